#!/usr/bin/env python
"""Whole-step CUDA graphs (`--cuda_graphs`, `run_scripts/training/graph_step.py`) on a GPU, in five parts, every row
printed as it is made (a run cut short still reports):

- `match`: `SLSTMTrainer` with whole-step graphs against the Trainer's eager step, the same batches from the same
  seed (the paper's NER config with character features, dropout off: a graph draws its dropout masks from another
  random stream), a linear decay and clipping that clips: per step the two losses, gradient norms and learning
  rates, then the largest parameter difference, the graphs captured and each run's peak reserved GPU memory (the
  graphs' pools included);
- `host`: host time per bare training step measured on the GPU machine: the eager step and the graph's replay
  (batch copied in, replay, scheduler), the BiLSTM-CRF with the same character CNN beside them (eager: it reads
  lengths on the host). Host ms: the time to launch one step after a sync, the queue empty (nothing in the step
  waits for the GPU; the BiLSTM's own syncs excepted); GPU ms: CUDA events around the same step; back-to-back ms: N
  steps launched, then one sync;
- `launch`: the host cost of one Triton launch through the JIT launcher (`kernel[grid](...)`) and through the
  compiled kernel's own launcher (`kernel.warmup(...)`, then `compiled[grid](...)`, and its bare `run`);
- `proxy`: the CPU proxy of the host part on this machine's CPU, `benchmark_host_time.py` at batches of 10x32 (its
  own process: it makes Triton interpret the kernels), its output passed through;
- `epochs`: one training epoch of CoNLL-2003 NER and of movie review through the training scripts with
  `--cuda_graphs` (capture time included), beside the eager S-LSTM and the BiLSTM with the same character CNN
  (`benchmark_epochs.py`'s runs; `graph_step_epochs.{csv,md}` and each run's log in `--output_dir`).

`--dry_run`: tiny sizes on the CPU, the step called directly instead of captured (what CI runs).

    python run_scripts/benchmarks/benchmark_graph_step.py --data_dir ../shared/data --output_dir out   # a CUDA GPU
    python run_scripts/benchmarks/benchmark_graph_step.py --dry_run --parts match host launch         # anywhere
"""

import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import torch

if not torch.cuda.is_available():  # before modeling_slstm is imported: Triton reads it when it decorates the kernels
    os.environ.setdefault("TRITON_INTERPRET", "1")

from transformers import AutoModelForSequenceClassification, AutoModelForTokenClassification, TrainerCallback

from run_scripts import REPOSITORY_ROOT
from run_scripts.benchmarks import benchmark_epochs
from run_scripts.benchmarks.support import workloads
from run_scripts.benchmarks.support.fresh_model_and_optimizer import random_vocabulary_model
from run_scripts.training.arguments import SLSTMTrainingArguments, check_choices, parse_arguments
from run_scripts.training.graph_step import WholeStepGraphs, training_step
from run_scripts.training.trainer import HostComputedLambdaLR, SLSTMTrainer, capturable_options

PARTS = ("match", "host", "launch", "proxy", "epochs")
PROXY = ["run_scripts/benchmarks/benchmark_host_time.py", "--tasks", "ner", "classification", "--models", "slstm-fused",
         "bilstm", "--shapes", "10x32", "--classification_shapes", "10x32", "--rounds", "1", "--steps", "10",
         "--no_trainer_steps"]  # fmt: skip
"""The CPU proxy of the host part's steps (every kernel launch a no-op, hidden size 8), on this machine's CPU."""
EPOCH_RUNS = ["ner-slstm+cuda-graphs", "ner-slstm", "ner-bilstm1", "movie-review-slstm+cuda-graphs",
              "movie-review-slstm", "movie-review-bilstm1"]  # fmt: skip
