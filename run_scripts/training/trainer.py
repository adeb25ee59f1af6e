"""`SLSTMTrainer`: the `transformers` Trainer of `run_ner.py` and `run_classification.py`.

It adds the paper's per-epoch exponential learning-rate decay and L2 regularisation, a length-grouped sampler that
resumes exactly, token-budget batches (`--max_tokens_per_batch`), evaluation in the data's order, and the S-LSTM model
card (`hub_configs/model_card_template.md`) that `create_model_card` / `push_to_hub` write.
"""

import json
import logging
import math
import os
import string
import sys
from collections.abc import Iterator, Sequence
from functools import partial
from pathlib import Path

import torch
from torch.utils.data import DataLoader, Sampler
from transformers import EarlyStoppingCallback, Trainer, TrainerCallback
from transformers.trainer_pt_utils import LengthGroupedSampler
from transformers.trainer_utils import seed_worker
from transformers.training_args import OptimizerNames

from run_scripts import REPOSITORY_ROOT
from run_scripts.training.threads import ThreadCountCallback

logger = logging.getLogger(__name__)

MODEL_CARD_TEMPLATE = REPOSITORY_ROOT / "hub_configs" / "model_card_template.md"
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


class TokenBudgetBatchSampler(Sampler[list[int]]):
    """Length-grouped batches of at most `max_tokens` padded tokens each (`examples * longest length`), all processes'
    batches of one epoch, for a `DataLoader`'s `batch_sampler`.

    Every epoch the examples are sorted by length, equal lengths in an order drawn from `(seed, epoch)`, and cut into
    consecutive batches at the same places: the cuts depend on the lengths alone (greedy, shortest first), so the
    number of batches and their sizes are the same every epoch (the Trainer and the per-epoch learning-rate decay
    count steps with them), while which examples of equal length share a batch changes. The batches are then yielded
    in an order drawn from `(seed, epoch)`. For several processes the largest batches are halved until the number of
    batches divides by `num_processes`: `accelerate` then deals batch `i` to process `i % num_processes`, each
    process gets the same number of whole batches and every example is used exactly once per epoch.

    Args:
        lengths (`Sequence[int]`): the length of every example in tokens (`<s>` and `</s>` included).
        max_tokens (`int`): the budget of one batch on one process; at least the longest length.
        seed (`int`, *optional*, defaults to 0): with the epoch, seeds the order of equal lengths and of the batches.
        num_processes (`int`, *optional*, defaults to 1): the number of training processes.
    """

    def __init__(self, lengths: Sequence[int], max_tokens: int, seed: int = 0, num_processes: int = 1):
        self.lengths = [int(length) for length in lengths]
        if not self.lengths:
            raise ValueError("Token-budget batches need at least one training example, got none")
        if max(self.lengths) > max_tokens:
            raise ValueError(
                f"--max_tokens_per_batch {max_tokens} is smaller than the longest training example "
                f"({max(self.lengths)} tokens with <s> and </s>): give at least {max(self.lengths)}, or cut the "
                "examples shorter with --max_seq_length"
            )
        self.max_tokens = max_tokens
        self.seed = seed
        self.num_processes = num_processes
        self.epoch = 0
        self.batch_sizes = self.cut_into_batches(sorted(self.lengths))

    def cut_into_batches(self, sorted_lengths: list[int]) -> list[int]:
        """The sizes of the consecutive batches of the sorted lengths: greedy within the budget, then the largest
        halved until their number divides by `num_processes`."""
        sizes, size = [], 0
        for length in sorted_lengths:
            if (size + 1) * length > self.max_tokens:  # `length` is the longest so far: it sets the padding
                sizes.append(size)
                size = 0
            size += 1
        sizes.append(size)
        while len(sizes) % self.num_processes:
            largest = max(range(len(sizes)), key=sizes.__getitem__)
            if sizes[largest] == 1:
                raise ValueError(
                    f"{len(self.lengths)} training examples in batches of one cannot be dealt evenly to "
                    f"{self.num_processes} processes: raise --max_tokens_per_batch or use fewer processes"
                )
            sizes[largest : largest + 1] = [sizes[largest] // 2, sizes[largest] - sizes[largest] // 2]
        return sizes

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def __len__(self) -> int:
        return len(self.batch_sizes)

    def __iter__(self) -> Iterator[list[int]]:
        generator = torch.Generator().manual_seed(self.seed + self.epoch)
        # A stable sort of a random permutation: by length, equal lengths in random order.
        order = sorted(torch.randperm(len(self.lengths), generator=generator).tolist(), key=self.lengths.__getitem__)
        batches, start = [], 0
        for size in self.batch_sizes:
            batches.append(order[start : start + size])
            start += size
        for index in torch.randperm(len(batches), generator=generator).tolist():
            yield batches[index]


class SamplerEpochCallback(TrainerCallback):
    """Gives the trainer's epoch-seeded sampler (length-grouped or token-budget) its epoch before each epoch's batches
    are drawn: the Trainer's own `set_epoch` calls do not reach it through the wrappers of a resumed multi-process
    run (`SkipBatchSampler(BatchSamplerShard(...))`). The epoch is the whole part of `state.epoch`, which a resumed
    run restores from its checkpoint.

    Args:
        trainer ([`SLSTMTrainer`]): whose `epoch_seeded_sampler` to set.
    """

    def __init__(self, trainer: "SLSTMTrainer"):
        self.trainer = trainer

    def on_epoch_begin(self, args, state, control, **kwargs):
        if self.trainer.epoch_seeded_sampler is not None:
            self.trainer.epoch_seeded_sampler.set_epoch(int(state.epoch or 0))


class SLSTMTrainer(Trainer):
    """`Trainer` with the paper's per-epoch exponential LR decay (`--lr_decay_per_epoch`), token-budget batches
    (`--max_tokens_per_batch`), early stopping (`--early_stopping_patience`) and the S-LSTM model card.

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
        if getattr(self.args, "early_stopping_patience", None):
            self.add_callback(EarlyStoppingCallback(self.args.early_stopping_patience))
        self.add_callback(SamplerEpochCallback(self))
        if getattr(self.args, "threads", None) == "auto":
            self.add_callback(ThreadCountCallback())
        self.model_card = model_card or {}
        self.reported_metrics = {}
        self.epoch_seeded_sampler = None  # the training (batch) sampler whose order depends on the epoch

    def report_metrics(self, split: str, metrics: dict, num_samples: int) -> None:
        """Logs the metrics of `split` (`train`, `eval` or `test`) with its number of examples, saves them in
        `<split>_results.json` and `all_results.json`, and keeps them for the model card."""
        metrics = dict(metrics, **{f"{split}_samples": num_samples})
        self.log_metrics(split, metrics)
        self.save_metrics(split, metrics)
        self.reported_metrics.update(metrics)

    def optimizer_steps_per_epoch(self) -> int:
        """Optimizer steps per epoch of each process, as the Trainer counts them (batches / accumulation, rounded
        up)."""
        args = self.args
        if isinstance(self.epoch_seeded_sampler, TokenBudgetBatchSampler):
            batches = len(self.epoch_seeded_sampler) // args.world_size
        elif args.dataloader_drop_last:
            batches = len(self.train_dataset) // (args.per_device_train_batch_size * args.world_size)
        else:
            batches = math.ceil(len(self.train_dataset) / (args.per_device_train_batch_size * args.world_size))
        return max(1, math.ceil(batches / args.gradient_accumulation_steps))

    def data_seed(self) -> int:
        return self.args.data_seed if self.args.data_seed is not None else self.args.seed

    def get_train_dataloader(self) -> DataLoader:
        """With `--max_tokens_per_batch`: batches of a token budget from `TokenBudgetBatchSampler` (in place of
        `--per_device_train_batch_size` and `--train_sampling_strategy`); otherwise the Trainer's."""
        budget = getattr(self.args, "max_tokens_per_batch", None)
        if budget is None:
            return super().get_train_dataloader()
        if self.train_dataset is None:
            raise ValueError("Trainer: training requires a train_dataset.")
        column = self.args.length_column_name
        if column in self.train_dataset.column_names:
            lengths = self.train_dataset[column]
        else:
            lengths = [len(ids) for ids in self.train_dataset["input_ids"]]
        sampler = TokenBudgetBatchSampler(lengths, budget, seed=self.data_seed(), num_processes=self.args.world_size)
        self.epoch_seeded_sampler = sampler
        logger.info(
            f"Token-budget batches: at most {budget} padded tokens per batch and process, {len(sampler)} batches per "
            f"epoch over all processes ({len(lengths) / len(sampler):.1f} examples on average); "
            "--per_device_train_batch_size and --train_sampling_strategy are not used"
        )
        args = self.args
        loader = DataLoader(
            self._remove_unused_columns(self.train_dataset, description="Training"),
            batch_sampler=sampler,
            collate_fn=self.data_collator,
            num_workers=args.dataloader_num_workers,
            pin_memory=args.dataloader_pin_memory,
            persistent_workers=args.dataloader_persistent_workers,
            worker_init_fn=partial(seed_worker, num_workers=args.dataloader_num_workers, rank=args.process_index),
        )
        return self.accelerator.prepare(loader)

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

    def create_optimizer(self, model=None) -> torch.optim.Optimizer:
        """The Trainer's optimizer, except: with `--l2_regularization`, the paper's Adam with coupled L2
        (`torch.optim.Adam(weight_decay=...)` adds the coefficient times each weight to its gradient), the word
        embeddings in a group without it unless `--l2_include_word_embeddings`; with
        `--feature_encoder_learning_rate`, the trainable feature-encoder weights in groups of their own with that
        learning rate."""
        l2 = self.args.l2_regularization
        encoder_learning_rate = self.args.feature_encoder_learning_rate
        if self.optimizer is not None or (l2 is None and encoder_learning_rate is None):
            return super().create_optimizer(model)
        model = self.model if model is None else model
        if l2 is not None:
            if self.args.optim not in (OptimizerNames.ADAMW_TORCH, OptimizerNames.ADAMW_TORCH_FUSED):
                logger.warning(
                    f"--l2_regularization trains with torch.optim.Adam: --optim {self.args.optim} is not used"
                )
            groups = l2_parameter_groups(model, l2, self.args.l2_include_word_embeddings)
            optimizer_class = torch.optim.Adam
            optimizer_kwargs = {"lr": self.args.learning_rate, "betas": (self.args.adam_beta1, self.args.adam_beta2),
                                "eps": self.args.adam_epsilon}  # fmt: skip
        else:
            optimizer_class, optimizer_kwargs = self.get_optimizer_cls_and_kwargs(self.args, model)
            groups = weight_decay_parameter_groups(
                model, self.get_decay_parameter_names(model), self.args.weight_decay
            )
        if encoder_learning_rate is not None:
            groups = with_feature_encoder_learning_rate(model, groups, encoder_learning_rate)
        self.optimizer = optimizer_class(groups, **optimizer_kwargs)
        return self.optimizer

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
            [f"{key}={getattr(config, key)}" for key in CARD_CONFIG_KEYS if hasattr(config, key)]
            + feature_encoder_summary(config)
        )
        info.update(model_description(config))
        write_model_card(self.args.output_dir, info, repo_id)

    # Private `Trainer` methods and attributes, all in this section: transformers has no public hook for what they do.
    # tests/scripts/test_private_trainer_hooks.py fails loudly when transformers changes any of them.
    # - `_get_train_sampler`: the length-grouped sampler, made resumable (`EpochSeededLengthGroupedSampler`);
    # - `_get_eval_sampler`: evaluation in the data's order;
    # - `_remove_unused_columns` (called in `get_train_dataloader`): the Trainer's column filter, for our own loader;
    # - `_created_lr_scheduler` (set in `create_scheduler`): lets the Trainer rebuild our scheduler on a new `train()`.

    def _get_train_sampler(self, train_dataset=None):
        sampler = super()._get_train_sampler(train_dataset)
        if isinstance(sampler, LengthGroupedSampler):
            sampler = EpochSeededLengthGroupedSampler(
                sampler.batch_size, lengths=sampler.lengths, seed=self.data_seed()
            )
            self.epoch_seeded_sampler = sampler
        return sampler

    def _get_eval_sampler(self, eval_dataset):
        """Evaluation and prediction keep the dataset's order even with `--train_sampling_strategy group_by_length`
        (which `transformers` also applies to evaluation, shuffling it): predictions.txt must line up with the data."""
        if eval_dataset is None or not hasattr(eval_dataset, "__len__"):
            return None
        return torch.utils.data.SequentialSampler(eval_dataset) if self.args.world_size <= 1 else None

    def end(self):
        """Releases the distributed model wrapper, waits for every process, then ends the run (destroys the process
        group). Left to interpreter exit, gloo's threads sometimes abort a process that has finished and saved
        everything.

        The wrapper goes first because its C++ gradient reducer holds the gloo process group: when the reducer drops
        the group's last reference, the group's destructor waits for gloo's worker threads while holding the GIL, and
        a worker that is still freeing a finished collective's tensors waits for the GIL: the process hangs after
        everything is saved (https://github.com/pytorch/pytorch/issues/56297). With the wrapper gone, the group's
        last reference is the one `destroy_process_group` drops, through a binding that releases the GIL first."""
        self.model_wrapped = self.model
        self.accelerator.free_memory()  # drops the accelerator's references to the wrapper, then collects garbage
        self.accelerator.wait_for_everyone()
        super().end()


