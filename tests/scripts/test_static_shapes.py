"""Static-shape training batches (`gpu_batching.StaticShapeBatches`, used with `--cuda_graphs` on a GPU), built and
checked on the CPU: the width bucket of a length, the filled batch's tensors, and that the empty filler sentences
change neither the loss nor any gradient of every head (against the same batch without them), with no NaN."""

import logging
import math
from types import SimpleNamespace

import datasets
import pytest
import torch
from helpers import BIO_LABELS, randomize_
from transformers import DataCollatorForTokenClassification, DataCollatorWithPadding

from modeling_slstm import SLSTMConfig, SLSTMForSequenceClassification, SLSTMForTokenClassification
from modeling_slstm.tokenization_slstm import CHAR_PAD_ID, build_word_tokenizer, update_config_from_tokenizer
from run_scripts.benchmarks import benchmark_batch_shapes
from run_scripts.training import gpu_batching
from run_scripts.training.arguments import SLSTMTrainingArguments
from run_scripts.training.gpu_batching import (
    BUCKET_WIDTHS,
    GPU_PAD_MULTIPLE,
    StaticShapeBatches,
    bucket_width,
    is_bucket_shape,
)
from run_scripts.training.trainer import SLSTMTrainer

SENTENCES = [
    ["Peter", "lives", "in", "Berlin", "."],
    ["Anna", "Maria", "Schmidt", "visited", "New", "York", "and", "Paris", "yesterday"],
    ["Hello"],
    ["In", "Paris", "Peter", "met", "Anna"],
]
TAGS = [
    ["B-PER", "O", "O", "B-LOC", "O"],
    ["B-PER", "I-PER", "I-PER", "O", "B-LOC", "I-LOC", "O", "B-LOC", "O"],
    ["O"],
    ["O", "B-LOC", "B-PER", "O", "B-PER"],
]
LABEL_IDS = {label: index for index, label in enumerate(BIO_LABELS)}
BATCH_SIZE = 7  # 4 sentences and 3 fillers


def brute_force_width(length: int, buckets=BUCKET_WIDTHS) -> int:
    """The first width from `length` upward that is a rung, or past the last rung a multiple of 8."""
    width = length
    while not (width in buckets or (width > buckets[-1] and width % GPU_PAD_MULTIPLE == 0)):
        width += 1
    return width


def test_bucket_width_is_the_smallest_rung_that_holds_the_length():
    for length in range(1, 3 * BUCKET_WIDTHS[-1]):
        width = bucket_width(length)
        assert width == brute_force_width(length), length
        assert is_bucket_shape((5, width), 5) == (length <= BUCKET_WIDTHS[-1]), length
    assert bucket_width(5, buckets=(4, 6)) == 6 and bucket_width(7, buckets=(4, 6)) == 8
    assert not is_bucket_shape((4, 16), 5) and not is_bucket_shape((5, 17), 5) and not is_bucket_shape((5,), 5)
    with pytest.raises(ValueError, match="at least one token, got length 0"):
        bucket_width(0)


def test_bucket_ladder_is_ascending_multiples_of_the_pad_multiple_at_most_8_rungs():
    assert list(BUCKET_WIDTHS) == sorted(set(BUCKET_WIDTHS)) and len(BUCKET_WIDTHS) <= 8
    assert all(width % GPU_PAD_MULTIPLE == 0 for width in BUCKET_WIDTHS)


@pytest.fixture(scope="module")
def tokenizer():
    return build_word_tokenizer(SENTENCES)


def token_features(tokenizer, sentences=SENTENCES, tags=TAGS) -> list[dict]:
    """The training scripts' token-classification features: ids, mask, char_ids, labels (-100 at `<s>`/`</s>`)."""
    features = []
    for words, word_tags in zip(sentences, tags, strict=True):
        encoded = tokenizer(words, is_split_into_words=True)
        labels = [-100, *(LABEL_IDS[tag] for tag in word_tags), -100]
        features.append({**encoded, "labels": labels})
    return features


def sentence_features(tokenizer) -> list[dict]:
    encoded = [tokenizer(words, is_split_into_words=True) for words in SENTENCES]
    return [{**encoding, "labels": index % 2} for index, encoding in enumerate(encoded)]


