"""A pretrained encoder's word features (`SLSTMSubwordFeatures` and the tokenizer's subword inputs), on a tiny
randomly initialised BERT saved to a temporary folder: subword-to-word alignment against tokenizing each word alone,
pooling against a plain loop over the encoder's per-sentence states, exactness under padding, freezing, save/load,
`pipeline` on raw text, and the errors."""

import pytest
import torch
from helpers import BIO_LABELS, save_tiny_encoder, tiny_config
from transformers import AutoConfig, AutoModel, AutoModelForTokenClassification, AutoTokenizer, pipeline

from modeling_slstm import SLSTMConfig, SLSTMForSequenceClassification, SLSTMForTokenClassification, SLSTMModel
from modeling_slstm.tokenization_slstm import build_word_tokenizer
from modeling_slstm.validation import check_batch_values

SENTENCES = [
    ["The", "unbelievable", "cats"],
    ["zq"],
    ["New", "York", "'s", "unbelievable", "xylophones", "."],
]


@pytest.fixture(scope="module")
def encoder_folder(tmp_path_factory) -> str:
    return save_tiny_encoder(tmp_path_factory.mktemp("tiny_bert"))


@pytest.fixture(scope="module")
def subword_tokenizer(encoder_folder):
    return AutoTokenizer.from_pretrained(encoder_folder)


@pytest.fixture(scope="module")
def tokenizer(subword_tokenizer):
    return build_word_tokenizer(SENTENCES, subword_tokenizer=subword_tokenizer)


def feature_config(encoder_folder, **overrides) -> SLSTMConfig:
    labels = {"id2label": dict(enumerate(BIO_LABELS)), "label2id": {label: i for i, label in enumerate(BIO_LABELS)}}
    settings = {"feature_encoder_config": AutoConfig.from_pretrained(encoder_folder), "vocab_size": 40, **labels}
    return tiny_config(**{**settings, **overrides})


def feature_model(model_class, encoder_folder, seed: int = 0, **overrides):
    torch.manual_seed(seed)
    model = model_class(feature_config(encoder_folder, **overrides))
    model.base_model.embeddings.subword_features.load_pretrained_encoder(encoder_folder)
    return model.eval()


def expected_subwords(subword_tokenizer, words: list[str]) -> tuple[list[int], list[int]]:
    """The oracle: `[CLS]`, each word's pieces tokenized alone, `[SEP]`; the word positions count `<s>` as 0."""
    ids, positions = [subword_tokenizer.cls_token_id], [0]
    for position, word in enumerate(words, start=1):
        pieces = subword_tokenizer(word, add_special_tokens=False)["input_ids"]
        ids += pieces
        positions += [position] * len(pieces)
    return ids + [subword_tokenizer.sep_token_id], positions + [len(words) + 1]


@pytest.mark.parametrize("padding_side", ["right", "left"])
def test_subwords_align_with_each_word_tokenized_alone(tokenizer, subword_tokenizer, padding_side):
    tokenizer.padding_side = padding_side
    try:
        batch = tokenizer(SENTENCES, is_split_into_words=True, padding=True)
        collated = tokenizer.pad([tokenizer(words, is_split_into_words=True) for words in SENTENCES])
        # as the training scripts collate for a model without character features: char_ids dropped
        without_chars = [
            {k: v for k, v in tokenizer(words, is_split_into_words=True).items() if k != "char_ids"}
            for words in SENTENCES
        ]
        collated_without_chars = tokenizer.pad(without_chars)
    finally:
        tokenizer.padding_side = "right"
    longest = max(len(words) for words in SENTENCES) + 2
    for encoded in (batch, collated, collated_without_chars):
        for row, words in enumerate(SENTENCES):
            ids, positions = expected_subwords(subword_tokenizer, words)
            shift = longest - len(words) - 2 if padding_side == "left" else 0
            real = len(ids)
            assert encoded["subword_ids"][row][:real] == ids
            assert encoded["subword_to_word"][row][:real] == [position + shift for position in positions]
            assert encoded["subword_attention_mask"][row] == [1] * real + [0] * (
                len(encoded["subword_ids"][row]) - real
            )
    # "unbelievable" is four pieces, all of them mapped to the word's position
    assert batch["subword_to_word"][0].count(2 + (0 if padding_side == "right" else 3)) == 4


def test_raw_text_subwords_follow_the_word_split(tokenizer, subword_tokenizer):
    encoded = tokenizer("New York's unbelievable xylophones.")
    words = ["New", "York", "'s", "unbelievable", "xylophones", "."]
    assert len(encoded["input_ids"]) == len(words) + 2
    assert (encoded["subword_ids"], encoded["subword_to_word"]) == expected_subwords(subword_tokenizer, words)


