"""The model of `run_ner.py` and `run_classification.py`: a saved checkpoint to continue from
(`--model_name_or_path`), or a fresh model: its config (`--config_name`, `--config_overrides`), a word-level tokenizer
built from the training data (with the character vocabulary of the training words, which a config with
`use_char_features` reads through `char_ids`), pretrained word vectors with their coverage logged, and a pretrained
feature encoder (`--feature_encoder`: its config and weights in the model, its tokenizer inside the word-level one).
"""

import json
import logging
from collections.abc import Callable
from pathlib import Path

from transformers import AutoConfig, AutoTokenizer, PreTrainedConfig

import baselines  # noqa: F401 (registers the baseline encoders with the Auto classes: their configs train here too)
from modeling_slstm import SLSTMConfig
from modeling_slstm.configuration_slstm import validate_feature_settings
from modeling_slstm.pretrained_vectors import format_coverage, initialize_embeddings, load_word_vectors
from modeling_slstm.token_tagging import are_placeholders
from modeling_slstm.tokenization_slstm import build_word_tokenizer, update_config_from_tokenizer
from run_scripts.training.feature_encoder import resolve_feature_encoder
from run_scripts.training.recipe import RECIPE_KEY
from run_scripts.training.usage_errors import UsageError, as_usage_error

logger = logging.getLogger(__name__)


def load_checkpoint(model_args, auto_model_class, data_labels: Callable[[], list[str]]) -> tuple:
    """The tokenizer and model saved at `--model_name_or_path` (the tokenizer of `--tokenizer_name` if given).

    A checkpoint without task labels (its `id2label` holds only the `LABEL_i` placeholders: a pretrained encoder
    such as a BERT folder) gets a new task head for the labels of the data, `data_labels()`, as transformers' example
    scripts fine-tune one; a checkpoint with labels keeps them.
    """
    path, trust_remote_code = model_args.model_name_or_path, model_args.trust_remote_code
    tokenizer = AutoTokenizer.from_pretrained(model_args.tokenizer_name or path, trust_remote_code=trust_remote_code)
    config = AutoConfig.from_pretrained(path, trust_remote_code=trust_remote_code)
    labels = {}
    if are_placeholders(tuple(config.id2label[index] for index in range(config.num_labels))):
        label_list = data_labels()
        labels = {"num_labels": len(label_list), "id2label": dict(enumerate(label_list)),
                  "label2id": {label: index for index, label in enumerate(label_list)}}  # fmt: skip
        logger.info(f"{path} has no task labels: a new {auto_model_class.__name__} head for {label_list}")
    model = auto_model_class.from_pretrained(path, trust_remote_code=trust_remote_code, **labels)
    if model_args.embeddings:
        logger.warning("--embeddings is ignored when continuing from --model_name_or_path")
    return tokenizer, model


def load_fresh_config(model_args) -> PreTrainedConfig:
    """The config of a fresh model, `--config_name` (a JSON file or a folder) then `--config_overrides`.

    The JSON's `model_type` picks the class through `AutoConfig` (S-LSTM by default, or a baseline encoder from
    `hub_configs/baselines/`), so every encoder trains through the same script. The training recipe stored with it
    (`recipe.py`) is left out: it says how to train from scratch, so a checkpoint that is fine-tuned later must not
    carry it.
    """
    with as_usage_error():  # the config's own checks of the values the user gave
        if model_args.config_name is None:
            config = SLSTMConfig()
        elif Path(model_args.config_name).is_file():
            with as_usage_error(f"--config_name {model_args.config_name}"):  # not JSON
                values = json.loads(Path(model_args.config_name).read_text(encoding="utf-8"))
            values = {key: value for key, value in values.items() if not key.startswith("_comment")}
            values.pop(RECIPE_KEY, None)
            config = AutoConfig.for_model(values.pop("model_type", SLSTMConfig.model_type), **values)
        else:
            config = AutoConfig.from_pretrained(model_args.config_name)
            vars(config).pop(RECIPE_KEY, None)
        if model_args.config_overrides:
            config.update_from_string(model_args.config_overrides)
            config = type(config)(**config.to_dict())  # re-runs the config's own validation on the new values
    return config


