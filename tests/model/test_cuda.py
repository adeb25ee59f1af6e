"""The model on a CUDA GPU (skipped without one): the same losses, outputs and gradients as on the CPU (float32, TF32
off), exact under padding, bf16 autocast, the `Trainer`, a checkpoint trained there loading on the CPU, and
`pipeline(device=0)` tagging as on the CPU.

    python -m pytest tests/model/test_cuda.py     # on a machine with a CUDA GPU
"""

import pytest
import torch
from helpers import (
    BIO_LABELS,
    build,
    char_settings,
    pad,
    pad_spellings,
    random_ids,
    random_spellings,
    real,
    save_tiny_encoder,
    tagger_config,
    tiny_config,
    word_tagger,
)
from transformers import (
    AutoConfig,
    AutoTokenizer,
    DataCollatorForTokenClassification,
    Trainer,
    TrainingArguments,
    pipeline,
)

from modeling_slstm import SLSTMForSequenceClassification, SLSTMForTokenClassification
from modeling_slstm.tokenization_slstm import build_word_tokenizer

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

LENGTHS = (5, 1, 3, 2)
CUDA = torch.device("cuda")
# The CPU and the GPU sum in different orders: float32 agrees to about 1e-6 relative per product, a few 1e-5 after the
# recurrence's steps and the CRF's log-sum-exps.
TOLERANCE = {"atol": 1e-4, "rtol": 1e-4}

CASES = {
    "crf tagger, char features, 2 sentence nodes, window 2, input initial state": (
        SLSTMForTokenClassification,
        {"use_crf": True, "num_sentence_nodes": 2, "window_size": 2, "initial_state": "input", **char_settings()},
    ),
    "softmax tagger, no sentence node": (SLSTMForTokenClassification, {"num_sentence_nodes": 0}),
    "classifier, attention pooling": (SLSTMForSequenceClassification, {"classifier_pooling": "attention"}),
    "classifier, sentence pooling": (SLSTMForSequenceClassification, {"classifier_pooling": "sentence"}),
    "classifier, mean pooling, weighted-sum simplification": (
        SLSTMForSequenceClassification,
        {"classifier_pooling": "mean", "context_independent_content": True, "remove_output_gate": True},
    ),
}


@pytest.fixture(autouse=True)
def float32_matmuls_on_the_gpu():
    """TF32 off: it rounds matmul inputs to 10 mantissa bits, which would hide a real difference from the CPU."""
    matmul, cudnn = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = matmul, cudnn


def case_model(name: str):
    model_class, overrides = CASES[name]
    if model_class is SLSTMForTokenClassification:
        return build(model_class, tagger_config(**overrides))
    return build(model_class, tiny_config(num_labels=3, **overrides))


def case_batch(model) -> dict:
    """A right-padded batch of `LENGTHS` with labels (-100 at the padding of a tagger's labels)."""
    ids, mask = pad(random_ids(LENGTHS))
    generator = torch.Generator().manual_seed(1)
    if isinstance(model, SLSTMForTokenClassification):
        labels = torch.randint(0, len(BIO_LABELS), ids.shape, generator=generator).masked_fill(~mask, -100)
    else:
        labels = torch.randint(0, 3, (len(LENGTHS),), generator=generator)
    batch = {"input_ids": ids, "attention_mask": mask, "labels": labels}
    if model.config.use_char_features:
        batch["char_ids"] = pad_spellings(random_spellings(LENGTHS))
    return batch


def loss_logits_and_gradients(model, batch: dict) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
    model.zero_grad()
    output = model(**batch)
    output.loss.backward()
    gradients = {name: p.grad.detach().cpu() for name, p in model.named_parameters() if p.grad is not None}
    return output.loss.detach().cpu(), output.logits.detach().cpu(), gradients


@pytest.mark.parametrize("name", list(CASES))
def test_loss_outputs_and_gradients_equal_the_cpu_ones(name):
    model = case_model(name)
    batch = case_batch(model)
    cpu_loss, cpu_logits, cpu_gradients = loss_logits_and_gradients(model, batch)
    model.to(CUDA)
    gpu_loss, gpu_logits, gpu_gradients = loss_logits_and_gradients(model, {k: v.to(CUDA) for k, v in batch.items()})
    torch.testing.assert_close(gpu_loss, cpu_loss, **TOLERANCE)
    torch.testing.assert_close(gpu_logits, cpu_logits, **TOLERANCE)
    assert gpu_gradients.keys() == cpu_gradients.keys() and len(cpu_gradients) > 5
    for parameter, gradient in cpu_gradients.items():
        torch.testing.assert_close(gpu_gradients[parameter], gradient, **TOLERANCE, msg=parameter)
    if model.config.use_crf:  # the Viterbi paths (the logits' argmax) are the same tags
        assert torch.equal(gpu_logits.argmax(-1), cpu_logits.argmax(-1))