def pooled_by_loop(model, subword_tokenizer, sentences, first_only: bool) -> list[torch.Tensor]:
    """The oracle: each sentence alone through the encoder, then a Python loop over its words' pieces."""
    encoder = model.base_model.embeddings.subword_features.encoder
    results = []
    for words in sentences:
        ids, positions = expected_subwords(subword_tokenizer, words)
        with torch.no_grad():
            states = encoder(input_ids=torch.tensor([ids])).last_hidden_state[0]  # (subwords, hidden)
        rows = []
        for position in range(len(words) + 2):
            pieces = [j for j, p in enumerate(positions) if p == position]
            rows.append(states[pieces[0]] if first_only else states[pieces].mean(0))
        results.append(torch.stack(rows))
    return results


@pytest.mark.parametrize("pooling", ["mean", "first"])
def test_pooled_features_equal_a_per_sentence_loop(encoder_folder, tokenizer, subword_tokenizer, pooling):
    model = feature_model(SLSTMModel, encoder_folder, feature_pooling=pooling)
    batch = tokenizer(SENTENCES, is_split_into_words=True, padding=True, return_tensors="pt")
    with torch.no_grad():
        features = model.embeddings.subword_features(
            batch["subword_ids"],
            batch["subword_attention_mask"],
            batch["subword_to_word"],
            batch["input_ids"].shape[1],
        )
    expected = pooled_by_loop(model, subword_tokenizer, SENTENCES, first_only=pooling == "first")
    for row, words in enumerate(SENTENCES):
        length = len(words) + 2
        torch.testing.assert_close(features[row, :length], expected[row], atol=1e-5, rtol=1e-5)
        assert features[row, length:].abs().max().item() == 0 if length < features.shape[1] else True
    # mean and first differ where a word has several pieces: the test can tell them apart
    other = pooled_by_loop(model, subword_tokenizer, SENTENCES[:1], first_only=pooling != "first")[0]
    assert not torch.allclose(features[0, :5], other, atol=1e-4)


@pytest.mark.parametrize("use_crf", [False, True])
def test_padding_does_not_change_a_sentence(encoder_folder, tokenizer, use_crf):
    model = feature_model(SLSTMForTokenClassification, encoder_folder, use_crf=use_crf)
    batch = tokenizer(SENTENCES, is_split_into_words=True, padding=True, return_tensors="pt")
    with torch.no_grad():
        batched = model(**batch).logits
        for row, words in enumerate(SENTENCES):
            alone = model(**tokenizer([words], is_split_into_words=True, return_tensors="pt")).logits[0]
            torch.testing.assert_close(batched[row, : len(words) + 2], alone, atol=1e-5, rtol=1e-5)


def test_frozen_encoder_stays_unchanged_and_in_eval_mode(encoder_folder, tokenizer):
    model = feature_model(SLSTMForSequenceClassification, encoder_folder)
    model.train()
    encoder = model.base_model.embeddings.subword_features.encoder
    assert not encoder.training and not any(p.requires_grad for p in encoder.parameters())
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    batch = tokenizer(SENTENCES, is_split_into_words=True, padding=True, return_tensors="pt")
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.5)
    model(**batch, labels=torch.tensor([0, 1, 1])).loss.backward()
    optimizer.step()
    changed = {name for name, p in model.named_parameters() if not torch.equal(p, before[name])}
    assert changed and not any(".subword_features." in name for name in changed)


def test_top_layers_train_when_asked(encoder_folder, tokenizer):
    model = feature_model(SLSTMForSequenceClassification, encoder_folder, feature_encoder_trainable_layers=1)
    model.train()
    encoder = model.base_model.embeddings.subword_features.encoder
    assert encoder.training  # a trained encoder keeps its dropout
    trainable = {name for name, p in encoder.named_parameters() if p.requires_grad}
    assert trainable and all(name.startswith("encoder.layer.1.") for name in trainable)
    all_trainable = feature_model(SLSTMModel, encoder_folder, feature_encoder_trainable_layers=-1)
    frozen = [
        n for n, p in all_trainable.embeddings.subword_features.encoder.named_parameters() if not p.requires_grad
    ]
    assert frozen == ["pooler.dense.weight", "pooler.dense.bias"]  # the pooler, which the features do not read


def test_save_and_load_keep_features_and_tokenizer(encoder_folder, tokenizer, tmp_path):
    model = feature_model(SLSTMForTokenClassification, encoder_folder, use_crf=True, feature_pooling="first")
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    loaded = AutoModelForTokenClassification.from_pretrained(tmp_path).eval()
    loaded_tokenizer = AutoTokenizer.from_pretrained(tmp_path)
    assert type(loaded.config.feature_encoder_config).__name__ == "BertConfig"
    assert loaded.config.feature_pooling == "first"
    assert not any(p.requires_grad for p in loaded.base_model.embeddings.subword_features.parameters())
    text = "New York's unbelievable cats."
    assert loaded_tokenizer(text) == tokenizer(text)
    assert loaded_tokenizer.model_max_length == tokenizer.model_max_length == 64  # the tiny BERT's limit
    with torch.no_grad():
        torch.testing.assert_close(
            loaded(**loaded_tokenizer(text, return_tensors="pt")).logits,
            model(**tokenizer(text, return_tensors="pt")).logits,
            atol=0,
            rtol=0,
        )