def l2_parameter_groups(model: torch.nn.Module, coefficient: float, include_word_embeddings: bool) -> list[dict]:
    """Adam parameter groups: every trainable parameter with `weight_decay=coefficient`, except the word embedding
    matrix (`model.get_input_embeddings()`), which gets 0 unless `include_word_embeddings`."""
    embedding = model.get_input_embeddings().weight
    trainable = [parameter for parameter in model.parameters() if parameter.requires_grad]
    exempt = None if include_word_embeddings else embedding
    regularized = [p for p in trainable if p is not exempt]
    groups = [
        {"params": regularized, "weight_decay": coefficient},
        {"params": [p for p in trainable if p is exempt], "weight_decay": 0.0},
    ]
    return [group for group in groups if group["params"]]


def weight_decay_parameter_groups(model: torch.nn.Module, decay_names: list[str], weight_decay: float) -> list[dict]:
    """The Trainer's own two groups: trainable parameters named in `decay_names` with `weight_decay`, the others
    (biases, norms) without."""
    trainable = [(name, parameter) for name, parameter in model.named_parameters() if parameter.requires_grad]
    groups = [
        {"params": [p for name, p in trainable if name in decay_names], "weight_decay": weight_decay},
        {"params": [p for name, p in trainable if name not in decay_names], "weight_decay": 0.0},
    ]
    return [group for group in groups if group["params"]]


