"""run_scripts/run_classification.py end to end on generated files and on slices of the shared data."""

import pytest
from script_helpers import (
    assert_classification_scores_match,
    read_json,
    run_args,
    run_main,
    write_generated_classification,
)  # fmt: skip

from run_scripts.training import data


def cls_args(output_dir, paths=None, **options):
    return run_args(output_dir, paths, config_name="hub_configs/slstm-classification.json", **options)


@pytest.mark.slow
def test_generated_text_label_files(tmp_path, monkeypatch):
    paths = write_generated_classification(tmp_path)
    out = tmp_path / "out"
    run_main_args = cls_args(out, paths, num_train_epochs=4, lr_decay_per_epoch=0.97, eval_strategy="epoch")
    run_main("run_classification", run_main_args, monkeypatch)
    results = read_json(out / "all_results.json")
    assert {"eval_accuracy", "eval_macro_f1"} <= set(results)  # the test metrics are checked below
    assert results["test_accuracy"] > 0.9  # the toy task is linearly separable by one word
    lines = (out / "predictions.txt").read_text().splitlines()
    assert lines[0] == "gold\tpredicted\ttext" and len(lines) == 25
    assert read_json(out / "config.json")["classifier_pooling"] == "attention"
    # scikit-learn on test_predictions.tsv gives exactly the reported metrics, and so does rescore_predictions.py
    assert_classification_scores_match(out, data.read_text_label_file(paths["test"]))
    from run_scripts.utilities import rescore_predictions

    rescored = rescore_predictions.main(["--predictions_file", str(out / "test_predictions.tsv")])
    assert (rescored["accuracy"], rescored["macro_f1"]) == (results["test_accuracy"], results["test_macro_f1"])


@pytest.mark.slow
def test_csv_and_parquet_inputs(tmp_path, monkeypatch):
    import pandas as pd

    rows = [{"sentence": f"{'good' if i % 2 else 'bad'} movie", "polarity": i % 2} for i in range(20)]
    pd.DataFrame(rows).to_csv(tmp_path / "train.csv", index=False)
    pd.DataFrame(rows).to_parquet(tmp_path / "test.parquet")
    out = tmp_path / "out"
    run_main(
        "run_classification",
        cls_args(
            out,
            {"train": tmp_path / "train.csv", "test": tmp_path / "test.parquet"},
            text_column_name="sentence",
            label_column_name="polarity",
            max_steps=3,
        ),
        monkeypatch,
    )
    assert read_json(out / "config.json")["id2label"] == {"0": "0", "1": "1"}
    test_examples = [{"text": row["sentence"], "label": str(row["polarity"])} for row in rows]
    assert_classification_scores_match(out, test_examples)


@pytest.mark.slow
def test_movie_review_slice(tmp_path, monkeypatch, shared_data):
    directory = shared_data("movie_review")
    out = tmp_path / "out"
    run_main(
        "run_classification",
        cls_args(
            out,
            rt_polarity_dir=directory,
            max_train_samples=80,
            max_eval_samples=40,
            max_predict_samples=40,
            max_steps=4,
        ),
        monkeypatch,
    )
    splits = data.read_rt_polarity(directory)
    # Both classes in what was trained and scored, so that accuracy and macro-F1 measure something.
    assert {e["label"] for e in splits["train"][:80]} == {"pos", "neg"}
    assert {e["label"] for e in splits["test"][:40]} == {"pos", "neg"}
    assert read_json(out / "all_results.json")["test_samples"] == 40
    assert_classification_scores_match(out, splits["test"][:40])


@pytest.mark.slow
def test_apparel_slice(tmp_path, monkeypatch, shared_data):
    directory = shared_data("apparel")
    out = tmp_path / "out"
    run_main(
        "run_classification",
        cls_args(
            out,
            {
                "train": directory / "apparel_trn",
                "validation": directory / "apparel_dev",
                "test": directory / "apparel_tst",
            },
            max_train_samples=60,
            max_eval_samples=20,
            max_predict_samples=20,
            max_steps=3,
            max_seq_length=64,
        ),
        monkeypatch,
    )
    assert read_json(out / "config.json")["label2id"] == {"0": 0, "1": 1}


def test_bad_inputs(tmp_path, monkeypatch):
    paths = write_generated_classification(tmp_path)
    with pytest.raises(FileNotFoundError, match="nothere"):
        run_main("run_classification", cls_args(tmp_path / "o", {"train": tmp_path / "nothere"}), monkeypatch)
    (tmp_path / "empty.txt").write_text("")
    with pytest.raises(ValueError, match="empty"):
        run_main("run_classification", cls_args(tmp_path / "o", {"train": tmp_path / "empty.txt"}), monkeypatch)
    (tmp_path / "unseen.txt").write_text("so so ||| neutral\n")
    with pytest.raises(ValueError, match=r"unseen in the training data\): \['neutral'\]"):
        run_main(
            "run_classification",
            cls_args(tmp_path / "o", {"train": paths["train"], "test": tmp_path / "unseen.txt"}),
            monkeypatch,
        )


def test_both_prediction_files_keep_one_example_per_line(tmp_path):
    """A tab or line break inside a text became a column or a line of its own in `predictions.txt` (only
    `test_predictions.tsv` flattened the text)."""
    from run_scripts import run_classification

    examples = [{"text": "good\tfilm\nreally", "label": "pos"}, {"text": "bad", "label": "neg"}]
    run_classification.write_predictions(tmp_path, examples, ["neg", "neg"])
    for name, text_column in (("test_predictions.tsv", 0), ("predictions.txt", 2)):
        lines = (tmp_path / name).read_text(encoding="utf-8").splitlines()
        assert len(lines) == 3, name
        rows = [line.split("\t") for line in lines[1:]]
        assert [row[text_column] for row in rows] == ["good film really", "bad"], name