def test_filled_batch_holds_the_sentences_then_empty_sentences_with_ignored_labels(tokenizer):
    features = token_features(tokenizer)
    batch = StaticShapeBatches(DataCollatorForTokenClassification, tokenizer, BATCH_SIZE)(features)
    longest = max(len(feature["input_ids"]) for feature in features)  # 11 tokens -> the rung 16
    assert batch["input_ids"].shape == (BATCH_SIZE, 16) and is_bucket_shape(batch["input_ids"].shape, BATCH_SIZE)
    assert batch["char_ids"].shape[:2] == (BATCH_SIZE, 16) and batch["labels"].shape == (BATCH_SIZE, 16)
    plain = gpu_batching.CharIdsPadding(DataCollatorForTokenClassification(tokenizer))(features)  # longest: 11
    for name, tensor in plain.items():
        assert torch.equal(batch[name][: len(features), :longest], tensor), name
        assert (batch[name][: len(features), longest:] == (-100 if name == "labels" else 0)).all(), name
    empty = tokenizer("")  # <s> </s>
    assert empty["input_ids"] == [tokenizer.bos_token_id, tokenizer.eos_token_id]
    for row in range(len(features), BATCH_SIZE):
        assert batch["input_ids"][row].tolist() == [*empty["input_ids"], *[tokenizer.pad_token_id] * 14]
        assert batch["attention_mask"][row].tolist() == [1, 1, *[0] * 14]
        assert (batch["labels"][row] == -100).all()
        word_length = batch["char_ids"].shape[2]
        boundary_rows = [chars + [CHAR_PAD_ID] * (word_length - len(chars)) for chars in empty["char_ids"]]
        assert batch["char_ids"][row, :2].tolist() == boundary_rows  # <s> and </s> spelt as in every sentence
        assert (batch["char_ids"][row, 2:] == CHAR_PAD_ID).all()


def test_filled_batch_of_sentence_labels_and_past_the_last_rung(tokenizer):
    features = sentence_features(tokenizer)
    batch = StaticShapeBatches(DataCollatorWithPadding, tokenizer, 6, buckets=(4, 12))(features)  # longest: 11
    assert batch["labels"].tolist() == [0, 1, 0, 1, -100, -100]
    assert batch["input_ids"].shape == (6, 12) and is_bucket_shape(batch["input_ids"].shape, 6, (4, 12))
    long = [{**tokenizer(SENTENCES[1] * 2, is_split_into_words=True), "labels": 1}]  # 20 tokens: past 12
    batch = StaticShapeBatches(DataCollatorWithPadding, tokenizer, 6, buckets=(4, 12))(long)
    assert batch["input_ids"].shape == (6, 24) and not is_bucket_shape(batch["input_ids"].shape, 6, (4, 12))


def test_static_shape_batches_name_what_they_cannot_fill(tokenizer):
    collator = StaticShapeBatches(DataCollatorWithPadding, tokenizer, 2)
    with pytest.raises(ValueError, match="hold 1 to 2 sentences .*got 3"):
        collator(sentence_features(tokenizer)[:3])
    with pytest.raises(ValueError, match="integer labels .*got 0.5: regression and multi-label"):
        collator([{**tokenizer("a b"), "labels": 0.5}])
    with pytest.raises(ValueError, match=r"has no \['subword_ids'\]"):
        collator([{**tokenizer("a b"), "subword_ids": [1, 2]}])


def training_arguments(tmp_path, **fields) -> SLSTMTrainingArguments:
    return SLSTMTrainingArguments(output_dir=str(tmp_path), use_cpu=True, report_to=[], threads="1", **fields)


def test_training_collator_is_static_only_when_asked_and_refuses_token_budgets(tokenizer, tmp_path):
    args = training_arguments(tmp_path, per_device_train_batch_size=3)
    assert not gpu_batching.uses_static_shapes(args)  # a CPU, no --cuda_graphs
    collator = gpu_batching.training_data_collator(DataCollatorWithPadding, tokenizer, args, static_shapes=True)
    assert isinstance(collator, StaticShapeBatches) and collator.batch_size == 3
    plain = gpu_batching.training_data_collator(DataCollatorWithPadding, tokenizer, args)
    assert plain(sentence_features(tokenizer)[:2])["input_ids"].shape == (2, 11)
    budget = SimpleNamespace(per_device_train_batch_size=3, max_tokens_per_batch=400)
    with pytest.raises(ValueError, match="--max_tokens_per_batch 400 makes batches of varying sizes"):
        gpu_batching.training_data_collator(DataCollatorWithPadding, tokenizer, budget, static_shapes=True)


