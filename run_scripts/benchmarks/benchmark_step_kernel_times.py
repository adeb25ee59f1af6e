#!/usr/bin/env python
"""What a bf16 training step of the paper S-LSTM encoder would take on an NVIDIA H200, kernel by kernel, predicted
from the sm_90 SASS of the fused step's Triton kernels and their grids, with no GPU (`support/step_time_model.py`
states the model and its assumptions; docs/benchmarks.md, "Fused step kernels: predicted H200 times", its results).

The step (forward and backward, the gradient of the sum of the encoder outputs, as `benchmark_speed.py` times it) is
recorded on this CPU at each shape, its kernels compiled for sm_90 by the Triton under `--triton_path` (this
process's by default; a folder holding another install, e.g. the GPU machine's Triton 3.6), and each
launch's time predicted: programs, waves over 132 SMs, registers, programs per SM, and the issue, chain and memory
time, the longest of which it takes; then the matmuls and other operators.

`--kernels_from REF` models the kernels of another commit (its `modeling_slstm`, this checkout's scripts).
`--save_statistics FILE` writes what the model reads (SASS statistics, launches, operators) as JSON, and
`--statistics FILE` reads it instead of compiling (`tests/benchmarks/data/` holds the calibration run's).
`--fit` fits the global-load latency to the H200 measurements of `fa948a1^1`'s kernels (`MEASURED`), which it
must be given (`--kernels_from fa948a1^1` or their statistics).

    python run_scripts/benchmarks/benchmark_step_kernel_times.py
    python run_scripts/benchmarks/benchmark_step_kernel_times.py --triton_path TRITON36
    python run_scripts/benchmarks/benchmark_step_kernel_times.py --kernels_from fa948a1^1 --triton_path TRITON36 \
        --shapes 32x512 32x32 --fit

(`TRITON36`: a folder holding Triton 3.6, e.g. `pip install --no-deps --target TRITON36 triton==3.6.0`.)
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

os.environ.setdefault("TRITON_INTERPRET", "1")  # the launches are recorded on CPU tensors; nothing runs here

from run_scripts import REPOSITORY_ROOT
from run_scripts.benchmarks.support import step_time_model
from run_scripts.benchmarks.support.speed_report import markdown_table
from run_scripts.benchmarks.support.workloads import parse_shape
from run_scripts.training.arguments import parse_arguments

MODULE = "run_scripts.benchmarks.benchmark_step_kernel_times"


@dataclass
class StepTimeArguments:
    """Arguments of benchmark_step_kernel_times.py."""

    shapes: list[str] = field(
        default_factory=lambda: ["32x512", "32x32", "10x20"], metadata={"help": "batch x length"}
    )
    triton_path: str | None = field(default=None, metadata={"help": "a folder holding another Triton to compile with"})
    kernels_from: str | None = field(default=None, metadata={"help": "a git commit whose kernels to model"})
    statistics: Path | None = field(default=None, metadata={"help": "read the model's inputs from this JSON file"})
    save_statistics: Path | None = field(default=None, metadata={"help": "write the model's inputs to this file"})
    fit: bool = field(default=False, metadata={"help": "fit the global-load latency to the H200 measurements"})
    terms: bool = field(default=False, metadata={"help": "also print the step as each of the model's terms gives it"})
    programs: bool = field(default=False, metadata={"help": "also print each kind of program's warp, per shape"})
    global_load_cycles: float = field(default=step_time_model.GLOBAL_LOAD_CYCLES)

    def __post_init__(self):
        for shape in self.shapes:
            parse_shape(shape)


def statistics_of_commit(reference: str, arguments: list[str]) -> dict:
    """`step_statistics` of the kernels of commit `reference`: its `modeling_slstm` beside this checkout's
    `run_scripts` and `hub_configs` in a folder of their own, where this script runs again with `arguments` (the
    shapes and the Triton folder)."""
    with tempfile.TemporaryDirectory() as folder:
        archive = subprocess.run(["git", "-C", str(REPOSITORY_ROOT), "archive", reference, "modeling_slstm"],
                                 capture_output=True, check=True)  # fmt: skip
        subprocess.run(["tar", "-x", "-C", folder], input=archive.stdout, check=True)
        for name in ("run_scripts", "hub_configs"):
            shutil.copytree(REPOSITORY_ROOT / name, Path(folder) / name, ignore=shutil.ignore_patterns("__pycache__"))
        output = Path(folder) / "statistics.json"
        environment = {**os.environ, "PYTHONPATH": folder}
        subprocess.run([sys.executable, "-m", MODULE, *arguments, "--save_statistics", str(output)],
                       cwd=folder, env=environment, check=True)  # fmt: skip
        return json.loads(output.read_text())


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:,.3f}"


def prediction_table(statistics: dict, shapes: list[str], global_load_cycles: float) -> list[str]:
    """Markdown rows: per shape, each kernel (its launches summed), then the matmuls, the other operators and the
    step."""
    header = ["batch×length", "kernel", "launches", "programs / launch", "waves / launch", "registers",
              "programs / SM", "issue ms", "chain ms", "memory ms", "predicted ms"]  # fmt: skip
    body = []
    for shape in shapes:
        predicted = step_time_model.step_prediction(statistics, shape, global_load_cycles)
        for kernel, row in predicted["kernels"].items():
            launches = row["launches"]
            body.append([shape, f"`{kernel}`", str(launches), f"{row['programs']:,}", str(row["waves"]),
                         str(row["registers"]), str(row["programs_per_sm"]), _ms(row["issue_s"]), _ms(row["chain_s"]),
                         _ms(row["memory_s"]), _ms(row["seconds"])])  # fmt: skip
        body.append([shape, "matmuls (cuBLAS)", str(predicted["matmuls"]), "", "", "", "", "", "", "",
                     _ms(predicted["matmul_s"])])  # fmt: skip
        body.append([shape, "other operators", str(predicted["operators"]), "", "", "", "", "", "", "",
                     _ms(predicted["operator_s"])])  # fmt: skip
        body.append([shape, "**step**", "", "", "", "", "", "", "", "", f"**{_ms(predicted['seconds'])}**"])
    return markdown_table(header, body)


UNLOADED_GLOBAL_LOAD_CYCLES = 560
"""A global load from HBM on an idle Hopper, as microbenchmarks give it (about 470-550 cycles)."""


def terms_table(statistics: dict, shapes: list[str], global_load_cycles: float) -> list[str]:
    """Markdown rows: per shape, the step's ms as the model's terms add up: the matmuls and other operators alone;
    with the kernels at their issue time (or memory time, the longer); at their chains without the waits on global
    loads, with those waits at an idle GPU's latency, and at `global_load_cycles`."""
    header = ["batch×length", "matmuls + other operators", "+ kernels at issue (or memory) time",
              "+ kernels at chain, no global-load wait", f"… global loads {UNLOADED_GLOBAL_LOAD_CYCLES} cycles",
              f"… global loads {global_load_cycles:.0f} cycles (the model)"]  # fmt: skip
    body = []
    for shape in shapes:
        full = step_time_model.step_prediction(statistics, shape, global_load_cycles)
        operators = full["matmul_s"] + full["operator_s"]
        issue = operators + sum(max(row["issue_s"], row["memory_s"], row["launches"] * step_time_model.KERNEL_FLOOR_S)
                                for row in full["kernels"].values())  # fmt: skip
        chains = [step_time_model.step_prediction(statistics, shape, cycles)["seconds"]
                  for cycles in (0, UNLOADED_GLOBAL_LOAD_CYCLES)]  # fmt: skip
        body.append([shape, _ms(operators), _ms(issue), _ms(chains[0]), _ms(chains[1]), _ms(full["seconds"])])
    return markdown_table(header, body)


