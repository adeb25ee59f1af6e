#!/usr/bin/env python
"""What each launch of a fused step costs a GPU, worked out from its grid and tiles (`triton_step.StepKernels` with a
GPU's tiles), without a GPU: the programs it launches, the longest program's serial passes over tiles (its critical
path), the bytes it reads and writes in memory (each tensor element once: what the L2 cache cannot save), how often
the backward loads each product element (its halo rows load some twice), and the memory the backward holds beside
the product. For a training step under bf16 autocast by default: the matmuls' outputs (the product `P`, `U x + b`,
the sentence terms) in 2 bytes, the states and cells in 4 (they stay float32), the sums in float32.

    python run_scripts/benchmarks/benchmark_step_kernel_costs.py --shapes 32x512 10x20

The time each launch would take on an H200, from the kernels' sm_90 SASS: `benchmark_step_kernel_times.py`.
"""

from dataclasses import dataclass, field

from modeling_slstm import triton_kernels, triton_step
from run_scripts.benchmarks.support.speed_report import markdown_table
from run_scripts.benchmarks.support.step_time_model import ceil_div
from run_scripts.benchmarks.support.workloads import parse_shape
from run_scripts.training.arguments import parse_arguments

MIB = 2**20


@dataclass
class StepCostArguments:
    """Arguments of benchmark_step_kernel_costs.py (defaults: the paper's NER configuration)."""

    shapes: list[str] = field(default_factory=lambda: ["32x512", "10x20"], metadata={"help": "batch x length"})
    hidden_size: int = 300
    window_size: int = 1
    num_sentence_nodes: int = 1
    matmul_bytes: int = field(default=2, metadata={"help": "bytes of P, U x + b and the sentence terms"})
    state_bytes: int = field(default=4, metadata={"help": "bytes of the states, the cells and their gradients"})


def launch_costs(batch: int, seq: int, arguments: StepCostArguments) -> list[dict]:
    """One row per launch of a step that is not the last (the last reads no gradient from a later step)."""
    hidden, window, nodes = arguments.hidden_size, arguments.window_size, arguments.num_sentence_nodes
    kernels = triton_step.StepKernels(batch, seq, hidden, nodes, window, sigmoid_scores=True)
    context = 2 * window + nodes + 4  # C: the gate blocks a word's context feeds
    product_width = ((2 * window + 1) * context + 3 * nodes) * hidden  # R
    sentence_width = (context + 3 * nodes) * hidden  # W
    matmul, state, words = arguments.matmul_bytes, arguments.state_bytes, batch * seq
    # Per word: P, U x + b, c^{t-1} and the mask read; per sentence: its terms, c_g^{t-1} and the statistics.
    inputs = words * ((product_width + context * hidden) * matmul + hidden * state + 4)
    sentence_inputs = batch * (sentence_width * matmul + nodes * hidden * state + 4 * nodes * hidden * 4)
    forward_bytes = inputs + sentence_inputs + words * 2 * hidden * state + batch * 2 * nodes * hidden * state
    # The backward reads the same, and the gradients of h^t (twice: the recurrence's, the encoder output's) and the
    # two parts of c^t's; writes dP, U x + b's (float32, read and written: the sum over the steps) and the two parts
    # of c^{t-1}'s; with sentence nodes, the partial sums of each position block.
    partials = kernels.position_blocks * kernels.sentence_gradients_size * 4 if nodes else 0
    backward_bytes = inputs + sentence_inputs + words * (4 * hidden * state + product_width * matmul)
    backward_bytes += words * (2 * context * hidden * 4 + 2 * hidden * state) + partials
    owned = kernels.backward_options["BLOCK_S"] - 2 * window
    forward_programs = batch * kernels.forward_programs
    sentence_passes = ceil_div(seq, kernels.forward_options["SENTENCE_BLOCK_S"]) if nodes else 0
    rows = [
        {"launch": "step_forward_kernel", "programs": forward_programs, "passes": max(1, sentence_passes),
         "bytes": forward_bytes, "product_loads": 1.0, "held": 0},
        {"launch": "step_backward_kernel", "programs": batch * kernels.backward_programs,
         "passes": kernels.backward_options["TILES"], "bytes": backward_bytes,
         "product_loads": kernels.backward_options["BLOCK_S"] / owned,
         "held": words * product_width * matmul + partials},
    ]  # fmt: skip
    if nodes:
        sums_bytes = partials + kernels.sentence_gradients_size * 4
        rows.append({"launch": "step_sums_kernel", "programs": kernels.sums_grid[0], "passes": kernels.position_blocks,
                     "bytes": sums_bytes, "product_loads": 0.0, "held": 0})  # fmt: skip
    return rows


def main():
    arguments = parse_arguments(StepCostArguments)
    triton_kernels.use_tiles(triton_kernels.GPU_TILES, in_the_interpreter=True)  # a GPU's tiles, on any machine
    header = ["batch×length", "launch", "programs", "serial passes (longest program)", "MiB read + written",
              "product loads per element", "MiB held beside P"]  # fmt: skip
    body = []
    for shape in arguments.shapes:
        batch, seq = parse_shape(shape)
        for row in launch_costs(batch, seq, arguments):
            body.append([shape, f"`{row['launch']}`", f"{row['programs']:,}", str(row["passes"]),
                         f"{row['bytes'] / MIB:,.1f}", f"{row['product_loads']:.2f}",
                         f"{row['held'] / MIB:,.1f}"])  # fmt: skip
    print("\n".join(markdown_table(header, body)))


if __name__ == "__main__":
    main()