def test_trainer_fills_training_batches_only(tokenizer, tmp_path):
    """The fillers reach the training batches, never the evaluation batches (whose predictions are the rows)."""

    dataset = datasets.Dataset.from_list(token_features(tokenizer) * 2)  # 8 sentences: batches of 3, 3, 2
    args = training_arguments(tmp_path, per_device_train_batch_size=3, per_device_eval_batch_size=3)
    model, _ = token_classifier(tokenizer, use_crf=False)
    trainer = SLSTMTrainer(
        model=model,
        args=args,
        train_dataset=dataset,
        eval_dataset=dataset,
        data_collator=gpu_batching.data_collator(DataCollatorForTokenClassification, tokenizer, args),
        train_data_collator=StaticShapeBatches(DataCollatorForTokenClassification, tokenizer, 3),
    )
    train_shapes = [tuple(batch["input_ids"].shape) for batch in trainer.get_train_dataloader()]
    assert len(train_shapes) == 3 and all(is_bucket_shape(shape, 3) for shape in train_shapes), train_shapes
    eval_rows = [batch["input_ids"].shape[0] for batch in trainer.get_eval_dataloader()]
    assert eval_rows == [3, 3, 2]
    assert trainer.data_collator is not trainer.train_data_collator


# --------------------------------------------------------------------------------------------------------------------
# The fillers count for nothing: loss and gradients against the plain batch (the oracle)
# --------------------------------------------------------------------------------------------------------------------


def labelled_config(tokenizer, **settings) -> SLSTMConfig:
    config = SLSTMConfig(
        embedding_dim=6, hidden_size=6, num_steps=2, embedding_dropout=0.0, hidden_dropout=0.0, classifier_dropout=0.0,
        use_char_features=True, char_embedding_dim=4, char_hidden_size=3, char_dropout=0.0,
        id2label=dict(enumerate(BIO_LABELS)), label2id=LABEL_IDS, **settings,
    )  # fmt: skip
    update_config_from_tokenizer(config, tokenizer)
    return config


def token_classifier(tokenizer, **settings):
    torch.manual_seed(0)
    model = randomize_(SLSTMForTokenClassification(labelled_config(tokenizer, **settings)), scale=0.5)
    return model.train(), DataCollatorForTokenClassification


def sentence_classifier(tokenizer, **settings):
    torch.manual_seed(0)
    config = labelled_config(tokenizer, **settings)
    config.num_labels, config.id2label, config.label2id = 2, {0: "neg", 1: "pos"}, {"neg": 0, "pos": 1}
    model = randomize_(SLSTMForSequenceClassification(config), scale=0.5)
    return model.train(), DataCollatorWithPadding


HEADS = {
    "crf": (token_classifier, {"use_crf": True}),
    "crf_bioes": (token_classifier, {"use_crf": True, "head_tag_scheme": "BIOES"}),
    "crf_triton": (token_classifier, {"use_crf": True, "step_implementation": "triton"}),
    "softmax": (token_classifier, {"use_crf": False}),
    "softmax_bioes": (token_classifier, {"use_crf": False, "head_tag_scheme": "BIOES"}),
    "sentence_state": (sentence_classifier, {"classifier_pooling": "sentence"}),
    "attention_pooling": (sentence_classifier, {"classifier_pooling": "attention"}),
    "mean_pooling": (sentence_classifier, {"classifier_pooling": "mean"}),
}


def loss_and_gradients(model, batch: dict, **loss_kwargs) -> tuple[torch.Tensor, dict, torch.Tensor]:
    """The loss, the gradient of every parameter and the logits of a training step on `batch`."""
    model.zero_grad()
    outputs = model(**batch, **loss_kwargs)
    outputs.loss.backward()
    gradients = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    return outputs.loss.detach(), gradients, outputs.logits.detach()


