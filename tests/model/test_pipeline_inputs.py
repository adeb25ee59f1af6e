"""`pipeline("token-classification")` and `pipeline("text-classification")` on what users pass: documents far longer
than 512 words are tagged whole (the S-LSTM has no length limit), and an empty text in a batch gives no entities, or
the class of its boundary tokens, as the pipelines give a BERT model, leaving the other texts of the batch as when
alone."""

import random
import re

import pytest
import torch
from helpers import BIO_LABELS, randomize_, tiny_bert_tokenizer, word_tagger
from transformers import BertConfig, BertForSequenceClassification, BertForTokenClassification, pipeline

from modeling_slstm import SLSTMConfig, SLSTMForSequenceClassification
from modeling_slstm.tokenization_slstm import build_word_tokenizer, update_config_from_tokenizer

VOCABULARY = [f"w{index}" for index in range(200)] + ["Paris", "John", "."]


def tagger(use_crf: bool):
    model, tokenizer = word_tagger([VOCABULARY], use_crf)
    return randomize_(model).eval(), tokenizer


@pytest.mark.parametrize("use_crf", [False, True])
def test_a_long_document_is_tagged_whole_as_in_one_forward_call(use_crf):
    model, tokenizer = tagger(use_crf)
    words = 1500  # three times BERT's 512 positions
    document = " ".join(random.Random(0).choices(VOCABULARY, k=words))
    tagged = pipeline("token-classification", model=model, tokenizer=tokenizer)(document)

    encoded = tokenizer(document, return_tensors="pt")
    assert encoded["input_ids"].shape[1] == words + 2  # every word, <s> and </s>: nothing truncated
    with torch.no_grad():
        predicted = model(**encoded).logits.argmax(-1)[0]  # (seq,)
    expected = {(index, BIO_LABELS[tag]) for index, tag in enumerate(predicted.tolist()) if 0 < index <= words}
    expected = {(index, label) for index, label in expected if label != "O"}  # the pipeline leaves out O
    assert {(entity["index"], entity["entity"]) for entity in tagged} == expected
    assert max(entity["index"] for entity in tagged) > words - 10  # the document's last words are tagged


def test_an_empty_text_in_a_batch_gives_no_entities():
    model, tokenizer = tagger(use_crf=True)
    tag = pipeline("token-classification", model=model, tokenizer=tokenizer)
    texts = ["John w1 Paris .", "", "   ", "w3 John"]
    batched = tag(texts)
    assert batched[1] == [] and batched[2] == []
    assert batched[0] == tag(texts[0]) and batched[3] == tag(texts[3])  # the other texts as when tagged alone


# Whitespace-separated words, each a single word of the tokenizer: graphemes of several code points (a flag, emoji
# with a variation selector, a skin tone or zero-width joiners, a keycap, a decomposed accent) and vocabulary words.
EMOJI_WORDS = [
    "\U0001f1e8\U0001f1f3", "\U0001f1fa\U0001f1f8", "\u2764\ufe0f", "\U0001f44d\U0001f3fd", "\U0001f469\u200d\U0001f52c",
    "\U0001f468\u200d\U0001f469\u200d\U0001f467", "1\ufe0f\u20e3", "cafe\u0301", "Paris", "John", "w1", ".",
]  # fmt: skip


@pytest.mark.parametrize("use_crf", [False, True])
def test_entities_keep_every_emoji_whole(use_crf):
    """`pipeline("token-classification")` on a text whose words are separated by spaces: every entity, with or
    without aggregation, spans whole words of the text (its offsets, its word), so a flag reads "🇨🇳", not "🇨 🇳"."""
    model, tokenizer = tagger(use_crf)
    text = " ".join(random.Random(0).choices(EMOJI_WORDS, k=60))
    words = [(match.start(), match.end()) for match in re.finditer(r"\S+", text)]
    starts, ends = {start for start, _ in words}, {end for _, end in words}
    for aggregation in ("none", "simple"):
        entities = pipeline(
            "token-classification", model=model, tokenizer=tokenizer, aggregation_strategy=aggregation
        )(text)
        for entity in entities:
            assert entity["start"] in starts and entity["end"] in ends, (aggregation, entity)
            # The words of the text, read without the spaces before punctuation (as transformers' own clean-up)
            expected = tokenizer.clean_up_tokenization(" ".join(text[entity["start"] : entity["end"]].split()))
            assert entity["word"] == expected, (aggregation, entity)
        tagged = [word for entity in entities for word in text[entity["start"] : entity["end"]].split()]
        assert len([word for word in tagged if len(word) > 1 and word in EMOJI_WORDS[:7]]) > 5  # not vacuous
        assert {"\U0001f1e8\U0001f1f3", "\U0001f1fa\U0001f1f8"} & set(tagged), aggregation  # a flag, whole


PUNCTUATED_TEXTS = [
    "M. Wasim",
    "Paris, said M. Wasim of Lahore's U.S. office... John!",
    "  Is it John, or M. Wasim?  ",
]


