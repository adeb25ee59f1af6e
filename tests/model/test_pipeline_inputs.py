"""`pipeline("token-classification")` on what users pass: documents far longer than 512 words are tagged whole
(the S-LSTM has no length limit), and an empty text in a batch gives no entities instead of failing the batch."""

import random

import pytest
import torch
from helpers import BIO_LABELS, randomize_, word_tagger
from transformers import pipeline

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