@pytest.mark.filterwarnings("error::RuntimeWarning")  # Triton's interpreter: an inf - inf in a kernel
@pytest.mark.parametrize("head", HEADS)
def test_fillers_change_neither_the_loss_nor_any_gradient(tokenizer, head):
    make_model, settings = HEADS[head]
    model, collator_class = make_model(tokenizer, **settings)
    features = token_features(tokenizer) if collator_class is DataCollatorForTokenClassification else None
    features = features or sentence_features(tokenizer)
    plain = gpu_batching.CharIdsPadding(collator_class(tokenizer))(features)  # the oracle: no fillers, width 11
    filled = StaticShapeBatches(collator_class, tokenizer, BATCH_SIZE)(features)  # 3 fillers, width 16
    assert filled["input_ids"].shape == (BATCH_SIZE, 16) and plain["input_ids"].shape == (len(features), 11)
    expected_loss, expected_gradients, expected_logits = loss_and_gradients(model, plain)
    loss, gradients, logits = loss_and_gradients(model, filled)
    torch.testing.assert_close(loss, expected_loss, rtol=1e-5, atol=1e-6)
    real_rows = logits[: len(features), :11] if logits.dim() == 3 else logits[: len(features)]
    torch.testing.assert_close(real_rows, expected_logits, rtol=1e-5, atol=1e-5)
    assert torch.isfinite(logits).all()
    assert gradients.keys() == expected_gradients.keys()
    for name, gradient in gradients.items():
        assert torch.isfinite(gradient).all(), name
        torch.testing.assert_close(gradient, expected_gradients[name], rtol=1e-4, atol=1e-6, msg=name)
    if head.startswith("softmax"):  # the Trainer's token count over the batch: the fillers add none
        count = (filled["labels"] != -100).sum()
        assert count == (plain["labels"] != -100).sum()
        torch.testing.assert_close(
            loss_and_gradients(model, filled, num_items_in_batch=count)[0], expected_loss, rtol=1e-5, atol=1e-6
        )


@pytest.mark.parametrize("head", ["crf", "softmax"])
def test_fillers_of_a_left_padding_tokenizer(head):
    """Left padding: the sentences and fillers end at the last column, and the fillers still count for nothing."""
    tokenizer = build_word_tokenizer(SENTENCES)
    tokenizer.padding_side = "left"
    make_model, settings = HEADS[head]
    model, collator_class = make_model(tokenizer, **settings)
    features = token_features(tokenizer)
    plain = gpu_batching.CharIdsPadding(collator_class(tokenizer), "left")(features)  # width 11
    filled = StaticShapeBatches(collator_class, tokenizer, BATCH_SIZE)(features)  # width 16
    for name, tensor in plain.items():
        assert torch.equal(filled[name][: len(features), -11:], tensor), name
    assert filled["input_ids"][len(features) :, -2:].tolist() == [[tokenizer.bos_token_id, tokenizer.eos_token_id]] * 3
    assert filled["attention_mask"][len(features) :].sum(dim=1).tolist() == [2] * 3
    expected_loss, expected_gradients, _ = loss_and_gradients(model, plain)
    loss, gradients, _ = loss_and_gradients(model, filled)
    torch.testing.assert_close(loss, expected_loss, rtol=1e-5, atol=1e-6)
    for name, gradient in gradients.items():
        torch.testing.assert_close(gradient, expected_gradients[name], rtol=1e-4, atol=1e-6, msg=name)


@pytest.mark.filterwarnings("error::RuntimeWarning")
@pytest.mark.parametrize("head", ["crf", "softmax", "attention_pooling"])  # the CRF kernels: the test above
def test_a_batch_of_one_sentence_and_fillers_has_finite_gradients(tokenizer, head):
    make_model, settings = HEADS[head]
    model, collator_class = make_model(tokenizer, **settings)
    features = token_features(tokenizer) if collator_class is DataCollatorForTokenClassification else None
    features = (features or sentence_features(tokenizer))[2:3]  # the one-word sentence
    expected_loss, _, _ = loss_and_gradients(model, gpu_batching.CharIdsPadding(collator_class(tokenizer))(features))
    loss, gradients, _ = loss_and_gradients(model, StaticShapeBatches(collator_class, tokenizer, 10)(features))
    torch.testing.assert_close(loss, expected_loss, rtol=1e-5, atol=1e-6)
    assert all(torch.isfinite(gradient).all() for gradient in gradients.values())