@pytest.mark.parametrize("side", ["right", "left"])
def test_padding_does_not_change_a_sentence_on_the_gpu(side):
    model = case_model("crf tagger, char features, 2 sentence nodes, window 2, input initial state").to(CUDA)
    sentences, spellings = random_ids(LENGTHS), random_spellings(LENGTHS)
    ids, mask = pad(sentences, side)
    with torch.no_grad():
        batched = model(
            input_ids=ids.to(CUDA), attention_mask=mask.to(CUDA), char_ids=pad_spellings(spellings, side).to(CUDA)
        ).logits.cpu()
        for row, (sentence, spelling) in enumerate(zip(sentences, spellings, strict=True)):
            alone = model(
                input_ids=torch.tensor([sentence], device=CUDA), char_ids=pad_spellings([spelling]).to(CUDA)
            ).logits[0]
            torch.testing.assert_close(real(batched, mask, row), alone.cpu(), atol=1e-5, rtol=0)


def test_bf16_autocast_trains_close_to_float32():
    model = case_model("crf tagger, char features, 2 sentence nodes, window 2, input initial state").to(CUDA)
    batch = {key: value.to(CUDA) for key, value in case_batch(model).items()}
    float32_loss = model(**batch).loss
    with torch.autocast("cuda", dtype=torch.bfloat16):
        bf16_loss = model(**batch).loss
    bf16_loss.backward()
    # bf16 keeps 8 mantissa bits: a loss within a few percent, every gradient finite and some non-zero
    torch.testing.assert_close(bf16_loss.float(), float32_loss, atol=0, rtol=5e-2)
    gradients = [p.grad for p in model.parameters() if p.grad is not None]
    assert all(torch.isfinite(g).all() for g in gradients) and any(g.abs().sum() > 0 for g in gradients)


def test_encoder_features_equal_the_cpu_ones(tmp_path):
    folder = save_tiny_encoder(tmp_path)
    words = [["The", "unbelievable", "cats"], ["zq"], ["New", "York", "'s", "unbelievable", "xylophones", "."]]
    tokenizer = build_word_tokenizer(words, subword_tokenizer=AutoTokenizer.from_pretrained(folder))
    config = tagger_config(feature_encoder_config=AutoConfig.from_pretrained(folder), vocab_size=40, use_crf=True)
    torch.manual_seed(0)
    model = SLSTMForTokenClassification(config)
    model.base_model.embeddings.subword_features.load_pretrained_encoder(folder)
    model.eval()
    batch = tokenizer(words, is_split_into_words=True, padding=True, return_tensors="pt")
    with torch.no_grad():
        cpu_logits = model(**batch).logits
        gpu_logits = model.to(CUDA)(**{key: value.to(CUDA) for key, value in batch.items()}).logits.cpu()
    torch.testing.assert_close(gpu_logits, cpu_logits, **TOLERANCE)


SENTENCES = [["John", "lives", "in", "Paris", "."], ["Mary", "met", "John", "."], ["Paris", "is", "big"]]
TAGS = [["B-PER", "O", "O", "B-LOC", "O"], ["B-PER", "O", "B-PER", "O"], ["B-LOC", "O", "O"]]


def labelled_examples(tokenizer, label2id: dict) -> list[dict]:
    """Each sentence tokenized with its tags as label ids at the words and -100 at `<s>` and `</s>`."""
    examples = []
    for words, tags in zip(SENTENCES, TAGS, strict=True):
        encoded = dict(tokenizer(words, is_split_into_words=True))
        encoded["labels"] = [-100] + [label2id[tag] for tag in tags] + [-100]
        examples.append(encoded)
    return examples


def test_the_trainer_trains_on_the_gpu_and_the_checkpoint_loads_on_the_cpu(tmp_path):
    model, tokenizer = word_tagger(SENTENCES)
    arguments = TrainingArguments(
        output_dir=str(tmp_path), max_steps=40, per_device_train_batch_size=3, learning_rate=0.05, report_to=[],
        save_strategy="no", logging_steps=10, seed=0,
    )  # fmt: skip
    trainer = Trainer(
        model,
        arguments,
        train_dataset=labelled_examples(tokenizer, model.config.label2id),
        data_collator=DataCollatorForTokenClassification(tokenizer),
    )
    assert trainer.args.device.type == "cuda"
    trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert next(model.parameters()).device.type == "cuda" and losses[-1] < losses[0] / 2
    model.save_pretrained(tmp_path / "saved")
    loaded = SLSTMForTokenClassification.from_pretrained(tmp_path / "saved").eval()
    batch = tokenizer(SENTENCES, is_split_into_words=True, padding=True, return_tensors="pt")
    with torch.no_grad():
        gpu_logits = model.eval()(**{key: value.to(CUDA) for key, value in batch.items()}).logits.cpu()
        torch.testing.assert_close(loaded(**batch).logits, gpu_logits, **TOLERANCE)


def test_pipeline_on_the_gpu_tags_as_on_the_cpu():
    model, tokenizer = word_tagger(SENTENCES)
    model.eval()
    texts = ["John lives in Paris .", "Mary met John", "Paris"]
    on_cpu = pipeline("token-classification", model=model, tokenizer=tokenizer, device="cpu", ignore_labels=[])
    cpu_tags = [[(entity["word"], entity["entity"]) for entity in tags] for tags in on_cpu(texts)]
    on_gpu = pipeline("token-classification", model=model.to(CUDA), tokenizer=tokenizer, device=0, ignore_labels=[])
    gpu_tags = [[(entity["word"], entity["entity"]) for entity in tags] for tags in on_gpu(texts, batch_size=3)]
    assert gpu_tags == cpu_tags and len(cpu_tags[0]) == 5
