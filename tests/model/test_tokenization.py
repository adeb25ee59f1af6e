"""Tests for the word-level tokenizer built by `build_word_tokenizer`: ids, framing, character ids, how raw and
pre-split text become words, words that look like special tokens, bad input, padding, saving and loading."""

import json
import unicodedata

import pytest
import regex
import torch
from helpers import tiny_bert_tokenizer
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from baselines import BaselineEncoderConfig
from modeling_slstm import SLSTMConfig
from modeling_slstm.tokenization_slstm import (
    SPECIAL_TOKENS,
    SLSTMTokenizer,
    _build_vocabulary,
    _sentence_framing,
    build_word_tokenizer,
    update_config_from_tokenizer,
)

SENTENCES = [["The", "cat", "sat"], ["the", "dog", "sat"], ["a", "cat", "ran"]]


@pytest.fixture(scope="module")
def tokenizer():
    return build_word_tokenizer(SENTENCES)


def test_special_tokens_have_fixed_ids(tokenizer):
    assert SPECIAL_TOKENS == ("<pad>", "<unk>", "<s>", "</s>")
    special_ids = [tokenizer.pad_token_id, tokenizer.unk_token_id, tokenizer.bos_token_id, tokenizer.eos_token_id]
    assert special_ids == [0, 1, 2, 3]
    assert tokenizer.convert_tokens_to_ids(list(SPECIAL_TOKENS)) == [0, 1, 2, 3]


def test_special_tokens_keep_their_ids_when_they_occur_in_the_data():
    # The tokenizers trainer would renumber special tokens that also occur in its training data.
    tokenizer = build_word_tokenizer([["<s>", "<pad>", "word", "</s>"]])
    assert tokenizer.convert_tokens_to_ids(list(SPECIAL_TOKENS)) == [0, 1, 2, 3]
    assert len(tokenizer) == 5


def test_vocabulary_is_ordered_by_frequency_then_alphabetically(tokenizer):
    vocabulary = tokenizer.get_vocab()
    # "cat" and "sat" occur twice, the other words once.
    assert [vocabulary[word] for word in ["cat", "sat", "The", "a", "dog", "ran", "the"]] == [4, 5, 6, 7, 8, 9, 10]
    assert build_word_tokenizer(SENTENCES).get_vocab() == vocabulary


def test_sentence_is_framed_with_bos_and_eos(tokenizer):
    encoding = tokenizer(["the", "cat"], is_split_into_words=True)
    assert encoding.tokens() == ["<s>", "the", "cat", "</s>"]
    assert encoding["input_ids"][0] == tokenizer.bos_token_id
    assert encoding["input_ids"][-1] == tokenizer.eos_token_id
    assert encoding.word_ids() == [None, 0, 1, None]


def test_pair_is_framed_with_bos_and_two_eos(tokenizer):
    encoding = tokenizer(["the", "cat"], ["sat"], is_split_into_words=True)
    assert encoding.tokens() == ["<s>", "the", "cat", "</s>", "sat", "</s>"]
    assert encoding.sequence_ids() == [None, 0, 0, None, 1, None]


def test_unknown_words_map_to_unk(tokenizer):
    encoding = tokenizer(["the", "zebra"], is_split_into_words=True)
    assert encoding["input_ids"][2] == tokenizer.unk_token_id
    assert encoding.word_ids() == [None, 0, 1, None]


def test_min_frequency_drops_rare_words():
    vocabulary = build_word_tokenizer(SENTENCES, min_frequency=2).get_vocab()
    assert set(vocabulary) == {*SPECIAL_TOKENS, "cat", "sat"}


def test_extra_vocabulary_is_added_after_training_words():
    tokenizer = build_word_tokenizer(SENTENCES, min_frequency=2, extra_vocabulary=["zebra", "cat", "yak", "zebra"])
    vocabulary = tokenizer.get_vocab()
    assert len(vocabulary) == 8
    assert [vocabulary["zebra"], vocabulary["yak"]] == [6, 7]
    assert tokenizer(["yak"], is_split_into_words=True).tokens() == ["<s>", "yak", "</s>"]