@pytest.mark.parametrize("use_crf", [True, False], ids=["crf", "softmax"])
def test_training_with_filled_batches_follows_training_without(tokenizer, tmp_path, use_crf):
    """Two epochs of `SLSTMTrainer` over 8 sentences in batches of 3 (the last one of 2, filled): the same losses and
    parameters as with the plain collator, with the Trainer's own token count (`num_items_in_batch`) for the softmax."""

    dataset = datasets.Dataset.from_list(token_features(tokenizer) * 2)
    runs = {}
    for name, train_collator in (
        ("plain", None),
        ("filled", StaticShapeBatches(DataCollatorForTokenClassification, tokenizer, 3)),
    ):
        model, _ = token_classifier(tokenizer, use_crf=use_crf)
        args = training_arguments(
            tmp_path / name, per_device_train_batch_size=3, num_train_epochs=2, learning_rate=0.01, logging_steps=1,
            save_strategy="no", seed=3,
        )  # fmt: skip
        trainer = SLSTMTrainer(
            model=model,
            args=args,
            train_dataset=dataset,
            data_collator=gpu_batching.data_collator(DataCollatorForTokenClassification, tokenizer, args),
            train_data_collator=train_collator,
        )
        trainer.train()
        losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
        runs[name] = (losses, {key: value.detach().clone() for key, value in model.state_dict().items()})
    assert len(runs["plain"][0]) == 6
    torch.testing.assert_close(runs["filled"][0], runs["plain"][0], rtol=1e-4, atol=1e-5)
    for key, value in runs["plain"][1].items():
        torch.testing.assert_close(runs["filled"][1][key], value, rtol=1e-4, atol=1e-5, msg=key)


# --------------------------------------------------------------------------------------------------------------------
# Shapes of a real epoch
# --------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("corpus", benchmark_batch_shapes.CORPUS_PATHS)
def test_an_epoch_of_each_corpus_takes_at_most_8_static_shapes(corpus, shared_data):
    path = shared_data(*benchmark_batch_shapes.CORPUS_PATHS[corpus].parts)
    lengths = benchmark_batch_shapes.training_lengths(corpus, path)
    for epoch in range(2):
        shapes = benchmark_batch_shapes.epoch_shapes(lengths, batch_size=10, seed=42, epoch=epoch, static=True)
        assert all(is_bucket_shape(shape, 10) for shape in shapes)
        assert len(set(shapes)) <= 8, sorted(set(shapes))
        assert len(shapes) == math.ceil(len(lengths) / 10)


def test_batch_shapes_benchmark_tells_static_shapes_from_multiples_of_8(shared_data, capsys, tmp_path):
    root = shared_data("conll2003").parent
    rows = benchmark_batch_shapes.main(["--data_dir", str(root), "--epochs", "1"])
    assert [(row["corpus"], row["collator"]) for row in rows] == [
        (corpus, collator)
        for corpus in benchmark_batch_shapes.CORPUS_PATHS
        for collator in ("multiples of 8", "static shapes")
    ]
    by_kind = {(row["corpus"], row["collator"]): row for row in rows}
    assert by_kind["conll2003_ner", "multiples of 8"]["shapes_per_epoch"][0] > 8  # 11 widths and the last batch
    for corpus in benchmark_batch_shapes.CORPUS_PATHS:
        static, plain = by_kind[corpus, "static shapes"], by_kind[corpus, "multiples of 8"]
        assert static["shapes_per_epoch"][0] <= 8 and static["padding_per_token"] >= plain["padding_per_token"]
    assert capsys.readouterr().out.count("| static shapes |") == 2
    absent = benchmark_batch_shapes.main(["--data_dir", str(tmp_path), "--epochs", "1"])
    assert [row["absent"] for row in absent] == [
        str(tmp_path / path) for path in benchmark_batch_shapes.CORPUS_PATHS.values()
    ]


def test_with_cuda_graphs_a_batch_past_the_buckets_trains_eagerly_logged_once(tokenizer, tmp_path, caplog):
    # Sentences of 7, 11, 3 and 7 tokens, one a batch, with a single rung of 8: the 11-token one is padded to 16,
    # past the buckets, and must not take a graph of its own.
    dataset = datasets.Dataset.from_list(token_features(tokenizer))
    args = training_arguments(tmp_path, per_device_train_batch_size=1, max_steps=4, save_strategy="no", seed=3)
    args.cuda_graphs = True  # parsing refuses it without a CUDA GPU: set after, as the tests' way in
    model, collator_class = token_classifier(tokenizer, use_crf=False)
    trainer = SLSTMTrainer(
        model=model,
        args=args,
        train_dataset=dataset,
        data_collator=gpu_batching.data_collator(collator_class, tokenizer, args),
        train_data_collator=StaticShapeBatches(collator_class, tokenizer, 1, buckets=(8,)),
    )
    with caplog.at_level(logging.WARNING):
        trainer.train()
    captured_widths = [dict((name, shape) for name, shape, *_ in key)["input_ids"] for key in trainer.whole_step.captured]
    assert captured_widths == [(1, 8)]
    assert caplog.text.count("a batch of a shape past the static-shape buckets (1x16) trains eagerly") == 1
