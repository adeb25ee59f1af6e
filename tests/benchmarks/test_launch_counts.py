"""Operator budgets of one training step (`run_scripts/benchmarks/benchmark_launch_counts.py`): each count of the
paper configurations, readable and fused, must stay at or under its budget. Counts are deterministic and depend on the
config and the sequence length only (from 2 sentences on), so the models here are small (batch 2, hidden 8) and the Triton kernels run as
their fakes (the output shapes `torch.compile` traces with): what is counted is which operators launch, not what they
compute. One count is also taken with the kernels running, in Triton's interpreter, and must be the same."""

import contextlib

import pytest
import torch
from torch._library.custom_ops import OPDEFS

pytest.importorskip("triton")

from modeling_slstm import triton_crf, triton_step  # noqa: F401 (their operators, registered before they are faked)
from modeling_slstm.custom_operators import OPERATOR_NAMESPACE
from run_scripts.benchmarks import benchmark_launch_counts
from run_scripts.benchmarks.support.launch_counts import count_launched_operators
from run_scripts.benchmarks.support.workloads import parse_shape

BUDGETS = {
    # (task, batch x length): budget per implementation, today's counts, so that any regression fails. The fused path
    # meets its targets (NER loss <= 200 at every length, classification <= 150) and launches nothing per word. Its
    # backward writes each step's dP apart from P (the last step's into a tensor of its own): one matmul more.
    ("ner", "2x8"): {"readable": 1237, "fused": 131},
    ("ner", "2x32"): {"readable": 1817, "fused": 131},
    ("pos", "2x32"): {"readable": 730, "fused": 107},
    ("classification", "2x21"): {"readable": 943, "fused": 122},
}
# One optimizer step after the forward and backward (clipping, AdamW, scheduler, zero_grad), by task: fused AdamW
# launches the same 10 operators for any number of parameters (8 of them clipping's); foreach AdamW on a CPU adds 2
# host reads (`item`) per parameter tensor (19 in the NER model, 16 in the others).
OPTIMIZER_BUDGETS = {
    "ner": {"fused AdamW": 10, "foreach AdamW": 56},
    "pos": {"fused AdamW": 10, "foreach AdamW": 50},
    "classification": {"fused AdamW": 10, "foreach AdamW": 50},
}


@contextlib.contextmanager
def kernels_as_fakes():
    """Every custom operator of the package runs its fake on CPU tensors (empty outputs of the right shapes)."""
    operators = [op for name, op in OPDEFS.items() if name.startswith(f"{OPERATOR_NAMESPACE}::") and op._abstract_fn]
    for op in operators:
        op.register_kernel("cpu", op._abstract_fn)
    try:
        yield
    finally:
        for op in operators:
            op.register_kernel("cpu", op._init_fn)


def training_step_count(task, shape, implementation, num_steps=None):
    batch, length = parse_shape(shape)
    model = benchmark_launch_counts.paper_model(task, benchmark_launch_counts.IMPLEMENTATIONS[implementation], 8)
    model.config.num_steps = num_steps or model.config.num_steps  # the steps share their weights
    inputs = benchmark_launch_counts.random_batch(model, batch, length)
    return sum(benchmark_launch_counts.training_step_counts(model, inputs).values())


@pytest.fixture(scope="module")
def counts():
    """Every count of `BUDGETS`, the kernels as fakes."""
    with kernels_as_fakes():
        return {
            (task, shape, implementation): training_step_count(task, shape, implementation)
            for task, shape in BUDGETS
            for implementation in benchmark_launch_counts.IMPLEMENTATIONS
        }


@pytest.mark.parametrize("task", OPTIMIZER_BUDGETS)
def test_optimizer_step_launches_at_most_its_budget(task):
    # The count depends on the parameter tensors only, the same for both steps: the readable one computes the
    # gradients faster here (the fused one runs its kernels in the interpreter outside the profiler).
    model = benchmark_launch_counts.paper_model(task, "eager", 8)
    inputs = benchmark_launch_counts.random_batch(model, 2, 8)
    with kernels_as_fakes():
        for name, options in benchmark_launch_counts.OPTIMIZERS.items():
            counts = benchmark_launch_counts.optimizer_step_counts(model, inputs, options)
            assert sum(counts.values()) <= OPTIMIZER_BUDGETS[task][name], (name, counts)
            assert counts["aten::clamp"] == 1  # clipping's scale is applied without a host-side test of the norm


@pytest.mark.parametrize(("task", "shape"), BUDGETS)
def test_training_step_launches_at_most_its_budget(task, shape, counts):
    for implementation, budget in BUDGETS[task, shape].items():
        assert counts[task, shape, implementation] <= budget, (implementation, counts[task, shape, implementation])


def test_fused_ner_step_launches_as_many_operators_for_long_sentences_as_for_short(counts):
    # The CRF's kernels loop over positions inside; the readable CRF launches operators per position.
    assert counts["ner", "2x32", "fused"] == counts["ner", "2x8", "fused"]
    assert counts["ner", "2x32", "readable"] > counts["ner", "2x8", "readable"] + 500


def test_fakes_launch_what_the_kernels_launch():
    # One recurrent step, so that the kernels run quickly in the interpreter.
    with kernels_as_fakes():
        faked = training_step_count("ner", "2x8", "fused", num_steps=1)
    assert training_step_count("ner", "2x8", "fused", num_steps=1) == faked


def test_counts_leave_out_views_and_allocations_and_count_copies_where_they_happen():
    weight = torch.randn(3, 2, requires_grad=True)

    def step():
        # reshape of a contiguous tensor is a view; contiguous of a transposed one copies (clone).
        inputs = torch.empty(4, 3).fill_(1.0).view(2, 6).reshape(4, 3).t().contiguous().t()
        (inputs @ weight).sum().backward()

    counts = count_launched_operators(step)
    # Forward: fill_, clone, matmul (its mm inside), sum; backward: the seed gradient (ones_like), sum's (expand: a
    # view), the weight's mm.
    assert counts == {
        "aten::fill_": 1,
        "aten::clone": 1,
        "aten::matmul": 1,
        "aten::sum": 1,
        "aten::ones_like": 1,
        "aten::mm": 1,
    }
