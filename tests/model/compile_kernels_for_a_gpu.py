"""Compiles the package's Triton kernels to sm_90 (H100) binaries with Triton's own compiler and ptxas, which need no
GPU: the interpreter runs kernels as Python, which forgives what the compiler refuses (types that change in a loop,
missing constexprs). Run without `TRITON_INTERPRET`, for the kernels named on the command line (default: all), each
with the one compile of every such check (`run_scripts/benchmarks/support/kernel_compiles.py`):

- `step` (by `test_fused_step.py::test_kernels_compile_for_a_gpu`): the fused step's kernels (every one of
  `triton_kernels.STEP_KERNELS`) with the options and tiles `triton_step.StepKernels` gives them on a GPU, bf16
  tensors with a float32 mask, saved statistics and partial sums; with `INT64_OFFSETS`, every product of offsets
  in their Triton IR must be int64 (without, most are int32);
- `crf` (by `test_crf_kernels.py::test_kernels_compile_for_a_gpu`): the CRF's kernels, bf16 emissions.

    python tests/model/compile_kernels_for_a_gpu.py [step] [crf]
"""

import inspect
import re
import sys

import triton

from modeling_slstm import triton_crf, triton_kernels, triton_step
from run_scripts.benchmarks.support.kernel_compiles import compile_for_sm_90

FLOAT32_POINTERS = ("mask_ptr", "lengths_ptr", "statistics_ptr", "d_input_terms_ptr", "partials_ptr")
INTEGERS = ("seq", "hidden", "batch", "blocks", "terms_size", "size")
ABSENT_WITHOUT_NODES = (
    "sentence_terms_ptr", "sentence_cells_ptr", "new_sentence_states_ptr", "new_sentence_cells_ptr", "statistics_ptr",
    "d_sentence_states_ptr", "d_sentence_cells_ptr", "partials_ptr",
)  # fmt: skip
ABSENT_AFTER_THE_LAST_STEP = ("d_output_states_ptr", "d_cells_ptr", "d_sentence_cells_ptr")


def compile_for_hopper(kernel, num_warps=4, **constants):
    names = inspect.signature(kernel.fn).parameters
    constants = {name: value for name, value in constants.items() if name in names}
    signature = {
        name: "constexpr" if name in constants else "i32" if name in INTEGERS
        else "*fp32" if name in FLOAT32_POINTERS else "*bf16"
        for name in names
    }  # fmt: skip
    return compile_for_sm_90(kernel, signature, constants, options={"num_warps": num_warps})


def tensor_product_types(compiled) -> set[str]:
    """The integer types of the tensor products in the compiled kernel's Triton IR (`arith.muli` of tensors): the
    offsets' products, positions times a row's width and gate slots times `hidden` (what overflows in int32)."""
    return set(re.findall(r"arith\.muli [^:]*: tensor<[^>]*x(i\d+)>", compiled.asm["ttir"]))


def step(window, nodes, sigmoid, last_step=False, hidden=300):
    """The constants of the forward's and the backward's launches as `StepKernels` makes them at `hidden`."""
    absent = dict.fromkeys(
        (ABSENT_WITHOUT_NODES if nodes == 0 else ()) + (ABSENT_AFTER_THE_LAST_STEP if last_step else ())
    )
    kernels = triton_step.StepKernels(2, 37, hidden, nodes, window, sigmoid)
    options = {**kernels.forward_options, **kernels.backward_options, "LATER_STEPS": not last_step, **absent}
    return {name: value for name, value in options.items() if name not in INTEGERS}


def compile_the_step_kernels():
    # The paper configuration's kernels, and for sentences whose product passes 2^31 values (`INT64_OFFSETS`): every
    # product of offsets is then int64. Otherwise most are int32, which take half the registers (the backward's
    # stores compute theirs in int64 all the same: kept apart from the loads' offsets, they free registers).
    for kernel in triton_kernels.step_forward_kernel, triton_kernels.step_backward_kernel:
        for int64 in False, True:
            compiled = compile_for_hopper(kernel, **{**step(1, 1, True), "INT64_OFFSETS": int64})
            products = tensor_product_types(compiled)
            assert products == {"i64"} if int64 else "i32" in products, (kernel.fn.__name__, int64, products)
    compile_for_hopper(triton_kernels.step_forward_kernel, **step(2, 0, False, hidden=40))
    compile_for_hopper(triton_kernels.step_backward_kernel, **step(2, 2, True, hidden=40))
    compile_for_hopper(triton_kernels.step_backward_kernel, **step(1, 1, False, last_step=True))
    compile_for_hopper(triton_kernels.step_backward_kernel, **step(1, 0, True, last_step=True))
    compile_for_hopper(triton_kernels.step_sums_kernel, BLOCK=triton_step.SUMS_BLOCK)


CRF_POINTERS = {
    "emissions_ptr": "*bf16", "d_emissions_ptr": "*bf16", "tags_ptr": "*i64", "paths_ptr": "*i64", "mask_ptr": "*i1",
    "start_allowed_ptr": "*i1", "end_allowed_ptr": "*i1", "transition_allowed_ptr": "*i1",
    "best_previous_ptr": "*i32",
}  # fmt: skip


def compile_the_crf_kernels():
    for kernel, constants in [
        (triton_crf.log_likelihood_forward_kernel, {"BLOCK_TAGS": 16}),
        (triton_crf.log_likelihood_backward_kernel, {"BLOCK_TAGS": 16}),
        (triton_crf.viterbi_kernel, {"BLOCK_TAGS": 32, "WITH_MAX_MARGINALS": True}),
        (triton_crf.viterbi_kernel, {"BLOCK_TAGS": 32, "WITH_MAX_MARGINALS": False, "alphas_ptr": None,
                                     "max_marginals_ptr": None}),
    ]:  # fmt: skip
        signature = {
            name: "constexpr" if name in constants else CRF_POINTERS.get(name, "*fp32") if name.endswith("_ptr")
            else "i32" if name in ("seq", "num_tags") else "fp32"
            for name in kernel.arg_names
        }  # fmt: skip
        compile_for_sm_90(kernel, signature, constants)


FAMILIES = {"step": compile_the_step_kernels, "crf": compile_the_crf_kernels}
for family in sys.argv[1:] or FAMILIES:
    FAMILIES[family]()
print("compiled")
