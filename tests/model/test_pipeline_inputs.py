"""`pipeline("token-classification")` and `pipeline("text-classification")` on what users pass: documents far longer
than 512 words are tagged whole (the S-LSTM has no length limit), and an empty text in a batch gives no entities, or
the class of its boundary tokens, instead of failing the batch."""

import random

import pytest
import torch
from helpers import BIO_LABELS, randomize_, word_tagger
from transformers import pipeline

from modeling_slstm import SLSTMConfig, SLSTMForSequenceClassification
from modeling_slstm.tokenization_slstm import build_word_tokenizer, update_config_from_tokenizer

VOCABULARY = [f"w{index}" for index in range(200)] + ["Paris", "John", "."]


def tagger(use_crf: bool):
    model, tokenizer = word_tagger([VOCABULARY], use_crf)
    return randomize_(model).eval(), tokenizer


@pytest.mark.parametrize("use_crf", [False, True])
def test_a_long_document_is_tagged_whole_as_in_one_forward_call(use_crf):
    model, tokenizer = tagger(use_crf)
    document = " ".join(random.Random(0).choices(VOCABULARY, k=5000))
    tagged = pipeline("token-classification", model=model, tokenizer=tokenizer)(document)

    encoded = tokenizer(document, return_tensors="pt")
    assert encoded["input_ids"].shape[1] == 5002  # every word, <s> and </s>: nothing truncated
    with torch.no_grad():
        predicted = model(**encoded).logits.argmax(-1)[0]  # (seq,)
    expected = {(index, BIO_LABELS[tag]) for index, tag in enumerate(predicted.tolist()) if 0 < index < 5001}
    expected = {(index, label) for index, label in expected if label != "O"}  # the pipeline leaves out O
    assert {(entity["index"], entity["entity"]) for entity in tagged} == expected
    assert max(entity["index"] for entity in tagged) > 4990  # the document's last words are tagged


def test_an_empty_text_in_a_batch_gives_no_entities():
    model, tokenizer = tagger(use_crf=True)
    tag = pipeline("token-classification", model=model, tokenizer=tokenizer)
    texts = ["John w1 Paris .", "", "   ", "w3 John"]
    batched = tag(texts)
    assert batched[1] == [] and batched[2] == []
    assert batched[0] == tag(texts[0]) and batched[3] == tag(texts[3])  # the other texts as when tagged alone


def test_direct_calls_keep_the_error_with_the_right_index():
    tokenizer = tagger(use_crf=True)[1]
    with pytest.raises(ValueError, match="Sentence 2 is empty"):
        tokenizer(["John", "Paris", " "])
    with pytest.raises(ValueError, match="Sentence 0 is empty"):
        tokenizer("")


def sentiment_classifier():
    """A small two-label S-LSTM classifier with every parameter drawn, and its word tokenizer."""
    tokenizer = build_word_tokenizer([["great", "fun", "."], ["boring", "and", "long", "."]])
    config = SLSTMConfig(
        embedding_dim=8, hidden_size=8, num_steps=2, embedding_dropout=0.0, hidden_dropout=0.0,
        classifier_dropout=0.0, id2label={0: "negative", 1: "positive"}, label2id={"negative": 0, "positive": 1},
    )  # fmt: skip
    update_config_from_tokenizer(config, tokenizer)
    return randomize_(SLSTMForSequenceClassification(config), seed=1).eval(), tokenizer


def expected_prediction(model, input_ids: list[int]) -> dict:
    """The label and probability the model gives `input_ids` (one sentence), computed without the tokenizer."""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([input_ids]), attention_mask=torch.ones(1, len(input_ids))).logits[0]
    probabilities = logits.double().softmax(-1)
    return {"label": model.config.id2label[int(probabilities.argmax())], "score": float(probabilities.max())}


@pytest.mark.parametrize("text", ["", "   "])
def test_text_classification_of_an_empty_text_is_that_of_its_boundary_tokens(text):
    model, tokenizer = sentiment_classifier()
    classify = pipeline("text-classification", model=model, tokenizer=tokenizer)
    (prediction,) = classify(text)
    expected = expected_prediction(model, [tokenizer.bos_token_id, tokenizer.eos_token_id])
    assert prediction["label"] == expected["label"]
    assert prediction["score"] == pytest.approx(expected["score"], abs=1e-6)


@pytest.mark.parametrize("batch_size", [1, 3])
def test_text_classification_gives_a_label_for_every_text_of_a_batch(batch_size):
    model, tokenizer = sentiment_classifier()
    classify = pipeline("text-classification", model=model, tokenizer=tokenizer)
    texts = ["great fun .", "", "boring and long .", " \t"]
    batched = classify(texts, batch_size=batch_size)
    assert len(batched) == len(texts)
    for text, prediction in zip(texts, batched):
        words = [tokenizer.convert_tokens_to_ids(word) for word in text.split()]
        expected = expected_prediction(model, [tokenizer.bos_token_id, *words, tokenizer.eos_token_id])
        assert prediction["label"] == expected["label"]
        assert prediction["score"] == pytest.approx(expected["score"], abs=1e-6)
        assert prediction == pytest.approx(classify(text)[0], abs=1e-6)  # as when classified alone
    # direct calls still refuse an empty text, naming it
    with pytest.raises(ValueError, match="Sentence 1 is empty"):
        tokenizer(texts, return_tensors="pt", padding=True)
    with pytest.raises(ValueError, match="Sentence 0 is empty"):
        tokenizer("", return_tensors="pt")
