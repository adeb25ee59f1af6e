"""A model of what a training step of the fused S-LSTM costs an NVIDIA H200, launch by launch, from the sm_90 SASS of
its Triton kernels and their grids, with no GPU (`benchmark_step_kernel_times.py` runs it).

What it reads (`step_statistics`, on the checkout whose kernels it models):

- the step's launches, recorded instead of run (`kernel_compiles.recorded_launches`, the GPU's tiles), with their
  grids and arguments, and every PyTorch operator the step runs around them (a `TorchDispatchMode`: the matmuls'
  shapes, the other operators' bytes);
- each distinct kernel variant compiled for sm_90 (Triton's compiler and `ptxas`, `kernel_compiles.gpu_compiles`;
  any Triton install, e.g. the GPU machine's), its registers and shared memory, and its SASS (`sass.py`): per
  instruction, the stall cycles and scoreboards `ptxas` encoded, and the source line;
- the paths a program can take through the SASS: a forward branch over an `EXIT` splits the programs into kinds (the
  word and the sentence-node bodies); a branch back is a loop, whose trip count comes from the launch's arguments
  (`LOOP_TRIPS`, by the function whose `while` it is, else the `while`'s own bound and step).

What it assumes (each a constant below; only `GLOBAL_LOAD_CYCLES` is fitted):

- **one warp's chain** (`warp_cycles`): a warp alone on its scheduler issues its instructions in order; the next one
  issues after the stall cycles `ptxas` encoded, and not before the scoreboards it waits on are released: a global
  load's after `GLOBAL_LOAD_CYCLES`, a shared-memory load's, shuffle's, special-function or conversion result's after
  `SHORT_LATENCY_CYCLES`, a store's source registers after `SHORT_LATENCY_CYCLES`; a `BAR.SYNC` adds
  `BARRIER_CYCLES`. The chain of a program is that of one of its warps (they run the same code);
- **issue** (`warp_cycles`): one instruction per cycle per scheduler, 4 schedulers per SM; a special-function or
  conversion op occupies its pipe `SLOW_PIPE_CYCLES`, a memory or shuffle op `MEMORY_PIPE_CYCLES`; a warp's issue
  time is the busiest of these;
- **occupancy** (`programs_per_sm`): the programs an SM holds at once, from the registers (`ptxas -v`), the shared
  memory and the warp limit; a wave of them takes `max(chain, issue time of the warps sharing a scheduler)`: their
  latency hides behind each other's issue, and no better;
- **waves** (`makespan`): `132 x programs per SM` programs run at once; each program starts, in grid order, in the
  first slot to come free, and takes its kind's wave time;
- **memory** (`launch_time`): a launch moves each of its tensor arguments once (`launch_record`), at
  `HBM_BYTES_PER_S`; a launch takes the longer of its compute and its memory, and at least `KERNEL_FLOOR_S`;
- **matmuls and other operators** (`operator_time`): a matmul at the bf16 GEMM rate the H200 run measured
  (`GEMM_FLOPS_PER_S`), another operator its bytes at `HBM_BYTES_PER_S`, each at least `KERNEL_FLOOR_S`; views and
  allocations launch nothing.

The model is calibrated on one GPU run (`MEASURED`): the kernels of commit `fa948a1^1` compiled by Triton 3.6, on an
H200; docs/benchmarks.md ("Fused step kernels: predicted H200 times") gives the fit, what each term contributes and
the predictions for today's kernels.
"""

import ast
import base64
import functools
import heapq
import inspect
import json
import math
import os
import subprocess
import sys
import zlib
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from run_scripts.benchmarks.support import sass