@pytest.mark.parametrize("text", PUNCTUATED_TEXTS)
def test_an_aggregated_entity_reads_as_the_text_spells_it(text):
    """The `word` of an entity that `aggregation_strategy="simple"` joins from several tokens, punctuation among
    them, is the text between the entity's offsets (as a BERT tokenizer's decoding gives it): `M. Wasim`, not
    `M . Wasim`. The tagger tags every word `I-PER`, so that the whole text is one entity; its words are in the
    vocabulary or not (a word outside it reads as the text spells it)."""
    model, tokenizer = word_tagger([VOCABULARY], use_crf=False)
    with torch.no_grad():
        model.classifier.weight.zero_()
        model.classifier.bias.copy_(torch.tensor([0.0 if label != "I-PER" else 1.0 for label in BIO_LABELS]))
    (entity,) = pipeline(
        "token-classification", model=model.eval(), tokenizer=tokenizer, aggregation_strategy="simple"
    )(text)
    assert (entity["entity_group"], entity["start"], entity["end"]) == ("PER", *re.search(r"\S.*\S", text).span())
    assert entity["word"] == text[entity["start"] : entity["end"]]


def sentiment_classifier(**overrides):
    """A small two-label S-LSTM classifier with every parameter drawn, and its word tokenizer; `overrides` change the
    config."""
    tokenizer = build_word_tokenizer([["great", "fun", "."], ["boring", "and", "long", "."]])
    config = SLSTMConfig(
        embedding_dim=8, hidden_size=8, num_steps=2, embedding_dropout=0.0, hidden_dropout=0.0,
        classifier_dropout=0.0, id2label={0: "negative", 1: "positive"}, label2id={"negative": 0, "positive": 1},
        char_dropout=0.0, **overrides,
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


MODELS_AND_TEXTS = {
    "tagger": (lambda: tagger(use_crf=False), ["John w1 Paris .", "", "w3", "  "]),
    "CRF tagger": (lambda: tagger(use_crf=True), ["", "John w1 Paris .", " \t", "w3"]),
    "sentence pooling": (lambda: sentiment_classifier(), ["great fun .", "", "boring", " "]),
    "attention pooling": (lambda: sentiment_classifier(classifier_pooling="attention"), ["", "boring and long ."]),
    "mean pooling": (lambda: sentiment_classifier(classifier_pooling="mean"), ["", "boring and long .", ""]),
    "characters": (lambda: sentiment_classifier(use_char_features=True), ["fun", "", "zzz great ."]),
}


@pytest.mark.parametrize("name", MODELS_AND_TEXTS)
def test_a_text_without_words_leaves_the_other_texts_of_its_batch_as_alone(name):
    """A blank text is `<s> </s>`: the model gives it finite outputs, and in a batch padded on either side every text
    (blank or not) gets the outputs it gets alone."""
    make_model, texts = MODELS_AND_TEXTS[name]
    model, tokenizer = make_model()
    with torch.no_grad():
        alone = [model(**tokenizer(text, return_tensors="pt")).logits[0] for text in texts]
        for side in ("right", "left"):
            batch = tokenizer(texts, padding=True, padding_side=side, return_tensors="pt")
            batched = model(**batch).logits
            for row, logits in enumerate(alone):
                assert torch.isfinite(logits).all()
                if batched.dim() == 3:  # (batch, seq, labels): the real positions of the row
                    batched_logits = batched[row][batch["attention_mask"][row].bool()]
                else:
                    batched_logits = batched[row]
                torch.testing.assert_close(batched_logits, logits, atol=1e-5, rtol=0, msg=f"{side} padding, {row}")


def tiny_bert(model_class, tokenizer, id2label: dict):
    """A one-layer BERT (hidden 8) with drawn weights, over `tokenizer`'s vocabulary."""
    config = BertConfig(
        vocab_size=len(tokenizer), hidden_size=8, num_hidden_layers=1, num_attention_heads=2, intermediate_size=8,
        id2label=id2label, label2id={label: index for index, label in id2label.items()},
    )  # fmt: skip
    torch.manual_seed(0)
    return model_class(config).eval()


@pytest.mark.parametrize("encoder", ["BERT", "S-LSTM"])
def test_pipelines_treat_blank_texts_as_with_a_bert_model(encoder):
    """What `transformers`' pipelines give a BERT model for an empty or blank text, run the same for both: no
    entities from token classification (whatever the aggregation), and from text classification the prediction for
    the special tokens alone (`[CLS] [SEP]`, `<s> </s>`: ids 2 and 3 in both), the other texts as when alone."""
    texts = ["", "great fun . Paris", " \t"]
    if encoder == "BERT":
        tokenizer = tagger_tokenizer = tiny_bert_tokenizer(["great", "fun", "."])
        classifier = tiny_bert(BertForSequenceClassification, tokenizer, {0: "negative", 1: "positive"})
        text_tagger = tiny_bert(BertForTokenClassification, tokenizer, dict(enumerate(BIO_LABELS)))
    else:
        classifier, tokenizer = sentiment_classifier()
        text_tagger, tagger_tokenizer = tagger(use_crf=True)
    classify = pipeline("text-classification", model=classifier, tokenizer=tokenizer)
    predictions = classify(texts, batch_size=3)
    framing_alone = expected_prediction(classifier, [2, 3])
    for text, prediction in zip(texts, predictions, strict=True):
        assert prediction == pytest.approx(classify(text)[0], abs=1e-6)
        if not text.strip():
            assert prediction["label"] == framing_alone["label"]
            assert prediction["score"] == pytest.approx(framing_alone["score"], abs=1e-6)
    for aggregation in ("none", "simple"):
        tag = pipeline(
            "token-classification", model=text_tagger, tokenizer=tagger_tokenizer, aggregation_strategy=aggregation
        )
        tagged = tag(texts, batch_size=3)
        assert tagged[0] == tagged[2] == [] and tagged[1] == tag(texts[1])
