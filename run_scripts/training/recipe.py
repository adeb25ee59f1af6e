"""The training recipe of a model trained from scratch: the training arguments that ship with its config.

`TrainingArguments`' defaults (lr 5e-5, linear decay, no clipping) suit fine-tuning a pretrained transformer, not a
randomly initialised S-LSTM. A config's `training_recipe` (or, for S-LSTM and baseline configs without one, the
paper's) becomes the parser's defaults before the command line is parsed, so every argument given on the command
line wins (`parse_training_arguments`).
"""

import json
from dataclasses import dataclass, field
from pathlib import Path

from transformers import AutoConfig, TrainingArguments

from baselines import BaselineEncoderConfig
from modeling_slstm import SLSTMConfig
from run_scripts.training.usage_errors import UsageError

RECIPE_KEY = "training_recipe"
# Zhang, Liu & Song (2018), Sec. 4: Adam with learning rate 0.001 decayed by 0.97 (per epoch), gradients clipped at 3,
# batches of 10 sentences of similar length. The recipe of S-LSTM and baseline configs without their own.
PAPER_TRAINING_RECIPE = {
    "learning_rate": 1e-3,
    "lr_decay_per_epoch": 0.97,
    "max_grad_norm": 3.0,
    "per_device_train_batch_size": 10,
    "train_sampling_strategy": "group_by_length",
}
RECIPE_MODEL_TYPES = (SLSTMConfig.model_type, BaselineEncoderConfig.model_type)
# A recipe value is left out when the command line chooses the same thing another way (another schedule than the
# Trainer's default one).
CONFLICTING_ARGUMENTS = {"lr_decay_per_epoch": ("lr_scheduler_type", "lr_scheduler_kwargs", "warmup_steps")}


@dataclass
class TrainingRecipe:
    """The recipe a fresh model trains with, once the command line is parsed.

    Args:
        source (`str`): where the recipe comes from (the config file, or the paper's for a config without one).
        applied (`dict`): the training arguments the recipe set (not given on the command line), by name.
        kept (`dict`): the recipe's arguments that the command line set otherwise, with the command line's values.
    """

    source: str
    applied: dict = field(default_factory=dict)
    kept: dict = field(default_factory=dict)

    def describe(self) -> str:
        message = f"Model built from a config, trained with the recipe of {self.source}: applied "
        message += format_arguments(self.applied) or "nothing"
        if self.kept:
            message += f"; kept from the command line: {format_arguments(self.kept)}"
        return message


def read_training_recipe(config_name: str | None) -> tuple[dict | None, str]:
    """`(recipe, model_type)` of `--config_name` (a JSON file, a saved config's folder or a Hub id; `None`: the
    default `SLSTMConfig`); the recipe is `None` when the config ships none."""
    if config_name is None:
        return None, SLSTMConfig.model_type
    path = Path(config_name)
    if not (path.is_file() or (path / "config.json").is_file()):  # a Hub id, as `load_fresh_config` reads it
        config = AutoConfig.from_pretrained(config_name)
        return getattr(config, RECIPE_KEY, None), config.model_type
    values = json.loads((path if path.is_file() else path / "config.json").read_text(encoding="utf-8"))
    return values.get(RECIPE_KEY), values.get("model_type", SLSTMConfig.model_type)


def config_recipe(config_name: str | None, training_fields: dict) -> tuple[dict, str] | None:
    """`(recipe, source)` for a fresh model from `config_name`: the config's own recipe, the paper's for an S-LSTM or
    baseline config without one, `None` for another model type. Checked against `training_fields` (the training
    arguments' dataclass fields by name)."""
    recipe, model_type = read_training_recipe(config_name)
    source = config_name or "the default SLSTMConfig"
    if recipe is None:
        if model_type not in RECIPE_MODEL_TYPES:
            return None
        recipe, source = PAPER_TRAINING_RECIPE, f"the paper (no {RECIPE_KEY!r} in {source})"
    check_recipe(recipe, source, training_fields)
    return recipe, source


def recipe_defaults(recipe: dict, chosen: dict, defaults: dict) -> dict:
    """The parser defaults that `recipe` sets: all of it, except a value that the command line chooses another way
    (`CONFLICTING_ARGUMENTS`: e.g. no per-epoch decay on top of a `--lr_scheduler_type` other than the default).

    Args:
        chosen: every argument's value as the command line gives it with the parser's own defaults.
        defaults: the parser's own defaults.
    """
    moved = {name for name, value in chosen.items() if value != defaults.get(name)}
    return {
        name: value
        for name, value in recipe.items()
        if not any(other in moved for other in CONFLICTING_ARGUMENTS.get(name, ()))
    }


def check_recipe(recipe: dict, source: str, training_fields: dict) -> None:
    """A recipe names training arguments, with one of their choices where the argument has choices."""
    for name, value in recipe.items():
        if name not in training_fields:
            raise UsageError(f"{source}: {RECIPE_KEY} sets {name!r}, which is not a training argument")
        choices = training_fields[name].metadata.get("choices")
        if choices is not None and value not in choices:
            raise UsageError(f"{source}: {RECIPE_KEY} sets {name}={value!r}; expected one of {choices}")


def settled_recipe(recipe: dict, source: str, training_args: TrainingArguments) -> TrainingRecipe:
    """What `recipe` set and what the command line kept, read from the parsed `training_args` (an argument given
    with the recipe's own value counts as applied)."""
    applied, kept = {}, {}
    for name, value in recipe.items():
        final = getattr(training_args, name)
        (applied if final == value else kept)[name] = final
    return TrainingRecipe(source, applied, kept)


def format_arguments(values: dict) -> str:
    return ", ".join(f"{name}={value}" for name, value in values.items())