H200_SMS = 132
H200_CLOCK_HZ = 1.98e9
"""The H200's boost clock (NVIDIA's H200 datasheet); a loaded GPU may run slower."""
HBM_BYTES_PER_S = 4.8e12
"""The H200's HBM3e bandwidth (datasheet); the run measured 3.9 TB/s for a device copy."""
SCHEDULERS_PER_SM = 4
MAX_PROGRAMS_PER_SM = 32
SHARED_BYTES_PER_SM = 228 * 1024
"""Shared memory per SM of compute capability 9.0 (of which a program may take 227 KiB)."""
GEMM_FLOPS_PER_S = 337.5e12
"""bf16 matmul rate: the 2048³ GEMM the H200 run timed (`speed_cuda_h200.md`, 34% of the 989 TFLOP/s peak)."""
KERNEL_FLOOR_S = 2e-6
"""The least time a launch takes in a replayed CUDA graph (a small kernel's launch, ramp and drain)."""
GLOBAL_LOAD_CYCLES = 1967
"""Cycles from a global load's issue to its result, the model's one fitted constant (`fit_global_load_cycles` on the
kernels of fa948a1^1, Triton 3.6). Microbenchmarks of Hopper give about 260 for an L2 hit and 470-550 from
HBM, unloaded: the fit stands for what the model does not see as well (docs/benchmarks.md: instruction fetch of long
unrolled bodies, address-divergent loads, queueing)."""
SHORT_LATENCY_CYCLES = 30
"""A shared-memory load's, a shuffle's, a special-function or conversion unit's result, a store's operand read."""
BARRIER_CYCLES = 20
"""What a `BAR.SYNC` adds to a warp's chain when its program's warps arrive together."""
SLOW_PIPE_CYCLES = 8
"""Cycles a special-function (`MUFU`) or conversion op holds its scheduler's pipe: 16 lanes per SM per cycle."""
MEMORY_PIPE_CYCLES = 4
"""Cycles a load, store or shuffle holds the SM's memory pipe per scheduler: 32 lanes per SM per cycle."""
OPCODE_CLASSES = {
    # class letter: the opcodes (without modifiers) in it; any other opcode is "O"
    "G": ("LDG", "LD", "LDGSTS", "ATOMG", "ATOM", "RED"),  # global memory: GLOBAL_LOAD_CYCLES
    "L": ("LDL",),  # a spilled register's load (the L1 cache: short latency)
    "S": ("LDS", "LDSM", "ATOMS"),  # shared memory
    "W": ("SHFL",),  # a shuffle across the warp's lanes
    "T": ("STG", "ST", "STL", "STS", "STSM"),  # stores
    "B": ("BAR",),  # a barrier of the program's warps
    "U": ("MUFU", "I2F", "F2I", "F2F", "I2I", "FRND", "F2FP"),  # the special-function and conversion pipes
}
_CLASS_OF = {opcode: letter for letter, opcodes in OPCODE_CLASSES.items() for opcode in opcodes}
MEMORY_PIPE = "GLSWT"
"""Classes that hold the SM's memory pipe (`MEMORY_PIPE_CYCLES`)."""

MEASURED = {
    # (batch, length): ms of a bf16 training step of the paper encoder on one H200, kernels of fa948a1^1, Triton 3.6
    (32, 512): 48.0,  # eager (speed_cuda_h200.md; graph replay 46.4)
    (32, 32): 3.66,  # CUDA-graph replay of forward and backward
}

def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


# The trip count of each loop of the kernels, by the function whose `while` it is, from the launch's arguments by
# name. A kernel with a loop of another function: add it here (the model says which).
LOOP_TRIPS = {
    "_word_update_backward": lambda args: ceil_div(args["seq"], args["WORD_BLOCK_S"]),  # fa948a1^1
    "_sentence_update_forward": lambda args: ceil_div(args["seq"], args["SENTENCE_BLOCK_S"]),
    "_sentence_update_backward": lambda args: ceil_div(args["seq"], args["SENTENCE_BLOCK_S"]),
    "step_backward_kernel": lambda args: args["TILES"],
    "step_sums_kernel": lambda args: args["blocks"],
}
# The programs of a kind that a marker function's body runs (the sentence nodes' programs), by that function; a
# kernel's other programs run its path without a marker.
KIND_PROGRAMS = {
    "_sentence_update_forward": lambda args, grid: grid[0] * ceil_div(args["hidden"], args["SENTENCE_BLOCK_H"]),
    "_sentence_update_backward": lambda args, grid: grid[0] * ceil_div(args["hidden"], args["SENTENCE_BLOCK_H"]),
}


# ---------------------------------------------------------------------------------------------------------------------
# What a checkout's step is made of (run where its package is imported)


def _while_bound(loop: ast.While, function: ast.FunctionDef) -> dict:
    """`{"bound", "step"}` of a `while counter < bound:` loop of `function` that adds `step` (a name or a number) to
    its counter (empty where the loop is not of that form)."""
    test = loop.test
    if not (isinstance(test, ast.Compare) and isinstance(test.left, ast.Name) and isinstance(test.ops[0], ast.Lt)
            and isinstance(test.comparators[0], ast.Name)):  # fmt: skip
        return {}
    for node in ast.walk(function):
        counter = isinstance(node, ast.AugAssign) and getattr(node.target, "id", None) == test.left.id
        if counter and isinstance(node.op, ast.Add):
            step = node.value.id if isinstance(node.value, ast.Name) else getattr(node.value, "value", None)
            return {"bound": test.comparators[0].id, "step": step} if step is not None else {}
    return {}


