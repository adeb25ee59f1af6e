"""Training paths users take that the model tests do not cover: dropout (where it acts, and its replay under activation
checkpointing), bf16 autocast, `torch.compile`, and the documented weight initialisation (fresh and after loading)."""

import logging
import math

import pytest
import torch
from helpers import (
    BOS,
    EOS,
    build,
    char_settings,
    pad,
    pad_spellings,
    random_ids,
    random_spellings,
    tagger_config,
    tiny_config,
)
from torch import nn

from modeling_slstm import SLSTMForSequenceClassification, SLSTMForTokenClassification, SLSTMModel, cpu_matmul
from modeling_slstm.cpu_matmul import SLSTMConv1d, SLSTMLinear
from modeling_slstm.crf import ConditionalRandomField
from modeling_slstm.modeling_slstm import SLSTMInitialStates
from modeling_slstm.tag_schemes import allowed_transitions

# Task models under test: name -> (model class, config settings on top of `tiny_config` or `tagger_config`).
SEQUENCE_KINDS = {
    f"{pooling}_classifier": (SLSTMForSequenceClassification, {"num_labels": 3, "classifier_pooling": pooling})
    for pooling in ("sentence", "attention", "mean")
}
TOKEN_KINDS = {
    "softmax_tagger": (SLSTMForTokenClassification, {}),
    "crf_tagger": (SLSTMForTokenClassification, {"use_crf": True}),
    "char_crf_tagger": (SLSTMForTokenClassification, dict(use_crf=True, **char_settings())),
}
KINDS = {"encoder": (SLSTMModel, {}), **SEQUENCE_KINDS, **TOKEN_KINDS}
DROPOUTS = {"embedding_dropout": 0.3, "hidden_dropout": 0.4, "classifier_dropout": 0.5}


def config_of(kind: str, **overrides):
    model_class, settings = KINDS[kind]
    make = tagger_config if model_class is SLSTMForTokenClassification else tiny_config
    return make(**{**settings, **overrides})


def batch(with_labels: bool = True) -> dict:
    """Framed sentences `<s> w … w </s>`, right padded, with character ids, tag labels (-100 at the frame and the
    padding) and sentence labels (`run` passes a model the labels of its task)."""
    words = random_ids([4, 1, 3])
    ids, mask = pad([[BOS] + w + [EOS] for w in words])
    spellings = random_spellings([len(w) + 2 for w in words])
    inputs = {"input_ids": ids, "attention_mask": mask, "char_ids": pad_spellings(spellings)}
    if with_labels:
        tags = [[0, 1, 2, 0], [3], [1, 0, 3]]  # valid BIO sequences
        inputs["tag_labels"] = pad([[-100] + t + [-100] for t in tags], value=-100)[0]
        inputs["sentence_labels"] = torch.tensor([2, 0, 1])
    return inputs


def run(model, inputs: dict, **kwargs):
    """`(loss, output)` of `model` (or of its `torch.compile` wrapper) on `batch()`: the model's own loss with the
    labels of its task (a fixed random projection of the states for the encoder) and its `logits` (the final word
    states for the encoder)."""
    inputs = dict(inputs)
    tag_labels, sentence_labels = inputs.pop("tag_labels", None), inputs.pop("sentence_labels", None)
    task_model = getattr(model, "_orig_mod", model)  # the model a `torch.compile` wrapper runs
    if isinstance(task_model, SLSTMForTokenClassification):
        inputs["labels"] = tag_labels
    elif isinstance(task_model, SLSTMForSequenceClassification):
        inputs["labels"] = sentence_labels
    out = model(**inputs, **kwargs)
    if hasattr(out, "logits"):
        return out.loss, out.logits
    states = out.last_hidden_state
    weights = torch.randn(states.shape, generator=torch.Generator().manual_seed(1), dtype=states.dtype)
    return (states * weights).sum() + out.pooler_output.sum(), states


def gradients(model) -> dict[str, torch.Tensor]:
    return {name: parameter.grad.clone() for name, parameter in model.named_parameters() if parameter.grad is not None}


def backward_once(model, inputs: dict, runner=None) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
    """`(loss, output, gradients)` of one backward pass of `runner` (default: `model`; e.g. its `torch.compile`
    wrapper) on `inputs`, the gradients read from `model`'s parameters and then zeroed."""
    loss, output = run(runner if runner is not None else model, inputs)
    loss.backward()
    grads = gradients(model)
    model.zero_grad()
    return loss, output, grads