CONLL_LABELS = ["O", "B-LOC", "I-LOC", "B-MISC", "I-MISC", "B-ORG", "I-ORG", "B-PER", "I-PER"]
TASKS = {
    # task: (S-LSTM config, BiLSTM config, labels, model class)
    "ner": ("slstm-ner-crf.json", "baselines/bilstm1-ner-crf-chars.json", CONLL_LABELS,
            AutoModelForTokenClassification),  # the BiLSTM-CRF with the S-LSTM NER config's character CNN
    "classification": ("slstm-classification-paper.json", "baselines/bilstm1-classification.json",
                       ["negative", "positive"], AutoModelForSequenceClassification),
}  # fmt: skip
VOCAB_SIZE, CHAR_VOCAB_SIZE, WORD_LENGTH = 2000, 60, 12
TOLERANCES = {"fp32": 1e-3, "bf16": 5e-2}  # the largest relative loss difference over the steps called a match


@dataclass
class GraphStepArguments:
    """Arguments of benchmark_graph_step.py."""

    parts: list[str] = field(default_factory=lambda: list(PARTS), metadata={"help": f"of {', '.join(PARTS)}"})
    tasks: list[str] = field(default_factory=lambda: list(TASKS), metadata={"help": f"of {', '.join(TASKS)}"})
    match_steps: int = field(default=50, metadata={"help": "training steps of the match, eager and graphed"})
    precisions: list[str] = field(default_factory=lambda: ["fp32", "bf16"], metadata={"help": "fp32 and/or bf16"})
    batch: int = field(default=10, metadata={"help": "sentences per batch (the paper's 10)"})
    lengths: list[int] = field(
        default_factory=lambda: [16, 24, 32], metadata={"help": "padded batch widths the match cycles through"}
    )
    host_steps: int = field(default=30, metadata={"help": "timed steps per row of the host part"})
    launches: int = field(default=500, metadata={"help": "Triton launches timed per launcher"})
    data_dir: Path | None = field(
        default=None, metadata={"help": "the shared data folder (conll2003/ner/, movie_review/); the epochs need it"}
    )
    epoch_runs: list[str] = field(
        default_factory=lambda: list(EPOCH_RUNS), metadata={"help": "benchmark_epochs.py's runs, in this order"}
    )
    run_timeout: float = field(default=60.0, metadata={"help": "seconds before an epoch's run is stopped"})
    max_train_samples: int | None = field(default=None, metadata={"help": "epochs of fewer sentences (a check)"})
    output_dir: Path = field(
        default=Path("."), metadata={"help": "the epochs' report (graph_step_epochs.md) and logs"}
    )
    dry_run: bool = field(default=False, metadata={"help": "tiny sizes on the CPU, nothing captured (checks wiring)"})

    def __post_init__(self):
        check_choices("parts", self.parts, PARTS)
        check_choices("epoch_runs", self.epoch_runs, benchmark_epochs.RUNS)
        check_choices("tasks", self.tasks, TASKS)
        check_choices("precisions", self.precisions, TOLERANCES)
        if self.dry_run:
            self.match_steps, self.lengths, self.host_steps, self.launches = 4, [5, 7], 2, 3
            self.precisions = ["fp32"]


def device_for(args: GraphStepArguments) -> torch.device:
    if args.dry_run or not torch.cuda.is_available():
        return torch.device("cpu")
    return torch.device("cuda")


def emit(row: dict) -> None:
    """One row, printed at once."""
    print(" | ".join(f"{name}={value:.6g}" if isinstance(value, float) else f"{name}={value}"
                     for name, value in row.items()), flush=True)  # fmt: skip


def fresh_model(task: str, model: str, args: GraphStepArguments, dropout: bool = True):
    """A fresh model of the task's shipped config with character features, seed 0, in training mode on the device:
    `model` "slstm" or "bilstm"; without `dropout` every dropout is 0."""
    slstm_config, bilstm_config, labels, auto_class = TASKS[task]
    overrides = "use_char_features=true" + (",hidden_size=8,embedding_dim=8" if args.dry_run else "")
    config_name = str(REPOSITORY_ROOT / "hub_configs" / (slstm_config if model == "slstm" else bilstm_config))
    model = random_vocabulary_model(auto_class.from_config, config_name, labels, VOCAB_SIZE, CHAR_VOCAB_SIZE,
                                    config_overrides=overrides, dropout=dropout)  # fmt: skip
    return model.to(device_for(args))


