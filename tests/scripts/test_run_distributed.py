"""Multi-process training with no code change, and resuming after a killed run.

- Two CPU processes over gloo through `accelerate launch` (flags or a config file) or `torchrun` give the same loss,
  metrics, predictions and weights as one process with the same global batch (no doubled loss from
  `num_items_in_batch`, no duplicated evaluation samples when the evaluation set does not split evenly), without DDP's
  unused-parameter search.
- The per-epoch learning-rate decay follows the epochs with two processes and gradient accumulation.
- The processes end without hanging: the model wrapper is freed before the process group is destroyed.
- A run SIGKILLed right after a mid-run checkpoint and resumed with `--resume_from_checkpoint` continues from the
  checkpoint's step and ends with the same weights as an uninterrupted run with the same seed.
"""

import math
import sys
from pathlib import Path

import pytest
from safetensors.torch import load_file
from script_helpers import (
    REPO,
    SCRIPTS,
    free_port,
    read_json,
    run_args,
    run_main,
    run_subprocess,
    torchrun,
    write_generated_ner,
)

from run_scripts.training import data

pytestmark = pytest.mark.slow
HERE = Path(__file__).parent  # the instrumented run_ner.py scripts beside this file


def accelerate_flags(port: int) -> list[str]:
    return [
        *[sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2"],
        *["--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no"],
        *["--main_process_port", str(port)],
    ]


def accelerate_yaml(port: int) -> list[str]:
    config = REPO / "hub_configs" / "accelerate" / "multi_cpu_2proc.yaml"
    launch = [sys.executable, "-m", "accelerate.commands.launch"]
    return [*launch, "--config_file", str(config), "--main_process_port", str(port)]


def ner_command(paths, output_dir, batch_size, use_crf=True, dropout=0.0, eval_batch_size=4, **options):
    overrides = (
        f"hidden_size=12,embedding_dim=12,num_steps=2,embedding_dropout={dropout},char_dropout={dropout},"
        f"use_crf={str(use_crf).lower()}"
    )
    return [
        str(SCRIPTS / "run_ner.py"),
        *run_args(
            output_dir,
            paths,
            config_overrides=overrides,
            per_device_train_batch_size=batch_size,
            per_device_eval_batch_size=eval_batch_size,
            seed=3,
            **options,
        ),
    ]


def test_a_launcher_leaves_no_temporary_folder():
    """torchrun leaves a `torchelastic_*` folder in the temporary folder of every run (a full test run left dozens in
    /tmp): `run_subprocess` gives the processes a temporary folder of their own and removes it when they end."""
    command = [*torchrun(free_port()), "--no-python", "sh", "-c", 'ls -d "$TMPDIR"/*']
    folders = {Path(line) for line in run_subprocess(command).stdout.split()}
    assert [folder.name.startswith("torchelastic_") for folder in folders] == [True]
    (folder,) = folders
    assert folder.parent.name.startswith("run_subprocess_") and not folder.parent.exists()


def assert_same_weights(first, second, atol):
    a, b = load_file(first / "model.safetensors"), load_file(second / "model.safetensors")
    assert a.keys() == b.keys()
    for key in a:
        assert (a[key] - b[key]).abs().max().item() <= atol, key


@pytest.mark.parametrize(
    "launcher, use_crf",
    [(accelerate_flags, True), (accelerate_yaml, False), (torchrun, True)],
    ids=["accelerate-flags-crf", "accelerate-yaml-softmax", "torchrun-crf"],
)
def test_two_processes_match_one_process(tmp_path, launcher, use_crf, monkeypatch):
    # validation: 13 sentences, uneven across 2 processes x 4 (the sampler pads with repeats that must not count);
    # test: 16, even.
    paths = write_generated_ner(tmp_path, n_train=32, n_eval=13, n_test=16)
    single, double = tmp_path / "single", tmp_path / "double"
    steps = {"max_steps": 3, "logging_steps": 1}
    # The same global batches for training and evaluation (the two processes' losses average over the tokens of
    # both halves of a batch). The one process is this one, on one thread as each launched process.
    run_main("run_ner", ner_command(paths, single, 8, use_crf, eval_batch_size=8, threads=1, **steps)[1:], monkeypatch)
    result = run_subprocess([*launcher(free_port()), *ner_command(paths, double, 4, use_crf, **steps)])
    output = result.stdout + result.stderr
    assert "world size 2" in output
    # No parameter of the heads is unused, so DDP runs without find_unused_parameters (which warns every run).
    assert "find_unused_parameters=True" not in output

    one, two = read_json(single / "all_results.json"), read_json(double / "all_results.json")
    assert two["eval_samples"] == one["eval_samples"] == 13
    for key in ("train_loss", "eval_accuracy", "eval_f1", "test_loss", "test_accuracy", "test_f1", "test_precision"):
        assert two[key] == pytest.approx(one[key], rel=1e-4, abs=1e-5), key
    # Not eval_loss: the Trainer averages per-batch losses, and the last, padded batch of an uneven split mixes the
    # real sentence with repeated ones inside one batch loss (metrics and predictions drop the repeats exactly).
    one_losses = [h["loss"] for h in read_json(single / "trainer_state.json")["log_history"] if "loss" in h]
    two_losses = [h["loss"] for h in read_json(double / "trainer_state.json")["log_history"] if "loss" in h]
    assert two_losses == pytest.approx(one_losses, rel=1e-4)
    assert (double / "predictions.txt").read_text() == (single / "predictions.txt").read_text()
    assert len(data.read_conll(double / "predictions.txt")) == 16
    assert_same_weights(single, double, atol=1e-4)


def test_learning_rate_decays_per_epoch_with_two_processes_and_gradient_accumulation(tmp_path):
    """`lr = lr_0 * decay ** epoch` in every step of each epoch, as the Trainer counts epochs, with 2 processes and
    gradient accumulation 2 on an uneven split: 36 sentences / (2 x 4) = 5 batches per process (the last one padded
    by accelerate), so 3 optimizer steps per epoch (the last one accumulates a single batch). Counting the epoch's
    steps without the world size (9 batches, 5 steps) or without the accumulation (5 steps) decays at the wrong step
    (deliberately broken variants of `SLSTMTrainer.optimizer_steps_per_epoch`)."""
    paths = write_generated_ner(tmp_path, n_train=36)
    out = tmp_path / "out"
    options = {"num_train_epochs": 3, "gradient_accumulation_steps": 2, "lr_decay_per_epoch": 0.5, "logging_steps": 1}
    run_subprocess([*torchrun(free_port()), *ner_command(paths, out, 4, do_eval=None, **options)])
    history = read_json(out / "trainer_state.json")["log_history"]
    steps = [entry for entry in history if "learning_rate" in entry]
    assert [entry["step"] for entry in steps] == list(range(1, 10))  # 3 epochs x 3 optimizer steps
    for entry in steps:
        epoch = math.ceil(entry["epoch"] - 1e-9) - 1  # the epoch of the step: its logged epoch is in (e, e + 1]
        assert entry["learning_rate"] == pytest.approx(0.01 * 0.5**epoch), entry
    assert {round(entry["learning_rate"], 6) for entry in steps} == {0.01, 0.005, 0.0025}


def test_model_wrapper_is_freed_before_the_process_group_is_destroyed(tmp_path):
    """Each process frees its DistributedDataParallel wrapper before the process group is destroyed. Freed after it,
    the wrapper's gradient reducer drops the gloo group's last reference and the group's destructor waits for gloo's
    threads while holding the GIL that one of them may need: a process that hangs after saving everything (seen in
    2 of 64 two-process runs while another such run shared the two cores)."""
    paths = write_generated_ner(tmp_path, n_train=16)
    command = ner_command(paths, tmp_path / "out", 4, do_eval=None, do_predict=None, max_steps=1)
    script = HERE / "run_ner_recording_the_wrapper_at_destroy.py"
    result = run_subprocess([*torchrun(free_port()), str(script), *command[1:]])
    assert result.stdout.count("DistributedDataParallel alive at destroy_process_group: False") == 2, result.stdout


def test_resume_after_kill_matches_uninterrupted_run(tmp_path):
    """Killed, then resumed: continues at the checkpoint's step and ends bit-identical to an uninterrupted run.

    Final weights alone cannot tell: a resumed run that ignored `--resume_from_checkpoint` and retrained from step 0
    with the same seed (deliberately broken variant: drop `resume_from_checkpoint=` below) ends with the same weights;
    the steps recorded by the resumed process then start at 1 instead of the checkpoint's step + 1.
    """
    paths = write_generated_ner(tmp_path, n_train=16, n_eval=6)

    # 4 optimizer steps per epoch, 3 epochs; killed after the checkpoint of step 6 (mid second epoch), with dropout,
    # per-epoch LR decay and length-grouped batches, so RNG, scheduler and sampler state must all be restored.
    total_steps, kill_step = 12, 6

    def run(output_dir, steps_file, kill_at=0, check=True, **more):
        command = ner_command(
            paths,
            output_dir,
            4,
            dropout=0.5,
            num_train_epochs=3,
            save_steps=2,
            logging_steps=1,
            lr_decay_per_epoch=0.5,
            train_sampling_strategy="group_by_length",
            max_grad_norm=3,
            **more,
        )
        script = HERE / "run_ner_recording_steps_then_killed.py"
        args = [sys.executable, str(script), str(steps_file), str(kill_at), *command[1:]]
        return run_subprocess(args, check=check)

    def steps_done(steps_file):
        return [int(line) for line in steps_file.read_text().split()]

    full, killed = tmp_path / "full", tmp_path / "killed"
    run(full, tmp_path / "full_steps.txt")
    assert steps_done(tmp_path / "full_steps.txt") == list(range(1, total_steps + 1))

    interrupted = run(killed, tmp_path / "killed_steps.txt", kill_at=kill_step, check=False)
    assert interrupted.returncode == -9, interrupted.stdout[-2000:] + interrupted.stderr[-2000:]
    assert (killed / f"checkpoint-{kill_step}").is_dir() and not (killed / f"checkpoint-{kill_step + 2}").exists()
    assert not (killed / "model.safetensors").exists()
    assert steps_done(tmp_path / "killed_steps.txt") == list(range(1, kill_step + 1))
    checkpoint_state = read_json(killed / f"checkpoint-{kill_step}" / "trainer_state.json")
    assert checkpoint_state["global_step"] == kill_step

    resumed_steps = tmp_path / "resumed_steps.txt"
    run(killed, resumed_steps, resume_from_checkpoint=killed / f"checkpoint-{kill_step}")
    # The resumed process continued from the checkpoint: its first optimizer step is the one after the checkpoint's
    # and it did only the remaining ones (a run that ignored the checkpoint would start again at step 1).
    resumed = steps_done(resumed_steps)
    assert resumed[0] == kill_step + 1 and len(resumed) == total_steps - kill_step
    state = read_json(killed / "trainer_state.json")
    assert state["global_step"] == total_steps
    # Its log history is the checkpoint's, then the resumed steps' logs, identical to the uninterrupted run's.
    losses = [(h["step"], h["loss"]) for h in state["log_history"] if "loss" in h]
    checkpoint_losses = [(h["step"], h["loss"]) for h in checkpoint_state["log_history"] if "loss" in h]
    assert losses[:kill_step] == checkpoint_losses and [step for step, _ in losses[kill_step:]] == resumed
    full_losses = [
        (h["step"], h["loss"]) for h in read_json(full / "trainer_state.json")["log_history"] if "loss" in h
    ]
    assert losses == full_losses

    assert_same_weights(full, killed, atol=0.0)
    assert read_json(killed / "all_results.json")["test_f1"] == read_json(full / "all_results.json")["test_f1"]