def assert_same_gradients(actual: dict, expected: dict, **tolerance):
    assert actual.keys() == expected.keys()
    for name, grad in expected.items():
        torch.testing.assert_close(
            actual[name], grad, msg=lambda message, name=name: f"{name}: {message}", **tolerance
        )


# Dropout


def train_output(model, seed: int) -> torch.Tensor:
    torch.manual_seed(seed)
    with torch.no_grad():
        return run(model, batch(with_labels=False))[1]


@pytest.mark.parametrize("kind", ["attention_classifier", "crf_tagger"])
def test_dropout_acts_in_train_mode_only(kind):
    model = build(KINDS[kind][0], config_of(kind, **DROPOUTS))
    evaluated = train_output(model.eval(), 0)
    assert torch.equal(train_output(model, 1), evaluated)  # eval: the seed does not matter
    model.train()
    assert torch.equal(train_output(model, 0), train_output(model, 0))
    assert not torch.equal(train_output(model, 0), train_output(model, 1))
    assert not torch.equal(train_output(model, 0), evaluated)


@pytest.mark.parametrize("kind", ["attention_classifier", "crf_tagger"])
def test_without_dropout_train_mode_equals_eval_mode(kind):
    model = build(KINDS[kind][0], config_of(kind, **char_settings(char_dropout=0.0)))
    assert torch.equal(train_output(model.train(), 0), train_output(model.eval(), 1))


@pytest.mark.parametrize("which", ["embedding_dropout", "hidden_dropout", "classifier_dropout"])
def test_each_dropout_acts_on_its_own(which):
    """One dropout at a time changes the output with the seed, and only from where it is documented to act: the
    classifier dropout leaves the encoder states alone."""
    model = build(SLSTMForSequenceClassification, tiny_config(num_labels=3, **{which: 0.5})).train()

    def states_and_logits(seed):
        torch.manual_seed(seed)
        ids, mask = pad(random_ids([4, 1, 3]))
        out = model(input_ids=ids, attention_mask=mask, output_hidden_states=True)
        return torch.cat([h.flatten() for h in out.hidden_states]), out.logits

    (states_0, logits_0), (states_1, logits_1) = states_and_logits(0), states_and_logits(1)
    assert not torch.equal(logits_0, logits_1)
    assert torch.equal(states_0, states_1) == (which == "classifier_dropout")


def test_embedding_dropout_covers_the_character_features():
    config = tiny_config(embedding_dropout=0.5, **char_settings(char_dropout=0.0))
    model = build(SLSTMModel, config).train()
    inputs = batch(with_labels=False)
    with torch.no_grad():
        torch.manual_seed(0)
        embeds = model.embeddings(inputs["input_ids"], char_ids=inputs["char_ids"])  # (batch, seq, 5 + 3)
    real = inputs["attention_mask"]
    word_part, char_part = embeds[real].split([config.embedding_dim, config.char_hidden_size], dim=-1)
    for part in (word_part, char_part):
        assert (part == 0).any() and (part != 0).any()


def test_hidden_dropout_acts_on_the_states_read_by_the_next_step():
    """The transition's dropout reads `h^{t-1}` and `g^{t-1}` exactly as the previous step returned them (`h^0 = g^0`,
    the learned initial state, at the first step) and zeroes some of them; the states the encoder returns are the
    transitions' own, undropped."""
    config = tiny_config(hidden_dropout=0.5, num_sentence_nodes=2)
    model = build(SLSTMModel, config).train()
    reads, dropped, steps_out = [], [], []
    model.transition.hidden_dropout.register_forward_hook(
        lambda _, args, out: reads.append(args[0]) or dropped.append(out)
    )
    model.transition.register_forward_hook(lambda _, args, out: steps_out.append(out))
    ids, mask = pad(random_ids([4, 1, 3]))
    torch.manual_seed(0)
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask, output_hidden_states=True)

    steps, batch_size = config.num_steps, ids.shape[0]
    assert len(reads) == 2 * steps  # the word states, then the sentence states, at every step
    initial = model.initial_states.learned_state.detach()
    word_reads = [initial * mask.unsqueeze(-1)] + [h for h, _, _, _ in steps_out[:-1]]
    sentence_reads = [initial.expand(batch_size, 2, -1)] + [g for _, _, g, _ in steps_out[:-1]]
    for step in range(steps):
        assert torch.equal(reads[2 * step], word_reads[step])
        assert torch.equal(reads[2 * step + 1], sentence_reads[step])
        assert torch.equal(out.hidden_states[step + 1], steps_out[step][0])
    assert torch.equal(out.last_hidden_state, steps_out[-1][0]) and torch.equal(out.hidden_states[0], word_reads[0])
    assert torch.equal(out.pooler_output, steps_out[-1][2][:, 0])
    for read, result in zip(reads, dropped):  # inverted dropout: each value zeroed or scaled by 1 / (1 - p)
        kept = result != 0
        torch.testing.assert_close(result[kept], 2 * read[kept])
        # g^1 is exactly zero (the sentence cell reads the zero cells of step 0): nothing to drop there.
        assert read.count_nonzero() == 0 or read.count_nonzero() > kept.sum() > 0
    assert torch.all(out.last_hidden_state[mask] != 0)


