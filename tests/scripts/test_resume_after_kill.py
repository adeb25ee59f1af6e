"""A run killed while it writes a checkpoint resumes with the documented command (`--resume_from_checkpoint last`):
the incomplete newest checkpoint is skipped (and kept), the run continues from the one before and ends with the
weights of an uninterrupted run."""

import logging
import shutil

import pytest
import torch
from safetensors.torch import load_file
from script_helpers import read_json, run_args, run_main, write_generated_ner

from run_scripts.training.checkpoints import checkpoint_problem, last_complete_checkpoint

EPOCHS = {"num_train_epochs": 3, "save_strategy": "epoch", "do_eval": None, "do_predict": None, "logging_steps": 1}


def truncate(path, keep_fraction=0.5):
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep_fraction)])


@pytest.mark.slow
def test_resume_skips_a_checkpoint_cut_short_and_ends_like_an_uninterrupted_run(tmp_path, monkeypatch, caplog):
    paths = write_generated_ner(tmp_path)
    uninterrupted, killed = tmp_path / "uninterrupted", tmp_path / "killed"
    run_main("run_ner", run_args(uninterrupted, paths, **EPOCHS), monkeypatch)
    # The killed run is the same run that got as far as writing the weights of its last checkpoint, half of them, and
    # no final model (a copy of the uninterrupted one, cut there: the same run, without training it twice).
    shutil.copytree(uninterrupted, killed)
    last_step = read_json(killed / "trainer_state.json")["global_step"]
    epoch_steps = last_step // 3
    broken = killed / f"checkpoint-{last_step}"
    truncate(broken / "model.safetensors")
    (killed / "model.safetensors").unlink()
    assert "model.safetensors is unreadable" in checkpoint_problem(broken)
    assert last_complete_checkpoint(str(killed)) == str(killed / f"checkpoint-{2 * epoch_steps}")

    with caplog.at_level(logging.WARNING):
        run_main("run_ner", run_args(killed, paths, **EPOCHS, resume_from_checkpoint="last"), monkeypatch)
    assert f"Not resuming from {broken}: model.safetensors is unreadable" in caplog.text
    assert broken.is_dir()  # kept: a resume deletes nothing (the Trainer rewrote it when it reached that step again)
    state = read_json(killed / "trainer_state.json")
    assert state["global_step"] == 3 * epoch_steps
    # Resumed from the epoch-2 checkpoint and trained its last epoch again: the uninterrupted run's weights, exactly.
    final, expected = load_file(killed / "model.safetensors"), load_file(uninterrupted / "model.safetensors")
    assert final.keys() == expected.keys()
    for name in final:
        torch.testing.assert_close(final[name], expected[name], rtol=0, atol=0, msg=name)


def test_checkpoint_problems_are_named(tmp_path):
    folder = tmp_path / "checkpoint-10"
    folder.mkdir()
    assert checkpoint_problem(folder) == "no model weights (*.safetensors)"
    from safetensors.torch import save_file

    save_file({"weight": torch.ones(3)}, folder / "model.safetensors")
    assert "trainer_state.json is missing" in checkpoint_problem(folder)
    (folder / "trainer_state.json").write_text("{}")
    assert checkpoint_problem(folder) == "optimizer.pt is missing or incomplete"
    torch.save({"state": {}}, folder / "optimizer.pt")
    torch.save({"last_epoch": 1}, folder / "scheduler.pt")
    assert checkpoint_problem(folder) is None
    truncate(folder / "optimizer.pt", keep_fraction=0.9)
    assert checkpoint_problem(folder) == "optimizer.pt is missing or incomplete"
    assert last_complete_checkpoint(str(tmp_path)) is None  # nothing complete: the run starts from the beginning


def write_complete_checkpoint(folder):
    """A checkpoint folder with everything a resume reads: weights, trainer state, optimizer and scheduler."""
    from safetensors.torch import save_file

    folder.mkdir()
    save_file({"weight": torch.ones(3)}, folder / "model.safetensors")
    (folder / "trainer_state.json").write_text("{}")
    torch.save({"state": {}, "param_groups": []}, folder / "optimizer.pt")
    torch.save({"last_epoch": 1, "base_lrs": [1e-3]}, folder / "scheduler.pt")


@pytest.mark.parametrize("damage", ["missing", "cut short"])
def test_a_newest_checkpoint_without_a_whole_scheduler_is_not_resumed_from(tmp_path, damage):
    """The LR schedule is part of the state a resume restores: without a whole `scheduler.pt` the newest checkpoint is
    passed over for the one before."""
    older, newest = tmp_path / "checkpoint-5", tmp_path / "checkpoint-10"
    write_complete_checkpoint(older)
    write_complete_checkpoint(newest)
    assert last_complete_checkpoint(str(tmp_path)) == str(newest)
    if damage == "missing":
        (newest / "scheduler.pt").unlink()
    else:
        truncate(newest / "scheduler.pt", keep_fraction=0.9)
    assert checkpoint_problem(newest) == "scheduler.pt is missing or incomplete"
    assert last_complete_checkpoint(str(tmp_path)) == str(older)
