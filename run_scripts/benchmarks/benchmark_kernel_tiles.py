#!/usr/bin/env python
"""How the fused step's kernels should tile their work on a GPU: a sweep of `triton_kernels.KernelTiles`.

For each tiling (values per tile, widest hidden block, warps per program, longest position block) the paper S-LSTM
(`timed_models.slstm_config`, fused step) runs training steps (forward and backward of the sum of its outputs)
on random batches; all tilings of one shape are timed in turn (`timing.time_interleaved`), so that their
ratios compare the same moments of the machine. Prints one table per shape, fastest first, with each tiling's time
as a ratio to the default tiling's, and writes `<name>.csv`.

    python run_scripts/benchmarks/benchmark_kernel_tiles.py --device cuda --output_dir out
"""

import statistics
from dataclasses import asdict, dataclass, field, replace
from itertools import product
from pathlib import Path

import torch

from modeling_slstm import triton_kernels
from run_scripts.benchmarks.support.csv_tables import write_csv
from run_scripts.benchmarks.support.speed_report import markdown_table
from run_scripts.benchmarks.support.timed_models import VARIANTS, TimedModel
from run_scripts.benchmarks.support.timing import Timing, machine_info, time_interleaved
from run_scripts.benchmarks.support.workloads import random_workload
from run_scripts.training.arguments import parse_arguments

FIELDS = ["device_name", "torch", "variant", "batch", "length"]
FIELDS += ["values_per_tile", "max_block_h", "num_warps", "max_block_s", "backward_values_per_tile"]
FIELDS += ["backward_max_block_h", "backward_tiles_per_program", "median_ms", "ratio_to_default"]


@dataclass
class TileSweepArguments:
    """Arguments of benchmark_kernel_tiles.py."""

    device: str = field(default="cuda", metadata={"help": "torch device (CUDA; CPU tensors need TRITON_INTERPRET=1)"})
    variant: str = field(default="bf16+fused", metadata={"help": "a fused variant of timed_models.VARIANTS"})
    batch_size: int = 32
    lengths: list[int] = field(default_factory=lambda: [32, 512])
    values_per_tile: list[int] = field(default_factory=lambda: [2048, 4096, 8192])
    max_block_h: list[int] = field(default_factory=lambda: [16, 32, 64])
    num_warps: list[int] = field(default_factory=lambda: [2, 4, 8])
    max_block_s: list[int] = field(default_factory=lambda: [16, 32, 64, 128])
    backward_values_per_tile: list[int] = field(default_factory=lambda: [1024, 2048])
    backward_max_block_h: list[int] = field(default_factory=lambda: [16])
    backward_tiles_per_program: list[int] = field(default_factory=lambda: [1, 2])
    warmup: int = 2
    repeats: int = 5
    min_time: float = 0.2
    max_repeats: int = 20
    output_dir: Path = Path(".")
    name: str = "kernel_tiles"


def tilings(arguments: TileSweepArguments) -> list[triton_kernels.KernelTiles]:
    """Every values-per-tile and block width with the default warps, and every warp count and longest position block
    at the default tile; every backward tile size and width, and tiles per backward program, at the defaults."""
    default = triton_kernels.KernelTiles()
    shapes = [
        triton_kernels.KernelTiles(values, block_h, default.num_warps)
        for values, block_h in product(arguments.values_per_tile, arguments.max_block_h)
    ]
    warps = [
        triton_kernels.KernelTiles(default.values_per_tile, default.max_block_h, warps)
        for warps in arguments.num_warps
    ]
    position_blocks = [replace(default, max_block_s=block_s) for block_s in arguments.max_block_s]
    backward = [
        replace(default, backward_values_per_tile=values, backward_max_block_h=block_h)
        for values, block_h in product(arguments.backward_values_per_tile, arguments.backward_max_block_h)
    ]
    backward += [replace(default, backward_tiles_per_program=tiles) for tiles in arguments.backward_tiles_per_program]
    return list(dict.fromkeys([default, *shapes, *warps, *position_blocks, *backward]))


def tiled_call(timed: TimedModel, tiles: triton_kernels.KernelTiles):
    """A training step of `timed` with the kernels tiled as `tiles` (in Triton's interpreter too, whose launches
    would otherwise take a sentence per tile whatever the tiling)."""

    def call():
        triton_kernels.use_tiles(tiles, in_the_interpreter=True)
        timed.forward_backward()

    return call


def main():
    arguments = parse_arguments(TileSweepArguments)
    device = torch.device(arguments.device)
    machine = machine_info(device)
    timing = Timing(arguments.warmup, arguments.repeats, arguments.min_time, arguments.max_repeats)
    default = triton_kernels.KernelTiles()
    rows = []
    for length in arguments.lengths:
        timed = TimedModel("slstm", VARIANTS[arguments.variant], random_workload(arguments.batch_size, length), device)
        timed.model.train()
        calls = {tiles: tiled_call(timed, tiles) for tiles in tilings(arguments)}
        times = time_interleaved(calls, device, timing)
        triton_kernels.use_tiles(default)
        default_ms = statistics.median(times[default]) * 1000
        shape_rows = []
        for tiles, seconds in times.items():
            median_ms = statistics.median(seconds) * 1000
            shape_rows.append(
                {"device_name": machine["device_name"], "torch": machine["torch"], "variant": arguments.variant,
                 "batch": arguments.batch_size, "length": length, **asdict(tiles),
                 "median_ms": round(median_ms, 3), "ratio_to_default": round(median_ms / default_ms, 3)}
            )  # fmt: skip
        shape_rows.sort(key=lambda row: row["median_ms"])
        print(f"\n{arguments.variant} training step, {arguments.batch_size}x{length}, {machine['device_name']}")
        print("\n".join(markdown_table(FIELDS[3:], [[str(row[name]) for name in FIELDS[3:]] for row in shape_rows])))
        rows += shape_rows
    arguments.output_dir.mkdir(parents=True, exist_ok=True)
    write_csv(rows, arguments.output_dir / f"{arguments.name}.csv", FIELDS)


if __name__ == "__main__":
    main()
