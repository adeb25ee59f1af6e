"""Task-head losses and decoding, gradients, training to zero error, determinism and activation checkpointing."""

import warnings

import pytest
import torch
from helpers import BIO_LABELS, BOS, EOS, PAD, build, pad, random_ids, tagger_config, tiny_config
from torch.nn import functional as F

from modeling_slstm import SLSTMForSequenceClassification, SLSTMForTokenClassification, SLSTMModel
from modeling_slstm.modeling_slstm import sentence_lengths


def batch(lengths=(4, 2, 3), seed=0):
    return pad(random_ids(lengths, seed))


# Sequence classification


def test_single_label_loss_is_cross_entropy():
    model = build(SLSTMForSequenceClassification, num_labels=3)
    ids, mask = batch()
    labels = torch.tensor([2, 0, 1])
    out = model(input_ids=ids, attention_mask=mask, labels=labels)
    assert model.config.problem_type == "single_label_classification"
    torch.testing.assert_close(out.loss, F.cross_entropy(out.logits, labels), rtol=1e-6, atol=0)


def test_multi_label_loss_is_binary_cross_entropy():
    model = build(SLSTMForSequenceClassification, num_labels=3, problem_type="multi_label_classification")
    ids, mask = batch()
    labels = torch.tensor([[1.0, 0.0, 1.0], [0.0, 0.0, 0.0], [0.0, 1.0, 1.0]])
    out = model(input_ids=ids, attention_mask=mask, labels=labels)
    torch.testing.assert_close(out.loss, F.binary_cross_entropy_with_logits(out.logits, labels), rtol=1e-6, atol=0)


def test_regression_loss_is_mean_squared_error():
    model = build(SLSTMForSequenceClassification, num_labels=1)
    ids, mask = batch()
    labels = torch.tensor([0.5, -1.0, 2.0])
    out = model(input_ids=ids, attention_mask=mask, labels=labels)
    assert out.logits.shape == (3, 1) and model.config.problem_type == "regression"
    torch.testing.assert_close(out.loss, F.mse_loss(out.logits[:, 0], labels), rtol=1e-6, atol=0)


# Token classification


def tagging_batch():
    """Framed sentences <s> w … w </s>, right padded; labels -100 at the frame and the padding."""
    words = random_ids([4, 1, 3])
    ids, mask = pad([[BOS] + w + [EOS] for w in words])
    tags = [[0, 1, 2, 0], [3], [1, 0, 3]]  # valid BIO sequences
    labels, _ = pad([[-100] + t + [-100] for t in tags], value=-100)
    return ids, mask, labels


def test_softmax_tagger_loss_is_cross_entropy_over_labelled_tokens():
    model = build(SLSTMForTokenClassification, tagger_config())
    ids, mask, labels = tagging_batch()
    out = model(input_ids=ids, attention_mask=mask, labels=labels)
    labelled = labels != -100
    torch.testing.assert_close(out.loss, F.cross_entropy(out.logits[labelled], labels[labelled]), rtol=1e-6, atol=0)
    # The Trainer's num_items_in_batch turns the mean into sum / num_items.
    scaled = model(input_ids=ids, attention_mask=mask, labels=labels, num_items_in_batch=torch.tensor(20))
    total = F.cross_entropy(out.logits[labelled], labels[labelled], reduction="sum")
    torch.testing.assert_close(scaled.loss, total / 20, rtol=1e-6, atol=0)


def emissions_of(model, ids, mask):
    return model.classifier(model.slstm(input_ids=ids, attention_mask=mask).last_hidden_state)


def test_crf_tagger_loss_is_mean_negative_log_likelihood():
    model = build(SLSTMForTokenClassification, tagger_config(use_crf=True))
    ids, mask, labels = tagging_batch()
    out = model(input_ids=ids, attention_mask=mask, labels=labels)
    emissions = emissions_of(model, ids, mask)
    per_sentence = model.crf(emissions, labels, labels != -100, reduction="none")
    assert torch.all(per_sentence > 0)
    torch.testing.assert_close(out.loss, per_sentence.mean(), rtol=1e-6, atol=0)


