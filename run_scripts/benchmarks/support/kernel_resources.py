"""What a kernel compiled for sm_90 (an H100's or H200's target) needs per thread and per program, and how many of
its programs an SM can hold at once.

`ptxas_resources` reads the report `ptxas -v` prints for the binary Triton compiled (`kernel_compiles.gpu_compiles`
asks Triton to print it): registers per thread, the stack frame, and the bytes of spill stores and loads (what does not
fit in registers goes to local memory, which every loop pass then reads and writes). `programs_per_sm_by_registers`
is the occupancy limit those registers set, as the CUDA occupancy calculator computes it.
"""

import re

SM_90_REGISTERS = 65536
"""32-bit registers per SM of compute capability 9.0 (CUDA C++ Programming Guide, technical specifications)."""
REGISTER_ALLOCATION_UNIT = 256
"""Registers are given to a warp in units of 256 (the per-thread count rounded up to a multiple of 8)."""
SM_90_MAX_WARPS = 64
"""Resident warps per SM of compute capability 9.0."""
WARP_SIZE = 32

_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_REGISTERS = re.compile(r"Used (\d+) registers")


def ptxas_resources(report: str) -> dict[str, int]:
    """The resources of the one kernel in `report` (what `ptxas -v` prints for a binary):
    `{"registers", "stack_bytes", "spill_store_bytes", "spill_load_bytes"}`, per thread.

    Raises:
        `ValueError`: If `report` has no line of registers or of stack frame and spills (e.g. Triton took the binary
        from its cache, and ptxas did not run).
    """
    frame, registers = _FRAME.search(report), _REGISTERS.search(report)
    if frame is None or registers is None:
        raise ValueError(
            "expected ptxas -v's report of a kernel ('N bytes stack frame, N bytes spill stores, N bytes spill loads' "
            f"and 'Used N registers'), got {report!r}"
        )
    stack, stores, loads = (int(value) for value in frame.groups())
    return {
        "registers": int(registers[1]), "stack_bytes": stack, "spill_store_bytes": stores, "spill_load_bytes": loads,
    }  # fmt: skip


def programs_per_sm_by_registers(registers: int, num_warps: int) -> int:
    """How many programs of `num_warps` warps, each thread holding `registers` registers, one SM's registers hold at
    once (at most its 64 resident warps): 2 programs of 4 warps at 255 registers, 3 at 168, 4 at 128."""
    per_warp = -(-registers * WARP_SIZE // REGISTER_ALLOCATION_UNIT) * REGISTER_ALLOCATION_UNIT
    warps = min(SM_90_REGISTERS // per_warp, SM_90_MAX_WARPS)
    return warps // num_warps