CHECKPOINT_KINDS = ["attention_classifier", "softmax_tagger", "char_crf_tagger"]


def dropout_model(kind: str):
    characters = {"char_dropout": 0.2} if "char" in kind else {}
    return build(KINDS[kind][0], config_of(kind, **DROPOUTS, **characters), dtype=torch.float64).train()


def train_step(model, checkpointing_kwargs: dict | None = None):
    """Loss, gradients, the hidden dropout's outputs and the RNG state after one seeded forward and backward."""
    if checkpointing_kwargs is not None:
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=checkpointing_kwargs)
    dropped = []
    model.slstm.transition.hidden_dropout.register_forward_hook(lambda *args: dropped.append(args[-1]))
    torch.manual_seed(123)
    loss = run(model, batch())[0]
    loss.backward()
    return loss.detach(), gradients(model), dropped, torch.get_rng_state()


@pytest.mark.parametrize("use_reentrant", [False, True])
@pytest.mark.parametrize("kind", CHECKPOINT_KINDS)
def test_checkpointing_replays_dropout(kind, use_reentrant):
    """With every dropout active in train mode, activation checkpointing gives the same loss and gradients as
    without: the recomputed transitions draw the same dropout masks (torch's checkpoint restores the RNG state)."""
    plain_loss, plain_grads, plain_dropped, plain_rng = train_step(dropout_model(kind))
    model = dropout_model(kind)
    loss, grads, dropped, rng = train_step(model, {"use_reentrant": use_reentrant})

    steps = model.config.num_steps
    assert len(plain_dropped) == 2 * steps and len(dropped) == 4 * steps  # the transitions were recomputed
    recomputed = [dropped[2 * steps + 2 * (steps - 1 - step) + i] for step in range(steps) for i in (0, 1)]
    for first, again in zip(dropped[: 2 * steps], recomputed):  # the backward recomputes the last step first
        assert torch.equal(first, again)
    assert torch.equal(loss, plain_loss)
    assert_same_gradients(grads, plain_grads, rtol=0, atol=1e-12)
    assert torch.equal(rng, plain_rng)  # and training goes on with the same random stream


def test_checkpointing_test_detects_a_recompute_with_fresh_dropout_masks():
    """The broken variant the test above guards against: recomputing without restoring the RNG state draws new masks
    and gives different gradients (the loss, computed once, is the same)."""
    plain_loss, plain_grads, _, _ = train_step(dropout_model("softmax_tagger"))
    broken = {"use_reentrant": False, "preserve_rng_state": False}
    loss, grads, _, _ = train_step(dropout_model("softmax_tagger"), broken)
    assert torch.equal(loss, plain_loss)
    assert any(not torch.allclose(grads[name], grad) for name, grad in plain_grads.items())


# bf16 autocast


@pytest.fixture
def bf16_fast_path(request, monkeypatch):
    """Pretend the CPU has (True) or lacks (False) a fast bf16 matmul path, so that both code paths of `SLSTMLinear`
    under bf16 autocast run on any machine."""
    monkeypatch.setattr(cpu_matmul, "cpu_has_fast_bf16", lambda: request.param)
    return request.param


def bf16_loss_and_output(model, inputs):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss, output = run(model, inputs)
    loss.backward()
    return loss, output


BF16_TOLERANCE = {False: 1e-2, True: 5e-2}  # absolute, on outputs of magnitude about 1; by fast path


