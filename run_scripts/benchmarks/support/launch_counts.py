"""How many operators a piece of model code launches: what a GPU pays for per call when work is small (each launch
costs microseconds however little it computes), counted on any machine.

`count_launched_operators` runs a function under `torch.profiler` (CPU activity only) and counts the top-level
operators it records: ATen operators and the package's custom operators (the Triton launchers and the oneDNN matmul,
`modeling_slstm.custom_operators`), each once, not the operators they call inside. Views, allocations and dtype
computations launch nothing and are not counted; operators that may or may not copy (`aten::to`, `aten::contiguous`, `aten::reshape`, ...)
count through what they call: nothing when they return their input or a view, the copy when they copy.

With `TRITON_INTERPRET=1` (set before `modeling_slstm` is imported) the Triton kernels run in the interpreter on CPU
tensors, each launch one custom operator as on a GPU, so the counts of the fused path are those of a GPU. The counts
are deterministic for given shapes and config: CI asserts budgets on them (`tests/benchmarks/test_launch_counts.py`).

`step_programs` counts inside one launch of the fused step's kernels instead: its programs (from the grid the launcher
works out, with the GPU's tiles) and how many position blocks its longest program walks one after another.
"""

import math
from collections import Counter
from collections.abc import Callable

import torch
from torch.autograd.profiler_util import FunctionEvent

from modeling_slstm import triton_step
from modeling_slstm.custom_operators import OPERATOR_NAMESPACE

VIEWS = {
    "alias", "as_strided", "chunk", "detach", "diagonal", "expand", "expand_as", "lift_fresh", "movedim", "narrow",
    "numpy_T", "permute", "select", "slice", "split", "split_with_sizes", "squeeze", "t", "transpose", "unbind",
    "unflatten", "unfold", "unsqueeze", "view", "view_as", "_reshape_alias", "_unsafe_view", "_unsafe_split",
}  # fmt: skip
ALLOCATIONS = {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "resize_"}
METADATA = {"promote_types", "result_type"}
"""Operators that compute a dtype, not a tensor."""
PASS_THROUGH = {"to", "type_as", "contiguous", "reshape", "flatten"}
"""Operators that copy only sometimes: counted through the operators they call."""
NOT_COUNTED = {f"aten::{name}" for name in VIEWS | ALLOCATIONS | METADATA | PASS_THROUGH}


def is_operator(name: str) -> bool:
    """Whether a profiler event is an operator call: ATen's or the package's custom operators."""
    return name.startswith(("aten::", f"{OPERATOR_NAMESPACE}::"))


def is_launch(event: FunctionEvent) -> bool:
    """Whether ``event`` is a counted operator none of whose callers is one (a top-level launch)."""
    if not is_operator(event.name) or event.name in NOT_COUNTED:
        return False
    caller = event.cpu_parent
    while caller is not None:
        if is_operator(caller.name) and caller.name not in NOT_COUNTED:
            return False
        caller = caller.cpu_parent
    return True


def count_launched_operators(fn: Callable[[], object]) -> Counter:
    """Run ``fn()`` once under the profiler and count its top-level operators by name (see the module docstring)."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
        fn()
    return Counter(event.name for event in profile.events() if is_launch(event))


def short_name(name: str) -> str:
    """``aten::mm`` -> ``mm``; a custom operator keeps only its name after the package's namespace."""
    return name.split("::", 1)[1]


SERIAL_PASSES = {
    # the launcher's grid attribute, less `_grid`: (word program, sentence program) passes over position blocks, from
    # the loops of today's `triton_kernels.py`, as functions of `seq` and the launch options
    "forward": lambda seq, options: (1, math.ceil(seq / options["SENTENCE_BLOCK_S"])),
    # the word program walks the sentence twice: its neighbours' cell gradients first, then its own
    "backward": lambda seq, options: (2 * math.ceil(seq / options["WORD_BLOCK_S"]),
                                      math.ceil(seq / options["SENTENCE_BLOCK_S"])),
}  # fmt: skip
"""What a program of each launch computes one after another: a kernel whose loops change changes its entry."""


def step_programs(config, batch: int, seq: int) -> list[dict]:
    """Per launch of a fused step for `config` on `batch` sentences of `seq` positions, as the launcher makes it
    (`triton_step.StepKernels`: each grid it holds, the GPU's tiles): `{"launch", "grid", "programs",
    "word_passes", "sentence_passes"}`, the last two the serial passes over position blocks of a word program and of
    a sentence-node program (`SERIAL_PASSES`; `None` for a launch it does not know, and for the sentence programs of
    a config without sentence nodes)."""
    from run_scripts.benchmarks.support.kernel_compiles import gpu_tiles  # here: it needs Triton, the counts do not

    sigmoid_scores = config.gate_normalization == "sigmoid_softmax"
    with gpu_tiles():
        kernels = triton_step.StepKernels(
            batch, seq, config.hidden_size, config.num_sentence_nodes, config.window_size, sigmoid_scores
        )
    rows = []
    for attribute, grid in vars(kernels).items():
        if not attribute.endswith("_grid"):
            continue
        launch = attribute.removesuffix("_grid")
        word_passes, sentence_passes = SERIAL_PASSES.get(launch, lambda *_: (None, None))(seq, kernels.options)
        if not config.num_sentence_nodes:
            sentence_passes = None
        rows.append({"launch": launch, "grid": tuple(grid), "programs": math.prod(grid), "word_passes": word_passes,
                     "sentence_passes": sentence_passes})  # fmt: skip
    return rows
