#!/usr/bin/env python
"""Seconds per training epoch of the paper's tasks, S-LSTM against the BiLSTM baseline, through the real training
scripts with the same recipe, next to the paper's figures (one GTX 1080; movie review: its Table 4, CoNLL-2003 NER:
Table 7).

Each run is one epoch of `run_classification.py` (movie review, the seeded 80/10/10 split of `--split_seed 42`) or
`run_ner.py` (CoNLL-2003 NER train split, trained in BIOES) from a config of `hub_configs/` and its training recipe
(Adam 1e-3, batch 10, length-grouped batches), with character features as `run_scripts/paper_runs.py` trains them:
every run, the BiLSTM's too, so that the baselines compare like for like (the NER BiLSTM-CRF from
`bilstm1-ner-crf-chars.json`, the S-LSTM NER config's character CNN; `ner-bilstm1-no-chars` is the BiLSTM-CRF without
characters, an extra run); bf16 autocast on a GPU, no evaluation and no checkpoints; the time is the Trainer's
`train_runtime` (the epoch's steps; data preparation and saving are outside it). Word embeddings are the configs' own
(300 dimensions, random): the pretrained-vector packages are not needed for a timing. `+compile-graphs` runs add
transformers' `--torch_compile --torch_compile_mode reduce-overhead` (CUDA graphs through `torch.compile`), whose
compilation is part of the epoch: they say whether the option pays for a whole epoch. `+cuda-graphs` runs add the
scripts' `--cuda_graphs` (whole training steps replayed from CUDA graphs), capture included.

    python run_scripts/benchmarks/benchmark_epochs.py --data_dir ../shared/data --output_dir out/epochs
    python run_scripts/benchmarks/benchmark_epochs.py --data_dir ../shared/data --runs ner-slstm ner-bilstm1 \
        --max_train_samples 200       # a quick check of the wiring

Writes `<name>.csv` and `<name>.md` after every run (a run stopped by `--run_timeout` is reported as such); the
training logs are `<output_dir>/<run>.log`.
"""

import json
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from run_scripts import REPOSITORY_ROOT
from run_scripts.benchmarks.support.csv_tables import write_csv
from run_scripts.benchmarks.support.speed_report import markdown_table
from run_scripts.training.arguments import check_choices, parse_arguments

# The paper's seconds per training epoch (Zhang, Liu & Song 2018; one GTX 1080): S-LSTM and BiLSTM.
PAPER_SECONDS = {"movie-review": {"slstm": 41, "bilstm1": 51}, "ner": {"slstm": 79, "bilstm1": 82}}
CONFIGS = {
    # (task, model): (config, its --config_overrides)
    ("movie-review", "slstm"): ("hub_configs/slstm-classification-paper.json", "use_char_features=true"),
    ("movie-review", "bilstm1"): ("hub_configs/baselines/bilstm1-classification.json", "use_char_features=true"),
    ("ner", "slstm"): ("hub_configs/slstm-ner-crf.json", ""),
    ("ner", "bilstm1"): ("hub_configs/baselines/bilstm1-ner-crf-chars.json", ""),  # the S-LSTM's char CNN
    ("ner", "bilstm1-no-chars"): ("hub_configs/baselines/bilstm1-ner-crf.json", ""),
}
COMPILE_GRAPHS = ["--torch_compile", "--torch_compile_mode", "reduce-overhead"]
WHOLE_STEP_GRAPHS = ["--cuda_graphs"]
RUNS = {
    "movie-review-slstm": ("movie-review", "slstm", []),
    "movie-review-bilstm1": ("movie-review", "bilstm1", []),
    "ner-slstm": ("ner", "slstm", []),
    "ner-bilstm1": ("ner", "bilstm1", []),
    "ner-bilstm1-no-chars": ("ner", "bilstm1-no-chars", []),
    "ner-slstm+compile-graphs": ("ner", "slstm", COMPILE_GRAPHS),
    "movie-review-slstm+compile-graphs": ("movie-review", "slstm", COMPILE_GRAPHS),
    "ner-slstm+cuda-graphs": ("ner", "slstm", WHOLE_STEP_GRAPHS),
    "movie-review-slstm+cuda-graphs": ("movie-review", "slstm", WHOLE_STEP_GRAPHS),
}
FIELDS = ["run", "task", "model", "options", "device_name", "seconds_per_epoch", "train_samples_per_second", "status"]
FIELDS += ["wall_seconds", "paper_seconds_per_epoch"]


@dataclass
class EpochArguments:
    """Arguments of benchmark_epochs.py."""

    data_dir: Path = field(metadata={"help": "the shared data folder (conll2003/ner/, movie_review/)"})
    runs: list[str] = field(
        default_factory=lambda: [name for name in RUNS if "+" not in name],
        metadata={"help": f"among {', '.join(RUNS)}, in this order"},
    )
    output_dir: Path = field(default=Path("."))
    name: str = field(default="epochs")
    run_timeout: float = field(default=600.0, metadata={"help": "seconds before a run is stopped"})
    max_train_samples: int | None = field(default=None, metadata={"help": "fewer sentences (a check of the wiring)"})

    def __post_init__(self):
        check_choices("runs", self.runs, RUNS)
        self.data_dir, self.output_dir = Path(self.data_dir), Path(self.output_dir)