def _source_functions(module) -> tuple[list[tuple[str, int, int]], dict[int, dict]]:
    """The functions of `module`'s source file `(name, first line, last line)` and its `while` statements by line,
    each with its bound and step where it has the form `_while_bound` reads."""
    tree = ast.parse(Path(inspect.getsourcefile(module)).read_text())
    functions, whiles = [], {}
    for function in ast.walk(tree):
        if isinstance(function, ast.FunctionDef):
            functions.append((function.name, function.lineno, function.end_lineno))
            for loop in ast.walk(function):
                if isinstance(loop, ast.While):
                    whiles[loop.lineno] = _while_bound(loop, function)
    return functions, whiles


def _function_of(line: int, functions: list[tuple[str, int, int]]) -> str | None:
    """The innermost function of `functions` holding `line`."""
    holding = [(first, name) for name, first, last in functions if first <= line <= last]
    return max(holding)[1] if holding else None


def program_paths(instructions, function_of, while_lines) -> list[dict]:
    """The paths a program can take through `instructions` (`sass.Instruction`s), each
    `{"functions": [...], "steps": [...]}`: the source functions its instructions came from, and its steps, each
    `[first, last]` (indices run in order) or `{"loop": function, "body": steps}` (a loop of `function`'s `while`).
    `function_of(instruction)`: the function of the kernels' source an instruction came from (`None` for another
    file's); `while_lines`: the source's `while` statements by line (`_source_functions`).

    A conditional forward branch over an unconditional `EXIT` is a fork (both ways are paths: the kinds of
    programs); any other conditional forward branch as not taken (its code counted as run), an unconditional one as
    taken unless it jumps over a loop (a loop's guard: every loop runs at least once); a loop's body runs whole each
    trip."""
    index = {instruction.address: position for position, instruction in enumerate(instructions)}
    loops = {}
    for first, last in sass.loops(instructions):
        if first == last:
            continue
        on_while = [i for i in range(last, first - 1, -1)
                    if instructions[i].line in while_lines and function_of(instructions[i])]  # fmt: skip
        function = function_of(instructions[on_while[0]]) if on_while else None
        line = instructions[on_while[0]].line if on_while else 0
        loops.setdefault(first, (last, function, line))  # innermost first: a loop that starts at the same instruction

    def exits(first: int, last: int) -> bool:
        return any(instructions[i].base == "EXIT" and not instructions[i].text.startswith("@")
                   for i in range(first, last))  # fmt: skip

    def walk(start: int, end: int, outer_loop: int | None) -> list[list]:
        """Every path from `start` to an `EXIT` or to `end`: lists of steps."""
        steps, first, position = [], start, start
        while position < end:
            instruction = instructions[position]
            loop = loops.get(position)
            if loop and position != outer_loop and loop[0] < end:
                if position > first:
                    steps.append([first, position - 1])
                body = walk(position, loop[0] + 1, position)[0]
                steps.append({"loop": loop[1], "line": loop[2], **while_lines.get(loop[2], {}), "body": body})
                position = first = loop[0] + 1
                continue
            conditional = instruction.text.startswith("@")
            if instruction.base == "EXIT" and not conditional:
                return [steps + [[first, position]]]
            if instruction.base == "BRA" and instruction.target is not None:
                target = index.get(instruction.target, position)
                if target == position:
                    return [steps + [[first, position]]]
                over_loop = any(position < start_at and other[0] < target for start_at, other in loops.items())
                if target > position and not conditional and not over_loop:
                    steps.append([first, position])
                    position = first = target
                    continue
                if target > position and outer_loop is None and exits(position + 1, target):
                    here = steps + [[first, position]]
                    return [here + rest for rest in walk(position + 1, end, None) + walk(target, end, None)]
            position += 1
        return [steps + ([[first, end - 1]] if end > first else [])]

    paths = []
    for steps in walk(0, len(instructions), None):
        _mark_unrolled(steps, instructions)
        functions = {function_of(instructions[i]) for i in _indices(steps)} - {None}
        paths.append({"functions": sorted(functions), "steps": steps})
    return paths


def _mark_unrolled(steps: list, instructions):
    """Where `ptxas` unrolled a `while` loop `k` times, its SASS has two loops of the same `while` line, the unrolled
    one first and the one that runs what is left after it: the first gets `"unrolled": k` (it runs `trips // k`
    times), the second `"remainder": k` (`trips % k`), `k` the ratio of their global loads (of their instructions
    where they load nothing)."""
    loops = [step for step in steps if isinstance(step, dict)]
    for step in loops:
        _mark_unrolled(step["body"], instructions)
    for unrolled, remainder in zip(loops, loops[1:]):
        if unrolled["line"] and unrolled["line"] == remainder["line"]:
            sizes = []
            for loop in (unrolled, remainder):
                indices = list(_indices(loop["body"]))
                loads = sum(instructions[i].base in OPCODE_CLASSES["G"] for i in indices)
                sizes.append((loads, len(indices)))
            (main_loads, main_size), (rest_loads, rest_size) = sizes
            factor = max(1, round(main_loads / rest_loads if main_loads and rest_loads else main_size / rest_size))
            unrolled["unrolled"] = remainder["remainder"] = factor


