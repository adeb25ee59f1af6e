"""Config validation and serialisation, and the errors raised by the models' forward on bad inputs."""

import re

import pytest
import torch
from helpers import MAX_WORD_LENGTH, VOCAB_SIZE, build, char_settings, tagger_config, tiny_config

from modeling_slstm import SLSTMConfig, SLSTMForSequenceClassification, SLSTMForTokenClassification, SLSTMModel
from modeling_slstm.validation import named_on_failure


@pytest.mark.parametrize(
    "field, value",
    [
        ("num_steps", 0),
        ("window_size", 0),
        ("num_sentence_nodes", -1),
        ("hidden_size", 0),
        ("embedding_dim", 0),
        ("vocab_size", 0),
        ("num_steps", 2.0),  # not an integer
        ("window_size", True),  # bool is not an integer here
        ("gate_normalization", "tanh"),
        ("classifier_pooling", "max"),
        ("embedding_dropout", 1.0),
        ("hidden_dropout", -0.1),
        ("classifier_dropout", 1.5),
        ("embedding_dropout", "0.5"),  # not a number
        ("use_crf", "false"),  # a string from JSON would read as true
        ("crf_constraints", 1),
        ("context_independent_content", "no"),
        ("remove_output_gate", None),
    ],
)
def test_invalid_setting_is_rejected_naming_the_field(field, value):
    with pytest.raises(ValueError, match=rf"SLSTMConfig\.{field} must .*got {re.escape(repr(value))}"):
        tiny_config(**{field: value})


def test_boundary_values_are_accepted():
    config = tiny_config(num_sentence_nodes=0, embedding_dropout=0.0, hidden_dropout=0.99)
    assert (config.num_sentence_nodes, config.hidden_dropout) == (0, 0.99)


def test_config_json_round_trip(tmp_path):
    config = tagger_config(
        num_steps=4, window_size=2, num_sentence_nodes=2, gate_normalization="softmax", use_crf=True,
        context_independent_content=True, remove_output_gate=True, classifier_pooling="mean", hidden_dropout=0.25,
    )  # fmt: skip
    path = tmp_path / "config.json"
    config.to_json_file(path)
    loaded = SLSTMConfig.from_json_file(path)
    assert loaded.to_dict() == config.to_dict()
    assert loaded.id2label == {0: "O", 1: "B-PER", 2: "I-PER", 3: "B-LOC", 4: "I-LOC"}  # int keys restored
    assert (loaded.window_size, loaded.num_sentence_nodes, loaded.gate_normalization) == (2, 2, "softmax")
    assert SLSTMConfig.model_type == loaded.model_type == "sentence_state_lstm"


def test_invalid_json_is_rejected_on_load(tmp_path):
    path = tmp_path / "config.json"
    tiny_config().to_json_file(path)
    path.write_text(path.read_text().replace('"num_steps": 3', '"num_steps": 0'))
    with pytest.raises(ValueError, match=r"SLSTMConfig\.num_steps must be an integer >= 1, got 0"):
        SLSTMConfig.from_json_file(path)


# Forward errors

IDS = torch.tensor([[4, 5, 6]])
V = VOCAB_SIZE


@pytest.fixture(scope="module")
def encoder():
    return build(SLSTMModel)


@pytest.mark.parametrize(
    "inputs, message",
    [
        ({"input_ids": IDS, "inputs_embeds": torch.zeros(1, 3, 5)}, r"exactly one of input_ids or inputs_embeds, got both"),
        ({}, r"exactly one of input_ids or inputs_embeds, got neither"),
        ({"inputs_embeds": torch.zeros(1, 3, 4)}, r"inputs_embeds must .*\(batch, seq, 5\), got \(1, 3, 4\)"),
        ({"inputs_embeds": torch.zeros(3, 5)}, r"inputs_embeds must have shape \(batch, seq, 5\), got \(3, 5\)"),
        ({"input_ids": torch.tensor([4, 5, 6])}, r"input_ids must have shape \(batch, seq\), got \(3,\)"),
        ({"input_ids": torch.tensor([[4, V]])}, rf"input_ids must be in \[0, {V}\) \(vocab_size\), .*\[4, {V}\]"),
        ({"input_ids": torch.tensor([[-1, 4]])}, rf"input_ids must be in \[0, {V}\) \(vocab_size\), .*\[-1, 4\]"),
        ({"input_ids": IDS, "attention_mask": torch.ones(1, 4)}, r"attention_mask must .*= \(1, 3\), got \(1, 4\)"),
        ({"input_ids": IDS, "attention_mask": torch.ones(3)}, r"attention_mask must have the shape .*got \(3,\)"),
        ({"input_ids": torch.zeros(2, 0, dtype=torch.long)}, r"sequence is empty"),
        ({"inputs_embeds": torch.zeros(1, 0, 5)}, r"sequence is empty"),
        ({"input_ids": torch.zeros(0, 3, dtype=torch.long)}, r"batch is empty \(batch = 0, input shape \(0, 3\)\)"),
        ({"inputs_embeds": torch.zeros(0, 3, 5)}, r"batch is empty \(batch = 0, input shape \(0, 3\)\)"),
        ({"input_ids": torch.zeros(0, 0, dtype=torch.long)}, r"batch is empty"),
    ],
    ids=["both", "neither", "embeds_width", "embeds_2d", "ids_1d", "id_too_large", "id_negative", "mask_width",
         "mask_1d", "empty_ids", "empty_embeds", "no_rows_ids", "no_rows_embeds", "no_rows_no_tokens"],
)  # fmt: skip
def test_encoder_rejects_bad_inputs(encoder, inputs, message):
    with pytest.raises(ValueError, match=message):
        encoder(**inputs)