@pytest.mark.parametrize("bf16_fast_path", [False, True], indirect=True, ids=["float32_matmuls", "bf16_matmuls"])
@pytest.mark.parametrize("kind", KINDS)
def test_bf16_autocast_forward_and_backward(kind, bf16_fast_path):
    model = build(KINDS[kind][0], config_of(kind))
    inputs = batch()
    loss, output, reference = backward_once(model, inputs)

    bf16_loss, bf16_output = bf16_loss_and_output(model, inputs)
    bf16_grads = gradients(model)
    assert torch.isfinite(bf16_loss) and bf16_grads.keys() == reference.keys()
    assert all(torch.isfinite(grad).all() for grad in bf16_grads.values())
    tolerance = BF16_TOLERANCE[bf16_fast_path]
    torch.testing.assert_close(bf16_output.float(), output.detach(), rtol=tolerance, atol=tolerance)
    torch.testing.assert_close(bf16_loss.float(), loss.detach(), rtol=tolerance, atol=tolerance)
    flat, flat_reference = (
        torch.cat([g.float().flatten() for g in grads.values()]) for grads in (bf16_grads, reference)
    )
    assert nn.functional.cosine_similarity(flat, flat_reference, dim=0) > 0.99


@pytest.mark.parametrize("bf16_fast_path", [False, True], indirect=True, ids=["float32_matmuls", "bf16_matmuls"])
@pytest.mark.parametrize("kind", ["crf_tagger", "char_crf_tagger"])
def test_bf16_autocast_crf_decodes_the_float32_path(kind, bf16_fast_path):
    model = build(KINDS[kind][0], config_of(kind), seed=4)  # a seed whose Viterbi path wins by a clear margin
    inputs = batch(with_labels=False)
    with torch.no_grad():
        logits = run(model, inputs)[1]  # max-marginals: 0 at the Viterbi tag, below 0 elsewhere
        with torch.autocast("cpu", dtype=torch.bfloat16):
            bf16_logits = run(model, inputs)[1]
    chain = (logits != 0).any(-1)  # (batch, seq): off the chain every logit is 0
    assert chain.sum() == 8  # the words of the three sentences
    tolerance = BF16_TOLERANCE[bf16_fast_path]
    margin = -logits[chain].topk(2, dim=-1).values[:, 1]  # how far the runner-up tag is below the Viterbi tag
    assert margin.min() > 2 * tolerance  # so an error within the tolerance cannot change the decision
    torch.testing.assert_close(bf16_logits.float(), logits, rtol=tolerance, atol=tolerance)
    assert torch.equal(bf16_logits.argmax(-1)[chain], logits.argmax(-1)[chain])


def linear_output_dtypes(model, inputs) -> set[torch.dtype]:
    """The dtypes of the outputs of every matmul-like module: the S-LSTM's linear layers and the character CNN."""
    dtypes = set()
    for module in model.modules():
        if isinstance(module, (SLSTMLinear, SLSTMConv1d)):
            module.register_forward_hook(lambda _, args, out: dtypes.add(out.dtype))
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        run(model, inputs)
    return dtypes


@pytest.mark.parametrize("bf16_fast_path", [False, True], indirect=True, ids=["float32_matmuls", "bf16_matmuls"])
def test_bf16_autocast_matmul_dtype_follows_the_cpu(bf16_fast_path):
    """Without a fast bf16 path the S-LSTM layers and the character CNN keep their matmuls in float32 under bf16
    autocast; with one they run in bf16."""
    model = build(SLSTMForSequenceClassification, config_of("attention_classifier", **char_settings()))
    assert linear_output_dtypes(model, batch()) == {torch.bfloat16 if bf16_fast_path else torch.float32}


def test_bf16_autocast_matmul_dtype_on_this_cpu():
    model = build(SLSTMModel, config_of("encoder"))
    expected = torch.bfloat16 if cpu_matmul.cpu_has_fast_bf16() else torch.float32
    assert linear_output_dtypes(model, batch()) == {expected}


def float32_warnings(caplog) -> list[logging.LogRecord]:
    return [record for record in caplog.records if "no fast bf16 matmul path" in record.getMessage()]


@pytest.mark.parametrize("bf16_fast_path", [False, True], indirect=True, ids=["float32_matmuls", "bf16_matmuls"])
def test_float32_fallback_is_warned_once(bf16_fast_path, caplog):
    cpu_matmul._warn_float32_under_bf16_autocast.cache_clear()  # as in a fresh process
    caplog.set_level(logging.WARNING, logger=cpu_matmul.logger.name)
    model = build(SLSTMForTokenClassification, config_of("crf_tagger"))
    inputs = batch()
    run(model, inputs)  # float32: never warned
    assert float32_warnings(caplog) == []
    for _ in range(2):
        bf16_loss_and_output(model, inputs)
    assert len(float32_warnings(caplog)) == (0 if bf16_fast_path else 1)
    assert all(record.levelno == logging.WARNING for record in float32_warnings(caplog))


