"""What the benchmarks on real text time: a fresh model of a shipped config over a tokenizer's vocabulary, and
batches of real sentences grouped by length the way the Trainer's `group_by_length` groups them."""

import torch
from transformers.trainer_pt_utils import LengthGroupedSampler

from modeling_slstm.tokenization_slstm import update_config_from_tokenizer
from run_scripts.training.arguments import ModelArguments
from run_scripts.training.model_setup import load_fresh_config


def fresh_model(model_class, config_name: str, tokenizer, seed: int, config_overrides: str = "", **fields):
    """A freshly initialised `model_class` in training mode, as the training scripts build one from scratch.

    Args:
        model_class: an `SLSTMFor*` class.
        config_name (`str`): a config JSON of `hub_configs/`, read as `--config_name` reads it (its
            `training_recipe` left out).
        tokenizer: the word-level tokenizer whose vocabulary (and characters) the model reads.
        seed (`int`): the seed of the initial weights.
        config_overrides (`str`, defaults to `""`): as `--config_overrides`, e.g. `"use_char_features=false"`.
        **fields: config attributes set after the overrides (`embedding_dim`, `id2label`, ...).
    """
    config = load_fresh_config(ModelArguments(config_name=config_name, config_overrides=config_overrides))
    config.update(fields)
    update_config_from_tokenizer(config, tokenizer)
    torch.manual_seed(seed)
    return model_class(config).train()


def length_grouped_batches(lengths: list[int], batch_size: int, seed: int) -> list[list[int]]:
    """The example indices of each batch of one epoch, `batch_size` examples of similar length each (transformers'
    `LengthGroupedSampler`, which `group_by_length` uses: random mega-batches, each sorted by length)."""
    generator = torch.Generator().manual_seed(seed)
    order = list(LengthGroupedSampler(batch_size, lengths=lengths, generator=generator))
    return [order[start : start + batch_size] for start in range(0, len(order), batch_size)]
