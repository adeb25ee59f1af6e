"""`SLSTMTrainer`: the `transformers` Trainer of `run_ner.py` and `run_classification.py`.

It adds the paper's per-epoch exponential learning-rate decay, a length-grouped sampler that resumes exactly,
evaluation in the data's order, and the S-LSTM model card (`hub_configs/model_card_template.md`) that
`create_model_card` / `push_to_hub` write.
"""

import json
import math
import os
import string
import sys
from pathlib import Path

import torch
from transformers import Trainer
from transformers.trainer_pt_utils import LengthGroupedSampler

MODEL_CARD_TEMPLATE = Path(__file__).resolve().parent.parent / "hub_configs" / "model_card_template.md"
CARD_CONFIG_KEYS = (
    "model_type",
    "encoder_type",
    "num_layers",
    "hidden_size",
    "embedding_dim",
    "num_steps",
    "window_size",
    "num_sentence_nodes",
    "use_crf",
    "classifier_pooling",
    "embedding_dropout",
    "vocab_size",
    "num_labels",
)
PAPER_CITATION = """@inproceedings{zhang-etal-2018-sentence,
    title = "Sentence-State {LSTM} for Text Representation",
    author = "Zhang, Yue and Liu, Qi and Song, Linfeng",
    booktitle = "Proceedings of the 56th Annual Meeting of the Association for Computational Linguistics (Volume 1: Long Papers)",
    year = "2018",
    address = "Melbourne, Australia",
    publisher = "Association for Computational Linguistics",
    url = "https://aclanthology.org/P18-1030",
    doi = "10.18653/v1/P18-1030",
    pages = "317--327",
}"""


class EpochSeededLengthGroupedSampler(LengthGroupedSampler):
    """`LengthGroupedSampler` whose shuffle is a function of `(seed, epoch)` only (the stock one draws from the
    global RNG when iterated, so a resumed run shuffles its resumed epoch differently from an uninterrupted run)."""

    def __init__(self, *args, seed: int = 0, **kwargs):
        super().__init__(*args, **kwargs)
        self.seed = seed
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def __iter__(self):
        self.generator = torch.Generator().manual_seed(self.seed + self.epoch)
        return super().__iter__()