def test_lowercase_applies_to_training_extra_words_and_input():
    tokenizer = build_word_tokenizer(SENTENCES, extra_vocabulary=["Zebra"], lowercase=True)
    vocabulary = tokenizer.get_vocab()
    assert "The" not in vocabulary and "zebra" in vocabulary and "Zebra" not in vocabulary
    assert tokenizer(["THE", "ZEBRA"], is_split_into_words=True).tokens() == ["<s>", "the", "zebra", "</s>"]
    # "The" and "the" are counted together: "the" is as frequent as "cat" and "sat".
    assert vocabulary["the"] < vocabulary["a"]


def test_batch_is_padded_with_pad_id(tokenizer):
    batch = tokenizer([["the", "cat", "sat"], ["a"]], is_split_into_words=True, padding=True)
    assert batch["input_ids"][1] == [2, tokenizer.convert_tokens_to_ids("a"), 3, 0, 0]
    assert batch["attention_mask"] == [[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]]
    assert batch.word_ids(1) == [None, 0, None, None, None]


def test_model_max_length_truncates():
    tokenizer = build_word_tokenizer(SENTENCES, model_max_length=4)
    assert tokenizer.model_max_length == 4
    encoding = tokenizer(["the", "cat", "sat", "a"], is_split_into_words=True, truncation=True)
    assert encoding.tokens() == ["<s>", "the", "cat", "</s>"]


def test_save_and_load_with_auto_tokenizer(tokenizer, tmp_path):
    tokenizer.save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    assert isinstance(loaded, PreTrainedTokenizerFast)
    # By name: once a test in this process has loaded a checkpoint with `trust_remote_code`, the copy of the class
    # that came with it is registered too, and AutoTokenizer may resolve the name to either (the same code).
    assert type(loaded).__name__ == SLSTMTokenizer.__name__
    assert loaded.is_fast
    words = [["The", "cat", "sat", "zebra"], ["a"]]
    assert (
        loaded(words, is_split_into_words=True, padding=True).data
        == tokenizer(words, is_split_into_words=True, padding=True).data
    )
    assert loaded("The cat, sat.").data == tokenizer("The cat, sat.").data
    assert loaded.get_vocab() == tokenizer.get_vocab()
    assert loaded.model_max_length == tokenizer.model_max_length
    assert [loaded.pad_token, loaded.unk_token, loaded.bos_token, loaded.eos_token] == list(SPECIAL_TOKENS)
    assert (loaded.char_vocabulary, loaded.max_word_length) == (tokenizer.char_vocabulary, tokenizer.max_word_length)
    # The code travels with the tokenizer, for `trust_remote_code=True` where the package is not installed.
    saved = json.loads((tmp_path / "tokenizer_config.json").read_text())
    assert saved["auto_map"]["AutoTokenizer"][0] == "tokenization_slstm.SLSTMTokenizer"
    assert {"tokenization_slstm.py", "configuration_slstm.py"} <= {path.name for path in tmp_path.iterdir()}