def _indices(steps):
    for step in steps:
        if isinstance(step, dict):
            yield from _indices(step["body"])
        else:
            yield from range(step[0], step[1] + 1)


def opcode_class(opcode: str) -> str:
    """The class letter of an opcode without modifiers (`OPCODE_CLASSES`; "O" for the others)."""
    return _CLASS_OF.get(opcode, "O")


def encode_instructions(instructions) -> str:
    """`sass.Instruction`s as the model keeps them: 6 characters each (class letter, stall, write barrier, read
    barrier, wait mask in hex), zlib-compressed and base64-encoded (the old backward has over 9,000)."""
    tokens = "".join(
        f"{opcode_class(instruction.base)}{instruction.stall:x}{instruction.write_barrier}{instruction.read_barrier}"
        f"{instruction.wait_mask:02x}"
        for instruction in instructions
    )
    return base64.b64encode(zlib.compress(tokens.encode(), 9)).decode()


@functools.cache
def decode_instructions(encoded: str) -> tuple[tuple[str, int, int, int, int], ...]:
    """`encode_instructions`' string as `(class, stall, write barrier, read barrier, wait mask)` per instruction."""
    tokens = zlib.decompress(base64.b64decode(encoded)).decode()
    return tuple(
        (tokens[i], int(tokens[i + 1], 16), int(tokens[i + 2]), int(tokens[i + 3]), int(tokens[i + 4 : i + 6], 16))
        for i in range(0, len(tokens), 6)
    )


def triton_tools(triton_path: str | None) -> Path:
    """The folder of `nvdisasm` of the Triton under `triton_path` (this process's Triton where `None`)."""
    if triton_path:
        return Path(triton_path) / "triton" / "backends" / "nvidia" / "bin"
    import triton

    return Path(triton.__file__).parent / "backends" / "nvidia" / "bin"


def triton_version(triton_path: str | None) -> str:
    """The version of the Triton under `triton_path` (this process's where `None`)."""
    paths = filter(None, [triton_path, os.environ.get("PYTHONPATH")])
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    run = subprocess.run([sys.executable, "-c", "import triton; print(triton.__version__)"], env=environment,
                         capture_output=True, text=True, check=True)  # fmt: skip
    return run.stdout.strip()


def variant_statistics(kernel: str, cubin: bytes, tools: Path, resources: dict) -> dict:
    """What the model reads of one compiled variant of `kernel`: `resources` (`registers`, `spill_bytes`,
    `shared_bytes`, `num_warps`), its SASS instructions (`encode_instructions`, disassembled by `tools`' `nvdisasm`)
    and program paths (`program_paths`)."""
    from run_scripts.benchmarks.support import kernel_compiles

    module = kernel_compiles.KERNELS[kernel]
    functions, while_lines = _source_functions(module)
    source = os.path.realpath(inspect.getsourcefile(module))

    def function_of(instruction) -> str | None:
        in_source = instruction.file and os.path.realpath(instruction.file) == source
        return _function_of(instruction.line, functions) if in_source else None

    instructions = sass.parse_sass(sass.disassemble(cubin, tools))
    return {"kernel": kernel, **resources, "instructions": encode_instructions(instructions),
            "paths": program_paths(instructions, function_of, while_lines)}  # fmt: skip


def kernel_variants(launches, triton_path: str | None) -> dict[str, dict]:
    """Each distinct kernel variant of `launches`, by its specialisation key, compiled for sm_90 by the Triton under
    `triton_path` (`variant_statistics`)."""
    from run_scripts.benchmarks.support import kernel_compiles
    from run_scripts.benchmarks.support.kernel_resources import ptxas_resources

    by_key = {key: launch for by_kernel in kernel_compiles.distinct_keys(launches).values()
              for key, launch in by_kernel.items()}  # fmt: skip
    compiled = kernel_compiles.gpu_compiles(list(by_key.values()), triton_path)
    variants = {}
    for (key, launch), binary in zip(by_key.items(), compiled, strict=True):
        report = ptxas_resources(binary["ptxas_log"])
        resources = {"registers": report["registers"],
                     "spill_bytes": report["spill_store_bytes"] + report["spill_load_bytes"],
                     "shared_bytes": binary["shared"], "num_warps": binary["num_warps"]}  # fmt: skip
        variants[key] = variant_statistics(launch.kernel, binary["cubin"], triton_tools(triton_path), resources)
    return variants


