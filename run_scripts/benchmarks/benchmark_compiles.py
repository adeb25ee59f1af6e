#!/usr/bin/env python
"""How many times an epoch compiles each Triton kernel on a GPU, and what one compile costs.

For each task's shipped config (as `benchmark_launch_counts.py`: a fresh model, random batches), one training step
(forward with the loss, and its backward) and one evaluation forward at each padded batch width a corpus has (on a GPU
the collators pad to multiples of 8: CoNLL-2003 NER's training batches take 11 widths from 8 to 120), under bf16
autocast as the training scripts run on a GPU, with the kernels' launches recorded instead of run
(`support/kernel_compiles.py`; the tiles the kernels get on a GPU). A launch whose specialisation key (its
constexprs, pointer dtypes and alignments, the integers Triton specialises on, `num_warps`) is new pays a compile on
the GPU's host before it runs: the table counts the distinct keys per kernel, and gives the seconds of compiling
each key's variant for sm_90 (an H100's or H200's target: Triton's compiler and `ptxas`, no GPU needed) on this
machine's CPU, in a fresh process with an empty cache. What an epoch pays is their sum, once per process (Triton's
on-disk cache keeps them for the next run of the same code).

    python run_scripts/benchmarks/benchmark_compiles.py
    python run_scripts/benchmarks/benchmark_compiles.py --tasks ner --widths 8 16 24 --time_compiles none
"""

import os
from collections import Counter
from dataclasses import dataclass, field

import torch

if not torch.cuda.is_available():  # before modeling_slstm is imported: Triton reads it when it decorates the kernels
    os.environ.setdefault("TRITON_INTERPRET", "1")

from run_scripts.benchmarks.benchmark_launch_counts import TASKS, paper_model, random_batch
from run_scripts.benchmarks.support import kernel_compiles
from run_scripts.benchmarks.support.speed_report import markdown_table
from run_scripts.benchmarks.support.timing import machine_info
from run_scripts.training.arguments import check_choices, parse_arguments

COMPILE_TIMINGS = ("all", "first", "none")


@dataclass
class CompileCountArguments:
    """Arguments of benchmark_compiles.py."""

    tasks: list[str] = field(default_factory=lambda: ["ner", "classification"], metadata={"help": f"of {list(TASKS)}"})
    widths: list[int] = field(
        default_factory=lambda: list(range(8, 121, 8)), metadata={"help": "padded batch widths (tokens)"}
    )
    batch_size: int = field(default=2, metadata={"help": "sentences per batch (no kernel is specialised on it)"})
    hidden_size: int | None = field(
        default=None, metadata={"help": "override the configs' hidden and embedding sizes"}
    )
    time_compiles: str = field(
        default="all", metadata={"help": f"compile for sm_90 and time: {', '.join(COMPILE_TIMINGS)} keys per kernel"}
    )

    def __post_init__(self):
        check_choices("tasks", self.tasks, TASKS)
        check_choices("time_compiles", [self.time_compiles], COMPILE_TIMINGS)
        if not self.widths or min(self.widths) < 1:
            raise ValueError(f"--widths takes positive lengths, got {self.widths}")


def epoch_launches(model, widths: list[int], batch_size: int) -> list[kernel_compiles.Launch]:
    """The kernel launches of a training step and an evaluation forward at each of `widths`, with the GPU's tiles,
    under bf16 autocast, recorded (none runs)."""
    with kernel_compiles.gpu_tiles(), kernel_compiles.recorded_launches() as launches:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            for width in widths:
                inputs = random_batch(model, batch_size, width)
                model.train()
                model(**inputs).loss.backward()
                model.eval()
                with torch.no_grad():
                    model(**inputs)
    return launches


def compile_rows(task: str, args: CompileCountArguments) -> list[dict]:
    """Per kernel: its launches over the widths, its distinct keys, and the sm_90 compile seconds of the first key's
    variant and of all keys' (as `args.time_compiles` says)."""
    model = paper_model(task, "triton", args.hidden_size)
    launches = epoch_launches(model, args.widths, args.batch_size)
    launch_counts = Counter(launch.kernel for launch in launches)
    rows = []
    for kernel, by_key in kernel_compiles.distinct_keys(launches).items():
        timed = {"all": list(by_key.values()), "first": list(by_key.values())[:1], "none": []}[args.time_compiles]
        seconds = kernel_compiles.time_gpu_compiles(timed) if timed else []
        row = {"task": task, "kernel": kernel, "launches": launch_counts[kernel], "keys": len(by_key)}
        rows.append({**row, "seconds": seconds})
    return rows


def markdown(rows: list[dict]) -> list[str]:
    body = []
    for row in rows:
        seconds = row["seconds"]
        first = f"{seconds[0]:.1f}" if seconds else "–"
        total = f"{sum(seconds):.1f}" if len(seconds) == row["keys"] else "–"
        body.append([row["task"], row["kernel"], f"{row['launches']:,}", str(row["keys"]), first, total])
    header = ["task", "kernel", "launches", "compiles (distinct keys)", "sm_90 compile, first key (s)", "all keys (s)"]
    return markdown_table(header, body)


def main(argv=None) -> list[dict]:
    args = parse_arguments(CompileCountArguments, argv, description=__doc__)
    rows = [row for task in args.tasks for row in compile_rows(task, args)]
    print(f"Widths {args.widths}; compiled on {machine_info(torch.device('cpu'))['cpu']}, {os.cpu_count()} cores")
    print("\n".join(markdown(rows)))
    return rows


if __name__ == "__main__":
    main()