def test_tokenizers_saved_without_characters_still_load(tmp_path):
    """A folder saved before character ids existed (a plain word-level tokenizer.json) loads as before."""
    backend = Tokenizer(models.WordLevel(_build_vocabulary(["the", "cat"]), unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    backend.add_special_tokens(list(SPECIAL_TOKENS))
    backend.post_processor = _sentence_framing()
    special = dict(zip(["pad_token", "unk_token", "bos_token", "eos_token"], SPECIAL_TOKENS))
    PreTrainedTokenizerFast(tokenizer_object=backend, **special).save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    assert not isinstance(loaded, SLSTMTokenizer)
    assert loaded("the dog cat").data == {"input_ids": [2, 4, 1, 5, 3], "attention_mask": [1] * 5}
    with pytest.raises(ValueError, match="char_vocabulary that starts with"):
        SLSTMTokenizer.from_pretrained(tmp_path)


def test_decode_skips_special_tokens(tokenizer):
    ids = tokenizer(["the", "cat"], is_split_into_words=True)["input_ids"]
    assert tokenizer.decode(ids, skip_special_tokens=True) == "the cat"


def test_tokens_read_without_the_spaces_before_punctuation(tmp_path):
    """Tokens join as transformers' `clean_up_tokenization` reads them joined with spaces (`M. Wasim, Lahore's`), in
    decoding too, in the tokenizer and from its tokenizer.json alone; no word is glued to the one before (`##x` is a
    word)."""
    tokens = ["M", ".", "Wasim", ",", "of", "Lahore", "'s", "office", "...", "(", "##x", ")", "!", "?"]
    tokenizer = build_word_tokenizer([tokens])
    expected = tokenizer.clean_up_tokenization(" ".join(tokens))
    assert expected == "M. Wasim, of Lahore's office... ( ##x )!?"
    tokenizer.save_pretrained(tmp_path)
    plain = PreTrainedTokenizerFast(tokenizer_file=str(tmp_path / "tokenizer.json"))
    assert tokenizer.convert_tokens_to_string(tokens) == plain.convert_tokens_to_string(tokens) == expected
    ids = tokenizer(tokens, is_split_into_words=True)["input_ids"]
    assert tokenizer.decode(ids, skip_special_tokens=True) == plain.decode(ids, skip_special_tokens=True) == expected


@pytest.mark.parametrize("sentences", [[], [[], []]])
def test_empty_training_data_is_rejected(sentences):
    with pytest.raises(ValueError, match="empty training data"):
        build_word_tokenizer(sentences)


def test_unsplit_sentence_is_rejected():
    with pytest.raises(TypeError, match="sequence of words.*index 1"):
        build_word_tokenizer([["a"], "a b"])


def test_min_frequency_below_one_is_rejected():
    with pytest.raises(ValueError, match="min_frequency.*got 0"):
        build_word_tokenizer(SENTENCES, min_frequency=0)


# --------------------------------------------------------------------------------------------------------------------
# Raw text and pre-split words
# --------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, words",
    [
        (
            "Just landed in New York, heading to Madison Square Garden.",
            ["Just", "landed", "in", "New", "York", ",", "heading", "to", "Madison", "Square", "Garden", "."],
        ),
        ("The U.S. e-mail said (in 1996-08-22): 1,000 at 3.5%...", ["The", "U.S.", "e-mail", "said", "(", "in",
                                                                    "1996-08-22", ")", ":", "1,000", "at", "3.5",
                                                                    "%", "..."]),
        ("Mr. O'Neill's AT&T deal -- reuters.com", ["Mr.", "O'Neill", "'s", "AT&T", "deal", "--", "reuters.com"]),
        ("don't stop, they're 3rd in Zürich!", ["don't", "stop", ",", "they", "'re", "3rd", "in", "Zürich", "!"]),
        ("Go @The_Score #NFL, see http://bit.ly/aQun1b.", ["Go", "@The_Score", "#NFL", ",", "see",
                                                          "http://bit.ly/aQun1b", "."]),
        ("(www.reuters.com/a?b=1) @ 5 # 2", ["(", "www.reuters.com/a?b=1", ")", "@", "5", "#", "2"]),
        ("I \u2764\ufe0f Beijing\U0001f1e8\U0001f1f3!", ["I", "\u2764\ufe0f", "Beijing", "\U0001f1e8\U0001f1f3", "!"]),
    ],
)  # fmt: skip
def test_raw_text_is_split_like_conll_data(tokenizer, text, words):
    encoding = tokenizer(text, return_offsets_mapping=True)
    spans = [
        text[start:end]
        for (start, end), word in zip(encoding["offset_mapping"], encoding.word_ids())
        if word is not None
    ]
    assert spans == words
    assert encoding.word_ids()[1:-1] == list(range(len(words)))


GRAPHEME_TEXTS = [
    "I \u2764\ufe0f NY, we \U0001f44d\U0001f3fd it!",  # a variation selector; a skin tone
    "Family: \U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466. Scientist\U0001f469\u200d\U0001f52cok",  # ZWJ
    "Trip to \U0001f1e8\U0001f1f3/\U0001f1fa\U0001f1f8 (Beijing\U0001f1e8\U0001f1f3).",  # flags, alone and attached
    "cafe\u0301 nai\u0308ve #cafe\u0301 @Zu\u0308rich e\u0301-mail U.S.\u0301",  # combining accents, decomposed
    "keys 1\ufe0f\u20e3 #\ufe0f\u20e3, \U0001f3f3\ufe0f\u200d\U0001f308! \u263a\ufe0e a\u200db",  # keycaps, a ZWJ flag
]


def graphemes(text: str) -> list[tuple[int, int]]:
    """The spans of `text`'s graphemes (extended grapheme clusters), by the `regex` package's `\\X`."""
    return [match.span() for match in regex.finditer(r"\X", text)]


@pytest.mark.parametrize("text", GRAPHEME_TEXTS)
def test_raw_text_words_never_split_a_grapheme(tokenizer, text):
    """Every word of raw text starts and ends on a grapheme boundary (the `regex` package's, an independent
    implementation of Unicode UAX #29), the words cover the text's characters in order, and a grapheme standing alone
    between spaces (a flag, an emoji with its modifiers) is one word."""
    encoding = tokenizer(text, return_offsets_mapping=True)
    spans = [span for span, word in zip(encoding["offset_mapping"], encoding.word_ids()) if word is not None]
    boundaries = {0} | {end for _, end in graphemes(text)}
    assert [span for span in spans if not set(span) <= boundaries] == []
    assert "".join(text[start:end] for start, end in spans) == "".join(text.split())
    lone = [chunk for chunk in text.split() if len(graphemes(chunk)) == 1]
    assert set(lone) <= {text[start:end] for start, end in spans}


ACCENTED_TEXTS = [
    (
        "@Zürich loves #naïve #café, says Müller's naïve résumé.",
        ["@Zürich", "loves", "#naïve", "#café", ",", "says", "Müller", "'s", "naïve", "résumé", "."],
    ),
    (
        "Señor Gödel-Escher: l'été à Zürich #Ελλάδα @नमस्ते_दुनिया #한국",
        ["Señor", "Gödel-Escher", ":", "l'été", "à", "Zürich", "#Ελλάδα", "@नमस्ते_दुनिया", "#한국"],
    ),
]


@pytest.mark.parametrize("form", ["NFC", "NFD"])
@pytest.mark.parametrize("text, words", ACCENTED_TEXTS, ids=["latin", "other-scripts"])
def test_accented_text_gives_the_same_words_composed_or_decomposed(tokenizer, text, words, form):
    """Words, mentions and hashtags with accents stay whole whether the accents are precomposed (NFC) or combining
    marks after their letters (NFD, where a mark may sit inside a word: `nai\u0308ve`): the same words, each as the
    text spells it."""
    text = unicodedata.normalize(form, text)
    encoding = tokenizer(text, return_offsets_mapping=True)
    spans = [
        text[start:end]
        for (start, end), word in zip(encoding["offset_mapping"], encoding.word_ids())
        if word is not None
    ]
    assert spans == [unicodedata.normalize(form, word) for word in words]


def test_pre_split_words_are_never_split(tokenizer):
    words = ["York,", "U.S.", "e-mail", "New York", "(", "3.5%"]
    encoding = tokenizer(words, is_split_into_words=True, return_offsets_mapping=True)
    assert encoding.word_ids() == [None, 0, 1, 2, 3, 4, 5, None]
    assert encoding["offset_mapping"][1:-1] == [(0, len(word)) for word in words]  # offsets within each word


@pytest.mark.parametrize("literal", ["<s>", "</s>", "<pad>", "<unk>"])
def test_words_that_look_like_special_tokens_are_words(tokenizer, literal):
    encoding = tokenizer(["the", literal, "cat"], is_split_into_words=True, return_special_tokens_mask=True)
    assert encoding["input_ids"] == [2, tokenizer.convert_tokens_to_ids("the"), 1, 4, 3]
    assert encoding["special_tokens_mask"] == [1, 0, 0, 0, 1]
    assert encoding["char_ids"][2] == tokenizer.spell(literal)
    raw = tokenizer(f"the {literal} cat", return_special_tokens_mask=True)
    assert raw["input_ids"].count(2) == raw["input_ids"].count(3) == 1 and 0 not in raw["input_ids"]
    assert sum(raw["special_tokens_mask"]) == 2  # only the framing


@pytest.mark.parametrize(
    "text, is_split_into_words, message",
    [
        ([], False, r"The batch of texts is empty \(text=\[\]\); expected at least one text"),
        ([], True, "Sentence 0 is empty: with is_split_into_words=True, expected at least one word"),
        ([["a"], []], True, "Sentence 1 is empty: with is_split_into_words=True, expected at least one word"),
        ([["a"], ["b", ""]], True, "Sentence 1 has an empty word at position 1"),
        ("a b", True, "expected sentence 0 to be a list of words, got the string 'a b'"),
        ([["a"], "a b"], True, "expected sentence 1 to be a list of words, got the string 'a b'"),
    ],
)
def test_empty_sentences_and_words_are_clear_errors(tokenizer, text, is_split_into_words, message):
    with pytest.raises(ValueError, match=message):
        tokenizer(text, is_split_into_words=is_split_into_words)


@pytest.mark.parametrize(
    "text, text_pair, side, faulty, message",
    [
        (["a", ""], ["b"], "first", ["a", ""], "has an empty word at position 1"),
        (["a"], ["b", ""], "second", ["b", ""], "has an empty word at position 1"),
        ([["a"], ["c"]], [["b"], ["", "d"]], "second", ["", "d"], "has an empty word at position 0"),
        ([["a"], ["c"]], [["b"], []], "second", [], "is empty: with is_split_into_words=True"),
    ],
)
def test_a_pre_split_pair_with_an_empty_word_is_an_error_naming_its_side(
    tokenizer, text, text_pair, side, faulty, message
):
    """Either side of a pair is checked as a single sentence is, and the message says which side holds the fault."""
    with pytest.raises(ValueError, match=message):  # the faulty sentence alone
        tokenizer(faulty, is_split_into_words=True)
    batched = isinstance(text[0], list)
    index = 1 if batched else 0
    argument = {"first": "text", "second": "text_pair"}[side]
    expected = rf"^The {side} sentence \({argument}\) of pair {index} {message}"
    for encode in (tokenizer, tokenizer.encode):
        with pytest.raises(ValueError, match=expected):
            encode(text, text_pair, is_split_into_words=True)


def test_empty_training_word_is_rejected():
    with pytest.raises(ValueError, match="Sentence 1 has an empty word at position 0"):
        build_word_tokenizer([["a"], ["", "b"]])


# --------------------------------------------------------------------------------------------------------------------
# Character ids
# --------------------------------------------------------------------------------------------------------------------


def test_character_vocabulary_is_ordered_by_frequency_and_keeps_case():
    tokenizer = build_word_tokenizer([["aab", "Ab"], ["b"]], lowercase=True)
    # b: 3, a: 2, A: 1; the reserved entries first.
    assert tokenizer.char_vocabulary == [*SPECIAL_TOKENS, "b", "a", "A"]
    assert tokenizer.char_vocab_size == 7
    assert tokenizer(["AB"], is_split_into_words=True).tokens() == ["<s>", "ab", "</s>"]  # words lower-cased
    assert tokenizer(["AB"], is_split_into_words=True)["char_ids"][1][:2] == [6, 1]  # "A" kept, "B" unseen


def test_rare_characters_share_the_unknown_id():
    tokenizer = build_word_tokenizer([["aab"]], min_char_frequency=2)
    assert tokenizer.char_vocabulary == [*SPECIAL_TOKENS, "a"]
    assert tokenizer.spell("ab")[:2] == [4, 1]


def test_char_ids_rows(tokenizer):
    width = tokenizer.max_word_length
    encoding = tokenizer([["cat", "x" * (width + 5), "€"], ["a"]], is_split_into_words=True, padding=True)
    rows = encoding["char_ids"][0]
    ids = tokenizer.char_vocabulary.index
    assert [len(row) for row in rows] == [width] * 5
    assert rows[0] == [2] + [0] * (width - 1)  # <s>
    assert rows[1] == [ids("c"), ids("a"), ids("t")] + [0] * (width - 3)
    assert rows[2] == [1] * width  # "x" was never seen: unknown; the long word is cut to its first characters
    assert rows[3] == [1] + [0] * (width - 1)
    assert rows[4] == [3] + [0] * (width - 1)  # </s>
    assert encoding["char_ids"][1][3:] == [[0] * width, [0] * width]  # padding


def test_every_token_is_spelled_from_its_own_text(tokenizer):
    """Overflowing windows, pairs, raw and pre-split text: each row spells the text its offsets point at."""
    texts = ["The cat sat , a dog ran .", "a cat"]
    encoding = tokenizer(
        texts, ["the dog", "sat"], truncation="only_first", max_length=7, stride=1, return_overflowing_tokens=True,
        return_offsets_mapping=True,
    )  # fmt: skip
    assert len(encoding["char_ids"]) == len(encoding["input_ids"]) > len(texts)
    for row, sample in enumerate(encoding["overflow_to_sample_mapping"]):
        sources = (texts[sample], ["the dog", "sat"][sample])
        for position, sequence in enumerate(encoding.sequence_ids(row)):
            if sequence is not None:
                start, end = encoding["offset_mapping"][row][position]
                assert encoding["char_ids"][row][position] == tokenizer.spell(sources[sequence][start:end])


@pytest.mark.parametrize("side", ["right", "left"])
def test_pad_pads_char_ids_on_the_padding_side(tokenizer, side):
    sentences = [["the", "cat", "sat"], ["a"]]
    features = [tokenizer(words, is_split_into_words=True) for words in sentences]
    padded = tokenizer.pad(features, padding_side=side, return_tensors="pt")
    expected = tokenizer(sentences, is_split_into_words=True, padding=True, padding_side=side, return_tensors="pt")
    for key in ("input_ids", "attention_mask", "char_ids"):
        assert torch.equal(padded[key], expected[key]), key
    assert padded["char_ids"].shape == (2, 5, tokenizer.max_word_length)
    assert "char_ids" in tokenizer.model_input_names


@pytest.mark.parametrize("config_class", [SLSTMConfig, BaselineEncoderConfig])
def test_update_config_from_tokenizer(tokenizer, config_class):
    config = config_class(use_char_features=True)
    update_config_from_tokenizer(config, tokenizer)
    assert (config.vocab_size, config.char_vocab_size) == (len(tokenizer), tokenizer.char_vocab_size) == (11, 16)
    assert (config.pad_token_id, config.bos_token_id, config.eos_token_id) == (0, 2, 3)
    plain = PreTrainedTokenizerFast(tokenizer_object=tokenizer.backend_tokenizer, unk_token="<unk>")
    update_config_from_tokenizer(word_only := config_class(), plain)
    assert word_only.vocab_size == 11
    with pytest.raises(ValueError, match="use_char_features=True but the tokenizer .TokenizersBackend. gives no"):
        update_config_from_tokenizer(config, plain)


# --------------------------------------------------------------------------------------------------------------------
# Empty and blank raw text, against a BERT tokenizer
# --------------------------------------------------------------------------------------------------------------------


def as_lists(value):
    """A tensor as nested lists; lists as they are."""
    return value.tolist() if isinstance(value, torch.Tensor) else value


def layout(encoding) -> dict:
    """What an encoding says about the texts whatever the vocabulary: whether it is a tensor, a batch, the framing and
    padding ids (-1 at a word's token), each token's word and sequence, the masks, offsets and overflow mapping."""
    ids = as_lists(encoding["input_ids"])
    batched = bool(ids) and isinstance(ids[0], list)
    result = {"tensor": isinstance(encoding["input_ids"], torch.Tensor), "batched": batched}
    result["framing"] = [
        [token if word is None else -1 for token, word in zip(row, encoding.word_ids(index), strict=True)]
        for index, row in enumerate(ids if batched else [ids])
    ]
    result["words"] = [encoding.word_ids(index) for index in range(len(encoding.encodings))]
    result["sequences"] = [encoding.sequence_ids(index) for index in range(len(encoding.encodings))]
    for key in ("attention_mask", "special_tokens_mask", "offset_mapping", "overflow_to_sample_mapping"):
        result[key] = as_lists(encoding.get(key))
    return result


@pytest.fixture(scope="module")
def bert_tokenizer():
    return tiny_bert_tokenizer(["the", "cat", "sat"])


ALIGNED = {"return_offsets_mapping": True, "return_special_tokens_mask": True}


@pytest.mark.parametrize(
    "args, options",
    [
        (("",), {}),
        (("   ",), ALIGNED),
        ((" \t\n",), {"return_tensors": "pt"}),
        ((["", "the cat"],), {"padding": True, **ALIGNED}),
        ((["the cat sat", "", "  "],), {"padding": True, "padding_side": "left", "return_tensors": "pt"}),
        ((["", "a"],), {"padding": "max_length", "max_length": 5, "return_tensors": "pt", **ALIGNED}),
        ((["", "the cat sat dog"],), {"truncation": True, "max_length": 4, "padding": True}),
        ((["", "the cat sat dog", " "],), {"truncation": True, "max_length": 4, "stride": 1,
                                           "return_overflowing_tokens": True, **ALIGNED}),
        (("the", ""), ALIGNED),  # an empty second text is no pair
        (("", "the"), ALIGNED),
        ((["", "cat", " "], ["the", "", ""]), {"padding": True, **ALIGNED}),
    ],
)  # fmt: skip
def test_empty_and_blank_text_encode_as_a_bert_tokenizer_does(tokenizer, bert_tokenizer, args, options):
    """`<s> </s>` where BERT gives `[CLS] [SEP]`, in single and batched calls, pairs, padding, truncation and
    overflowing windows; the texts' words split alike in both, so everything but the words' ids must agree."""
    ours = tokenizer(*args, **options)
    assert layout(ours) == layout(bert_tokenizer(*args, **options))
    input_ids, char_ids = as_lists(ours["input_ids"]), as_lists(ours["char_ids"])
    if not isinstance(input_ids[0], list):
        input_ids, char_ids = [input_ids], [char_ids]
    blank = [0] * (tokenizer.max_word_length - 1)
    for token_ids, rows in zip(input_ids, char_ids, strict=True):
        assert len(rows) == len(token_ids)
        for token, row in zip(token_ids, rows):
            if token in (tokenizer.pad_token_id, tokenizer.bos_token_id, tokenizer.eos_token_id):
                # padding's row is all zeros; the framing's is its reserved character id (its token id), then zeros
                assert row == [token, *blank]


def test_blank_sentences_of_a_dataset_tokenize_as_transformers_run_classification_does(tokenizer, bert_tokenizer):
    """transformers' `examples/pytorch/text-classification/run_classification.py` tokenizes the sentence column with
    `datasets.map(batched=True)`, padded to `max_seq_length` and truncated: a training file with a blank sentence
    gives it the special tokens alone, and every other sentence its words."""
    from datasets import Dataset

    sentences = ["the cat sat", "", "sat the cat sat the cat", "  \t"]
    dataset = Dataset.from_dict({"sentence": sentences, "label": [0, 1, 0, 1]})

    def preprocessed(word_tokenizer):
        def preprocess(examples):
            return word_tokenizer(examples["sentence"], padding="max_length", max_length=6, truncation=True)

        return dataset.map(preprocess, batched=True, batch_size=3)  # the blank sentences in two map batches

    ours, bert = preprocessed(tokenizer), preprocessed(bert_tokenizer)
    assert ours["attention_mask"] == bert["attention_mask"]
    for sentence, ids, bert_ids in zip(sentences, ours["input_ids"], bert["input_ids"], strict=True):
        words = tokenizer.convert_tokens_to_ids(sentence.split()[:4])
        assert ids == [2, *words, 3] + [0] * (4 - len(words))
        assert [token if token < 4 else -1 for token in bert_ids] == [token if token < 4 else -1 for token in ids]
