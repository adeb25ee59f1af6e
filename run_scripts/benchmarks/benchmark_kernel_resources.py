#!/usr/bin/env python
"""Registers, spills and shared memory of the package's Triton kernels compiled for sm_90 (an H100's or H200's
target), with no GPU: do the kernels fit the machine?

For each task's paper config (`ner`: `hub_configs/slstm-ner-crf.json`, hidden 300, window 1, one sentence node, the
CRF; `classification`: `hub_configs/slstm-classification-paper.json`), the kernel launches of a training step and an
evaluation forward under bf16 autocast, as the training scripts run on a GPU, are recorded instead of run, with the
tiles and warps a GPU launch picks (`triton_kernels.GPU_TILES`; `benchmark_compiles.epoch_launches`). Each distinct
compiled variant (the last step's backward, which has no later step's gradients, is one of its own) is compiled for
sm_90 by Triton's compiler and `ptxas` in a fresh process (`support/kernel_compiles.py`), and `ptxas -v`'s report read
(`support/kernel_resources.py`): registers per thread, stack frame, spill stores and loads per thread, the shared
memory a launch asks for, warps per program, and how many programs per SM the registers allow. A variant is labelled
by the launch arguments in which it differs from the kernel's other variants.

The programs per launch, their serial passes and their memory traffic: `benchmark_step_kernel_costs.py`.

Prints the table and writes `<name>.csv` and `<name>.md` under `--output_dir`.

    python run_scripts/benchmarks/benchmark_kernel_resources.py
    python run_scripts/benchmarks/benchmark_kernel_resources.py --tasks ner --families step
    python run_scripts/benchmarks/benchmark_kernel_resources.py --families step \
        --config_overrides window_size=2,num_sentence_nodes=2   # the other windows and node counts a config allows
"""

import os
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

os.environ.setdefault("TRITON_INTERPRET", "1")  # the launches are recorded on CPU tensors; nothing runs here

import torch
import triton

from run_scripts.benchmarks.benchmark_compiles import epoch_launches
from run_scripts.benchmarks.benchmark_launch_counts import TASKS, paper_model
from run_scripts.benchmarks.support import kernel_compiles
from run_scripts.benchmarks.support.csv_tables import write_csv
from run_scripts.benchmarks.support.kernel_resources import programs_per_sm_by_registers, ptxas_resources
from run_scripts.benchmarks.support.speed_report import markdown_table
from run_scripts.benchmarks.support.timing import machine_info
from run_scripts.training.arguments import check_choices, parse_arguments

FAMILIES = {"step": kernel_compiles.STEP_KERNEL_NAMES, "crf": kernel_compiles.kernel_names(kernel_compiles.triton_crf)}
RECORDED_WIDTH = 20
"""Positions of the recorded batches: no compiled variant depends on them (Triton does not specialise on `seq`)."""
FIELDS = ["task", "kernel", "variant", "registers", "spill_store_bytes", "spill_load_bytes", "stack_bytes"]
FIELDS += ["shared_bytes", "num_warps", "programs_per_sm", "compile_seconds"]


@dataclass
class KernelResourceArguments:
    """Arguments of benchmark_kernel_resources.py."""

    tasks: list[str] = field(
        default_factory=lambda: ["ner", "classification"], metadata={"help": f"paper configs of {list(TASKS)}"}
    )
    families: list[str] = field(default_factory=lambda: list(FAMILIES), metadata={"help": f"of {list(FAMILIES)}"})
    output_dir: Path = field(default=Path("."))
    name: str = field(default="kernel_resources")
    config_overrides: str = field(
        default="", metadata={"help": "applied to each task's config, as --config_overrides (window_size=2,...)"}
    )

    def __post_init__(self):
        check_choices("tasks", self.tasks, TASKS)
        check_choices("families", self.families, FAMILIES)
        self.output_dir = Path(self.output_dir)


