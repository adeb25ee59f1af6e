"""Tests for the word-level tokenizer built by `build_word_tokenizer`."""

import pytest
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from modeling_slstm.tokenization_slstm import SPECIAL_TOKENS, build_word_tokenizer


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
    assert loaded.is_fast
    words = [["The", "cat", "sat", "zebra"], ["a"]]
    assert loaded(words, is_split_into_words=True, padding=True).data == tokenizer(
        words, is_split_into_words=True, padding=True
    ).data
    assert loaded.get_vocab() == tokenizer.get_vocab()
    assert loaded.model_max_length == tokenizer.model_max_length
    assert [loaded.pad_token, loaded.unk_token, loaded.bos_token, loaded.eos_token] == list(SPECIAL_TOKENS)


def test_decode_skips_special_tokens(tokenizer):
    ids = tokenizer(["the", "cat"], is_split_into_words=True)["input_ids"]
    assert tokenizer.decode(ids, skip_special_tokens=True) == "the cat"


@pytest.mark.parametrize("sentences", [[], [[], []]])
def test_empty_training_data_is_rejected(sentences):
    with pytest.raises(ValueError, match="empty training data"):
        build_word_tokenizer(sentences)


def test_unsplit_sentence_is_rejected():
    with pytest.raises(ValueError, match="sequence of words.*index 1"):
        build_word_tokenizer([["a"], "a b"])


def test_min_frequency_below_one_is_rejected():
    with pytest.raises(ValueError, match="min_frequency.*got 0"):
        build_word_tokenizer(SENTENCES, min_frequency=0)
