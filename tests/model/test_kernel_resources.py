"""Do the fused step's kernels fit an H100's or H200's SM? Compiled for sm_90 with Triton's compiler and `ptxas` (no
GPU needed) for the paper configs, as a GPU launch of a bf16 training step compiles them
(`run_scripts/benchmarks/benchmark_kernel_resources.py`), every step kernel must hold at most `MAX_REGISTERS`
registers per thread, so that 4 programs of 4 warps share an SM, and spill nothing to local memory, which every loop
pass would otherwise read and write.

Under two Tritons: the one installed here, and 3.6, which torch 2.11 installs (the GPU machines' version), from a
second install that only these compiles use (`pip install --target DIR triton==3.6.0`, DIR in `SECOND_TRITON_ENV`;
`.ci/run` keeps one). The two can compile the same kernels to quite different register counts. Each runs the
benchmark in a fresh process, with Triton's interpreter (the launches are recorded on CPU tensors, also on a GPU
machine) and an empty Triton cache in a temporary folder (`kernel_compiles.gpu_compiles`): about 18 s of CPU for
each (AMD EPYC), most of it the compiles."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from modeling_slstm.kernel_dispatch import TRITON_IMPORT_ERROR
from run_scripts import REPOSITORY_ROOT
from run_scripts.benchmarks.support.csv_tables import read_csv
from run_scripts.benchmarks.support.kernel_resources import programs_per_sm_by_registers, ptxas_resources

MAX_REGISTERS = 128
MAX_SPILL_BYTES = 0
SECOND_TRITON_ENV = "SLSTM_TRITON_3_6_PATH"
"""The environment variable naming the folder of the second Triton (3.6) install."""
SECOND_TRITON_VERSION = "3.6."
INTEGERS = {"registers", "spill_store_bytes", "spill_load_bytes"}
ROW_FIELDS = ["task", "kernel", "variant", *INTEGERS]
"""The columns of the benchmark's CSV that the test reads (its module is not imported: importing it turns the
interpreter on in this process)."""

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
    """Why the installed Triton cannot compile the kernels for sm_90 here, or None."""
    if TRITON_IMPORT_ERROR:
        return TRITON_IMPORT_ERROR
    try:
        from triton.backends.nvidia.compiler import get_ptxas

        get_ptxas(90).path  # the ptxas Triton runs for sm_90
    except (ImportError, RuntimeError) as error:  # a Triton without its NVIDIA backend, or without ptxas
        return f"no ptxas to compile for sm_90 ({error})"
    return None


def second_triton_obstacle() -> str | None:
    """Why there is no second Triton install to compile with, or None."""
    folder = os.environ.get(SECOND_TRITON_ENV)
    if not folder:
        return f"{SECOND_TRITON_ENV} names no folder of a Triton 3.6 install (pip install --target DIR triton==3.6.0)"
    if not (Path(folder) / "triton" / "__init__.py").is_file():
        return f"{SECOND_TRITON_ENV}={folder!r} holds no triton package"
    return None


def benchmark_rows(output_dir: Path, triton_path: str | None = None) -> tuple[str, list[dict]]:
    """The benchmark's rows of the step kernels, each task's paper config and compiled variant, run in a fresh
    process with the interpreter and, with `triton_path`, the Triton installed there: `(its Triton's version line,
    rows)`."""
    environment = {**os.environ, "TRITON_INTERPRET": "1"}
    environment["PYTHONPATH"] = os.pathsep.join(
        [*([triton_path] if triton_path else []), str(REPOSITORY_ROOT), os.environ.get("PYTHONPATH", "")]
    )
    command = [sys.executable, "run_scripts/benchmarks/benchmark_kernel_resources.py", "--families", "step"]
    run = subprocess.run(
        [*command, "--output_dir", str(output_dir)], env=environment, cwd=REPOSITORY_ROOT, capture_output=True,
        text=True, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-5000:]
    version = next(line for line in run.stdout.splitlines() if "Triton" in line)
    return version, read_csv(output_dir / "kernel_resources.csv", ROW_FIELDS, {"task", "kernel", "variant"}, INTEGERS)


@pytest.fixture(scope="module", params=["installed", "second"])
def step_kernel_rows(request, tmp_path_factory) -> list[dict]:
    """The step kernels' rows under the installed Triton, and under the second install (3.6)."""
    obstacle = compile_obstacle()
    if request.param == "second":
        obstacle = obstacle or second_triton_obstacle()
    if obstacle:
        pytest.skip(obstacle)
    output_dir = tmp_path_factory.mktemp(f"kernel_resources_{request.param}")
    if request.param == "installed":
        return benchmark_rows(output_dir)[1]
    version, rows = benchmark_rows(output_dir, os.environ[SECOND_TRITON_ENV])
    assert f"Triton {SECOND_TRITON_VERSION}" in version, version  # the second install, not the installed one
    return rows


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
