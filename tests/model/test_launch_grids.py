"""Every kernel launch fits CUDA's grid limits at any length: up to 2^31 - 1 programs on axis x, 65,535 on y and z,
which Triton's interpreter does not check (a launch past them fails on a GPU only). Recorded, not run
(`kernel_compiles.recorded_launches`): a training step of the paper NER config (hidden 300, 9 steps, window 1, one
sentence node, the CRF) on one sentence of 30,000 words and its inference on one of 100,000, with a GPU's tiles
(`triton_kernels.GPU_TILES`) under bf16 autocast, as the training scripts run on a GPU. Before the long sentences'
layout (`triton_step.launch_grid`), the backward put 95,000 programs on axis y at 30,000 words and the forward
125,010 at 100,000.

The kernels do not run, and neither do the matmuls around them (`SkippedMatmuls`: at 100,000 words the 9 steps'
products alone are 3.9 TFLOP, minutes of CPU): a launch's grid and options follow from the tensors' shapes, never
their values. About 10 s of CPU for the module (the elementwise work of 9 steps at these lengths)."""

import math

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

pytest.importorskip("triton")

from modeling_slstm import triton_step
from run_scripts.benchmarks.benchmark_launch_counts import paper_model, random_batch
from run_scripts.benchmarks.support import kernel_compiles

CUDA_GRID_LIMITS = (2**31 - 1, 65_535, 65_535)  # the most programs per axis (x, y, z) that CUDA launches
TRAINING_WORDS, INFERENCE_WORDS = 30_000, 100_000
ATEN = torch.ops.aten


class SkippedMatmuls(TorchDispatchMode):
    """Within the block, every matmul gives an uninitialised tensor of its result's shape and dtype instead of
    computing it (in place and `out=` ones give their output as it was), as the recorded kernels leave theirs;
    every other operator runs."""

    RESULTS = (ATEN.mm.default, ATEN.addmm.default, ATEN.bmm.default, ATEN.baddbmm.default)
    IN_PLACE = (ATEN.addmm_.default,)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in self.IN_PLACE:
            return args[0]
        if func is ATEN.mm.out:
            return kwargs["out"]
        if func in self.RESULTS:  # the result's shape and dtype, from the same operator on meta tensors
            meta = func(*(arg.to("meta") if isinstance(arg, torch.Tensor) else arg for arg in args), **kwargs)
            return torch.empty(meta.shape, dtype=meta.dtype, device=args[0].device)
        return func(*args, **kwargs)


def recorded(model, words: int, training: bool) -> list[kernel_compiles.Launch]:
    """The launches of a training step (forward with the loss, backward) or of an inference forward (no labels, as a
    pipeline's) on one sentence of `words` words, as a GPU would launch them."""
    inputs = random_batch(model, 1, words)
    if not training:
        del inputs["labels"]
    model.train(training)
    with kernel_compiles.gpu_tiles(), kernel_compiles.recorded_launches() as launches, SkippedMatmuls():
        with torch.autocast("cpu", dtype=torch.bfloat16), torch.set_grad_enabled(training):
            outputs = model(**inputs)
            if training:
                outputs.loss.backward()
    return launches


@pytest.fixture(scope="module", params=["training", "inference"])
def task_launches(request) -> tuple[str, list[kernel_compiles.Launch]]:
    """`(task, its launches)`: a training step on `TRAINING_WORDS` words, inference on `INFERENCE_WORDS`."""
    training = request.param == "training"
    words = TRAINING_WORDS if training else INFERENCE_WORDS
    return request.param, recorded(paper_model("ner", "triton"), words, training)


KERNELS = {  # every kernel a task launches (the training forward decodes its predictions too)
    "training": set(kernel_compiles.KERNELS),
    "inference": {"step_forward_kernel", "viterbi_kernel"},
}


def test_every_launch_fits_cudas_grid_limits(task_launches):
    task, recorded_launches = task_launches
    assert {launch.kernel for launch in recorded_launches} == KERNELS[task]
    for launch in recorded_launches:
        grid = launch.grid + (1,) * (3 - len(launch.grid))  # (x, y, z)
        within = all(1 <= size <= limit for size, limit in zip(grid, CUDA_GRID_LIMITS, strict=True))
        assert within, (launch.kernel, grid)