def task_variants(task: str, kernels: set[str], config_overrides: str = "") -> dict[str, kernel_compiles.Launch]:
    """The distinct compiled variants of `kernels` that a training step and an evaluation forward of `task`'s paper
    config (with `config_overrides`) launch, each by its specialisation key, with its first launch."""
    model = paper_model(task, "triton", config_overrides=config_overrides)
    launches = epoch_launches(model, [RECORDED_WIDTH], batch_size=2)
    by_kernel = kernel_compiles.distinct_keys([launch for launch in launches if launch.kernel in kernels])
    return {key: launch for by_key in by_kernel.values() for key, launch in by_key.items()}


def _argument(value) -> str:
    """A launch argument as a variant label shows it: a tensor by its dtype, anything else as it is."""
    return str(value.dtype).removeprefix("torch.") if isinstance(value, torch.Tensor) else repr(value)


def variant_labels(launches: list[kernel_compiles.Launch]) -> list[str]:
    """Per launch (the variants of one kernel), the arguments in which it differs from the others, `name=value`
    (empty where the kernel has one variant)."""
    shown = [{name: _argument(value) for name, value in launch.kwargs.items()} for launch in launches]
    differing = [name for name in shown[0] if len({arguments.get(name) for arguments in shown}) > 1]
    return [", ".join(f"{name}={arguments[name]}" for name in differing) for arguments in shown]


def resource_rows(args: KernelResourceArguments) -> list[dict]:
    """One row per task, kernel and compiled variant (`FIELDS`); a variant two tasks share is compiled once."""
    kernels = {name for family in args.families for name in FAMILIES[family]}
    variants = {task: task_variants(task, kernels, args.config_overrides) for task in args.tasks}
    distinct = {key: launch for by_key in variants.values() for key, launch in by_key.items()}
    compiled = dict(zip(distinct, kernel_compiles.gpu_compiles(list(distinct.values())), strict=True))
    rows = []
    for task, by_key in variants.items():
        per_kernel = defaultdict(list)
        for key, launch in by_key.items():
            per_kernel[launch.kernel].append(key)
        for kernel, keys in per_kernel.items():
            for key, label in zip(keys, variant_labels([by_key[key] for key in keys]), strict=True):
                binary = compiled[key]
                resources = ptxas_resources(binary["ptxas_log"])
                rows.append(
                    {"task": task, "kernel": kernel, "variant": label, **resources, "shared_bytes": binary["shared"],
                     "num_warps": binary["num_warps"],
                     "programs_per_sm": programs_per_sm_by_registers(resources["registers"], binary["num_warps"]),
                     "compile_seconds": binary["seconds"]}
                )  # fmt: skip
    return rows


def _cell(value) -> str:
    return "–" if value is None else f"{value:,}" if isinstance(value, int) else str(value)


def markdown(rows: list[dict]) -> list[str]:
    header = ["task", "kernel", "variant", "registers / thread", "spill stores (B)", "spill loads (B)",
              "stack frame (B)", "shared memory (B)", "warps", "programs / SM (registers)"]  # fmt: skip
    body = [[_cell(row[name]) for name in FIELDS[:-1]] for row in rows]
    return markdown_table(header, body)


def main(argv=None) -> list[dict]:
    args = parse_arguments(KernelResourceArguments, argv, description=__doc__)
    rows = resource_rows(args)
    machine = f"Compiled on {machine_info(torch.device('cpu'))['cpu']}, Triton {triton.__version__}"
    arguments = sys.argv[1:] if argv is None else argv
    command = " ".join(["python", "run_scripts/benchmarks/benchmark_kernel_resources.py", *arguments])
    lines = markdown(rows)
    print(f"sm_90 binaries. {machine}", *lines, sep="\n")
    args.output_dir.mkdir(parents=True, exist_ok=True)
    write_csv(rows, args.output_dir / f"{args.name}.csv", FIELDS)
    title = ["# The kernels compiled for sm_90: registers and spills", "", f"Command: `{command}`  "]
    (args.output_dir / f"{args.name}.md").write_text("\n".join([*title, machine, "", *lines]) + "\n")
    return rows


if __name__ == "__main__":
    main()
