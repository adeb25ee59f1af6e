"""What the benchmarks of training steps start from: a fresh model of a shipped config over a tokenizer's vocabulary
or a random one, and the optimizer the training scripts' `Trainer` gives it."""

import torch
from transformers import Trainer, TrainingArguments

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


def random_vocabulary_model(make_model, config_name: str, labels: list[str], vocab_size: int, char_vocab_size: int,
                            config_overrides: str = "", dropout: bool = True, **fields):  # fmt: skip
    """A freshly initialised model of a shipped config over a random vocabulary of `vocab_size` words and
    `char_vocab_size` characters (no tokenizer; `workloads.random_batch` draws its batches), seed 0, in training mode.

    Args:
        make_model (`Callable[[PreTrainedConfig], PreTrainedModel]`): the model from its config, e.g.
            `SLSTMForTokenClassification` or `AutoModelForTokenClassification.from_config`.
        config_name (`str`): a config JSON of `hub_configs/` (S-LSTM or baseline), read as `--config_name` reads it.
        labels (`list[str]`): the label names, in id order.
        vocab_size (`int`), char_vocab_size (`int`): the sizes of the word and character vocabularies.
        config_overrides (`str`, defaults to `""`): as `--config_overrides`, e.g. `"use_char_features=true"`.
        dropout (`bool`, defaults to `True`): without, every dropout rate of the config is 0.
        **fields: config attributes set last (`step_implementation`, `hidden_size`, ...).
    """
    config = load_fresh_config(ModelArguments(config_name=config_name, config_overrides=config_overrides))
    config.update({"vocab_size": vocab_size, "char_vocab_size": char_vocab_size, "id2label": dict(enumerate(labels)),
                   "label2id": {label: index for index, label in enumerate(labels)}})  # fmt: skip
    if not dropout:
        config.update({name: 0.0 for name in config.to_dict() if name.endswith("dropout")})
    config.update(fields)
    torch.manual_seed(0)
    return make_model(config).train()


def trainer_optimizer(model) -> torch.optim.Optimizer:
    """The optimizer the `Trainer` of `run_ner.py` builds, with the recipe's lr 1e-3 and no weight decay: its
    default `optim`, fused AdamW, whose step took 3.5 ms where the unfused one took 21 on a 10-sentence NER batch
    (one thread, AVX-512 EPYC), about 4% of the training step."""
    args = TrainingArguments(learning_rate=1e-3, use_cpu=True, report_to="none")
    optimizer_cls, optimizer_kwargs = Trainer.get_optimizer_cls_and_kwargs(args, model)
    return optimizer_cls(model.parameters(), weight_decay=args.weight_decay, **optimizer_kwargs)