def with_feature_encoder_learning_rate(model: torch.nn.Module, groups: list[dict], learning_rate: float) -> list[dict]:
    """`groups` with the feature encoder's parameters (`model.base_model.embeddings.subword_features`) moved into
    copies of their groups that set `lr` to `learning_rate`."""
    features = getattr(model.base_model.embeddings, "subword_features", None)
    if features is None:
        raise ValueError("--feature_encoder_learning_rate is set but the model has no feature encoder")
    encoder = {id(parameter) for parameter in features.parameters()}
    split = []
    for group in groups:
        split.append({**group, "params": [p for p in group["params"] if id(p) not in encoder]})
        split.append({**group, "params": [p for p in group["params"] if id(p) in encoder], "lr": learning_rate})
    return [group for group in split if group["params"]]


def format_metrics_table(metrics: dict) -> str:
    rows = [
        f"| {key} | {value:.4f} |" if isinstance(value, float) else f"| {key} | {value} |"
        for key, value in metrics.items()
    ]
    return "| metric | value |\n|---|---|\n" + "\n".join(rows) if rows else "(no metrics recorded)"


def feature_encoder_summary(config) -> list[str]:
    """The model card's words on a pretrained feature encoder inside the model (its weights ship with the checkpoint,
    under the encoder's own license), or nothing."""
    encoder = getattr(config, "feature_encoder_config", None)
    if encoder is None:
        return []
    layers = config.feature_encoder_trainable_layers
    training = {0: "frozen", -1: "fine-tuned"}.get(layers, f"top {layers} layers fine-tuned")
    name = Path(encoder.name_or_path).name or "unnamed"  # the folder's name, not where it was on the machine
    summary = (
        f"with the word features of a pretrained {encoder.model_type} encoder ({name}: {encoder.num_hidden_layers} "
        f"layers, hidden {encoder.hidden_size}; {config.feature_pooling} of each word's subwords, {training}), whose "
        "weights ship inside this checkpoint under that encoder's license"
    )
    return [summary]