def position_blocks(launch: kernel_compiles.Launch) -> int:
    """The programs a step kernel's launch needs for a sentence's words, from its tiles: position blocks times
    hidden blocks."""
    options, words, hidden = launch.kwargs, launch.kwargs["seq"], launch.kwargs["hidden"]
    if launch.kernel == "step_forward_kernel":
        return math.ceil(words / options["WORD_BLOCK_S"]) * math.ceil(hidden / options["WORD_BLOCK_H"])
    owned = (options["BLOCK_S"] - 2 * options["WINDOW"]) * options["TILES"]
    return math.ceil(words / owned) * math.ceil(hidden / options["BLOCK_H"])


def test_the_step_grids_still_cover_every_word(task_launches):
    """At least as many programs as the sentence has tiles: a grid kept within the limits drops none."""
    steps = [launch for launch in task_launches[1] if launch.kernel in ("step_forward_kernel", "step_backward_kernel")]
    assert steps
    for launch in steps:
        assert math.prod(launch.grid) >= position_blocks(launch), (launch.kernel, launch.grid)


def test_offsets_are_int64_where_a_sentences_product_passes_int32(task_launches):
    """`INT64_OFFSETS` as the largest offset within a sentence asks, read from the recorded product `(1, seq, P)`:
    its last value's, `seq * P - 1`, past int32's range or not (at 100,000 words, `P = 7,200`: not)."""
    for launch in task_launches[1]:
        if launch.kernel in ("step_forward_kernel", "step_backward_kernel"):
            _, words, width = launch.kwargs["product_ptr"].shape
            assert launch.kwargs["INT64_OFFSETS"] == (words * width - 1 > 2**31 - 1), launch.kernel


def test_int64_offsets_from_the_first_sentence_whose_product_passes_int32():
    """At hidden 1024, window 2 and one sentence node (`P = ((2w + 1)(2w + K + 4) + 3K) H = 49,152`), the first
    length whose product's last offset is past int32's range, 43,691 words, takes int64 offsets; one word less
    does not. The launches' options only (no tensor)."""
    width = ((2 * 2 + 1) * (2 * 2 + 1 + 4) + 3 * 1) * 1024
    first = next(words for words in range(43_000, 44_000) if words * width - 1 > 2**31 - 1)
    for words, expected in ((first - 1, False), (first, True)):
        kernels = triton_step.StepKernels(2, words, 1024, 1, 2, True)
        assert kernels.forward_options["INT64_OFFSETS"] is expected
        assert kernels.backward_options["INT64_OFFSETS"] is expected


@pytest.mark.parametrize("batch", [65_535, 65_536, 70_001, 200_003])
def test_a_batch_past_an_axis_of_sentences_fits_in_rows(batch):
    """Long sentences (100,000 words: 125,010 forward programs, 316,673 backward ones) put the batch on axes y and z:
    rows of equal length, with fewer than a row of programs past the batch's end (which return at once); short
    ones (8 words) put it on axis x. The launches' grids only (no tensor)."""
    with kernel_compiles.gpu_tiles():
        long, short = (triton_step.StepKernels(batch, words, 300, 1, 1, True) for words in (INFERENCE_WORDS, 8))
    for grid in long.forward_grid, long.backward_grid:
        programs, per_row, rows = grid
        assert programs > CUDA_GRID_LIMITS[1] and max(per_row, rows) <= CUDA_GRID_LIMITS[1]
        assert batch <= per_row * rows < batch + per_row
    for grid in short.forward_grid, short.backward_grid:
        assert grid[0] == batch and grid[1] <= CUDA_GRID_LIMITS[1] and grid[2] == 1


def test_a_sentence_past_axis_xs_limit_is_refused_clearly():
    """A sentence of 2^31 - 1 words at hidden 300 would take 2.7 billion forward programs, past axis x's limit (and
    any GPU's memory): an error naming the limit, before any launch."""
    with kernel_compiles.gpu_tiles(), pytest.raises(ValueError, match="at most 2,147,483,647 programs.*got 2,68"):
        triton_step.StepKernels(1, 2**31 - 1, 300, 1, 1, True)
