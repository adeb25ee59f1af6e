"""Which checkpoint a run resumes from: `--resume_from_checkpoint last` finds the newest complete one, and a folder
that a killed run left half-written is skipped (and kept)."""

import json
import logging
import zipfile
from pathlib import Path

from safetensors import SafetensorError, safe_open
from transformers import TrainingArguments
from transformers.trainer import OPTIMIZER_NAME, SCHEDULER_NAME, TRAINER_STATE_NAME
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

logger = logging.getLogger(__name__)


def resume_checkpoint(training_args: TrainingArguments) -> str | None:
    """`--resume_from_checkpoint`: a checkpoint folder, or `last` / `True` for the newest complete one in
    `--output_dir` (see `last_complete_checkpoint`; none: the run starts from the beginning)."""
    if training_args.resume_from_checkpoint in ("last", "True"):
        return last_complete_checkpoint(training_args.output_dir)
    return training_args.resume_from_checkpoint


def last_complete_checkpoint(output_dir: str) -> str | None:
    """The newest `checkpoint-<step>` folder of `output_dir` that a run can resume from (`checkpoint_problem` finds
    nothing wrong with it). Newer, incomplete ones (a run killed while writing one) are logged and left as they are:
    nothing is deleted."""
    folders = [path for path in Path(output_dir).glob(f"{PREFIX_CHECKPOINT_DIR}-*") if path.is_dir()]
    steps = {path: int(path.name.rsplit("-", 1)[1]) for path in folders if path.name.rsplit("-", 1)[1].isdigit()}
    for folder in sorted(steps, key=steps.get, reverse=True):
        problem = checkpoint_problem(folder)
        if problem is None:
            return str(folder)
        logger.warning(f"Not resuming from {folder}: {problem} (written by a run that stopped?); it is left as it is")
    return None


def checkpoint_problem(folder: Path) -> str | None:
    """What a resume would fail on in a checkpoint folder, or `None`: the weights (every `*.safetensors` file
    readable to its last tensor), `trainer_state.json` (valid JSON), and `optimizer.pt` and `scheduler.pt` (whole
    archives: a truncated file lacks the archive's closing record)."""
    weights = sorted(folder.glob("*.safetensors"))
    if not weights:
        return "no model weights (*.safetensors)"
    for path in weights:
        try:
            with safe_open(path, framework="pt") as file:
                for name in file.keys():  # noqa: SIM118 (a safetensors file handle, not a dict)
                    file.get_tensor(name)
        except (SafetensorError, OSError) as error:
            return f"{path.name} is unreadable ({error})"
    try:
        json.loads((folder / TRAINER_STATE_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        return f"{TRAINER_STATE_NAME} is missing or unreadable ({error})"
    for name in (OPTIMIZER_NAME, SCHEDULER_NAME):
        if not zipfile.is_zipfile(folder / name):
            return f"{name} is missing or incomplete"
    return None
