"""Do the fused step's kernels fit an H100's or H200's SM? Compiled for sm_90 with Triton's compiler and `ptxas` (no
GPU needed) for the paper configs, as a GPU launch of a bf16 training step compiles them
(`run_scripts/benchmarks/benchmark_kernel_resources.py`), every step kernel must hold at most `MAX_REGISTERS`
registers per thread, so that 3 programs of 4 warps share an SM instead of 2, and spill at most `MAX_SPILL_BYTES`
per thread to local memory, which every loop pass would otherwise read and write.

The compiles run in a fresh process with an empty Triton cache in a temporary folder (`kernel_compiles.gpu_compiles`),
once for the module (this file: about 35 s of CPU on an AMD EPYC, most of it the three compiles)."""

import pytest

from modeling_slstm.kernel_dispatch import KERNELS_INTERPRETED, TRITON_IMPORT_ERROR
from run_scripts.benchmarks.support.kernel_resources import programs_per_sm_by_registers, ptxas_resources

MAX_REGISTERS = 168
MAX_SPILL_BYTES = 32

# ptxas -v's report of step_backward_kernel's last-step variant (NER paper config, bf16), compiled for sm_90 with
# Triton 3.9 before the kernels were redesigned.
PTXAS_REPORT = (
    "ptxas-blackwell info    : 0 bytes gmem\n"
    "ptxas-blackwell info    : Compiling entry function 'step_backward_kernel' for 'sm_90a'\n"
    "ptxas-blackwell info    : Function properties for step_backward_kernel\n"
    "    1296 bytes stack frame, 2182 bytes spill stores, 2280 bytes spill loads\n"
    "ptxas-blackwell info    : Used 255 registers, used 1 barriers, 1296 bytes cumulative stack size\n"
    "ptxas-blackwell info    : Compile time = 4335.298 ms\n"
)


def compile_obstacle() -> str | None:
    """Why the kernels cannot be recorded and compiled for sm_90 here, or None."""
    if TRITON_IMPORT_ERROR:
        return TRITON_IMPORT_ERROR
    if not KERNELS_INTERPRETED:
        return "the launches are recorded on CPU tensors in Triton's interpreter: run with TRITON_INTERPRET=1"
    try:
        from triton.backends.nvidia.compiler import get_ptxas

        get_ptxas(90).path  # the ptxas Triton runs for sm_90
    except (ImportError, RuntimeError) as error:  # a Triton without its NVIDIA backend, or without ptxas
        return f"no ptxas to compile for sm_90 ({error})"
    return None


@pytest.fixture(scope="module")
def step_kernel_rows(tmp_path_factory) -> list[dict]:
    """The benchmark's rows of the step kernels, each task's paper config and compiled variant."""
    obstacle = compile_obstacle()
    if obstacle:
        pytest.skip(obstacle)
    from run_scripts.benchmarks import benchmark_kernel_resources

    output_dir = tmp_path_factory.mktemp("kernel_resources")
    return benchmark_kernel_resources.main(["--families", "step", "--output_dir", str(output_dir)])


def test_every_step_kernel_fits_the_registers_and_spills_budget(step_kernel_rows):
    from run_scripts.benchmarks.support.kernel_compiles import STEP_KERNEL_NAMES

    assert {row["kernel"] for row in step_kernel_rows} == set(STEP_KERNEL_NAMES)  # each kernel compiled
    assert {row["task"] for row in step_kernel_rows} == {"ner", "classification"}
    over = [
        f"{row['task']} {row['kernel']} ({row['variant'] or 'its one variant'}): {row['registers']} registers, "
        f"{row['spill_store_bytes']} B spill stores, {row['spill_load_bytes']} B spill loads"
        for row in step_kernel_rows
        if row["registers"] > MAX_REGISTERS or max(row["spill_store_bytes"], row["spill_load_bytes"]) > MAX_SPILL_BYTES
    ]
    assert not over, f"over {MAX_REGISTERS} registers or {MAX_SPILL_BYTES} B of spills per thread:\n" + "\n".join(over)


def test_ptxas_report_gives_registers_stack_and_spills():
    assert ptxas_resources(PTXAS_REPORT) == {
        "registers": 255, "stack_bytes": 1296, "spill_store_bytes": 2182, "spill_load_bytes": 2280,
    }  # fmt: skip
    with pytest.raises(ValueError, match="expected ptxas -v's report.*got ''"):
        ptxas_resources("")  # a binary from Triton's cache: ptxas did not run


def test_programs_per_sm_follow_the_register_file():
    # 65,536 registers per SM, given to a warp in units of 256: 255 registers take 8,192 per warp (8 warps per SM),
    # 168 take 5,376 (12 warps), 128 take 4,096 (16), 32 would allow 64 warps but an SM holds 64 at most.
    assert [programs_per_sm_by_registers(registers, 4) for registers in (255, 168, 128, 32)] == [2, 3, 4, 16]
    assert programs_per_sm_by_registers(255, 1) == 8 and programs_per_sm_by_registers(70, 1) == 28