def training_command(run: str, args: EpochArguments, output_dir: Path) -> list[str]:
    """The training script's command line for one epoch of `run`."""
    task, model, options = RUNS[run]
    if task == "ner":
        script = "run_ner.py"
        data = ["--train_file", str(args.data_dir / "conll2003/ner/train.txt"), "--tag_scheme", "bioes"]
    else:
        script = "run_classification.py"
        data = ["--rt_polarity_dir", str(args.data_dir / "movie_review"), "--split_seed", "42"]
    command = [sys.executable, str(REPOSITORY_ROOT / "run_scripts" / script), *data]
    config, overrides = CONFIGS[task, model]
    command += ["--config_name", str(REPOSITORY_ROOT / config)]
    command += ["--config_overrides", overrides] if overrides else []
    command += ["--output_dir", str(output_dir), "--do_train", "--num_train_epochs", "1", "--eval_strategy", "no"]
    command += ["--save_strategy", "no", "--report_to", "none", "--disable_tqdm", "true", "--seed", "42"]
    command += ["--logging_steps", "500"]
    if torch.cuda.is_available():
        command.append("--bf16")
    if args.max_train_samples:
        command += ["--max_train_samples", str(args.max_train_samples)]
    return command + options


def time_epoch(run: str, args: EpochArguments) -> dict:
    """Runs one epoch of `run`; its row of the report (seconds from the Trainer's `train_results.json`)."""
    task, model, options = RUNS[run]
    row = {"run": run, "task": task, "model": model, "options": " ".join(options)}
    row["device_name"] = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    row["paper_seconds_per_epoch"] = PAPER_SECONDS[task].get(model, "")  # none for the BiLSTM without characters
    with tempfile.TemporaryDirectory() as folder, (args.output_dir / f"{run}.log").open("w") as log:
        command = training_command(run, args, Path(folder))
        print(f"== {run}: {' '.join(command)}", flush=True)
        started = time.perf_counter()
        try:
            finished = subprocess.run(
                command, check=False, stdout=log, stderr=subprocess.STDOUT, timeout=args.run_timeout
            )
            row["status"] = "ok" if finished.returncode == 0 else f"failed (exit {finished.returncode})"
        except subprocess.TimeoutExpired:
            row["status"] = f"stopped after {args.run_timeout:.0f} s"
        row["wall_seconds"] = time.perf_counter() - started
        results = Path(folder) / "train_results.json"
        if results.is_file():
            metrics = json.loads(results.read_text())
            row["seconds_per_epoch"] = metrics["train_runtime"]
            row["train_samples_per_second"] = metrics["train_samples_per_second"]
    print(f"== {run}: {row['status']}, {row.get('seconds_per_epoch', float('nan')):.1f} s per epoch", flush=True)
    return row


def report_lines(rows: list[dict], command: str) -> list[str]:
    """Markdown: seconds per epoch per run, and S-LSTM ÷ BiLSTM per task, ours (same run) and the paper's."""
    lines = ["# Seconds per training epoch", "", f"Command: `{command}`  "]
    lines += [f"Device: {', '.join(sorted({row['device_name'] for row in rows}))}", ""]
    header = ["run", "status", "s/epoch (ours)", "samples/s", "paper s/epoch (GTX 1080)"]
    body = [
        [r["run"], r["status"], f"{r.get('seconds_per_epoch', float('nan')):.1f}",
         f"{r.get('train_samples_per_second', float('nan')):.0f}", str(r["paper_seconds_per_epoch"])]
        for r in rows
    ]  # fmt: skip
    lines += markdown_table(header, body)
    ratios = []
    for task, paper in PAPER_SECONDS.items():
        times = {r["run"]: r.get("seconds_per_epoch") for r in rows if r["task"] == task and r["status"] == "ok"}
        baseline = times.get(f"{task}-bilstm1")
        for run, seconds in times.items():
            if baseline and RUNS[run][1] == "slstm":
                ratios.append([run, f"{seconds / baseline:.2f}", f"{paper['slstm'] / paper['bilstm1']:.2f}"])
    if ratios:
        lines += ["", "**S-LSTM time ÷ BiLSTM time per epoch (< 1: S-LSTM faster)**", ""]
        lines += markdown_table(["S-LSTM run", "ours", "paper"], ratios)
    return lines


def write_report(rows: list[dict], command: str, output_dir: Path, name: str):
    write_csv(rows, output_dir / f"{name}.csv", FIELDS)
    (output_dir / f"{name}.md").write_text("\n".join(report_lines(rows, command)) + "\n")


def main(argv=None) -> list[dict]:
    args = parse_arguments(EpochArguments, argv, description=__doc__)
    args.output_dir.mkdir(parents=True, exist_ok=True)
    arguments = sys.argv[1:] if argv is None else argv
    command = " ".join(["python", "run_scripts/benchmarks/benchmark_epochs.py", *arguments])
    rows = []
    for run in args.runs:
        rows.append(time_epoch(run, args))
        write_report(rows, command, args.output_dir, args.name)
    return rows


if __name__ == "__main__":
    main()
