"""Helpers for the tests of run_scripts/ (imported by tests/scripts/ and tests/benchmarks/); holds no tests.

Fixtures (isolated Hugging Face caches, the shared benchmark data) are in conftest.py.
"""

import json
import os
import random
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import psutil  # a dependency of accelerate

from run_scripts.training import data

REPO = Path(__file__).resolve().parent.parent
SCRIPTS = REPO / "run_scripts"


# The labels of write_generated_ner's corpus (IOB2), in the order of the model's labels.
GENERATED_NER_LABELS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
NER_CONFIG = "hub_configs/slstm-ner-crf-small.json"
TINY_MODEL = "hidden_size=16,embedding_dim=16,num_steps=2"
COMMON_TRAINING = {
    "report_to": "none",
    "disable_tqdm": "true",
    "seed": 7,
    "per_device_train_batch_size": 8,
    "per_device_eval_batch_size": 16,
    "learning_rate": 0.01,
    "dataloader_num_workers": 0,
}


def cli(**options) -> list[str]:
    """`--name value` for each keyword argument, in order; `True` gives a bare `--name` and `None` leaves it out."""
    args = []
    for name, value in options.items():
        if value is not None:
            args += [f"--{name}"] if value is True else [f"--{name}", str(value)]
    return args


def run_args(output_dir, paths: dict | None = None, **options) -> list[str]:
    """The command line of run_ner.py / run_classification.py: a tiny fresh model from NER_CONFIG, the data files in
    `paths` (by split: train, validation, test), do_train/do_eval/do_predict and COMMON_TRAINING, each of them
    replaced by the `options` of the same name (`None` drops one), then the other `options`."""
    files = {f"{split}_file": path for split, path in (paths or {}).items()}
    defaults = {"config_name": NER_CONFIG, "config_overrides": TINY_MODEL, **files, "output_dir": output_dir}
    defaults |= {"do_train": True, "do_eval": True, "do_predict": True, **COMMON_TRAINING}
    return cli(**(defaults | options))


def write_generated_classification(directory: Path, n: int = 24) -> dict[str, Path]:
    """A toy polarity task as `text ||| label` files (train, validation, test), separable by one word."""
    paths = {}
    for split in ("train", "validation", "test"):
        paths[split] = directory / f"{split}.txt"
        lines = [
            f"a {'great' if i % 2 else 'awful'} film number {i} ||| {'pos' if i % 2 else 'neg'}" for i in range(n)
        ]
        paths[split].write_text("\n".join(lines) + "\n\n")
    return paths


def write_generated_ner(directory: Path, n_train=40, n_eval=12, seed=0, tab=True, n_test=None) -> dict[str, Path]:
    """A tiny generated NER corpus in IOB2: names after 'Mr', cities after 'in'."""
    rng = random.Random(seed)
    names, cities, fillers = (
        ["Smith", "Jones", "Brown"],
        ["Paris", "Rome", "New York"],
        ["the", "a", "saw", "went", "."],
    )

    def sentence():
        tokens, tags = [], []
        for _ in range(rng.randint(1, 3)):
            tokens += [rng.choice(fillers) for _ in range(rng.randint(0, 3))]
            tags += ["O"] * (len(tokens) - len(tags))
            if rng.random() < 0.5:
                tokens += ["Mr", rng.choice(names)]
                tags += ["O", "B-PER"]
            else:
                city = rng.choice(cities).split()
                tokens += ["in", *city]
                tags += ["O", "B-LOC"] + ["I-LOC"] * (len(city) - 1)
        return tokens, tags

    paths = {}
    separator = "\t" if tab else " "
    for split, n in (("train", n_train), ("validation", n_eval), ("test", n_test or n_eval)):
        paths[split] = directory / f"{split}.txt"
        with paths[split].open("w") as file:
            file.write(f"-DOCSTART-{separator}O\n\n")
            for _ in range(n):
                for token, tag in zip(*sentence()):
                    file.write(f"{token}{separator}{tag}\n")
                file.write("\n")
            file.write("\n\n")
    return paths


def run_main(module_name: str, argv: list[str], monkeypatch) -> None:
    """Runs `run_scripts/<module_name>.py`'s main() in this process with the given command line, with this process's
    thread count unless `argv` gives `--threads` (`auto` would follow the machine's load, and leave its choice to the
    tests that run after)."""
    import importlib

    import torch

    module = importlib.import_module(f"run_scripts.{module_name}")
    threads = [] if "--threads" in argv else ["--threads", str(torch.get_num_threads())]
    monkeypatch.setattr(sys, "argv", [f"{module_name}.py", *argv, *threads])
    module.main()


def read_json(path: Path) -> dict:
    return json.loads(Path(path).read_text())


def kill_with_descendants(pid: int) -> None:
    """SIGKILL a process and every process below it (torchrun starts its workers in new sessions: killing the
    launcher's process group would leave them running)."""
    root = psutil.Process(pid)
    for process in [*root.children(recursive=True), root]:
        try:
            process.kill()
        except psutil.NoSuchProcess:
            pass