class SLSTMTrainer(Trainer):
    """`Trainer` with the paper's per-epoch exponential LR decay (`--lr_decay_per_epoch`) and the S-LSTM model card.

    The decay is a `LambdaLR` over optimizer steps, `lr = lr_0 * decay ** (step // steps_per_epoch)`, so it is saved
    in and restored from checkpoints like every other scheduler.

    Args:
        model_card (`dict`, *optional*):
            The task's fields of the model card: `pipeline_tag`, `auto_class`, `task_description`, `training_data`,
            `usage_example` (whose `REPO_ID` becomes the Hub repository or the output folder) and
            `training_recipe` (the arguments that a config's recipe set, shown under the command). The command line,
            labels, config and the `eval_`/`test_` metrics given to `report_metrics` are added when the card is
            written.
        *args, **kwargs: those of `Trainer`.
    """

    def __init__(self, *args, model_card: dict | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.model_card = model_card or {}
        self.reported_metrics = {}

    def report_metrics(self, split: str, metrics: dict, num_samples: int) -> None:
        """Logs the metrics of `split` (`train`, `eval` or `test`) with its number of examples, saves them in
        `<split>_results.json` and `all_results.json`, and keeps them for the model card."""
        metrics = dict(metrics, **{f"{split}_samples": num_samples})
        self.log_metrics(split, metrics)
        self.save_metrics(split, metrics)
        self.reported_metrics.update(metrics)

    def optimizer_steps_per_epoch(self) -> int:
        args = self.args
        batches = math.ceil(len(self.train_dataset) / (args.per_device_train_batch_size * args.world_size))
        if args.dataloader_drop_last:
            batches = len(self.train_dataset) // (args.per_device_train_batch_size * args.world_size)
        return max(1, math.ceil(batches / args.gradient_accumulation_steps))

    def _get_train_sampler(self, train_dataset=None):
        sampler = super()._get_train_sampler(train_dataset)
        if isinstance(sampler, LengthGroupedSampler):
            seed = self.args.data_seed if self.args.data_seed is not None else self.args.seed
            sampler = EpochSeededLengthGroupedSampler(sampler.batch_size, lengths=sampler.lengths, seed=seed)
        return sampler

    def _get_eval_sampler(self, eval_dataset):
        """Evaluation and prediction keep the dataset's order even with `--train_sampling_strategy group_by_length`
        (which `transformers` also applies to evaluation, shuffling it): predictions.txt must line up with the data."""
        if eval_dataset is None or not hasattr(eval_dataset, "__len__"):
            return None
        return torch.utils.data.SequentialSampler(eval_dataset) if self.args.world_size <= 1 else None

    def create_scheduler(self, num_training_steps: int, optimizer=None):
        decay = getattr(self.args, "lr_decay_per_epoch", None)
        if decay is None or self.lr_scheduler is not None:
            return super().create_scheduler(num_training_steps, optimizer)
        steps_per_epoch = self.optimizer_steps_per_epoch()
        self.lr_scheduler = torch.optim.lr_scheduler.LambdaLR(
            optimizer if optimizer is not None else self.optimizer,
            lambda step: decay ** (step // steps_per_epoch),
        )
        self._created_lr_scheduler = True
        return self.lr_scheduler

    def create_model_card(self, model_name: str | None = None, **kwargs):
        """Writes the S-LSTM model card (README.md) into `--output_dir` instead of the generic one; `push_to_hub`
        calls it before the upload."""
        if not self.is_world_process_zero():
            return
        config = self.model.config
        info = dict(self.model_card)
        repo_id = self.args.hub_model_id or model_name or Path(self.args.output_dir).name
        info["command"] = command_line(info.pop("training_recipe", None))
        info["labels"] = [config.id2label[index] for index in range(config.num_labels)]
        info["usage_example"] = info.get("usage_example", "").replace(
            "REPO_ID", self.args.hub_model_id or self.args.output_dir
        )
        info["metrics"] = {
            key: value
            for key, value in self.reported_metrics.items()
            if key.startswith(("eval_", "test_")) and not key.endswith(("_runtime", "_per_second"))
        }
        info["config_summary"] = ", ".join(
            f"{key}={getattr(config, key)}" for key in CARD_CONFIG_KEYS if hasattr(config, key)
        )
        write_model_card(self.args.output_dir, info, repo_id)

    def end(self):
        """Waits for every process, then ends the run (destroys the process group). Left to interpreter exit, gloo's
        threads sometimes abort a process that has finished and saved everything."""
        self.accelerator.wait_for_everyone()
        super().end()


def format_metrics_table(metrics: dict) -> str:
    rows = [
        f"| {key} | {value:.4f} |" if isinstance(value, float) else f"| {key} | {value} |"
        for key, value in metrics.items()
    ]
    return "| metric | value |\n|---|---|\n" + "\n".join(rows) if rows else "(no metrics recorded)"


def write_model_card(output_dir: str, info: dict, repo_id: str) -> Path:
    """Fills `hub_configs/model_card_template.md` with `info` and writes `README.md` into `output_dir`."""
    template = string.Template(MODEL_CARD_TEMPLATE.read_text(encoding="utf-8"))
    values = {
        "repo_id": repo_id,
        "pipeline_tag": info.get("pipeline_tag", "token-classification"),
        "task_description": info.get("task_description", ""),
        "auto_class": info.get("auto_class", "AutoModelForTokenClassification"),
        "training_data": info.get("training_data", "(not recorded)"),
        "command": info.get("command", "(not recorded)"),
        "metrics_table": format_metrics_table(info.get("metrics", {})),
        "labels": ", ".join(f"`{label}`" for label in info.get("labels", [])),
        "usage_example": info.get("usage_example", ""),
        "config_summary": info.get("config_summary", ""),
        "citation": PAPER_CITATION,
    }
    path = Path(output_dir) / "README.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(template.safe_substitute(values), encoding="utf-8")
    return path


def command_line(training_recipe: dict | None = None) -> str:
    """This process's command line; the arguments that a config's training recipe set follow as a comment."""
    launcher = "python" if "LOCAL_RANK" not in os.environ else "accelerate launch"
    command = " ".join([launcher, *[_quote(argument) for argument in sys.argv]])
    if training_recipe:
        recipe = " ".join(f"--{name} {value}" for name, value in training_recipe.items())
        command += f"\n# + the config's training recipe (not given on the command line): {recipe}"
    return command


def _quote(argument: str) -> str:
    return json.dumps(argument) if (" " in argument or not argument) else argument
