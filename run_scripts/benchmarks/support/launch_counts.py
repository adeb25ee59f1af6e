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
"""

from collections import Counter
from collections.abc import Callable

import torch
from torch.autograd.profiler_util import FunctionEvent

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
