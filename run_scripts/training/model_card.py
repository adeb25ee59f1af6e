"""The model card (`README.md`) that `SLSTMTrainer.create_model_card` and `push_to_hub` write: the S-LSTM's
template, `hub_configs/model_card_template.md`, filled with the task, the data, the command, the metrics and the
config."""

import json
import os
import string
import sys
from pathlib import Path

from run_scripts import REPOSITORY_ROOT

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


def model_card_info(args, config, card: dict, reported_metrics: dict) -> dict:
    """The values of a trained model's card, for `write_model_card`.

    Args:
        args (`TrainingArguments`): `output_dir` and `hub_model_id` (where the usage example loads from).
        config (`PreTrainedConfig`): the model's config (labels and a summary of the architecture).
        card (`dict`): the task's fields, see `SLSTMTrainer`'s `model_card`.
        reported_metrics (`dict`): the metrics reported so far; the `eval_`/`test_` scores go into the card.
    """
    info = dict(card)
    info["command"] = command_line(info.pop("training_recipe", None))
    info["labels"] = [config.id2label[index] for index in range(config.num_labels)]
    info["usage_example"] = info.get("usage_example", "").replace("REPO_ID", args.hub_model_id or args.output_dir)
    info["metrics"] = {
        key: value
        for key, value in reported_metrics.items()
        if key.startswith(("eval_", "test_")) and not key.endswith(("_runtime", "_per_second"))
    }
    info["config_summary"] = ", ".join(
        [f"{key}={getattr(config, key)}" for key in CARD_CONFIG_KEYS if hasattr(config, key)]
        + feature_encoder_summary(config)
    )
    info.update(model_description(config))
    return info


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
