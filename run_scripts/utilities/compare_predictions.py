#!/usr/bin/env python
"""Is system A more accurate than system B on the same test sentences? A paired permutation test over the sentences.

Each system is one or more `test_predictions.tsv` files (`text<TAB>gold<TAB>predicted` with a header, as
`run_classification.py` writes them), e.g. one per training seed, all of the same test set in the same order. A
sentence's score under a system is its accuracy averaged over that system's files (the fraction of seeds that
classify it right), so the test compares the seed-averaged systems and several seeds lower the variance of both.

The test is `scipy.stats.permutation_test` with `permutation_type="samples"`: under the null hypothesis the two
systems' scores of each sentence are exchangeable, so every one of the `2^n` swaps of the pairs is equally likely;
the p-value (two-sided) is the share of swaps, exact up to 2^n <= --resamples and sampled beyond, whose mean
difference is at least as far from zero as the observed one. A 95% paired bootstrap interval of the difference
(`scipy.stats.bootstrap`, BCa) is printed beside it.

    python run_scripts/utilities/compare_predictions.py \\
        --a docs/results/predictions/classification-seeds/slstm-movie_review-seed4{2,3,4,5,6}-test.tsv \\
        --b docs/results/predictions/classification-seeds/bilstm-movie_review-seed4{2,3,4,5,6}-test.tsv
"""

from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from scipy import stats

from run_scripts.training.arguments import parse_arguments
from run_scripts.training.usage_errors import DebugArguments, UsageError, run_script

HEADER = ["text", "gold", "predicted"]


@dataclass
class CompareArguments(DebugArguments):
    """Arguments of compare_predictions.py."""

    a: list[str] = field(metadata={"help": "system A's test_predictions.tsv files (one per seed)"})
    b: list[str] = field(metadata={"help": "system B's test_predictions.tsv files (one per seed)"})
    resamples: int = field(default=100_000, metadata={"help": "permutations (and bootstrap resamples) at most"})
    seed: int = field(default=0, metadata={"help": "seed of the sampled permutations and the bootstrap"})


def read_predictions(path: str) -> tuple[list[tuple[str, str]], np.ndarray]:
    """`(text, gold)` of every row of a predictions file and whether each prediction is right (0/1)."""
    lines = Path(path).read_text(encoding="utf-8").split("\n")  # not splitlines(): texts may hold U+0085
    if lines[0].split("\t") != HEADER:
        raise UsageError(f"{path}: expected the header {'<TAB>'.join(HEADER)}, got {lines[0]!r}")
    rows = [line.split("\t") for line in lines[1:] if line]
    malformed = [number for number, row in enumerate(rows, start=2) if len(row) != 3]
    if malformed:
        raise UsageError(f"{path}: lines {malformed[:5]} do not have 3 tab-separated columns")
    return [(text, gold) for text, gold, _ in rows], np.array(
        [gold == predicted for _, gold, predicted in rows], float
    )


def sentence_scores(
    paths: list[str], reference: tuple[str, list] | None = None
) -> tuple[tuple[str, list], np.ndarray]:
    """Per-sentence accuracy averaged over `paths`, in the order of the `(file, rows)` every file was checked against:
    each must hold the same sentences and gold labels as the first one (or as `reference`, from another system), in
    any order (runs that kept the test split in another order pair up sentence by sentence)."""
    columns = []
    for path in paths:
        rows, correct = read_predictions(path)
        reference = reference or (path, rows)
        columns.append(correct if rows == reference[1] else in_reference_order(path, rows, correct, reference))
    return reference, np.mean(columns, axis=0)


def in_reference_order(path: str, rows: list, correct: np.ndarray, reference: tuple[str, list]) -> np.ndarray:
    """`correct` of a file whose `(text, gold)` rows are the reference's in another order, rearranged into the
    reference's order (equal rows are interchangeable: a model predicts the same for the same text)."""
    positions = defaultdict(list)
    for index, row in enumerate(rows):
        positions[row].append(index)
    order = [positions[row].pop(0) if positions[row] else None for row in reference[1]]
    if None in order or any(positions.values()):
        raise UsageError(f"{path}: its sentences or gold labels differ from {reference[0]}'s (same test set needed)")
    return correct[order]


def mean_difference(a: np.ndarray, b: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.mean(a - b, axis=axis)


def compare(a: np.ndarray, b: np.ndarray, resamples: int, seed: int) -> dict:
    """Observed accuracy difference A - B (in points), its two-sided paired permutation p-value and a 95% bootstrap
    interval."""
    permutation = stats.permutation_test(
        (a, b), mean_difference, permutation_type="samples", vectorized=True, n_resamples=resamples,
        alternative="two-sided", rng=np.random.default_rng(seed),
    )  # fmt: skip
    interval = stats.bootstrap(
        (a, b), mean_difference, paired=True, vectorized=True, n_resamples=min(resamples, 10_000),
        confidence_level=0.95, rng=np.random.default_rng(seed),
    ).confidence_interval  # fmt: skip
    return {
        "accuracy_a": 100 * a.mean(),
        "accuracy_b": 100 * b.mean(),
        "difference": 100 * (a.mean() - b.mean()),
        "p_value": float(permutation.pvalue),
        "interval": (100 * interval.low, 100 * interval.high),
        "sentences": len(a),
    }


def main(argv=None) -> dict:
    args = parse_arguments(CompareArguments, argv, description=__doc__)
    reference, a = sentence_scores(args.a)
    _, b = sentence_scores(args.b, reference=reference)
    result = compare(a, b, args.resamples, args.seed)
    low, high = result["interval"]
    print(
        f"{result['sentences']} sentences; A ({len(args.a)} file(s)) {result['accuracy_a']:.2f}, "
        f"B ({len(args.b)} file(s)) {result['accuracy_b']:.2f}; A - B = {result['difference']:+.2f} points "
        f"(95% bootstrap interval {low:+.2f} to {high:+.2f}); paired permutation test, two-sided p = "
        f"{result['p_value']:.4f}"
    )
    return result


if __name__ == "__main__":
    run_script(main)