def run_variants(launches) -> dict[str, dict]:
    """`kernel_variants` of launches that ran on a GPU (`recorded_launches(run=True)`): from the binaries they ran,
    their registers as the driver loaded them."""
    from run_scripts.benchmarks.support import kernel_compiles

    variants = {}
    for launch in launches:
        key = kernel_compiles.specialisation_key(launch)
        if key not in variants:
            compiled = launch.compiled
            metadata = compiled.metadata
            resources = {"registers": compiled.n_regs, "spill_bytes": compiled.n_spills,
                         "shared_bytes": metadata.shared, "num_warps": metadata.num_warps}  # fmt: skip
            variants[key] = variant_statistics(launch.kernel, compiled.asm["cubin"], triton_tools(None), resources)
    return variants


_MATMULS = {"mm": (0, 1), "addmm": (1, 2), "bmm": (0, 1), "baddbmm": (1, 2)}


def _tensor_bytes(value) -> int:
    import torch

    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, (list, tuple)):
        return sum(_tensor_bytes(item) for item in value)
    return 0


def operator_record(func, args, output) -> list | None:
    """A PyTorch operator the GPU would run: `["matmul", flops]` or `["operator", bytes read and written]`; `None`
    for a view or an allocation (nothing launched)."""
    import torch

    from run_scripts.benchmarks.support.launch_counts import ALLOCATIONS, VIEWS

    packet = func.overloadpacket.__name__
    if func.is_view or packet in VIEWS or packet in ALLOCATIONS or packet == "set_" or packet.startswith("_has_"):
        return None
    if packet in _MATMULS:
        first, second = (args[position] for position in _MATMULS[packet])
        batch = first.shape[0] if first.dim() == 3 else 1
        rows, inner, columns = first.shape[-2], first.shape[-1], second.shape[-1]
        return ["matmul", 2.0 * batch * rows * inner * columns]
    tensors = [value for value in args if isinstance(value, torch.Tensor)]
    return ["operator", float(sum(_tensor_bytes(value) for value in tensors) + _tensor_bytes(output))]