def test_pipeline_tags_raw_texts_with_features(encoder_folder, tokenizer):
    model = feature_model(SLSTMForTokenClassification, encoder_folder, use_crf=True)
    tagger = pipeline("token-classification", model=model, tokenizer=tokenizer, device="cpu")
    texts = ["New York's unbelievable cats.", "zq", "The cats"]
    one_by_one = [tagger(text) for text in texts]
    assert tagger(texts, batch_size=3) == one_by_one
    # the pipeline's tags are those of one direct forward call
    encoded = tokenizer(texts[0], return_tensors="pt")
    with torch.no_grad():
        predicted = model(**encoded).logits.argmax(-1)[0, 1:-1]
    tags = [model.config.id2label[int(index)] for index in predicted]
    assert [entity["entity"] for entity in one_by_one[0]] == [tag for tag in tags if tag != "O"]


def test_pipelines_cut_long_raw_texts_to_what_the_encoder_reads(encoder_folder, subword_tokenizer):
    """A text longer than the encoder reads is tagged up to its last word that fits (oracle: the longest prefix
    whose subwords fit), as the token-classification pipeline asks for truncation by itself; classification asks
    for it with `truncation=True`."""
    short = build_word_tokenizer(SENTENCES, subword_tokenizer=subword_tokenizer)
    short.subword_max_length = 13
    words = ["The", "unbelievable", "cats", "zq", "New", "York", "xylophones"]  # 23 subwords with the framing
    kept = max(k for k in range(len(words) + 1) if len(expected_subwords(subword_tokenizer, words[:k])[0]) <= 13)
    assert 0 < kept < len(words)
    long_text, kept_text = " ".join(words), " ".join(words[:kept])
    tagger = pipeline(
        "token-classification", model=feature_model(SLSTMForTokenClassification, encoder_folder), tokenizer=short
    )
    tags = tagger(long_text)
    assert tags == tagger(kept_text) and tags  # a random model tags some words (of those kept)
    classifier = pipeline(
        "text-classification", model=feature_model(SLSTMForSequenceClassification, encoder_folder), tokenizer=short
    )
    assert classifier(long_text, truncation=True) == classifier(kept_text)
    with pytest.raises(ValueError, match="Sentence 0 is 23 subwords long"):
        classifier(long_text)
    # windows over the text (a pipeline's stride) cover all of it, each checked against the limit
    windows = short(long_text, truncation=True, max_length=4, stride=1, return_overflowing_tokens=True)
    assert [windows.tokens(i)[1:-1] for i in range(len(windows["input_ids"]))] == [
        words[start : start + 2] for start in range(len(words) - 1)
    ]
    short.subword_max_length = 12  # "York xylophones" is 13 subwords with the framing
    with pytest.raises(ValueError, match="is 13 subwords long .* must each fit: give them a smaller max_length"):
        short(long_text, truncation=True, max_length=4, stride=1, return_overflowing_tokens=True)


def test_missing_or_inconsistent_subword_inputs_are_named(encoder_folder, tokenizer):
    model = feature_model(SLSTMModel, encoder_folder)
    batch = tokenizer(SENTENCES, is_split_into_words=True, padding=True, return_tensors="pt")
    with pytest.raises(ValueError, match="missing: subword_ids, subword_attention_mask, subword_to_word"):
        model(input_ids=batch["input_ids"])
    wrong = dict(batch, subword_to_word=batch["subword_to_word"][:, :-1])
    with pytest.raises(ValueError, match=r"subword_to_word must have shape \(batch, subwords\)"):
        model(**wrong)
    # Values are checked where data enters (the model reads none: a host sync), e.g. by the training scripts' collator.
    beyond = dict(batch, subword_to_word=batch["subword_to_word"] + batch["input_ids"].shape[1])
    with pytest.raises(ValueError, match=r"subword_to_word \(where subword_attention_mask is 1\) must be in"):
        check_batch_values(beyond, model.config)
    with pytest.raises(ValueError, match=r"subword_ids must be in \[0, \d+\) \(the feature encoder's vocab_size\)"):
        model(**dict(batch, subword_ids=batch["subword_ids"] + 1000))


