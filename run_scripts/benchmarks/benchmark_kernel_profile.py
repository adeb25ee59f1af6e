#!/usr/bin/env python
"""Where a training step's GPU time goes, kernel by kernel: `torch.profiler` over one eager training step of the
paper S-LSTM (forward, the loss, backward, as `benchmark_speed.py` times it: `timed_models.TimedModel`), after
warm-up steps (Triton's compiles, cuBLAS's heuristics), on the speed benchmark's random 32x512 batch and on a real
CoNLL-2003 NER training batch of 10 (the NER config's character CNN on, the batch drawn and padded as `run_ner.py`
does: `workloads.real_workloads`).

Prints, as each workload is done, the top `--top` operators and kernels by self CUDA time
(`key_averages().table`), and appends them to `<name>.md` under `--output_dir`. The fused step shows as its Triton
kernels (`step_forward_kernel`, `step_backward_kernel`, ...) beside cuBLAS's matmuls. On a GPU it then prints, kernel
by kernel, the measured device time beside what the H200 model (`support/step_time_model.py`) predicts from the
binaries that ran and their grids (`prediction_table`): the GPU's check of the model. `--dry_run`: tiny sizes on the
CPU, the CPU time per operator instead, no prediction (checks the wiring; what CI runs).

    python run_scripts/benchmarks/benchmark_kernel_profile.py --data_dir ../shared/data --output_dir out
    python run_scripts/benchmarks/benchmark_kernel_profile.py --dry_run --data_dir ../shared/data
"""

import sys
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity

from run_scripts.benchmarks.benchmark_speed import reads_characters
from run_scripts.benchmarks.support import step_time_model
from run_scripts.benchmarks.support.speed_report import markdown_table
from run_scripts.benchmarks.support.timed_models import PAPER_SLSTM, VARIANTS, TimedModel
from run_scripts.benchmarks.support.timing import machine_info
from run_scripts.benchmarks.support.workloads import NER_CORPUS, Workload, parse_shape, random_workload, real_workloads
from run_scripts.training.arguments import check_choices, parse_arguments


@dataclass
class KernelProfileArguments:
    """Arguments of benchmark_kernel_profile.py."""

    device: str = field(default="cuda", metadata={"help": "torch device (cuda; cpu profiles CPU time)"})
    variant: str = field(default="bf16", metadata={"help": "of timed_models.VARIANTS (bf16: the package's choice)"})
    shapes: list[str] = field(default_factory=lambda: ["32x512"], metadata={"help": "random batches, BxL"})
    data_dir: Path | None = field(default=None, metadata={"help": "the shared data folder (conll2003/ner/)"})
    real_batch_size: int = field(default=10, metadata={"help": "sentences of the real CoNLL-2003 NER batch"})
    warmup: int = field(default=3, metadata={"help": "training steps before the profiled one"})
    top: int = field(default=15, metadata={"help": "rows of each table"})
    output_dir: Path = field(default=Path("."))
    name: str = field(default="kernel_profile")
    dry_run: bool = field(default=False, metadata={"help": "tiny sizes on the CPU (checks the wiring)"})

    def __post_init__(self):
        check_choices("variant", [self.variant], VARIANTS)
        for shape in self.shapes:
            parse_shape(shape)
        if self.dry_run:
            self.device, self.variant, self.shapes, self.real_batch_size = "cpu", "fp32", ["2x6"], 2
        self.output_dir = Path(self.output_dir)


def workloads(args: KernelProfileArguments, device: torch.device) -> list[Workload]:
    """The random batches of `--shapes`, then one real NER batch (none, with the reason printed, without the data)."""
    random = [random_workload(*parse_shape(shape)) for shape in args.shapes]
    return random + real_workloads(args.data_dir, [NER_CORPUS], [args.real_batch_size], 1, device)


def profile_table(timed: TimedModel, args: KernelProfileArguments) -> tuple[str, list]:
    """`timed`'s training step profiled once after `args.warmup` unprofiled ones: the top `args.top` rows by self
    device time (by self CPU time on a CPU), and every row (`key_averages()`)."""
    device = timed.device
    step = timed.call_for("train")
    for _ in range(args.warmup):
        step()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with torch.profiler.profile(activities=activities) as profile:
        step()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    sort_by = "self_device_time_total" if device.type == "cuda" else "self_cpu_time_total"
    averages = profile.key_averages()
    return averages.table(sort_by=sort_by, row_limit=args.top), list(averages)