def recorded_step(step, run: bool = False) -> tuple[list, list]:
    """`step()` with the kernels' launches recorded (`kernel_compiles.recorded_launches`, run as well where `run`)
    and every PyTorch operator noted (`operator_record`): `(launches, operators)`."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from run_scripts.benchmarks.support import kernel_compiles

    operators = []

    class Operators(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            output = func(*args, **(kwargs or {}))
            record = operator_record(func, args, output)
            if record:
                operators.append(record)
            return output

    with kernel_compiles.recorded_launches(run) as launches, Operators():
        step()
    return launches, operators


def step_records(batch: int, length: int) -> tuple[list, list]:
    """`recorded_step` of one bf16 training step of the paper encoder at `batch` x `length` (random full sentences,
    as `benchmark_speed.py` times it) on this CPU, the kernels tiled as on a GPU."""
    import torch

    from run_scripts.benchmarks.support import kernel_compiles
    from run_scripts.benchmarks.support.timed_models import PAPER_SLSTM, VARIANTS, TimedModel
    from run_scripts.benchmarks.support.workloads import random_workload

    timed = TimedModel(PAPER_SLSTM, VARIANTS["bf16+fused"], random_workload(batch, length), torch.device("cpu"))
    step = timed.call_for("train")
    with kernel_compiles.gpu_tiles():
        return recorded_step(step)


def launch_record(launch, variant_key: str) -> dict:
    """What the model needs of a recorded launch: its variant, grid, integer and constexpr arguments by name, and
    the bytes of its tensor arguments (each once)."""
    import torch

    from run_scripts.benchmarks.support import kernel_compiles

    names = kernel_compiles._compiled_form(launch.kernel)[0].arg_names
    arguments = {**dict(zip(names, launch.args)), **launch.kwargs}
    plain = {name: value for name, value in arguments.items() if isinstance(value, (int, bool))}
    tensors = {(value.data_ptr(), value.numel()): value.numel() * value.element_size()
               for value in arguments.values() if isinstance(value, torch.Tensor)}  # fmt: skip
    return {"variant": variant_key, "kernel": launch.kernel, "grid": list(launch.grid), "arguments": plain,
            "bytes": float(sum(tensors.values()))}  # fmt: skip


def step_entry(launches, operators) -> dict:
    """A step's entry of `step_statistics`: its launches (`launch_record`), matmul FLOPs and other operators' bytes."""
    from run_scripts.benchmarks.support import kernel_compiles

    records = [launch_record(launch, kernel_compiles.specialisation_key(launch)) for launch in launches]
    matmuls = [size for kind, size in operators if kind == "matmul"]
    others = [size for kind, size in operators if kind == "operator"]
    return {"launches": records, "matmul_flops": matmuls, "operator_bytes": others}


def step_statistics(shapes: list[tuple[int, int]], triton_path: str | None) -> dict:
    """What the model needs of this checkout's training step at each of `shapes`, with its kernels compiled by the
    Triton under `triton_path`: `{"triton", "variants", "steps": {"BxL": step_entry}}`."""
    recorded = {f"{batch}x{length}": step_records(batch, length) for batch, length in shapes}
    all_launches = [launch for launches, _ in recorded.values() for launch in launches]
    variants = kernel_variants(all_launches, triton_path)
    steps = {shape: step_entry(launches, operators) for shape, (launches, operators) in recorded.items()}
    return {"triton": triton_version(triton_path), "variants": variants, "steps": steps}


def run_statistics(step, name: str) -> dict:
    """`step_statistics` of `step()` (a training step on a GPU), run once with its launches recorded, the kernels as
    they ran; its step is called `name`."""
    import triton

    launches, operators = recorded_step(step, run=True)
    launches = [launch for launch in launches if launch.compiled is not None]
    return {"triton": triton.__version__, "variants": run_variants(launches),
            "steps": {name: step_entry(launches, operators)}}  # fmt: skip


# ---------------------------------------------------------------------------------------------------------------------
# The model (reads only `step_statistics`' dictionary)


@dataclass(frozen=True)
class WarpCost:
    """One warp's path through its program: `issued` instructions, `issue_cycles` on its busiest pipe, `chain_cycles`
    alone on its scheduler, and the instructions issued per opcode class (`OPCODE_CLASSES`)."""

    issued: int
    issue_cycles: float
    chain_cycles: float
    counts: Counter


class _Warp:
    """A warp's clock, its scoreboards' release times and its counts, as `warp_cycles` runs it."""

    def __init__(self, instructions, trips_of, global_load_cycles: float):
        self.instructions, self.trips_of, self.global_load_cycles = instructions, trips_of, global_load_cycles
        self.clock = 0.0
        self.ready = [0.0] * 6
        self.counts = Counter()

    def run(self, steps: list):
        for step in steps:
            if isinstance(step, dict):
                trips = self.trips_of(step)
                if "unrolled" in step:
                    trips //= step["unrolled"]
                elif "remainder" in step:
                    trips %= step["remainder"]
                self.loop(step["body"], trips)
            else:
                for position in range(step[0], step[1] + 1):
                    self.issue(*self.instructions[position])

    def issue(self, opcode: str, stall: int, write_barrier: int, read_barrier: int, wait_mask: int):
        issue_at = max([self.clock] + [self.ready[barrier] for barrier in range(6) if wait_mask >> barrier & 1])
        if opcode == "B":
            issue_at += BARRIER_CYCLES
        self.clock = issue_at + max(stall, 1)
        if write_barrier != sass.NO_BARRIER:
            latency = self.global_load_cycles if opcode == "G" else SHORT_LATENCY_CYCLES
            self.ready[write_barrier] = max(self.ready[write_barrier], issue_at + latency)
        if read_barrier != sass.NO_BARRIER:
            self.ready[read_barrier] = max(self.ready[read_barrier], issue_at + SHORT_LATENCY_CYCLES)
        self.counts[opcode] += 1

    def _state(self) -> tuple:
        """The scoreboards as seen from the clock (a release already past is no wait)."""
        return tuple(max(ready - self.clock, 0.0) for ready in self.ready)

    def loop(self, body: list, trips: int):
        """`trips` runs of `body`. Once a run ends in the state it began in (the scoreboards' waits from the clock),
        every later run takes the same cycles: those are added at once."""
        for done in range(1, trips + 1):
            clock, state, counts = self.clock, self._state(), Counter(self.counts)
            self.run(body)
            run = (self.clock - clock, state, self._state())
            if run[1] == run[2]:
                left = trips - done
                self.clock += left * run[0]
                self.ready = [self.clock + wait if wait > 0 else ready for ready, wait in zip(self.ready, run[2])]
                for opcode, count in (self.counts - counts).items():
                    self.counts[opcode] += left * count
                return


def warp_cycles(instructions, steps: list, trips_of, global_load_cycles: float = GLOBAL_LOAD_CYCLES) -> WarpCost:
    """A warp's cost along `steps` (`program_paths`) of `instructions` (`decode_instructions`' tuples), a loop
    step run `trips_of(loop step)` times. See the module docstring for the assumptions."""
    warp = _Warp(instructions, trips_of, global_load_cycles)
    warp.run(steps)
    counts = warp.counts
    issued = sum(counts.values())
    memory = sum(counts[letter] for letter in MEMORY_PIPE)
    issue_cycles = max(issued, counts["U"] * SLOW_PIPE_CYCLES, memory * MEMORY_PIPE_CYCLES)
    return WarpCost(issued, issue_cycles, max([warp.clock] + warp.ready), counts)


def programs_per_sm(variant: dict) -> int:
    """Programs of `variant` an SM holds at once: by registers (`programs_per_sm_by_registers`), shared memory and
    the 32-program limit."""
    from run_scripts.benchmarks.support.kernel_resources import programs_per_sm_by_registers

    by_registers = programs_per_sm_by_registers(variant["registers"], variant["num_warps"])
    by_shared = SHARED_BYTES_PER_SM // variant["shared_bytes"] if variant["shared_bytes"] else MAX_PROGRAMS_PER_SM
    return max(1, min(by_registers, by_shared, MAX_PROGRAMS_PER_SM))


def launch_kinds(launch: dict, variant: dict) -> list[tuple[dict, int]]:
    """Each path of the launch's kernel with the programs that take it, in grid order: a path marked by a
    `KIND_PROGRAMS` function takes that many, the unmarked path the rest (of several unmarked paths the longest, the
    one with the most instructions). The fork's fall-through path (an `if` body) is taken to come first in the grid,
    as the kernels' `if program < ...:` puts it."""
    total = math.prod(launch["grid"])
    forked = len(variant["paths"]) > 1
    kinds, unmarked = [], []
    for path in variant["paths"]:
        markers = [function for function in path["functions"] if function in KIND_PROGRAMS and forked]
        if markers:
            kinds.append([path, KIND_PROGRAMS[markers[0]](launch["arguments"], launch["grid"])])
        else:
            unmarked.append(path)
            kinds.append([path, None])
    if unmarked:
        longest = max(unmarked, key=lambda path: sum(1 for _ in _indices(path["steps"])))
        rest = total - sum(programs for _, programs in kinds if programs is not None)
        kinds = [[path, rest if path is longest else programs] for path, programs in kinds]
    return [(path, programs) for path, programs in kinds if programs]