def test_crf_chain_leaves_out_padding_whatever_its_labels():
    # A collator that pads labels with a real tag id (here 0) instead of -100 must not put padding on the chain.
    model = build(SLSTMForTokenClassification, tagger_config(use_crf=True))
    ids, mask, labels = tagging_batch()
    padded_with_tag = labels.masked_fill(mask == 0, 0)
    assert not torch.equal(padded_with_tag, labels)
    with torch.no_grad():
        expected = model(input_ids=ids, attention_mask=mask, labels=labels)
        out = model(input_ids=ids, attention_mask=mask, labels=padded_with_tag)
    torch.testing.assert_close(out.loss, expected.loss, rtol=0, atol=0)
    assert torch.equal(out.logits, expected.logits)


def test_crf_tagger_batch_without_labelled_positions_has_loss_0_and_finite_gradients():
    # As a static-shape batch of fillers only: the mean over labelled sentences divides by at least one sentence.
    model = build(SLSTMForTokenClassification, tagger_config(use_crf=True))
    ids, mask, labels = tagging_batch()
    out = model(input_ids=ids, attention_mask=mask, labels=torch.full_like(labels, -100))
    assert out.loss.item() == 0.0
    out.loss.backward()
    assert all(torch.isfinite(parameter.grad).all() for parameter in model.parameters() if parameter.grad is not None)


def test_sentence_lengths_count_exactly_in_bfloat16():
    # bfloat16 has 8 significant bits: counted in the model's dtype, 257 real tokens would be 256.
    mask = torch.ones(2, 257, dtype=torch.bfloat16)
    mask[1, 3:] = 0
    assert mask.sum(1).tolist() == [256.0, 3.0]
    lengths = sentence_lengths(mask)  # (batch, 1)
    assert lengths.dtype == torch.float32 and lengths.flatten().tolist() == [257.0, 3.0]


@pytest.mark.parametrize("with_labels", [True, False])
def test_crf_tagger_logits_argmax_is_the_viterbi_path(with_labels):
    model = build(SLSTMForTokenClassification, tagger_config(use_crf=True))
    ids, mask, labels = tagging_batch()
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask, labels=labels if with_labels else None)
        emissions = emissions_of(model, ids, mask)
    special = (ids == PAD) | (ids == BOS) | (ids == EOS)
    chain = labels != -100 if with_labels else mask & ~special
    assert torch.equal(chain, labels != -100)  # here both rules pick the words
    path = model.crf.decode(emissions, chain)
    assert torch.equal(out.logits.argmax(-1)[chain], path[chain])
    assert torch.all(out.logits[~chain] == 0)
    # The CRF changes the decision somewhere: emission argmax is not the path (random transitions, BIO constraints).
    assert not torch.equal(emissions.argmax(-1)[chain], path[chain])


def test_loss_kwargs_acceptance():
    assert SLSTMForTokenClassification(tagger_config(use_crf=False)).accepts_loss_kwargs is True
    assert SLSTMForTokenClassification(tagger_config(use_crf=True)).accepts_loss_kwargs is False
    assert SLSTMForSequenceClassification(tiny_config()).accepts_loss_kwargs is False


# Gradients


GRADCHECK_CONFIGS = {
    "paper": {},
    "softmax_gates": {"gate_normalization": "softmax"},
    "linear_content": {"context_independent_content": True},
    "no_output_gate": {"remove_output_gate": True},
    "no_sentence_node": {"num_sentence_nodes": 0},
    "two_nodes_window_2": {"num_sentence_nodes": 2, "window_size": 2, "gate_normalization": "softmax"},
}


@pytest.mark.parametrize("options", GRADCHECK_CONFIGS)
def test_gradcheck_wrt_inputs_embeds(options):
    config = tiny_config(hidden_size=3, embedding_dim=2, num_steps=3, **GRADCHECK_CONFIGS[options])
    model = build(SLSTMModel, config, dtype=torch.float64)
    embeds = torch.randn(2, 4, 2, dtype=torch.float64, requires_grad=True)
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]])

    def encoder(inputs_embeds):
        out = model(inputs_embeds=inputs_embeds, attention_mask=mask)
        return out.last_hidden_state, out.pooler_output

    assert torch.autograd.gradcheck(encoder, (embeds,), eps=1e-6, atol=1e-7)


# Training


def train(model, steps, **inputs):
    optimizer = torch.optim.Adam(model.parameters(), lr=0.05)
    model.train()
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        loss = model(**inputs).loss
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return model.eval(), losses


