#!/usr/bin/env python
"""Is bf16 faster than float32 on this CPU? The package's answer (`cpu_matmul.bf16_decision`) beside what it
measures: matmul GFLOP/s in bf16 and float32, and the paper S-LSTM's training step in float32 and under bf16 autocast.

    OMP_NUM_THREADS=1 python run_scripts/benchmarks/benchmark_cpu_bf16.py --threads 1

Timed in turn (`timing.time_interleaved`), median of the timed rounds:
- one `--matmul_size`³ matmul, float32 by the S-LSTM's float32 backend (`cpu_matmul.selected_backend`) and bf16
  (`torch.nn.functional.linear` on bf16 tensors, oneDNN);
- the paper S-LSTM encoder (hidden 300, 9 steps) forward+backward on `--batch`×`--length` random tokens: float32;
  bf16 autocast with the S-LSTM layers' matmuls in bf16; bf16 autocast with them in float32 (what the package does
  where bf16 is not faster), each with its time as a ratio to float32's.

Printed: the CPU (model, vendor, family and model numbers, the bf16 flags), the package's decision and its reason, and
the two tables; with `--output_dir`, also `<name>.md`.
"""

import sys
from dataclasses import dataclass, field
from pathlib import Path
from statistics import median

import torch

from modeling_slstm import cpu_matmul
from run_scripts.benchmarks.support.speed_report import markdown_table
from run_scripts.benchmarks.support.timed_models import PAPER_SLSTM, VARIANTS, TimedModel
from run_scripts.benchmarks.support.timing import Timing, machine_info, time_interleaved
from run_scripts.benchmarks.support.workloads import random_workload
from run_scripts.training.arguments import parse_arguments

CPU = torch.device("cpu")
# The model's setups: (label, variant, the S-LSTM layers' matmul dtype under autocast)
MODEL_SETUPS = [
    ("float32", "fp32", "float32"),
    ("bf16 autocast, bf16 matmuls", "bf16", "bf16"),
    ("bf16 autocast, float32 matmuls", "bf16", "float32"),
]


@dataclass
class CpuBf16Arguments:
    """Arguments of benchmark_cpu_bf16.py."""

    threads: int | None = field(default=None, metadata={"help": "torch threads (default: PyTorch's)"})
    matmul_size: int = field(default=2048, metadata={"help": "the timed matmul is size x size x size"})
    batch: int = field(default=32, metadata={"help": "sentences per batch of the model's step"})
    length: int = field(default=128, metadata={"help": "tokens per sentence"})
    repeats: int = field(default=5, metadata={"help": "timed rounds at least"})
    min_time: float = field(default=2.0, metadata={"help": "time rounds for at least this many seconds"})
    max_repeats: int = field(default=20, metadata={"help": "timed rounds at most"})
    output_dir: str | None = field(default=None, metadata={"help": "where <name>.md goes (none: print only)"})
    name: str = field(default="cpu_bf16", metadata={"help": "file name stem"})


def cpu_line() -> str:
    info = cpu_matmul.cpu_info()
    flags = sorted(cpu_matmul.cpu_flags() & cpu_matmul.NATIVE_BF16_CPU_FLAGS) or ["no bf16 flags"]
    return (
        f"{info.get('model name', '?')} ({info.get('vendor_id', '?')}, family {info.get('cpu family', '?')}, model "
        f"{info.get('model', '?')}), {', '.join(flags)}, CPU capability {torch.backends.cpu.get_cpu_capability()}"
    )


def matmul_calls(size: int) -> dict:
    generator = torch.Generator().manual_seed(0)
    inputs = torch.randn(size, size, generator=generator)  # (rows, in)
    layer = cpu_matmul.SLSTMLinear(size, size, bias=False)
    inputs_bf16, weight_bf16 = inputs.bfloat16(), layer.weight.detach().bfloat16()

    def float32():
        with torch.no_grad():
            layer(inputs)

    def bf16():
        with torch.no_grad():
            torch.nn.functional.linear(inputs_bf16, weight_bf16)

    return {"float32": float32, "bf16": bf16}


def model_calls(args: CpuBf16Arguments) -> dict:
    """The paper S-LSTM's training step per setup, each with its matmul dtype set for the call."""
    workload = random_workload(args.batch, args.length)
    calls = {}
    for label, variant, matmuls in MODEL_SETUPS:
        step = TimedModel(PAPER_SLSTM, VARIANTS[variant], workload, CPU).call_for("train")

        def call(step=step, matmuls=matmuls):
            cpu_matmul.set_cpu_bf16(matmuls)
            step()

        calls[label] = call
    return calls


def main(argv=None) -> dict:
    args = parse_arguments(CpuBf16Arguments, argv, description=__doc__)
    if args.threads:
        torch.set_num_threads(args.threads)
    decision = cpu_matmul.bf16_decision()
    info = machine_info(CPU)
    timing = Timing(warmup=1, repeats=args.repeats, min_time=args.min_time, max_repeats=args.max_repeats)
    command = " ".join(
        ["python", "run_scripts/benchmarks/benchmark_cpu_bf16.py", *(sys.argv[1:] if argv is None else argv)]
    )
    machine = f"{info['threads']} thread(s), torch {info['torch']}, float32 matmul backend {info['matmul_backend']}"
    choice = "bf16" if decision.fast else "float32"
    lines = [f"Command: `{command}`", "", f"{cpu_line()}; {machine}"]
    lines.append(f"Package's choice: {choice} matmuls under bf16 autocast ({decision.reason})")
    flop = 2 * args.matmul_size**3
    matmul = {
        name: median(times) for name, times in time_interleaved(matmul_calls(args.matmul_size), CPU, timing).items()
    }
    lines += ["", f"{args.matmul_size}³ matmul:", ""]
    lines += markdown_table(
        ["dtype", "GFLOP/s", "ms"],
        [[name, f"{flop / seconds / 1e9:.0f}", f"{seconds * 1000:.1f}"] for name, seconds in matmul.items()],
    )
    lines.append(f"bf16 / float32 speed: {matmul['float32'] / matmul['bf16']:.2f}x")
    try:
        model = {name: median(times) for name, times in time_interleaved(model_calls(args), CPU, timing).items()}
    finally:
        cpu_matmul.set_cpu_bf16(None)
    tokens = args.batch * args.length
    lines += ["", f"Paper S-LSTM, forward+backward, {args.batch}×{args.length} tokens:", ""]
    lines += markdown_table(
        ["setup", "ms", "tokens/s", "time / float32's"],
        [
            [name, f"{seconds * 1000:.0f}", f"{tokens / seconds:,.0f}", f"{seconds / model['float32']:.2f}x"]
            for name, seconds in model.items()
        ],
    )
    print("\n".join(lines))
    if args.output_dir:
        output_dir = Path(args.output_dir)
        output_dir.mkdir(parents=True, exist_ok=True)
        (output_dir / f"{args.name}.md").write_text("\n".join(lines) + "\n")
    return {"decision": decision, "matmul_seconds": matmul, "model_seconds": model}


if __name__ == "__main__":
    main()