def makespan(durations: list[tuple[float, int]], slots: int) -> float:
    """When the last of a launch's programs ends, `durations` giving `(cycles, programs)` of its kinds in grid order
    and `slots` programs running at once: each program starts in the first slot to come free, in grid order."""
    free = [0.0] * slots
    for cycles, count in durations:
        for _ in range(count):
            heapq.heapreplace(free, free[0] + cycles)
    return max(free)


def _argument(arguments: dict, name):
    """A loop's bound or step by its name in the kernel's source: a number as it is, a launch argument of that name,
    or the one launch argument whose name ends in it (a helper's `BLOCK_S` as the kernel's `WORD_BLOCK_S`)."""
    if isinstance(name, int):
        return name
    if name in arguments:
        return arguments[name]
    ending = [value for argument, value in arguments.items() if argument.endswith("_" + str(name))]
    return ending[0] if len(ending) == 1 else None


def _trips(launch: dict):
    """The trips of a loop step (`program_paths`) of this launch: by `LOOP_TRIPS` where it knows the loop's function,
    else `ceil(bound / step)` of the loop's `while`."""
    arguments = launch["arguments"]

    def trips_of(loop: dict) -> int:
        if loop["loop"] in LOOP_TRIPS:
            return LOOP_TRIPS[loop["loop"]](arguments)
        bound, step = _argument(arguments, loop.get("bound")), _argument(arguments, loop.get("step"))
        if bound is None or not step:
            raise ValueError(
                f"{launch['kernel']} has a loop of {loop['loop']!r} (line {loop.get('line')}) whose trips neither "
                f"LOOP_TRIPS (step_time_model.py) nor its `while` gives from the launch's arguments "
                f"{sorted(arguments)}: add its trip count to LOOP_TRIPS"
            )
        return ceil_div(bound, step)

    return trips_of


def _loops(steps) -> list[dict]:
    """The loop steps of `steps`, nested ones too."""
    loops = [step for step in steps if isinstance(step, dict)]
    return loops + [inner for loop in loops for inner in _loops(loop["body"])]


def _loop_key(loop: dict) -> tuple:
    return loop["loop"], loop.get("line", 0)


