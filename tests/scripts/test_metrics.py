"""The training scripts' metrics against independent oracles (scikit-learn, seqeval, a plain count) on imperfect
predictions, chosen so that a wrong metric (micro instead of macro F1, token instead of entity F1) gives another
number."""

import numpy as np
import pytest
from seqeval.metrics import f1_score as seqeval_f1
from sklearn.metrics import accuracy_score, f1_score
from transformers import EvalPrediction

from run_scripts.run_classification import classification_metrics
from run_scripts.run_ner import decode_tags, score_tags
from run_scripts.training.evaluation import predicted_ids
from run_scripts.training.tag_scheme_decisions import in_scheme

LABELS = ["neg", "pos"]


def test_classification_macro_f1_is_scikit_learns_macro_average():
    gold = np.array([1, 1, 1, 1, 1, 1, 0, 0])
    predicted = np.array([1, 1, 1, 1, 1, 0, 1, 1])  # the minority class is never found
    logits = np.eye(2)[predicted]  # (examples, classes), argmax = predicted
    names = [LABELS[i] for i in gold], [LABELS[i] for i in predicted]
    assert [LABELS[i] for i in predicted_ids(logits)] == names[1]
    metrics = classification_metrics(*names)
    assert metrics["macro_f1"] == pytest.approx(f1_score(*names, average="macro"))
    assert metrics["accuracy"] == pytest.approx(accuracy_score(*names))
    # The check can fail: micro-F1 (= accuracy here) and macro-F1 differ on these predictions.
    assert metrics["macro_f1"] != pytest.approx(f1_score(*names, average="micro"))


NER_LABELS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]


def token_metrics(eval_prediction: EvalPrediction, labels: list[str], scheme: str) -> dict:
    """run_ner.py's `compute_metrics`: the labelled positions' tags, in their IOB2 form, scored."""
    gold, predicted = decode_tags(eval_prediction.predictions, eval_prediction.label_ids, labels)
    gold, predicted = ([in_scheme(tags, scheme, "IOB2") for tags in tag_lists] for tag_lists in (gold, predicted))
    return score_tags(gold, predicted, span_task=True, strict=False, per_type=False)


ID = {label: index for index, label in enumerate(NER_LABELS)}


def ner_batch(gold_tags, predicted_tags):
    """Label ids `(batch, seq)` with -100 at the `<s>`/`</s>` frame and padding, and predicted ids beside them."""
    width = max(len(tags) for tags in gold_tags) + 2
    labels = np.full((len(gold_tags), width), -100)
    predictions = np.zeros((len(gold_tags), width), dtype=int)
    for row, (gold, predicted) in enumerate(zip(gold_tags, predicted_tags, strict=True)):
        labels[row, 1 : 1 + len(gold)] = [ID[tag] for tag in gold]
        predictions[row, 1 : 1 + len(predicted)] = [ID[tag] for tag in predicted]
    return EvalPrediction(predictions=predictions, label_ids=labels)


def test_entity_f1_is_seqevals_and_not_a_token_score():
    gold = [["B-PER", "I-PER", "I-PER", "O", "B-LOC"], ["O", "B-LOC", "I-LOC", "O"]]
    # A three-token person cut short (2 of 3 tokens right, 0 of 1 entity), one location right, one missed.
    predicted = [["B-PER", "I-PER", "O", "O", "B-LOC"], ["O", "O", "O", "O"]]
    metrics = token_metrics(ner_batch(gold, predicted), NER_LABELS, "IOB2")
    assert metrics["f1"] == pytest.approx(seqeval_f1(gold, predicted))  # 1 of 3 gold, 1 of 2 predicted: 0.4
    tokens = [(g, p) for gs, ps in zip(gold, predicted) for g, p in zip(gs, ps)]
    assert metrics["accuracy"] == pytest.approx(sum(g == p for g, p in tokens) / len(tokens))
    # Per-token F1 over the entity tokens would be 2/3 (3 of 3 predicted right, 3 of 6 found): the entity score
    # tells them apart.
    token_f1 = f1_score([g for g, _ in tokens], [p for _, p in tokens], labels=NER_LABELS[1:], average="micro")
    assert metrics["f1"] == pytest.approx(0.4) and token_f1 == pytest.approx(2 / 3)


def test_bioes_training_tags_are_scored_on_their_iob2_form():
    """A BIOES-trained model's predictions are converted to IOB2 first: seqeval on the IOB2 forms is the oracle."""
    bioes = ["O", "B-PER", "I-PER", "E-PER", "S-PER", "B-LOC", "I-LOC", "E-LOC", "S-LOC"]
    to_iob2 = {"E": "I", "S": "B", "B": "B", "I": "I"}
    gold_bioes = [["B-PER", "E-PER", "O", "S-LOC"], ["S-PER", "O", "B-LOC", "I-LOC", "E-LOC"]]
    predicted_bioes = [["B-PER", "E-PER", "O", "O"], ["S-PER", "O", "B-LOC", "E-LOC", "O"]]
    ids = {tag: index for index, tag in enumerate(bioes)}
    width = 7
    labels, predictions = np.full((2, width), -100), np.zeros((2, width), dtype=int)
    for row, (gold, predicted) in enumerate(zip(gold_bioes, predicted_bioes)):
        labels[row, 1 : 1 + len(gold)] = [ids[t] for t in gold]
        predictions[row, 1 : 1 + len(predicted)] = [ids[t] for t in predicted]
    metrics = token_metrics(EvalPrediction(predictions=predictions, label_ids=labels), bioes, "BIOES")

    def iob2(tags):
        return [tag if tag == "O" else f"{to_iob2[tag[0]]}-{tag[2:]}" for tag in tags]

    expected = seqeval_f1([iob2(t) for t in gold_bioes], [iob2(t) for t in predicted_bioes])
    assert metrics["f1"] == pytest.approx(expected) and 0 < expected < 1