@pytest.mark.parametrize("use_char_features", [False, True], ids=["words", "chars"])
@pytest.mark.parametrize(
    "model_class, overrides, labels",
    [
        (SLSTMModel, {}, None),
        (SLSTMModel, {"num_sentence_nodes": 0}, None),
        (SLSTMForSequenceClassification, {}, torch.zeros(0, dtype=torch.long)),
        (SLSTMForTokenClassification, {"use_crf": False}, torch.zeros(0, 3, dtype=torch.long)),
        (SLSTMForTokenClassification, {"use_crf": True}, torch.zeros(0, 3, dtype=torch.long)),
    ],
    ids=["encoder", "encoder_without_sentence_nodes", "sequence", "softmax_tagger", "crf_tagger"],
)
def test_a_batch_of_zero_rows_is_named_by_every_head(model_class, overrides, labels, use_char_features):
    """A `(0, seq)` batch failed deep inside the character CNN or the sentence update (`cannot reshape tensor of 0
    elements`), and gave empty outputs without sentence nodes. transformers' own encoders (BERT, DistilBERT, GPT-2)
    fail in such a reshape too rather than return empty outputs, so it is an error that names the batch."""
    chars = char_settings() if use_char_features else {}
    model = build(model_class, tagger_config(**chars, **overrides))
    inputs = {"input_ids": torch.zeros(0, 3, dtype=torch.long)}
    if use_char_features:
        inputs["char_ids"] = torch.zeros(0, 3, MAX_WORD_LENGTH, dtype=torch.long)
    for label_inputs in [{}] if labels is None else [{}, {"labels": labels}]:
        with pytest.raises(ValueError, match=r"The input batch is empty \(batch = 0, input shape \(0, 3\)\)"):
            model(**inputs, **label_inputs)


@pytest.mark.parametrize("use_crf", [False, True])
@pytest.mark.parametrize(
    "labels, message",
    [
        (torch.tensor([[0, 1]]), r"labels must have the shape of the input, \(batch, seq\) = \(1, 3\), got \(1, 2\)"),
        (torch.tensor([0, 1, 2]), r"labels must have the shape of the input.*got \(3,\)"),
        (torch.tensor([[0, 5, -100]]), r"labels must be in \[0, 5\) \(num_labels\) or -100 \(ignored\).*\[0, 5\]"),
        (torch.tensor([[-1, 0, -100]]), r"labels must be in \[0, 5\) \(num_labels\) or -100 \(ignored\).*\[-1, 0\]"),
    ],
    ids=["short", "1d", "too_large", "negative"],
)
def test_tagger_rejects_bad_labels(use_crf, labels, message):
    model = build(SLSTMForTokenClassification, tagger_config(use_crf=use_crf))
    with pytest.raises(ValueError, match=message):
        model(input_ids=IDS, labels=labels)


@pytest.mark.parametrize(
    "labels, message",
    [
        (torch.tensor([3]), r"labels must be in \[0, 3\) \(num_labels\), got values in \[3, 3\]"),
        (torch.tensor([-1]), r"labels must be in \[0, 3\) \(num_labels\), got values in \[-1, -1\]"),
        (torch.tensor([0, 1]), r"labels must have batch size 1 like the input, got shape \(2,\)"),
    ],
    ids=["too_large", "negative", "batch"],
)
def test_sequence_classifier_rejects_bad_labels(labels, message):
    model = build(SLSTMForSequenceClassification, num_labels=3)
    with pytest.raises(ValueError, match=message):
        model(input_ids=IDS, labels=labels)


def test_a_failure_with_valid_values_is_raised_as_it_is():
    """Where the value check passes, the failure inside `named_on_failure` is raised unchanged, not swallowed."""
    failure = IndexError("not about the values")
    with pytest.raises(IndexError) as raised, named_on_failure(lambda: None):
        raise failure
    assert raised.value is failure
    # In a forward: class ids in range given to a multi-label classifier fail in the loss, and that failure is what
    # the caller gets (swallowed, the forward would return no loss).
    model = build(SLSTMForSequenceClassification, num_labels=3, problem_type="multi_label_classification")
    with pytest.raises(ValueError, match=r"Target size \(torch.Size\(\[1\]\)\) must be the same as input size"):
        model(input_ids=IDS, labels=torch.tensor([1]))