def random_batch(model, batch: int, length: int, seed: int) -> dict[str, torch.Tensor]:
    """`workloads.random_batch` of sentences from `length // 2` tokens up, padded to `length`, on the CPU."""
    return workloads.random_batch(model, batch, length, WORD_LENGTH, seed, shortest=max(1, length // 2))


# --------------------------------------------------------------------------------------------------------------------
# match: the Trainer with whole-step graphs against its eager step
# --------------------------------------------------------------------------------------------------------------------


class StepLog(TrainerCallback):
    """Keeps each step's logged loss, gradient norm and rate; with `eager` given, prints each step beside it."""

    def __init__(self, label: str, eager: list[dict] | None = None):
        self.label, self.eager, self.logs = label, eager, []

    def on_log(self, args, state, control, logs=None, **kwargs):
        if "loss" not in logs:
            return
        self.logs.append(logs)
        if self.eager is not None and len(self.logs) <= len(self.eager):
            eager = self.eager[len(self.logs) - 1]
            emit({"part": "match", "run": self.label, "step": state.global_step, "eager_loss": eager["loss"],
                  "graph_loss": logs["loss"], "rel_diff": abs(logs["loss"] - eager["loss"]) / abs(eager["loss"]),
                  "eager_grad_norm": eager["grad_norm"], "graph_grad_norm": logs["grad_norm"],
                  "eager_lr": eager["learning_rate"], "graph_lr": logs["learning_rate"]})  # fmt: skip


def train_steps(task: str, precision: str, graphs: bool, args: GraphStepArguments, log: StepLog):
    """`args.match_steps` steps of `SLSTMTrainer`: `(model, seconds, graphs captured, peak reserved MB)`."""
    model = fresh_model(task, "slstm", args, dropout=False)
    batches = [random_batch(model, args.batch, args.lengths[i % len(args.lengths)], seed=i) for i in range(8)]
    with tempfile.TemporaryDirectory() as folder:
        training_args = SLSTMTrainingArguments(
            output_dir=folder, per_device_train_batch_size=1, max_steps=args.match_steps, learning_rate=2e-3,
            lr_scheduler_type="linear", max_grad_norm=0.5, logging_steps=1, report_to="none", save_strategy="no",
            seed=3, bf16=precision == "bf16", use_cpu=device_for(args).type == "cpu", dataloader_pin_memory=False,
            disable_tqdm=True,
        )  # fmt: skip
        training_args.cuda_graphs = graphs  # set after parsing, which refuses it on a CPU (the dry run)
        trainer = SLSTMTrainer(model=model, args=training_args, train_dataset=batches,
                               data_collator=lambda items: items[0], callbacks=[log])  # fmt: skip
        if torch.cuda.is_available():
            torch.cuda.reset_peak_memory_stats()
        started = time.perf_counter()
        trainer.train()
        seconds = time.perf_counter() - started
    shapes = len(trainer.whole_step.captured) if trainer.whole_step is not None else 0
    peak = torch.cuda.max_memory_reserved() / 2**20 if torch.cuda.is_available() else float("nan")
    return model, seconds, shapes, peak


def match(task: str, precision: str, args: GraphStepArguments) -> bool:
    label = f"{task}-{precision}"
    eager_log = StepLog(label)
    eager, eager_seconds, _, eager_peak = train_steps(task, precision, False, args, eager_log)
    graph_log = StepLog(label, eager_log.logs)
    graphed, graph_seconds, shapes, graph_peak = train_steps(task, precision, True, args, graph_log)
    largest = max((p - q).abs().max().item() for p, q in zip(graphed.parameters(), eager.parameters(), strict=True))
    scale = max(q.abs().max().item() for q in eager.parameters())
    worst = max(abs(g["loss"] - e["loss"]) / abs(e["loss"]) for g, e in zip(graph_log.logs, eager_log.logs))
    matches = len(graph_log.logs) == len(eager_log.logs) == args.match_steps and worst <= TOLERANCES[precision]
    emit({"part": "match", "run": label, "steps": len(graph_log.logs), "graphs": shapes,
          "max_rel_loss_diff": worst, "max_abs_parameter_diff": largest,
          "max_abs_parameter": scale, "eager_s": eager_seconds,
          "graph_s_with_capture": graph_seconds, "eager_peak_reserved_mb": eager_peak,
          "graph_peak_reserved_mb": graph_peak, "verdict": "match" if matches else "MISMATCH"})  # fmt: skip
    return matches


# --------------------------------------------------------------------------------------------------------------------
# host: host and GPU time of one bare step, eager and replayed
# --------------------------------------------------------------------------------------------------------------------


def bare_step(model, batch: dict, args: GraphStepArguments, graphed: bool):
    """`(step, inputs)`: one training step as the Trainer takes it with `--cuda_graphs` (capturable fused AdamW
    with rates on the device, clipping at 3, a per-step decay filled beside the step), eager or from a graph."""
    device = device_for(args)
    parameters = [parameter for parameter in model.parameters() if parameter.requires_grad]
    groups, options = capturable_options([{"params": parameters}], {"lr": 1e-3, "fused": True}, device)
    optimizer = torch.optim.AdamW(groups, **options)
    scheduler = HostComputedLambdaLR(optimizer, lambda step: 0.999**step)
    inputs = {name: value.to(device) for name, value in batch.items()}
    step = partial(training_step, lambda batch: model(**batch).loss, parameters=parameters, optimizer=optimizer,
                   max_grad_norm=3.0)  # fmt: skip
    if graphed:
        step = WholeStepGraphs(step, optimizer, capture=device.type == "cuda")

    def step_and_schedule():
        outputs = step(inputs)
        scheduler.step()
        return outputs

    return step_and_schedule


def host_rows(task: str, args: GraphStepArguments):
    cuda = device_for(args).type == "cuda"
    for model_name, graphed in (("slstm", False), ("slstm", True), ("bilstm", False)):
        label = f"{task}-{model_name}{'+graph' if graphed else ''}"
        try:
            model = fresh_model(task, model_name, args)
            step = bare_step(model, random_batch(model, args.batch, 32 if not args.dry_run else 6, seed=0), args,
                             graphed)  # fmt: skip
            for _ in range(3):  # warm-up (and the capture)
                step()
            host, device = [], []
            for _ in range(args.host_steps):
                if cuda:
                    torch.cuda.synchronize()
                    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    start.record()
                began = time.perf_counter()
                step()
                host.append(time.perf_counter() - began)
                if cuda:
                    end.record()
                    end.synchronize()
                    device.append(start.elapsed_time(end) / 1000)
            if cuda:
                torch.cuda.synchronize()
            began = time.perf_counter()
            for _ in range(args.host_steps):
                step()
            if cuda:
                torch.cuda.synchronize()
            back_to_back = (time.perf_counter() - began) / args.host_steps
            emit({"part": "host", "run": label, "host_ms": 1000 * statistics.median(host),
                  "gpu_ms": 1000 * statistics.median(device) if device else float("nan"),
                  "back_to_back_ms": 1000 * back_to_back, "steps": args.host_steps})  # fmt: skip
        except Exception as error:  # noqa: BLE001 (a row that fails reports why; the others still run)
            emit({"part": "host", "run": label, "error": f"{type(error).__name__}: {error}"})


# --------------------------------------------------------------------------------------------------------------------
# launch: one Triton launch, JIT launcher against the compiled kernel's
# --------------------------------------------------------------------------------------------------------------------


def launch_rows(args: GraphStepArguments):
    if device_for(args).type != "cuda":
        emit({"part": "launch", "skipped": "needs a CUDA GPU (Triton's interpreter has no launcher to time)"})
        return
    import triton
    import triton.language as tl

    @triton.jit
    def add_kernel(x, y, out, n, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        keep = offsets < n
        tl.store(out + offsets, tl.load(x + offsets, mask=keep) + tl.load(y + offsets, mask=keep), mask=keep)

    x, y, out = (torch.randn(128, device="cuda") for _ in range(3))
    grid = (1, 1, 1)
    compiled = add_kernel.warmup(x, y, out, 128, BLOCK=128, grid=grid)
    compiled._init_handles()
    stream = torch.cuda.current_stream().cuda_stream
    launchers = {
        "jit kernel[grid](...)": lambda: add_kernel[grid](x, y, out, 128, BLOCK=128),
        "compiled[grid](...)": lambda: compiled[grid](x, y, out, 128, 128),
        "compiled.run(...)": lambda: compiled.run(
            *grid, stream, compiled.function, compiled.packed_metadata, None, None, None, x, y, out, 128, 128
        ),
    }
    reference = None
    for name, launch in launchers.items():
        try:
            out.zero_()
            launch()
            torch.cuda.synchronize()
            correct = torch.equal(out, x + y)
            seconds = []
            for _ in range(3):
                torch.cuda.synchronize()
                began = time.perf_counter()
                for _ in range(args.launches):
                    launch()
                seconds.append((time.perf_counter() - began) / args.launches)
                torch.cuda.synchronize()
            micro = 1e6 * min(seconds)
            reference = reference or micro
            emit({"part": "launch", "launcher": name, "host_us_per_launch": micro,
                  "vs_jit": micro / reference, "correct": correct})  # fmt: skip
        except Exception as error:  # noqa: BLE001 (a launcher that fails reports why; the others still run)
            emit({"part": "launch", "launcher": name, "error": f"{type(error).__name__}: {error}"})


def proxy_rows(run_timeout: float):
    command = [sys.executable, str(REPOSITORY_ROOT / PROXY[0]), *PROXY[1:]]
    emit({"part": "proxy", "command": " ".join(command)})
    try:
        finished = subprocess.run(command, check=False, capture_output=True, text=True, timeout=run_timeout)
        print(finished.stdout, flush=True)
        emit({"part": "proxy", "status": f"exit {finished.returncode}", "stderr_tail": finished.stderr[-300:]})
    except subprocess.TimeoutExpired:
        emit({"part": "proxy", "status": f"stopped after {run_timeout:.0f} s"})


# --------------------------------------------------------------------------------------------------------------------
# epochs: the training scripts with whole-step graphs, beside eager and the BiLSTM with the same character CNN
# --------------------------------------------------------------------------------------------------------------------


def epoch_rows(args: GraphStepArguments, command: str):
    if args.data_dir is None:
        emit({"part": "epochs", "skipped": "give --data_dir"})
        return
    epochs = benchmark_epochs.EpochArguments(
        data_dir=args.data_dir, runs=args.epoch_runs, output_dir=args.output_dir, name="graph_step_epochs",
        run_timeout=args.run_timeout, max_train_samples=args.max_train_samples,
    )  # fmt: skip
    args.output_dir.mkdir(parents=True, exist_ok=True)
    rows = []
    for run in args.epoch_runs:
        row = benchmark_epochs.time_epoch(run, epochs)
        rows.append(row)
        benchmark_epochs.write_report(rows, command, args.output_dir, epochs.name)
        emit({"part": "epochs", **{name: row.get(name, "") for name in benchmark_epochs.FIELDS}})


def main(argv=None) -> bool:
    args = parse_arguments(GraphStepArguments, argv, description=__doc__)
    device = device_for(args)
    emit({"device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu", "torch": torch.__version__,
          "dry_run": args.dry_run})  # fmt: skip
    matched = True
    if "match" in args.parts:
        for task in args.tasks:
            for precision in args.precisions:
                matched &= match(task, precision, args)
    if "host" in args.parts:
        for task in args.tasks:
            host_rows(task, args)
    if "launch" in args.parts:
        launch_rows(args)
    if "proxy" in args.parts:
        proxy_rows(args.run_timeout)
    if "epochs" in args.parts:
        arguments = sys.argv[1:] if argv is None else argv
        epoch_rows(args, " ".join(["python", "run_scripts/benchmarks/benchmark_graph_step.py", *arguments]))
    return matched


if __name__ == "__main__":
    raise SystemExit(0 if main() else 1)
