"""run_scripts/benchmarks/classification_study.py: the commands it would run, and its table and plot of finished
runs checked against `statistics` on planted results (the runs themselves take half an hour each)."""

import json
import statistics

from run_scripts.benchmarks import classification_study


def plant_result(runs_dir, point, seed, accuracy, epochs=5, runtime=1000.0):
    folder = runs_dir / point / f"seed{seed}"
    folder.mkdir(parents=True)
    results = {"eval_accuracy": accuracy, "epoch": epochs, "train_runtime": runtime}
    (folder / "all_results.json").write_text(json.dumps(results))


def test_commands_change_one_setting_of_the_reference(tmp_path, capsys):
    classification_study.main(["--runs_dir", str(tmp_path), "--dry_run", "--only", "paper", "initial_state=input",
                               "l2=0.001", "--seeds", "42", "43"])  # fmt: skip
    commands = capsys.readouterr().out.strip().splitlines()
    assert len(commands) == 6  # 3 points x 2 seeds
    assert all("--config_overrides use_char_features=false" in c and "--split_seed 42" in c for c in commands)
    assert all("--num_train_epochs 8" in c and "--early_stopping_patience 2" in c for c in commands)
    assert sum("initial_state=input" in c for c in commands) == 2
    assert sum("--l2_regularization 0.001" in c for c in commands) == 2
    assert sum("--seed 43" in c for c in commands) == 3


def test_table_and_plot_of_the_finished_runs(tmp_path):
    runs, docs = tmp_path / "runs", tmp_path / "docs"
    accuracies = {"paper": [0.7936, 0.7917, 0.79], "initial_state=input": [0.801, 0.795],
                  "steps=3,initial_state=learned": [0.77, 0.775, 0.78]}  # fmt: skip
    for point, values in accuracies.items():
        for seed, accuracy in zip((42, 43, 44), values):
            plant_result(runs, point, seed, accuracy)
    (runs / "l2=0.001" / "seed42").mkdir(parents=True)  # started, not finished: not in the table
    classification_study.main(["--runs_dir", str(runs), "--output_dir", str(docs), "--collect_only"])
    rows = {line.split(" | ")[0].strip("| "): line.split(" | ") for line in
            (docs / "classification_study.md").read_text().splitlines()[2:]}  # fmt: skip
    for point, values in accuracies.items():
        percents = [100 * value for value in values]
        assert rows[point][2] == f"{len(values)}/3"
        assert rows[point][3] == f"{statistics.mean(percents):.2f} ± {statistics.stdev(percents):.2f}"
    assert rows["l2=0.001"][2] == "0/3" and rows["l2=0.001"][3] == "–"
    assert (docs / "classification_study.png").stat().st_size > 0


def test_the_bilstm_is_selected_on_the_same_dev_set(tmp_path, capsys):
    classification_study.main(["--runs_dir", str(tmp_path), "--dry_run", "--only", "bilstm", "bilstm,dropout=0.3",
                               "--seeds", "42"])  # fmt: skip
    commands = capsys.readouterr().out.strip().splitlines()
    assert len(commands) == 2 and all("baselines/bilstm1-classification.json" in c for c in commands)
    assert "use_char_features=false,embedding_dropout=0.3" in commands[1]


def test_seconds_per_epoch_count_only_the_epochs_of_the_last_process(tmp_path):
    """train_runtime covers the epochs after the checkpoint the last process resumed from (Trainer's log line)."""
    runs, docs = tmp_path / "runs", tmp_path / "docs"
    resumed_twice = "Resuming training from checkpoint with epoch 2 and global step 10\n" * 2
    logs = {42: "", 43: resumed_twice + "Resuming training from checkpoint with epoch 6 and global step 30\n",
            44: "Resuming training from checkpoint with epoch 8 and global step 40\n"}  # fmt: skip
    for seed, log in logs.items():
        plant_result(runs, "paper", seed, 0.79, epochs=8, runtime=800.0)
        (runs / "paper" / f"seed{seed}" / "run.log").write_text(log)
    # 42: 800 s over 8 epochs; 43: over the 2 after epoch 6; 44: resumed after its last epoch, no time per epoch
    assert classification_study.finished_result(runs / "paper" / "seed43")["seconds_per_epoch"] == 400.0
    assert classification_study.finished_result(runs / "paper" / "seed44")["seconds_per_epoch"] is None
    classification_study.main(["--runs_dir", str(runs), "--output_dir", str(docs), "--collect_only"])
    paper = next(line for line in (docs / "classification_study.md").read_text().splitlines() if "| paper |" in line)
    assert paper.split(" | ")[-1] == f"{statistics.mean([100.0, 400.0]):.0f} |"