def test_float32_fallback_warning_on_this_cpu(caplog):
    cpu_matmul._warn_float32_under_bf16_autocast.cache_clear()
    caplog.set_level(logging.WARNING, logger=cpu_matmul.logger.name)
    model = build(SLSTMModel, config_of("encoder"))
    for _ in range(2):
        bf16_loss_and_output(model, batch())
    assert len(float32_warnings(caplog)) == (0 if cpu_matmul.cpu_has_fast_bf16() else 1)


# torch.compile


@pytest.fixture(autouse=True)
def fresh_dynamo():
    """Every test compiles from scratch: no cached graph or recompile count carries over between tests."""
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


COMPILE_KINDS = ["encoder", "sentence_classifier", "attention_classifier", "softmax_tagger", "crf_tagger"]


def assert_compiled_matches_eager(model, compiled, tolerance: float = 1e-5):
    """Outputs, loss and gradients of `compiled` equal `model`'s; for a token classifier also at inference (no labels:
    the CRF decodes its inference chain)."""
    inputs = batch()
    eager_loss, eager_output, eager_grads = backward_once(model, inputs)
    loss, output, grads = backward_once(model, inputs, runner=compiled)
    close = {"rtol": tolerance, "atol": tolerance}
    torch.testing.assert_close(output, eager_output, **close)
    torch.testing.assert_close(loss, eager_loss, **close)
    assert_same_gradients(grads, eager_grads, **close)
    if isinstance(model, SLSTMForTokenClassification):
        with torch.no_grad():
            inference, eager_inference = run(compiled, batch(False))[1], run(model, batch(False))[1]
        torch.testing.assert_close(inference, eager_inference, **close)


@pytest.mark.parametrize("kind", COMPILE_KINDS)
def test_compiled_task_model_matches_eager_in_one_graph(kind):
    """Dynamo captures each task model whole (`fullgraph=True`) and runs it like eager, training and inference."""
    model = build(KINDS[kind][0], config_of(kind))
    assert_compiled_matches_eager(model, torch.compile(model, backend="eager", fullgraph=True))


@pytest.mark.slow
@pytest.mark.parametrize("kind", COMPILE_KINDS)
def test_compiled_task_model_gradients_through_aot_autograd(kind):
    """`torch.compile(model)` as users call it, through AOTAutograd as with inductor: outputs, loss and gradients
    equal eager's.

    Failed (wrong gradients) while `cpu_matmul.selected_backend` broke the graph: the overlapping `unfold` view of
    `neighbourhood` then crossed a graph break, which AOTAutograd (torch 2.13) differentiates wrongly."""
    model = build(KINDS[kind][0], config_of(kind, num_steps=2))
    assert_compiled_matches_eager(model, torch.compile(model, backend="aot_eager"))


@pytest.mark.slow
def test_inductor_compiled_classifier_matches_eager():
    """The default backend, as users call it: outputs, loss and gradients within 1e-4 of eager (inductor fuses and
    reorders float sums)."""
    model = build(SLSTMForSequenceClassification, config_of("mean_classifier", num_steps=2))
    assert_compiled_matches_eager(model, torch.compile(model), tolerance=1e-4)


# Weight initialisation


INIT_SETTINGS = {"vocab_size": 2000, "hidden_size": 16, "embedding_dim": 8, "initializer_range": 0.05}


def init_config(kind: str):
    settings = char_settings(char_vocab_size=1500, char_embedding_dim=8) if kind == "char_crf_tagger" else {}
    return config_of(kind, **INIT_SETTINGS, **settings)


def assert_uniform(weight: torch.Tensor, bound: float, name: str) -> None:
    """Drawn from U(-bound, bound): inside the bound, not all zero, and (where there are enough values to tell) spread
    over it with the standard deviation `bound / sqrt(3)`."""
    assert 0 < weight.abs().max() <= bound, name
    if weight.numel() >= 200:
        assert weight.abs().max() > 0.9 * bound, name
        assert abs(weight.std() - bound / math.sqrt(3)) < 0.2 * bound / math.sqrt(3), name


