"""Compiles per epoch (`run_scripts/benchmarks/benchmark_compiles.py`): over the padded widths of a CoNLL-2003 NER
epoch, each Triton kernel needs a fixed number of compiled variants on a GPU, whatever the widths. Counted from the
launches' specialisation keys as Triton computes them for an sm_90 target (no GPU needed); the kernels do not run
(their launches are recorded), so the model is the NER config at hidden 40 (tiles as at 300: 2+ hidden blocks of 32,
and neither size a multiple of 16)."""

import dataclasses
import types

import pytest

pytest.importorskip("triton")

import triton
from triton.runtime.jit import KernelInterface

from modeling_slstm import triton_crf, triton_kernels
from run_scripts.benchmarks import benchmark_compiles
from run_scripts.benchmarks.benchmark_launch_counts import paper_model
from run_scripts.benchmarks.support import kernel_compiles

NER_WIDTHS = list(range(8, 121, 8))  # the collators pad to multiples of 8 on a GPU; CoNLL-2003 batches reach 120
COMPILE_BOUNDS = {
    "step_forward_kernel": 1,
    # The last step's backward has no gradient from a later step (`d_cells_ptr`, `d_output_states_ptr` are None, and
    # LATER_STEPS is False), every other step's has: two variants.
    "step_backward_kernel": 2,
    "step_sums_kernel": 1,  # its sizes (the position blocks, the batch's) are left unspecialised
    "log_likelihood_forward_kernel": 1,
    "log_likelihood_backward_kernel": 1,
    "viterbi_kernel": 1,
}


@pytest.fixture(scope="module")
def ner_launches() -> list[kernel_compiles.Launch]:
    """The kernel launches of a training step and an evaluation forward at each NER width, recorded."""
    model = paper_model("ner", "triton", hidden_size=40)
    return benchmark_compiles.epoch_launches(model, NER_WIDTHS, batch_size=2)


def test_an_epoch_compiles_each_kernel_a_fixed_number_of_times(ner_launches):
    """Distinct specialisation keys per kernel over the 15 widths: at most `COMPILE_BOUNDS` (the tiles a GPU gets
    follow the model's sizes, not the batch's width, and Triton does not specialise on the width)."""
    keys = kernel_compiles.distinct_keys(ner_launches)
    assert keys.keys() == COMPILE_BOUNDS.keys()
    counts = {kernel: len(by_key) for kernel, by_key in keys.items()}
    assert all(counts[kernel] <= bound for kernel, bound in COMPILE_BOUNDS.items()), counts


def with_arguments(launch: kernel_compiles.Launch, **changes) -> kernel_compiles.Launch:
    return dataclasses.replace(launch, kwargs={**launch.kwargs, **changes})


def test_the_key_changes_where_triton_compiles_anew(ner_launches):
    """The key sees what Triton compiles a variant for: a constexpr (a tile size), an integer argument's divisibility
    by 16 (`hidden`, `num_tags`), an absent pointer; and not the padded width `seq`, which the kernels leave
    unspecialised."""
    step = next(launch for launch in ner_launches if launch.kernel == "step_forward_kernel")
    crf = next(launch for launch in ner_launches if launch.kernel == "log_likelihood_forward_kernel")
    key = kernel_compiles.specialisation_key
    assert key(with_arguments(step, WORD_BLOCK_S=2 * step.kwargs["WORD_BLOCK_S"])) != key(step)
    assert key(with_arguments(step, hidden=48)) != key(step)
    assert key(with_arguments(step, statistics_ptr=None)) != key(step)
    assert key(with_arguments(crf, num_tags=16)) != key(crf)
    for launch in step, crf:
        assert {key(with_arguments(launch, seq=seq)) for seq in (1, 8, 16, 24, 32, 120)} == {key(launch)}


def test_a_recorded_launch_compiles_for_sm_90(ner_launches):
    """A recorded launch's variant compiles to an sm_90 binary in `time_gpu_compiles`' own process (the benchmark's
    compile timing), from the signature, constexprs and attributes its key holds."""
    viterbi = next(launch for launch in ner_launches if launch.kernel == "viterbi_kernel")
    (seconds,) = kernel_compiles.time_gpu_compiles([viterbi])
    assert seconds > 0


@triton.jit
def first_kernel(x_ptr):
    pass


@triton.jit
def second_kernel(x_ptr):
    pass


@triton.jit
def _helper(x_ptr):
    pass


def test_kernels_are_found_by_the_modules_list_else_by_their_names():
    """A kernel module's kernels: its `STEP_KERNELS` where it has one (in its order), else every `triton.jit`
    function named `*_kernel` (not the helpers, not a plain function of that name)."""
    module = types.ModuleType("kernels")
    module.first_kernel, module.second_kernel, module._helper = first_kernel, second_kernel, _helper
    module.plain_kernel = lambda: None
    assert kernel_compiles.kernel_names(module) == ("first_kernel", "second_kernel")
    module.STEP_KERNELS = ("second_kernel",)
    assert kernel_compiles.kernel_names(module) == ("second_kernel",)
    step_kernels = kernel_compiles.kernel_names(triton_kernels)
    assert step_kernels and all(isinstance(getattr(triton_kernels, name), KernelInterface) for name in step_kernels)
    assert kernel_compiles.kernel_names(triton_crf) == (
        "log_likelihood_forward_kernel", "log_likelihood_backward_kernel", "viterbi_kernel",
    )  # fmt: skip


def test_launches_recorded_as_they_run_compute_what_the_kernels_compute():
    """`recorded_launches(run=True)` (the GPU profile's record of the binaries that ran) records each launch with its
    grid and still runs it: the fused forward's outputs are those of the unrecorded one, bit for bit."""
    import torch

    from run_scripts.benchmarks.benchmark_launch_counts import random_batch

    model = paper_model("ner", "triton", hidden_size=8).eval()
    inputs = random_batch(model, 2, 5)
    with torch.no_grad():
        expected = model(**inputs).logits
        with kernel_compiles.recorded_launches(run=True) as launches:
            recorded = model(**inputs).logits
    assert torch.equal(recorded, expected)
    steps = [launch for launch in launches if launch.kernel == "step_forward_kernel"]
    assert len(steps) == model.config.num_steps and all(launch.grid[0] == 2 for launch in steps)