def test_crf_tagger_overfits_a_few_bio_sentences():
    words = random_ids([5, 3, 6, 2, 4], seed=3)
    tags = [["B-PER", "I-PER", "O", "B-LOC", "O"], ["O", "B-LOC", "I-LOC"], ["O", "O", "B-PER", "O", "B-LOC", "I-LOC"],
            ["B-PER", "O"], ["O", "B-LOC", "I-LOC", "I-LOC"]]  # fmt: skip
    ids, mask = pad([[BOS] + w + [EOS] for w in words])
    labels, _ = pad([[-100] + [BIO_LABELS.index(t) for t in row] + [-100] for row in tags], value=-100)
    torch.manual_seed(0)
    model = SLSTMForTokenClassification(tagger_config(use_crf=True, hidden_size=16, embedding_dim=8))
    model, losses = train(model, 100, input_ids=ids, attention_mask=mask, labels=labels)
    assert losses[-1] < 0.1 * losses[0]
    with torch.no_grad():
        predictions = model(input_ids=ids, attention_mask=mask).logits.argmax(-1)  # the inference chain
    labelled = labels != -100
    assert torch.equal(predictions[labelled], labels[labelled])


def test_sequence_classifier_overfits_a_few_sentences():
    ids, mask = pad(random_ids([4, 2, 5, 3, 1, 4], seed=4))
    labels = torch.tensor([0, 1, 2, 1, 0, 2])
    torch.manual_seed(0)
    model = SLSTMForSequenceClassification(tiny_config(num_labels=3, hidden_size=16, embedding_dim=8))
    model, losses = train(model, 60, input_ids=ids, attention_mask=mask, labels=labels)
    assert losses[-1] < 0.1 * losses[0]
    with torch.no_grad():
        assert torch.equal(model(input_ids=ids, attention_mask=mask).logits.argmax(-1), labels)


def test_eval_forward_is_deterministic():
    model = build(SLSTMForTokenClassification, tagger_config(use_crf=True, embedding_dropout=0.5, hidden_dropout=0.3))
    ids, mask = batch()
    with torch.no_grad():
        first, second = model(input_ids=ids, attention_mask=mask), model(input_ids=ids, attention_mask=mask)
    assert torch.equal(first.logits, second.logits)


def test_training_with_the_same_seed_is_reproducible():
    config = tiny_config(num_labels=3, embedding_dropout=0.5, hidden_dropout=0.3, classifier_dropout=0.2)
    ids, mask = batch()
    labels = torch.tensor([2, 0, 1])

    def trained_weights(seed):
        torch.manual_seed(seed)
        model, _ = train(SLSTMForSequenceClassification(config), 3, input_ids=ids, attention_mask=mask, labels=labels)
        return torch.cat([p.detach().flatten() for p in model.parameters()])

    assert torch.equal(trained_weights(0), trained_weights(0))
    assert not torch.equal(trained_weights(0), trained_weights(1))  # the seed does matter (init and dropout)


@pytest.mark.parametrize("enable", ["gradient_checkpointing_enable", "activation_checkpointing_enable"])
def test_activation_checkpointing_gives_the_same_gradients(enable):
    ids, mask, labels = tagging_batch()

    def gradients(checkpointing):
        model = build(SLSTMForTokenClassification, tagger_config(use_crf=True), dtype=torch.float64).train()
        if checkpointing:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # gradient_checkpointing_enable is a deprecated alias in v5
                getattr(model, enable)()
        calls = []  # hidden_dropout runs twice per transition forward, again when the backward recomputes it
        model.slstm.transition.hidden_dropout.register_forward_hook(lambda *args: calls.append(1))
        model(input_ids=ids, attention_mask=mask, labels=labels).loss.backward()
        return {name: p.grad for name, p in model.named_parameters()}, len(calls)

    plain, plain_calls = gradients(False)
    checkpointed, checkpointed_calls = gradients(True)
    steps = tagger_config().num_steps
    assert (plain_calls, checkpointed_calls) == (2 * steps, 4 * steps)  # the transitions really were recomputed
    assert plain.keys() == checkpointed.keys()
    for name, grad in plain.items():
        torch.testing.assert_close(checkpointed[name], grad, rtol=0, atol=1e-12, msg=name)