def free_port() -> int:
    """A TCP port that nothing listens on now (the launchers' rendezvous; fixed ports collide across runs)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def torchrun(port: int) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(port)]


def read_columns(path: Path) -> list[list[list[str]]]:
    """The sentences of a `token gold predicted` file as lists of columns (read here, not with data_utils)."""
    sentences, current = [], []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if line.strip():
            current.append(line.split("\t"))
        elif current:
            sentences.append([list(column) for column in zip(*current, strict=True)])
            current = []
    if current:
        sentences.append([list(column) for column in zip(*current, strict=True)])
    return sentences


def assert_tag_scores_match(output_dir: Path, gold_file: Path, gold_scheme: str = "IOB2", strict: bool = False):
    """Oracle of run_ner.py's test metrics: seqeval (default mode, or strict IOB2) and token accuracy recomputed from
    `test_predictions.txt` must EQUAL the reported `test_f1`/`test_precision`/`test_recall`/`test_accuracy`; the file's
    words and gold column must be the gold test file's (converted from `gold_scheme` to IOB2), in its order."""
    from seqeval.metrics import f1_score, precision_score, recall_score
    from seqeval.scheme import IOB2

    from modeling_slstm.tag_schemes import convert_tag_sequence

    results = read_json(Path(output_dir) / "all_results.json")
    rows = read_columns(Path(output_dir) / "test_predictions.txt")
    expected = data.read_conll(gold_file)[: results["test_samples"]]
    assert [tokens for tokens, _, _ in rows] == [sentence["tokens"] for sentence in expected]
    gold = [gold for _, gold, _ in rows]
    assert gold == [convert_tag_sequence(sentence["tags"], gold_scheme, "IOB2") for sentence in expected]
    predicted = [predicted for _, _, predicted in rows]
    assert all(tag == "O" or tag[:2] in ("B-", "I-") for tags in predicted for tag in tags)  # IOB2 prefixes only
    mode = {"mode": "strict", "scheme": IOB2} if strict else {}
    assert results["test_f1"] == f1_score(gold, predicted, **mode)
    assert results["test_precision"] == precision_score(gold, predicted, **mode)
    assert results["test_recall"] == recall_score(gold, predicted, **mode)
    pairs = [(g, p) for gs, ps in zip(gold, predicted) for g, p in zip(gs, ps, strict=True)]
    assert results["test_accuracy"] == sum(g == p for g, p in pairs) / len(pairs)
    return results


def assert_classification_scores_match(output_dir: Path, test_examples: list[dict]):
    """Oracle of run_classification.py's test metrics: scikit-learn's accuracy and macro-F1 on the label columns of
    `test_predictions.tsv` must EQUAL the reported ones; its texts and gold labels are the test data's, in order."""
    from sklearn.metrics import accuracy_score, f1_score

    results = read_json(Path(output_dir) / "all_results.json")
    text = (Path(output_dir) / "test_predictions.tsv").read_text(encoding="utf-8")
    lines = text.split("\n")  # not splitlines(): a latin-1 text may hold U+0085, a line break to splitlines()
    assert lines[0] == "text\tgold\tpredicted" and lines[-1] == ""
    rows = [line.split("\t") for line in lines[1:-1]]
    assert [(text, gold) for text, gold, _ in rows] == [(e["text"], e["label"]) for e in test_examples]
    gold, predicted = [row[1] for row in rows], [row[2] for row in rows]
    assert results["test_accuracy"] == accuracy_score(gold, predicted)
    assert results["test_macro_f1"] == f1_score(gold, predicted, average="macro")
    return results


TRACEBACK_BEFORE_TIMEOUT = Path(__file__).resolve().parent / "traceback_before_timeout"
TRACEBACK_MARGIN_S = 20


def run_subprocess(args: list[str], env_extra: dict | None = None, timeout=240, check=True):
    """`args` run from the repository root with one OpenMP thread, as a `CompletedProcess` (text output).

    The processes get a temporary folder (`TMPDIR`) of their own, removed when they end: the launchers leave their
    `torchelastic_*` folders there.

    A run still going after `timeout` seconds fails the test with the output of every process it started: each one
    (launcher and workers included) dumps its threads' tracebacks `TRACEBACK_MARGIN_S` seconds before (see
    `traceback_before_timeout/sitecustomize.py`), and all of them are then killed, the workers that a launcher
    starts in sessions of their own too, so that none outlives the test."""
    env = dict(os.environ, OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false", PYTHONHASHSEED="0")
    env.pop("LOCAL_RANK", None)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(TRACEBACK_BEFORE_TIMEOUT), env.get("PYTHONPATH")]))
    env["SLSTM_TEST_TRACEBACK_AFTER_S"] = str(max(timeout - TRACEBACK_MARGIN_S, 1))
    env.update(env_extra or {})
    temporary = tempfile.TemporaryDirectory(prefix="run_subprocess_")
    env["TMPDIR"] = temporary.name
    pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True}
    with temporary, subprocess.Popen(args, cwd=REPO, env=env, **pipes) as run:
        try:
            stdout, stderr = run.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_with_descendants(run.pid)
            stdout, stderr = run.communicate()
            raise AssertionError(f"{args} still ran after {timeout} s:\n{stdout[-4000:]}\n{stderr[-12000:]}") from None
    result = subprocess.CompletedProcess(args, run.returncode, stdout, stderr)
    if check and result.returncode != 0:
        raise AssertionError(f"{args} failed ({result.returncode}):\n{result.stdout[-4000:]}\n{result.stderr[-6000:]}")
    return result