def model_description(config) -> dict:
    """The model card's lines that depend on the model: what it is, and how its code reaches a user. An S-LSTM
    checkpoint carries its code (`trust_remote_code`); a baseline's code is the repository's `baselines` package; a
    fine-tuned pretrained encoder (`--model_name_or_path` of a BERT folder) is transformers' own."""
    if config.model_type == "slstm_baseline_encoder":
        encoder = {"bilstm": "BiLSTM", "cnn": "CNN", "transformer": "Transformer", "feed_forward": "feed-forward"}[
            config.encoder_type
        ]
        name = f"{config.num_layers}-layer {encoder} baseline"
        return {
            "model_description": f"A **{name}** (compared with the Sentence-State LSTM of Zhang, Liu & Song, ACL 2018)",
            "loading_note": "The baseline's code does not ship with the checkpoint: it loads where the `baselines` "
            "package of the modeling_slstm repository is installed (`import baselines` registers it with the Auto "
            "classes).",
            "code_tag": "- baseline",
        }
    if config.model_type != "sentence_state_lstm":  # a pretrained encoder fine-tuned with a new head
        return {
            "model_description": f"A fine-tuned **{config.model_type}** encoder (the baseline a pretrained encoder "
            "gives, compared with the Sentence-State LSTM of Zhang, Liu & Song, ACL 2018)",
            "loading_note": "It loads with the Auto classes of transformers, no custom code.",
            "code_tag": "- fine-tuned",
        }
    return {
        "model_description": "A **Sentence-State LSTM** (S-LSTM; Zhang, Liu & Song, ACL 2018)",
        "loading_note": "The model code ships with the checkpoint, so it loads with `trust_remote_code=True` (or without "
        "it when the `modeling_slstm` package is installed).",
        "code_tag": "- custom_code",
    }


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
        **{key: info.get(key, "") for key in ("model_description", "loading_note", "code_tag")},
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
