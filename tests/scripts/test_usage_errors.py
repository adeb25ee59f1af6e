"""A data or usage error ends a script with its message alone: one line on stderr, exit code 1, no traceback (kept
with `--debug`); a bug keeps its traceback. The unseen-label hint names the task's own labels."""

import re
import runpy
import sys

import pytest
import torch
from script_helpers import SCRIPTS, run_args, run_subprocess, write_generated_classification, write_generated_ner

from run_scripts import run_classification
from run_scripts.training import data
from run_scripts.training.arguments import ModelArguments
from run_scripts.training.model_setup import load_fresh_config
from run_scripts.training.usage_errors import UsageError, run_script
from run_scripts.utilities import rescore_predictions

TINY = {"config_overrides": "hidden_size=8,embedding_dim=8,num_steps=1", "config_name": None, "threads": 1}


def run_script_in_subprocess(script: str, argv: list[str]):
    return run_subprocess([sys.executable, f"run_scripts/{script}.py", *argv], timeout=180, check=False)


def classification_with_an_unseen_label(tmp_path, *extra) -> list[str]:
    paths = write_generated_classification(tmp_path, n=4)
    paths["validation"].write_text("a fine film ||| neutral\n")
    return run_args(tmp_path / "out", paths, do_predict=None, **TINY) + list(extra)


def test_a_data_error_ends_in_its_message_alone_and_the_classification_hint_names_its_labels(tmp_path):
    result = run_script_in_subprocess("run_classification", classification_with_an_unseen_label(tmp_path))
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert result.stderr.rstrip("\n").splitlines()[-1] == (
        "The validation split has labels that the model does not know (unseen in the training data): ['neutral']. "
        "Known labels: ['neg', 'pos']. Map them to known labels in the data, add training examples for them, or give "
        "--include_eval_labels (an output for each, never trained)."
    )


@pytest.mark.parametrize("debug", [["--debug"], ["--debug", "underflow_overflow"]], ids=["alone", "with a value"])
def test_debug_keeps_the_traceback(tmp_path, monkeypatch, debug):
    """run_classification.py run as a script in this process: with `--debug` (transformers' flag, which the scripts
    take alone too) the error itself leaves the script, for Python to print with its traceback."""
    argv = classification_with_an_unseen_label(tmp_path, "--threads", str(torch.get_num_threads()), *debug)
    monkeypatch.setattr(sys, "argv", ["run_classification.py", *argv])
    with pytest.raises(UsageError, match=r"^The validation split has labels .*: \['neutral'\]"):
        runpy.run_path(str(SCRIPTS / "run_classification.py"), run_name="__main__")


def test_a_bad_conll_line_ends_run_ner_with_its_message(tmp_path, monkeypatch):
    """run_ner.py run as a script (its `__main__` block) in this process: the message is the `SystemExit`'s, which
    Python prints alone with exit code 1 (as the subprocess runs above show)."""
    paths = write_generated_ner(tmp_path, n_train=4, n_eval=2)
    paths["validation"].write_text("Paris\tB-LOC\nis\n")
    argv = run_args(tmp_path / "out", paths, do_predict=None, **TINY | {"threads": torch.get_num_threads()})
    monkeypatch.setattr(sys, "argv", ["run_ner.py", *argv])
    with pytest.raises(SystemExit) as exit_info:
        runpy.run_path(str(SCRIPTS / "run_ner.py"), run_name="__main__")
    expected = f"{paths['validation']}, line 2: expected 2 columns like the file's first line, got 1 ('is')"
    assert exit_info.value.code == expected


