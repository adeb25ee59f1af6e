"""How many operators a piece of model code launches: the count that sets a GPU step's speed when sentences are short
(each operator is at least one kernel launch, a few microseconds whatever its size).

Counted with `torch.profiler` on the CPU: the top-level aten and custom operators (those not called by another
counted operator), leaving out views and allocations, which launch nothing; an operator that only wraps others
(`contiguous`, `reshape`, `to`, ...) counts as the operators it calls. With `TRITON_INTERPRET=1` and
`step_implementation="triton"` the fused step runs on the CPU as on CUDA, so the counts are a GPU step's launches
(a Triton kernel is one custom operator). Counts are deterministic.

    from run_scripts.benchmarks.launch_counts import count_operators
    counts = count_operators(lambda: model(**batch).loss.backward())  # Counter {operator name: calls}
    sum(counts.values())
"""

from collections import Counter
from collections.abc import Callable

import torch
from torch.profiler import ProfilerActivity, profile

LAUNCH_FREE_OPERATORS = frozenset(
    f"aten::{name}"
    for name in (
        "view", "_unsafe_view", "reshape", "as_strided", "expand", "expand_as", "permute", "transpose", "t",
        "unsqueeze", "squeeze", "slice", "select", "split", "split_with_sizes", "unbind", "chunk", "narrow", "alias",
        "detach", "detach_", "flatten", "unflatten", "view_as", "contiguous", "to", "lift_fresh", "resolve_conj",
        "resolve_neg", "_reshape_alias", "numpy_T", "empty", "empty_like", "empty_strided", "new_empty",
        "new_empty_strided", "result_type", "is_nonzero", "item", "_local_scalar_dense", "set_", "resize_",
    )
)  # fmt: skip
"""Operators that launch nothing themselves: views, allocations, metadata. Those that may copy (`contiguous`,
`reshape`, `to`) are counted through the operators they call when they do."""


def is_operator(name: str) -> bool:
    """An aten or custom operator (`namespace::name`), not a range of the profiler or of autograd (whose gradient
    accumulation counts as the operators it calls)."""
    return "::" in name and not name.startswith(("autograd::", "torch::autograd::", "profiler::", "ProfilerStep"))


def counted_operators(event) -> list[str]:
    """The names `event` counts as: itself if it launches, else what its children count as."""
    if is_operator(event.name) and event.name not in LAUNCH_FREE_OPERATORS:
        return [event.name]
    return [name for child in event.cpu_children for name in counted_operators(child)]


def count_operators(run: Callable[[], object]) -> Counter:
    """Runs `run()` once under `torch.profiler` (CPU) and returns the top-level operators it launched, by name."""
    with profile(activities=[ProfilerActivity.CPU]) as profiler:
        run()
    roots = [event for event in profiler.events() if event.cpu_parent is None]
    return Counter(name for event in roots for name in counted_operators(event))