def assert_documented_init(model) -> None:
    """Every parameter follows `SLSTMPreTrainedModel._init_weights`, and the character convolution, which it leaves
    alone, PyTorch's own init; the CRF constraint buffers match the labels' scheme."""
    config = model.config
    checked = set()
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear):
            assert_uniform(module.weight, 1 / math.sqrt(config.hidden_size), name)
            assert module.bias is None or torch.all(module.bias == 0), name
        elif isinstance(module, nn.Embedding):
            rows = torch.ones(module.num_embeddings, dtype=torch.bool)
            rows[module.padding_idx] = False
            values = module.weight[rows]
            assert abs(values.std() - config.initializer_range) < 0.1 * config.initializer_range, name
            assert abs(values.mean()) < 0.1 * config.initializer_range, name
            assert torch.all(module.weight[module.padding_idx] == 0), name
        elif isinstance(module, SLSTMInitialStates):
            assert torch.all(module.learned_state == 0)
            checked.add(f"{name}.learned_state".lstrip("."))
            continue
        elif isinstance(module, ConditionalRandomField):
            for scores in (module.start_transitions, module.end_transitions, module.transitions):
                assert scores.abs().max() <= 0.1 and torch.unique(scores).numel() == scores.numel()
            assert_crf_constraints(module, config)
        elif isinstance(module, nn.Conv1d):
            fan_in = module.in_channels * module.kernel_size[0]
            assert_uniform(module.weight, 1 / math.sqrt(fan_in), name)  # kaiming_uniform_(a=sqrt(5))
            assert_uniform(module.bias, 1 / math.sqrt(fan_in), name)
        else:
            continue
        checked |= {f"{name}.{parameter}" for parameter, _ in module.named_parameters(recurse=False)}
    assert checked == {name for name, _ in model.named_parameters()}


def assert_crf_constraints(crf, config) -> None:
    labels = [config.id2label[i] for i in range(config.num_labels)]
    start, end, transitions = (torch.tensor(values) for values in allowed_transitions(labels))
    assert torch.equal(crf.start_allowed, start) and torch.equal(crf.end_allowed, end)
    assert torch.equal(crf.transition_allowed, transitions)
    assert not crf.transition_allowed.all()  # BIO: e.g. O -> I-PER is forbidden


@pytest.mark.parametrize("kind", ["encoder", "attention_classifier", "softmax_tagger", "char_crf_tagger"])
def test_fresh_model_follows_the_documented_init(kind):
    torch.manual_seed(0)
    assert_documented_init(KINDS[kind][0](init_config(kind)))


@pytest.mark.parametrize("kind", ["encoder", "attention_classifier", "char_crf_tagger"])
def test_from_pretrained_restores_the_saved_weights(kind, tmp_path):
    """Saved weights (random draws far outside the init ranges) come back exactly, not re-initialised; the CRF
    constraint buffers, which checkpoints do not hold, are rebuilt from the labels."""
    model = build(KINDS[kind][0], init_config(kind))
    model.save_pretrained(tmp_path)
    loaded = KINDS[kind][0].from_pretrained(tmp_path)
    saved, restored = model.state_dict(), loaded.state_dict()
    assert saved.keys() == restored.keys()
    for name, tensor in saved.items():
        assert torch.equal(restored[name], tensor), name
    if kind == "char_crf_tagger":
        assert loaded.crf.transitions.abs().max() > 0.1  # not the init range
        assert_crf_constraints(loaded.crf, loaded.config)


def test_task_model_from_a_saved_encoder_initialises_only_the_new_head(tmp_path):
    """Fine-tuning from an encoder checkpoint: the encoder's weights load exactly, the classifier and the CRF, absent
    from the checkpoint, follow the documented init."""
    config = init_config("char_crf_tagger")
    encoder = build(SLSTMModel, config)
    encoder.save_pretrained(tmp_path)
    tagger = SLSTMForTokenClassification.from_pretrained(tmp_path, config=config)
    for name, tensor in encoder.state_dict().items():
        assert torch.equal(tagger.slstm.state_dict()[name], tensor), name
    bound = 1 / math.sqrt(config.hidden_size)
    assert 0 < tagger.classifier.weight.abs().max() <= bound and torch.all(tagger.classifier.bias == 0)
    assert 0 < tagger.crf.transitions.abs().max() <= 0.1
    assert_crf_constraints(tagger.crf, config)
