"""run_scripts/utilities/compare_predictions.py: the paired permutation test against a brute-force enumeration of
every swap, the interval against `scipy.stats.bootstrap` at 95%, and the seed averaging against per-sentence
accuracies read from the prediction files here, on files as run_classification.py writes them."""

import csv
import itertools

import numpy as np
import pytest
from scipy import stats

from run_scripts.utilities import compare_predictions


def brute_force_p_value(a: np.ndarray, b: np.ndarray) -> float:
    """Share of the 2^n swaps of the sentence pairs whose mean difference is at least as far from 0 as observed."""
    differences = a - b
    observed = abs(differences.mean())
    signs = itertools.product([1.0, -1.0], repeat=len(differences))
    return float(np.mean([abs((differences * np.array(s)).mean()) >= observed - 1e-12 for s in signs]))


def seed_averaged_correctness(paths: list[str]) -> np.ndarray:
    """Per sentence, the share of `paths` (one file per seed) whose prediction equals the gold label."""
    columns = []
    for path in paths:
        with open(path, encoding="utf-8", newline="") as file:
            rows = list(csv.DictReader(file, delimiter="\t", quoting=csv.QUOTE_NONE))
        columns.append([row["gold"] == row["predicted"] for row in rows])
    return np.array(columns, float).mean(axis=0)


def write_predictions(path, gold, predicted, texts):
    rows = ["text\tgold\tpredicted", *(f"{t}\t{g}\t{p}" for t, g, p in zip(texts, gold, predicted))]
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return str(path)


def test_p_value_is_the_exact_permutation_share(tmp_path):
    generator = np.random.default_rng(3)
    texts = [f"sentence {i}" for i in range(13)]
    gold = generator.choice(["pos", "neg"], size=13)
    flip = {"pos": "neg", "neg": "pos"}
    # A: two seeds, mostly right; B: two seeds, mostly wrong: imperfect both, a clear but not certain difference.
    a_files = [
        write_predictions(tmp_path / f"a{seed}.tsv", gold, [g if r < 0.8 else flip[g] for g, r in
                          zip(gold, generator.random(13))], texts) for seed in range(2)
    ]  # fmt: skip
    b_files = [
        write_predictions(tmp_path / f"b{seed}.tsv", gold, [g if r < 0.45 else flip[g] for g, r in
                          zip(gold, generator.random(13))], texts) for seed in range(2)
    ]  # fmt: skip
    seed = 7
    result = compare_predictions.main(["--a", *a_files, "--b", *b_files, "--seed", str(seed)])
    a, b = seed_averaged_correctness(a_files), seed_averaged_correctness(b_files)
    assert result["p_value"] == pytest.approx(brute_force_p_value(a, b), abs=1e-12)  # 2^13 swaps: exact
    assert result["accuracy_a"] == pytest.approx(100 * a.mean())
    assert result["accuracy_b"] == pytest.approx(100 * b.mean())
    assert result["difference"] == pytest.approx(100 * (a.mean() - b.mean()))
    # The documented 95% paired BCa interval, as scipy draws it with the same seed and number of resamples.
    expected = stats.bootstrap(
        (a, b), lambda x, y, axis=-1: np.mean(x - y, axis=axis), paired=True, vectorized=True,
        n_resamples=10_000, confidence_level=0.95, rng=np.random.default_rng(seed),
    ).confidence_interval  # fmt: skip
    assert result["interval"] == pytest.approx((100 * expected.low, 100 * expected.high), abs=1e-9)


def test_seed_files_are_averaged_per_sentence(tmp_path):
    """Each sentence scores the fraction of a system's seed files that classify it right: with two files that
    disagree on every sentence, each sentence scores 1/2 and the accuracy is 50, whichever file comes last."""
    texts, gold = ["x", "y", "z", "w"], ["pos", "neg", "pos", "neg"]
    right = write_predictions(tmp_path / "right.tsv", gold, gold, texts)
    wrong = write_predictions(tmp_path / "wrong.tsv", gold, ["neg", "pos", "neg", "pos"], texts)
    half = write_predictions(tmp_path / "half.tsv", gold, ["pos", "pos", "neg", "neg"], texts)
    for a_files in ([right, wrong], [wrong, right]):
        result = compare_predictions.main(["--a", *a_files, "--b", half, "--resamples", "100"])
        assert result["accuracy_a"] == pytest.approx(50.0)
        assert result["accuracy_b"] == pytest.approx(50.0)
        assert result["difference"] == pytest.approx(0.0)
        assert result["p_value"] == pytest.approx(1.0)  # every sentence scores 1/2 under A and 0 or 1 under B


def test_files_of_another_test_set_are_refused(tmp_path):
    first = write_predictions(tmp_path / "a.tsv", ["pos", "neg"], ["pos", "pos"], ["x", "y"])
    other = write_predictions(tmp_path / "b.tsv", ["pos", "neg"], ["pos", "pos"], ["x", "z"])
    with pytest.raises(ValueError, match="differ from .*a.tsv"):
        compare_predictions.main(["--a", first, "--b", other])
    (tmp_path / "bad.tsv").write_text("gold\tpredicted\ttext\n")
    with pytest.raises(ValueError, match="expected the header"):
        compare_predictions.main(["--a", str(tmp_path / "bad.tsv"), "--b", first])


def test_files_in_another_order_pair_up_sentence_by_sentence(tmp_path):
    """A run that kept the test split in another order (the same sentences, a duplicate included) is compared
    sentence by sentence: the result equals that of the file in the reference's order."""
    texts, gold = ["x", "y", "x", "z", "w"], ["pos", "neg", "pos", "neg", "pos"]
    a = write_predictions(tmp_path / "a.tsv", gold, ["pos", "pos", "pos", "neg", "neg"], texts)
    b_predicted = ["neg", "neg", "neg", "neg", "pos"]
    b = write_predictions(tmp_path / "b.tsv", gold, b_predicted, texts)
    order = [4, 2, 0, 3, 1]
    shuffled = write_predictions(
        tmp_path / "b_shuffled.tsv",
        [gold[i] for i in order],
        [b_predicted[i] for i in order],
        [texts[i] for i in order],
    )
    assert compare_predictions.main(["--a", a, "--b", shuffled]) == compare_predictions.main(["--a", a, "--b", b])
    missing = write_predictions(tmp_path / "c.tsv", gold[:4] + ["neg"], b_predicted, texts)
    with pytest.raises(ValueError, match="differ from .*a.tsv"):
        compare_predictions.main(["--a", a, "--b", missing])
