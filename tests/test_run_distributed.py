"""Multi-process training with no code change, and resuming after a killed run.

- Two CPU processes over gloo through `accelerate launch --multi_gpu --num_processes 2` give the same loss, metrics,
  predictions and weights as one process with the same global batch (no doubled loss from `num_items_in_batch`, no
  duplicated evaluation samples when the evaluation set does not split evenly).
- A run SIGKILLed right after a mid-run checkpoint and resumed with `--resume_from_checkpoint` ends with the same
  weights as an uninterrupted run with the same seed.
"""

import sys

import pytest
from safetensors.torch import load_file
from test_run_helpers import REPO, data_utils, read_json, run_args, run_subprocess, training_utils, write_generated_ner

ACCELERATE_2PROC = [
    sys.executable,
    "-m",
    "accelerate.commands.launch",
    "--multi_gpu",
    "--num_processes",
    "2",
    "--num_machines",
    "1",
    "--mixed_precision",
    "no",
    "--dynamo_backend",
    "no",
    "--main_process_port",
    "29517",
]


def ner_command(paths, output_dir, batch_size, use_crf=True, dropout=0.0, **options):
    overrides = (
        f"hidden_size=12,embedding_dim=12,num_steps=2,embedding_dropout={dropout},use_crf={str(use_crf).lower()}"
    )
    return [
        str(REPO / "run_scripts" / "run_ner.py"),
        *run_args(
            output_dir,
            paths,
            config_overrides=overrides,
            per_device_train_batch_size=batch_size,
            per_device_eval_batch_size=4,
            seed=3,
            **options,
        ),
    ]


def assert_same_weights(first, second, atol):
    a, b = load_file(first / "model.safetensors"), load_file(second / "model.safetensors")
    assert a.keys() == b.keys()
    for key in a:
        assert (a[key] - b[key]).abs().max().item() <= atol, key


ACCELERATE_YAML_2PROC = [
    sys.executable,
    "-m",
    "accelerate.commands.launch",
    "--config_file",
    str(REPO / "hub_configs" / "accelerate" / "multi_cpu_2proc.yaml"),
    "--main_process_port",
    "29518",
]
TORCHRUN_2PROC = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", "29519"]


@pytest.mark.parametrize(
    "launcher, use_crf",
    [(ACCELERATE_2PROC, True), (ACCELERATE_YAML_2PROC, False), (TORCHRUN_2PROC, True)],
    ids=["accelerate-flags-crf", "accelerate-yaml-softmax", "torchrun-crf"],
)
def test_two_processes_match_one_process(tmp_path, launcher, use_crf):
    # validation: 13 sentences, uneven across 2 processes x 4 (the sampler pads with repeats that must not count);
    # test: 16, even.
    paths = write_generated_ner(tmp_path, n_train=32, n_eval=13, n_test=16)
    single, double = tmp_path / "single", tmp_path / "double"
    steps = {"max_steps": 3, "logging_steps": 1}
    run_subprocess([sys.executable, *ner_command(paths, single, 8, use_crf, **steps)])
    result = run_subprocess([*launcher, *ner_command(paths, double, 4, use_crf, **steps)])
    assert "world size 2" in result.stdout + result.stderr

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
    assert len(data_utils.read_conll(double / "predictions.txt")) == 16
    assert_same_weights(single, double, atol=1e-4)


def test_resume_after_kill_matches_uninterrupted_run(tmp_path):
    paths = write_generated_ner(tmp_path, n_train=16, n_eval=6)

    # 4 optimizer steps per epoch, 3 epochs; killed after the checkpoint of step 6 (mid second epoch), with dropout,
    # per-epoch LR decay and length-grouped batches, so RNG, scheduler and sampler state must all be restored.
    def command(output_dir, **more):
        return [
            sys.executable,
            *ner_command(
                paths,
                output_dir,
                4,
                dropout=0.5,
                num_train_epochs=3,
                save_steps=2,
                lr_decay_per_epoch=0.5,
                train_sampling_strategy="group_by_length",
                max_grad_norm=3,
                **more,
            ),
        ]

    full, killed = tmp_path / "full", tmp_path / "killed"
    run_subprocess(command(full))
    interrupted = run_subprocess(command(killed), env_extra={training_utils.KILL_ENV: "6"}, check=False)
    assert interrupted.returncode == -9, interrupted.stdout[-2000:] + interrupted.stderr[-2000:]
    assert (killed / "checkpoint-6").is_dir() and not (killed / "checkpoint-8").exists()
    assert not (killed / "model.safetensors").exists()
    run_subprocess(command(killed, resume_from_checkpoint=killed / "checkpoint-6"))
    assert_same_weights(full, killed, atol=0.0)
    assert read_json(killed / "all_results.json")["test_f1"] == read_json(full / "all_results.json")["test_f1"]