@functools.lru_cache(maxsize=4096)
def _path_cost(instructions: str, steps: str, trips: tuple, global_load_cycles: float) -> WarpCost:
    """`warp_cycles` of a path, remembered: the launches of a step repeat the same few."""
    by_loop = dict(trips)
    return warp_cycles(decode_instructions(instructions), json.loads(steps), lambda loop: by_loop[_loop_key(loop)],
                       global_load_cycles)  # fmt: skip


def launch_time(launch: dict, variant: dict, global_load_cycles: float = GLOBAL_LOAD_CYCLES) -> dict:
    """The predicted seconds of one launch and what makes them: programs, waves, programs per SM, and the seconds
    of the launch were every program to take its issue time, its chain, or the memory its launch moves (each
    alone); the prediction takes per program the longer of issue and chain, and the memory's if longer."""
    resident = programs_per_sm(variant)
    slots = H200_SMS * resident
    warps_per_scheduler = resident * variant["num_warps"] / SCHEDULERS_PER_SM
    issue, chain, both = [], [], []
    trips_of = _trips(launch)
    for path, count in launch_kinds(launch, variant):
        trips = tuple(sorted({_loop_key(loop): trips_of(loop) for loop in _loops(path["steps"])}.items()))
        cost = _path_cost(variant["instructions"], json.dumps(path["steps"]), trips, global_load_cycles)
        issue.append((cost.issue_cycles * warps_per_scheduler, count))
        chain.append((cost.chain_cycles, count))
        both.append((max(cost.chain_cycles, cost.issue_cycles * warps_per_scheduler), count))
    programs = sum(count for _, count in both)
    issue_s, chain_s, compute = (_makespan(tuple(kinds), slots) / H200_CLOCK_HZ for kinds in (issue, chain, both))
    memory = launch["bytes"] / HBM_BYTES_PER_S
    seconds = max(compute, memory, KERNEL_FLOOR_S)
    return {"kernel": launch["kernel"], "programs": programs, "waves": ceil_div(programs, slots),
            "registers": variant["registers"], "programs_per_sm": resident, "issue_s": issue_s, "chain_s": chain_s,
            "memory_s": memory, "seconds": seconds}  # fmt: skip


@functools.lru_cache(maxsize=4096)
def _makespan(durations: tuple, slots: int) -> float:
    return makespan(list(durations), slots)


def operator_time(step: dict) -> dict:
    """The matmuls' and the other operators' seconds of a step (`step_statistics`' `steps` entry)."""
    matmuls = sum(max(flops / GEMM_FLOPS_PER_S, KERNEL_FLOOR_S) for flops in step["matmul_flops"])
    others = sum(max(size / HBM_BYTES_PER_S, KERNEL_FLOOR_S) for size in step["operator_bytes"])
    return {"matmuls": len(step["matmul_flops"]), "matmul_s": matmuls, "operators": len(step["operator_bytes"]),
            "operator_s": others}  # fmt: skip


def step_prediction(statistics: dict, shape: str, global_load_cycles: float = GLOBAL_LOAD_CYCLES) -> dict:
    """A training step at `shape` ("32x512"): per kernel (summed over its launches) the `launch_time` fields and
    launches, the operators' `operator_time`, and the step's total seconds."""
    step = statistics["steps"][shape]
    kernels = {}
    for launch in step["launches"]:
        timed = launch_time(launch, statistics["variants"][launch["variant"]], global_load_cycles)
        row = kernels.setdefault(launch["kernel"], {**timed, "launches": 0, "seconds": 0.0, "issue_s": 0.0,
                                                    "chain_s": 0.0, "memory_s": 0.0})  # fmt: skip
        row["launches"] += 1
        for name in ("seconds", "issue_s", "chain_s", "memory_s"):
            row[name] += timed[name]
    operators = operator_time(step)
    total = sum(row["seconds"] for row in kernels.values()) + operators["matmul_s"] + operators["operator_s"]
    return {"kernels": kernels, **operators, "seconds": total}


def fit_global_load_cycles(statistics: dict, measured: dict = MEASURED) -> float:
    """The global-load latency (cycles, 100 to 4000) that minimises the squared log error of `step_prediction`
    against `measured` (`{(batch, length): ms}`): the model's one fitted constant."""
    def error(cycles: float) -> float:
        return sum(math.log(step_prediction(statistics, f"{batch}x{length}", cycles)["seconds"] * 1e3 / ms) ** 2
                   for (batch, length), ms in measured.items())  # fmt: skip

    low, high = 100.0, 4000.0
    while high - low > 4:  # golden-section search: the error is unimodal in the latency
        first, second = high - (high - low) / 1.618, low + (high - low) / 1.618
        low, high = (low, second) if error(first) < error(second) else (first, high)
    return float(round((low + high) / 2))