@pytest.mark.parametrize(
    "sentences, batch_smaller",
    [(SENTENCES, True), ([["zq"], ["cats"], ["The"], ["."], ["New"]], False)],
    ids=["batch_smaller_than_seq", "batch_larger_than_seq"],
)
def test_subword_to_word_is_checked_against_the_sentence_length(encoder_folder, tokenizer, sentences, batch_smaller):
    """The limit of `subword_to_word` is `seq` (the word positions), whatever the batch size: valid batches pass,
    a subword assigned to position `seq` or beyond is named, padding (`subword_attention_mask` 0) holds any value."""
    config = feature_config(encoder_folder)
    batch = tokenizer(sentences, is_split_into_words=True, padding=True, return_tensors="pt")
    batch_size, seq = batch["input_ids"].shape
    assert (batch_size < seq) is batch_smaller, (batch_size, seq)
    check_batch_values(batch, config)  # the tokenizer's own batch: every subword within its sentence
    padding = ~batch["subword_attention_mask"].bool()
    check_batch_values(dict(batch, subword_to_word=batch["subword_to_word"].masked_fill(padding, seq + 5)), config)
    for value in range(seq, max(batch_size, seq) + 1):  # with batch > seq, values below the batch size too
        beyond = batch["subword_to_word"].clone()
        beyond[-1, 0] = value  # the first subword of the last sentence (always attended)
        message = rf"subword_to_word \(where subword_attention_mask is 1\) must be in \[0, {seq}\) \(seq\)"
        with pytest.raises(ValueError, match=message):
            check_batch_values(dict(batch, subword_to_word=beyond), config)


def test_tokenizer_errors_name_the_problem(subword_tokenizer):
    short = build_word_tokenizer(SENTENCES, subword_tokenizer=subword_tokenizer)
    short.subword_max_length = 6
    with pytest.raises(
        ValueError, match="Sentence 1 is 8 subwords long for the feature encoder, which reads at most 6"
    ):
        short([["a"], ["unbelievable", "zq"]], is_split_into_words=True)
    with pytest.raises(ValueError, match="Sentence 0 is 8 subwords long .* or pass truncation=True"):
        short("unbelievable zq")
    with pytest.raises(ValueError, match="first word of sentence 0 alone is 10 subwords"):
        short("xylophones zq", truncation=True)
    with pytest.raises(
        ValueError, match="first word of sentence 1 alone is 10 subwords .* at most 6 with its framing"
    ):
        short([["a"], ["xylophones"]], is_split_into_words=True, truncation=True, max_length=100)
    with pytest.raises(ValueError, match="Sentence pairs are not supported"):
        short("a b", "c d")


@pytest.mark.parametrize("subword_max_length", [5, 6, 8, 9, 11, 100])
def test_truncation_drops_last_words_until_the_subwords_fit(subword_tokenizer, subword_max_length):
    """Oracle: the longest prefix of each sentence whose subwords (`expected_subwords`, framing included) fit, found
    by trying every prefix; with truncation on, a batch encodes exactly as those prefixes encoded without it."""
    short = build_word_tokenizer(SENTENCES, subword_tokenizer=subword_tokenizer)
    short.subword_max_length = subword_max_length

    def fits(words):
        return len(expected_subwords(subword_tokenizer, words)[0]) <= subword_max_length

    prefixes = [words[: max(k for k in range(len(words) + 1) if fits(words[:k]))] for words in SENTENCES]
    truncated = short(SENTENCES, is_split_into_words=True, truncation=True, max_length=1000)
    assert dict(truncated) == dict(short(prefixes, is_split_into_words=True))
    # raw text (whose split gives the same words here) is cut after its last kept word; truncation=True needs no
    # max_length: the tokenizer's model_max_length is the subword tokenizer's
    raw = short([" ".join(words) for words in SENTENCES], truncation=True)
    assert dict(raw) == dict(short([" ".join(words) for words in prefixes]))
    # the word-level max_length still cuts too: whichever limit is tighter wins
    both = short(SENTENCES, is_split_into_words=True, truncation=True, max_length=4)
    assert both["input_ids"] == [ids[:3] + ids[-1:] if len(ids) > 4 else ids for ids in truncated["input_ids"]]


def test_config_and_weights_mismatch_are_named(encoder_folder, tmp_path):
    with pytest.raises(ValueError, match=r"feature_encoder_trainable_layers \(3\) exceeds .* num_hidden_layers \(2\)"):
        feature_config(encoder_folder, feature_encoder_trainable_layers=3)
    with pytest.raises(ValueError, match="feature_pooling must be one of"):
        feature_config(encoder_folder, feature_pooling="max")
    bigger = AutoConfig.from_pretrained(encoder_folder)
    bigger.hidden_size, bigger.intermediate_size = 12, 24
    AutoModel.from_config(bigger).save_pretrained(tmp_path)
    model = SLSTMModel(feature_config(encoder_folder))
    with pytest.raises(ValueError, match="does not match config.feature_encoder_config"):
        model.embeddings.subword_features.load_pretrained_encoder(str(tmp_path))