def test_run_script_ends_usage_errors_only():
    """In this process: a `UsageError` becomes `SystemExit(message)` (Python prints it, exit code 1), unless
    `--debug`; any other exception, a bug's, goes on with its traceback."""

    def fails_with(error):
        def main():
            raise error

        return main

    with pytest.raises(SystemExit) as exit_info:
        run_script(fails_with(UsageError("bad.txt, line 3: expected 2 columns")), argv=[])
    assert exit_info.value.code == "bad.txt, line 3: expected 2 columns"
    for argv in (["--debug"], ["--debug", "underflow_overflow"]):
        with pytest.raises(UsageError, match="expected 2 columns"):
            run_script(fails_with(UsageError("bad.txt, line 3: expected 2 columns")), argv=argv)
    with pytest.raises(ValueError, match="a bug") as error_info:
        run_script(fails_with(ValueError("a bug")), argv=[])
    assert type(error_info.value) is ValueError
    with pytest.raises(FileNotFoundError):  # one that no script raised on purpose
        run_script(fails_with(FileNotFoundError("/no/such/cache")), argv=[])


def test_argument_errors_and_the_utilities_end_in_one_line_too(tmp_path, monkeypatch):
    argv = ["--train_file", "t.txt", "--output_dir", str(tmp_path), "--l2_regularization", "-1"]
    monkeypatch.setattr(sys, "argv", ["run_classification.py", *argv])
    with pytest.raises(SystemExit) as exit_info:  # raised while the arguments are parsed
        run_script(run_classification.main)
    assert exit_info.value.code == "--l2_regularization must be >= 0, got -1.0"
    # One of transformers' own checks of the training arguments.
    strategies = ["--load_best_model_at_end", "true", "--eval_strategy", "epoch", "--save_strategy", "steps"]
    monkeypatch.setattr(sys, "argv", ["run_classification.py", *argv[:4], *strategies])
    with pytest.raises(SystemExit) as exit_info:
        run_script(run_classification.main)
    assert exit_info.value.code.startswith("--load_best_model_at_end requires the save and eval strategy to match")

    bad = tmp_path / "bad.txt"
    bad.write_text("only-one-column\n")
    argv = ["--predictions_file", str(bad)]
    with pytest.raises(SystemExit) as exit_info:
        run_script(lambda: rescore_predictions.main(argv), argv)
    assert exit_info.value.code == f"{bad}, line 1: expected 'token gold predicted', got 'only-one-column'"
    with pytest.raises(UsageError, match="expected 'token gold predicted'"):  # --debug, a field of its arguments
        run_script(lambda: rescore_predictions.main([*argv, "--debug"]), [*argv, "--debug"])


@pytest.mark.parametrize(
    "labels, key, sequence, example",
    [(["O", "B-PER", "I-PER"], "tags", True, "(e.g. 'O', outside any entity)"),
     (["NN", "VB"], "tags", True, None),  # POS tags: no 'O' to suggest
     (["neg", "pos"], "label", False, None)],
    ids=["span tags", "POS", "classes"],
)  # fmt: skip
def test_the_unseen_label_hint_suggests_only_labels_of_the_task(labels, key, sequence, example):
    unseen = ["B-ORG"] if sequence else "neutral"
    splits = {"train": [{key: labels if sequence else labels[0]}], "test": [{key: unseen}]}
    with pytest.raises(UsageError) as error_info:
        data.check_labels_known(splits, labels, key, sequence)
    message = str(error_info.value)
    assert f"Known labels: {sorted(labels)}. Map them to known labels" in message
    assert ("(e.g. 'O'" in message) == (example is not None)
    if example is not None:
        assert f"Map them to known labels {example} in the data" in message


def test_the_package_checks_of_a_config_the_user_gives_are_usage_errors(tmp_path):
    not_json = tmp_path / "config.json"
    not_json.write_text('{"hidden_size": 8,}')
    with pytest.raises(UsageError, match=rf"^--config_name {re.escape(str(not_json))}: Expecting property name"):
        load_fresh_config(ModelArguments(config_name=str(not_json)))
    with pytest.raises(UsageError, match="num_steps"):  # the config's own check of an override
        load_fresh_config(ModelArguments(config_overrides="num_steps=0"))