def _device_ms(row) -> float:
    """A `key_averages()` row's self device time, ms."""
    return row.self_device_time_total / 1e3


def prediction_table(timed: TimedModel, averages: list) -> str:
    """Per kernel of the step's Triton launches: the launches and device ms measured in the profiled step beside the
    H200 model's prediction (`step_time_model`, from one more step with its launches recorded as they run); then the
    step's other kernels together (matmuls and the rest) and the whole step's device time."""
    statistics = step_time_model.run_statistics(timed.call_for("train"), "profiled")
    predicted = step_time_model.step_prediction(statistics, "profiled")
    measured = {row.key: row for row in averages}
    header = ["kernel", "launches", "measured ms", "predicted ms", "predicted / measured", "issue ms", "chain ms",
              "memory ms", "registers", "programs / SM"]  # fmt: skip
    body = []
    for kernel, row in predicted["kernels"].items():
        seen = measured.get(kernel)
        ms = _device_ms(seen) if seen else float("nan")
        body.append([f"`{kernel}`", str(seen.count if seen else 0), f"{ms:.3f}", f"{row['seconds'] * 1e3:.3f}",
                     f"{row['seconds'] * 1e3 / ms:.2f}", f"{row['issue_s'] * 1e3:.3f}", f"{row['chain_s'] * 1e3:.3f}",
                     f"{row['memory_s'] * 1e3:.3f}", str(row["registers"]), str(row["programs_per_sm"])])  # fmt: skip
    total = sum(_device_ms(row) for row in averages)
    kernels = sum(_device_ms(measured[kernel]) for kernel in predicted["kernels"] if kernel in measured)
    rest = predicted["matmul_s"] + predicted["operator_s"]
    body.append(["matmuls and other operators", "", f"{total - kernels:.3f}", f"{rest * 1e3:.3f}",
                 f"{rest * 1e3 / (total - kernels):.2f}", "", "", "", "", ""])  # fmt: skip
    body.append(["**step (device time)**", "", f"{total:.3f}", f"{predicted['seconds'] * 1e3:.3f}",
                 f"{predicted['seconds'] * 1e3 / total:.2f}", "", "", "", "", ""])  # fmt: skip
    return "\n".join(markdown_table(header, body))


def main(argv=None) -> list[dict]:
    args = parse_arguments(KernelProfileArguments, argv, description=__doc__)
    device = torch.device(args.device)
    arguments = sys.argv[1:] if argv is None else argv
    command = " ".join(["python", "run_scripts/benchmarks/benchmark_kernel_profile.py", *arguments])
    report = args.output_dir / f"{args.name}.md"
    args.output_dir.mkdir(parents=True, exist_ok=True)
    machine = machine_info(device)
    report.write_text(f"# One training step, kernel by kernel\n\nCommand: `{command}`  \n"
                      f"Device: {machine['device_name']}, torch {machine['torch']}\n")  # fmt: skip
    rows = []
    for workload in workloads(args, device):
        characters = reads_characters(PAPER_SLSTM, workload)
        timed = TimedModel(PAPER_SLSTM, VARIANTS[args.variant], workload, device, characters)
        table, averages = profile_table(timed, args)
        title = f"{args.variant} training step, {workload.label()}, widths {list(workload.widths)}"
        print(f"== {title}\n{table}", flush=True)
        with report.open("a") as handle:
            handle.write(f"\n## {title}\n\n```\n{table}\n```\n")
        predicted = ""
        if device.type == "cuda":
            try:
                predicted = prediction_table(timed, averages)
            except Exception as error:  # noqa: BLE001 (a model's failure must not end a timed GPU run)
                print(f"== the H200 model's prediction failed: {type(error).__name__}: {error}", flush=True)
        if predicted:
            print(f"== measured beside the H200 model's prediction\n{predicted}", flush=True)
            with report.open("a") as handle:
                handle.write(f"\nMeasured beside the H200 model's prediction (`step_time_model.py`):\n\n{predicted}\n")
        rows.append({"workload": workload.label(), "table": table, "prediction": predicted})
    return rows


if __name__ == "__main__":
    main()
