#!/usr/bin/env python
"""Rescores test predictions with independent scorers and prints the numbers (as JSON).

    python run_scripts/utilities/rescore_predictions.py --predictions_file docs/results/predictions/conll2003-ner-test.txt
    python run_scripts/utilities/rescore_predictions.py --predictions_file out/ner/test_predictions.txt --mode strict
    python run_scripts/utilities/rescore_predictions.py --predictions_file docs/results/predictions/movie_review-test.tsv

Token tagging (`token gold predicted` per line, tab- or space-separated, a blank line between sentences: the
`test_predictions.txt` of run_ner.py): token accuracy and, when every tag is `O` or `<prefix>-<type>`, seqeval's
entity-level precision, recall and F1 (micro average), in its default conlleval-compatible mode or with
`--mode strict` (scheme `--scheme`, IOB2 by default).

Classification (`text<TAB>gold<TAB>predicted` with that header line: the `test_predictions.tsv` of
run_classification.py): scikit-learn's accuracy and macro-F1 (over the labels present in either column).

The files are read here, with no code of the training scripts or of the model, so the numbers check theirs.
"""

import json
from dataclasses import dataclass, field
from pathlib import Path

from seqeval.metrics import f1_score as entity_f1
from seqeval.metrics import precision_score, recall_score
from seqeval.scheme import IOB2, IOBES
from sklearn.metrics import accuracy_score, f1_score

from modeling_slstm.tag_schemes import is_span_tag
from run_scripts.training.arguments import check_choices, parse_arguments
from run_scripts.training.usage_errors import DebugArguments, UsageError, run_script

FORMATS = ("auto", "tagging", "classification")
MODES = ("default", "strict")
STRICT_SCHEMES = {"IOB2": IOB2, "IOBES": IOBES}
CLASSIFICATION_HEADER = ["text", "gold", "predicted"]


@dataclass
class RescoreArguments(DebugArguments):
    predictions_file: str = field(metadata={"help": "the predictions to score (see the module docstring)"})
    format: str = field(
        default="auto",
        metadata={"help": f"one of {', '.join(FORMATS)}; auto: classification for a .tsv file, else tagging"},
    )
    mode: str = field(default="default", metadata={"help": f"seqeval's mode for tags: one of {', '.join(MODES)}"})
    scheme: str = field(
        default="IOB2", metadata={"help": f"the tag scheme of --mode strict: one of {', '.join(STRICT_SCHEMES)}"}
    )

    def __post_init__(self):
        check_choices("format", self.format, FORMATS)
        check_choices("mode", self.mode, MODES)
        check_choices("scheme", self.scheme, STRICT_SCHEMES)
        if self.format == "auto":
            self.format = "classification" if self.predictions_file.lower().endswith(".tsv") else "tagging"


def read_lines(path: Path) -> list[str]:
    """The lines of a UTF-8 file, split at line ends only (`str.splitlines` would also split texts at characters
    such as U+0085, which latin-1 text like the movie-review data contains)."""
    with path.open(encoding="utf-8", newline="") as file:
        return [line.rstrip("\r\n") for line in file]


def read_tagging(path: Path) -> tuple[list[list[str]], list[list[str]]]:
    """`(gold, predicted)` tag sequences, one per sentence, from the last two columns of every line."""
    gold, predicted = [], []
    sentence_gold, sentence_predicted = [], []
    for line_number, line in enumerate(read_lines(path), start=1):
        if not line.strip():
            if sentence_gold:
                gold.append(sentence_gold)
                predicted.append(sentence_predicted)
            sentence_gold, sentence_predicted = [], []
            continue
        fields = line.split("\t") if "\t" in line else line.split()
        if len(fields) < 3:
            raise UsageError(f"{path}, line {line_number}: expected 'token gold predicted', got {line!r}")
        sentence_gold.append(fields[-2])
        sentence_predicted.append(fields[-1])
    if sentence_gold:
        gold.append(sentence_gold)
        predicted.append(sentence_predicted)
    if not gold:
        raise UsageError(f"{path}: no sentences found")
    return gold, predicted


def score_tagging(path: Path, mode: str, scheme: str) -> dict:
    gold, predicted = read_tagging(path)
    pairs = [(g, p) for gs, ps in zip(gold, predicted) for g, p in zip(gs, ps)]
    scores = {"sentences": len(gold), "tokens": len(pairs)}
    scores["accuracy"] = sum(g == p for g, p in pairs) / len(pairs)
    if not all(is_span_tag(tag) for pair in pairs for tag in pair):
        if mode == "strict":
            raise UsageError(f"{path}: --mode strict scores span tags (O, B-X, I-X, ...), and the file has others")
        return scores
    mode_kwargs = {"mode": "strict", "scheme": STRICT_SCHEMES[scheme]} if mode == "strict" else {}
    for name, scorer in (("precision", precision_score), ("recall", recall_score), ("f1", entity_f1)):
        scores[name] = float(scorer(gold, predicted, zero_division=0, **mode_kwargs))
    return scores


def score_classification(path: Path) -> dict:
    lines = read_lines(path)
    if lines and not lines[-1]:
        lines.pop()  # the final line end
    if not lines or lines[0].split("\t") != CLASSIFICATION_HEADER:
        raise UsageError(f"{path}: expected the header line {chr(9).join(CLASSIFICATION_HEADER)!r}")
    gold, predicted = [], []
    for line_number, line in enumerate(lines[1:], start=2):
        fields = line.rsplit("\t", 2)
        if len(fields) != 3:
            raise UsageError(f"{path}, line {line_number}: expected 'text<TAB>gold<TAB>predicted', got {line!r}")
        gold.append(fields[1])
        predicted.append(fields[2])
    if not gold:
        raise UsageError(f"{path}: no examples after the header")
    return {
        "examples": len(gold),
        "accuracy": float(accuracy_score(gold, predicted)),
        "macro_f1": float(f1_score(gold, predicted, average="macro", zero_division=0)),
    }


def main(argv=None) -> dict:
    args = parse_arguments(RescoreArguments, argv, description=__doc__)
    path = Path(args.predictions_file)
    if args.format == "classification":
        scores = score_classification(path)
    else:
        scores = score_tagging(path, args.mode, args.scheme)
    settings = {"mode": args.mode, "scheme": args.scheme if args.mode == "strict" else None}
    settings = {key: value for key, value in settings.items() if value and args.format == "tagging"}
    print(json.dumps({"file": str(path), "format": args.format, **settings, **scores}, indent=2))
    return scores


if __name__ == "__main__":
    run_script(main)