def program_table(statistics: dict, shapes: list[str], global_load_cycles: float) -> list[str]:
    """Markdown rows: per shape and distinct launch (kernel variant and arguments), each kind of program: how many,
    and one warp's instructions issued, global loads, shuffles, barriers, chain and issue cycles."""
    header = ["batch×length", "kernel", "programs", "instructions / warp", "global loads", "shuffles", "barriers",
              "chain cycles", "issue cycles"]  # fmt: skip
    body = []
    for shape in shapes:
        seen = set()
        for launch in statistics["steps"][shape]["launches"]:
            key = (launch["variant"], str(launch["arguments"]), str(launch["grid"]))
            if key in seen:
                continue
            seen.add(key)
            variant = statistics["variants"][launch["variant"]]
            for path, count in step_time_model.launch_kinds(launch, variant):
                cost = step_time_model.warp_cycles(step_time_model.decode_instructions(variant["instructions"]),
                                                   path["steps"], step_time_model._trips(launch), global_load_cycles)
                counts = cost.counts
                body.append([shape, f"`{launch['kernel']}`", f"{count:,}", f"{cost.issued:,}", f"{counts['G']:,}",
                             f"{counts['W']:,}", f"{counts['B']:,}", f"{cost.chain_cycles:,.0f}",
                             f"{cost.issue_cycles:,.0f}"])  # fmt: skip
    return markdown_table(header, body)


def main(argv=None) -> dict:
    args = parse_arguments(StepTimeArguments, argv, description=__doc__)
    if args.statistics:
        statistics = json.loads(Path(args.statistics).read_text())
    elif args.kernels_from:
        # What the commit's statistics depend on: the shapes and the compiling Triton.
        forwarded = ["--shapes", *args.shapes, *(["--triton_path", args.triton_path] if args.triton_path else [])]
        statistics = statistics_of_commit(args.kernels_from, forwarded)
        statistics["kernels_from"] = args.kernels_from
    else:
        statistics = step_time_model.step_statistics([parse_shape(shape) for shape in args.shapes], args.triton_path)
    statistics.setdefault("kernels_from", args.kernels_from or "this checkout")
    if args.save_statistics:
        Path(args.save_statistics).write_text(json.dumps(statistics, separators=(",", ":")))
    cycles = step_time_model.fit_global_load_cycles(statistics) if args.fit else args.global_load_cycles
    shapes = [shape for shape in args.shapes if shape in statistics["steps"]]
    print(f"Kernels of {statistics['kernels_from']}, Triton {statistics['triton']}, sm_90; H200 model, global load "
          f"{cycles:.0f} cycles{' (fitted)' if args.fit else ''}")  # fmt: skip
    print("\n".join(prediction_table(statistics, shapes, cycles)))
    if args.terms:
        print("\n".join(terms_table(statistics, shapes, cycles)))
    if args.programs:
        print("\n".join(program_table(statistics, shapes, cycles)))
    if args.fit:
        for (batch, length), ms in step_time_model.MEASURED.items():
            predicted = step_time_model.step_prediction(statistics, f"{batch}x{length}", cycles)["seconds"] * 1e3
            print(f"{batch}x{length}: predicted {predicted:.2f} ms, measured {ms:.2f} ms ({predicted / ms - 1:+.0%})")
    return {"statistics": statistics, "global_load_cycles": cycles}


if __name__ == "__main__":
    main()