def build_fresh_model(
    model_args,
    config: PreTrainedConfig,
    auto_model_class,
    label_list: list[str],
    train_sentences: list[list[str]],
    eval_sentences: list[list[str]],
) -> tuple:
    """A word-level tokenizer built from the training data (or `--tokenizer_name`) and a fresh model of `config`.

    Args:
        config: from `load_fresh_config`; its vocabulary, special-token ids, labels and (with `--embeddings`)
            `embedding_dim` are set here.
        label_list: the model's labels, in id order.
        train_sentences: the training examples split into words (builds the tokenizer's vocabulary).
        eval_sentences: validation/test words, added to the vocabulary when they have a pretrained vector and
            `--pretrained_vocab eval`.

    Returns:
        `(tokenizer, model)`.
    """
    words, vectors = None, None
    if model_args.embeddings:
        with as_usage_error():  # a vector file that cannot be read names itself and the line
            words, vectors = load_word_vectors(model_args.embeddings, max_vectors=model_args.max_vectors)
        if config.embedding_dim != vectors.shape[1]:
            logger.info(
                f"Setting embedding_dim to {vectors.shape[1]}, the dimension of {model_args.embeddings} "
                f"(the config had {config.embedding_dim})"
            )
            config.embedding_dim = int(vectors.shape[1])

    feature_encoder = resolve_feature_encoder(model_args.feature_encoder) if model_args.feature_encoder else None
    if feature_encoder is not None:
        config.feature_encoder_config = AutoConfig.from_pretrained(feature_encoder)
        validate_feature_settings(config)
    if model_args.tokenizer_name:
        tokenizer = AutoTokenizer.from_pretrained(model_args.tokenizer_name)
        if feature_encoder is not None and getattr(tokenizer, "subword_backend", None) is None:
            raise UsageError(
                f"--tokenizer_name {model_args.tokenizer_name} gives no subword inputs for --feature_encoder: leave "
                "--tokenizer_name out to build a tokenizer that does"
            )
    else:
        tokenizer = build_word_tokenizer(
            train_sentences,
            min_frequency=model_args.min_word_frequency,
            extra_vocabulary=extra_vocabulary(model_args.pretrained_vocab, words, eval_sentences),
            lowercase=model_args.lowercase,
            subword_tokenizer=None if feature_encoder is None else AutoTokenizer.from_pretrained(feature_encoder),
            **({"max_word_length": model_args.max_word_length} if model_args.max_word_length else {}),
        )
    update_config_from_tokenizer(config, tokenizer)  # vocabulary, special ids, and characters for char features
    config.num_labels = len(label_list)
    config.id2label = dict(enumerate(label_list))
    config.label2id = {label: index for index, label in enumerate(label_list)}
    model = auto_model_class.from_config(config)
    if feature_encoder is not None:
        model.base_model.embeddings.subword_features.load_pretrained_encoder(feature_encoder)
        logger.info(
            f"Feature encoder: {feature_encoder} ({type(model.base_model.embeddings.subword_features.encoder).__name__})"
        )
    if words is not None:
        report = initialize_embeddings(model.get_input_embeddings(), tokenizer.get_vocab(), words, vectors)
        logger.info(f"{model_args.embeddings}: {format_coverage(report)}")  # the main process's log only
    n_parameters = sum(p.numel() for p in model.parameters())
    characters = f", {config.char_vocab_size:,} character ids" if uses_char_features(config) else ""
    logger.info(
        f"Fresh {type(model).__name__}: {n_parameters:,} parameters, vocabulary {len(tokenizer):,}{characters}"
    )
    return tokenizer, model


def uses_char_features(config: PreTrainedConfig) -> bool:
    """Whether the model reads `char_ids` (S-LSTM and baseline configs with `use_char_features`)."""
    return bool(getattr(config, "use_char_features", False))


def extra_vocabulary(pretrained_vocab: str, words: list[str] | None, eval_sentences: list[list[str]]):
    """The words that `--pretrained_vocab` adds to the training words (`None`: none)."""
    if words is None or pretrained_vocab == "train":
        return None
    if pretrained_vocab == "all":
        return words
    known = set(words)
    return [word for sentence in eval_sentences for word in sentence if word in known or word.lower() in known]
