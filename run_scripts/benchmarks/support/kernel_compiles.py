"""How many compiled variants of each of the package's Triton kernels a run needs, and what compiling one costs.

Triton compiles a kernel once per specialisation key: the values of its `tl.constexpr` arguments (tile sizes,
switches, `None` for an absent pointer), the dtype and 16-byte alignment of each pointer, and for each integer argument
not in the kernel's `do_not_specialize` whether it is 1, a multiple of 16, or neither; and the launch options
(`num_warps`). A launch whose key is new pays a compile (seconds of host time) before it runs.

`recorded_launches` records the launches a block of code makes, with the kernels replaced by recorders that run
nothing (their outputs stay uninitialised: only which launches happen, with which arguments and grids, is kept), so
that a model's training step can be recorded on a CPU for any batch shape. `specialisation_key` computes the key Triton
computes on an NVIDIA GPU for a recorded launch, with Triton's own binder for an sm_90 target (no GPU needed);
`gpu_compiles` compiles the launches of distinct keys for sm_90 in a fresh process (Triton's compiler and `ptxas`,
no GPU; a process of its own, since this one may run the kernels in Triton's interpreter): the seconds each takes
(`time_gpu_compiles`), and what `ptxas` reports of its binary (registers, stack, spills: `kernel_resources.py`).
`compile_for_sm_90` is the one compile of every such check (`tests/model/compile_kernels_for_a_gpu.py` too).

The kernels are found by `kernel_names`, so that a kernel added to a module is recorded and compiled with the others.
The binder and `_pack_args` are Triton internals (Triton 3.3 on).
"""

import contextlib
import functools
import io
import os
import pickle
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from unittest import mock

from modeling_slstm import triton_crf, triton_kernels, triton_step
from run_scripts import REPOSITORY_ROOT


def kernel_names(module) -> tuple[str, ...]:
    """The names of the kernels `module` defines: its `STEP_KERNELS` (a tuple of kernel names) where it has one, else
    each of its `triton.jit` functions whose name ends in `_kernel` (the helpers they call are `_`-prefixed)."""
    from triton.runtime.jit import KernelInterface

    listed = getattr(module, "STEP_KERNELS", None)
    if listed is not None:
        return tuple(listed)
    return tuple(
        name for name, value in vars(module).items() if name.endswith("_kernel") and isinstance(value, KernelInterface)
    )


LAUNCHING_MODULES = {
    # module that launches kernels: (the module that defines them, their names)
    triton_step: (triton_kernels, kernel_names(triton_kernels)),
    triton_crf: (triton_crf, kernel_names(triton_crf)),
}
STEP_KERNEL_NAMES = LAUNCHING_MODULES[triton_step][1]
KERNELS = {name: defining for defining, names in LAUNCHING_MODULES.values() for name in names}
"""Each kernel's defining module, by the kernel's name."""
SM_90 = ("cuda", 90, 32)  # backend, compute capability, warp size: an H100's or H200's target


@dataclass
class Launch:
    """One recorded kernel launch: the kernel's name, its positional and keyword arguments, its grid (the programs
    per axis, as the launcher gave it) and, where it ran, what Triton's launch returned (the compiled kernel)."""

    kernel: str
    args: tuple
    kwargs: dict
    grid: tuple
    compiled: object = None


class _Recorder:
    """Stands in for a kernel: `kernel[grid](...)` appends a `Launch` to `launches`, and runs `kernel` only where
    `run`."""

    def __init__(self, name: str, launches: list[Launch], kernel=None):
        self.name, self.launches, self.kernel = name, launches, kernel

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            compiled = self.kernel[grid](*args, **kwargs) if self.kernel is not None else None
            self.launches.append(Launch(self.name, args, kwargs, tuple(grid), compiled))

        return launch


@contextlib.contextmanager
def recorded_launches(run: bool = False) -> Iterator[list[Launch]]:
    """Within the block, every kernel launch of `triton_step` and `triton_crf` is recorded into the list yielded
    instead of run (with `run`, as well as run): each kernel is replaced where it is defined and where the launching
    module imported it."""
    launches: list[Launch] = []
    with contextlib.ExitStack() as patches:
        for launching, (defining, names) in LAUNCHING_MODULES.items():
            for name in names:
                recorder = _Recorder(name, launches, getattr(defining, name) if run else None)
                for module in dict.fromkeys((defining, launching)):
                    if hasattr(module, name):
                        patches.enter_context(mock.patch.object(module, name, recorder))
        yield launches


@contextlib.contextmanager
def gpu_tiles() -> Iterator[None]:
    """Within the block, the kernels' launches tile their work as on a GPU (`triton_kernels.GPU_TILES`), also in
    Triton's interpreter; the tiling before it is restored after."""
    with triton_kernels.using_tiles(triton_kernels.GPU_TILES):
        yield


def _kernel(name: str):
    """The kernel `name` as defined (a `JITFunction`, or an `InterpretedFunction` under `TRITON_INTERPRET=1`)."""
    return getattr(KERNELS[name], name)


@functools.cache
def _compiled_form(name: str):
    """The kernel `name` as Triton compiles it for a GPU, its binder for an sm_90 target and that target's backend:
    `(JITFunction, binder, backend)`. Under the interpreter, a `JITFunction` of the same function and `jit` options
    (it only binds arguments here: compiling it needs its helpers compiled too, `time_gpu_compiles` does that)."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import make_backend
    from triton.runtime.jit import JITFunction, create_function_from_signature

    kernel = _kernel(name)
    if not isinstance(kernel, JITFunction):
        kernel = JITFunction(kernel.fn, **kernel.kwargs)
    backend = make_backend(GPUTarget(*SM_90))
    return kernel, create_function_from_signature(kernel.signature, kernel.params, backend), backend


def specialisation_key(launch: Launch) -> str:
    """Triton's cache key of `launch` on an sm_90 GPU (as `JITFunction.run` computes it): a new key is a compile."""
    _, binder, _ = _compiled_form(launch.kernel)
    _, specialization, options = binder(*launch.args, **launch.kwargs)
    return str(specialization) + str(options)


def distinct_keys(launches: list[Launch]) -> dict[str, dict[str, Launch]]:
    """Per kernel name, its launches' distinct specialisation keys, each with the first launch that had it."""
    keys: dict[str, dict[str, Launch]] = defaultdict(dict)
    for launch in launches:
        keys[launch.kernel].setdefault(specialisation_key(launch), launch)
    return dict(keys)


def _compile_request(launch: Launch) -> tuple:
    """What compiling `launch` for sm_90 takes, in plain values: `(kernel name, signature, constexprs, attrs,
    options)`, as `JITFunction.run` works them out before it compiles."""
    kernel, binder, backend = _compiled_form(launch.kernel)
    bound_args, specialization, options = binder(*launch.args, **launch.kwargs)
    options, signature, constexprs, attrs = kernel._pack_args(backend, launch.kwargs, bound_args, specialization,
                                                              options)  # fmt: skip
    return launch.kernel, signature, constexprs, attrs, options.__dict__


def compile_for_sm_90(kernel, signature: dict, constexprs: dict, attrs: dict | None = None, options=None):
    """`kernel` (a `JITFunction`) compiled for sm_90 by Triton's compiler and `ptxas`, no GPU needed; run without
    `TRITON_INTERPRET`. `signature` gives each argument's type (`"*bf16"`, `"i32"`, `"constexpr"`), `constexprs`
    their values, `attrs` the alignments Triton specialises on, `options` the launch options (`num_warps`)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    source = ASTSource(kernel, signature, constexprs, attrs)
    compiled = triton.compile(source, target=GPUTarget(*SM_90), options=options)
    if "cubin" not in compiled.asm:
        raise RuntimeError(f"{kernel.fn.__name__} compiled without an sm_90 binary: {sorted(compiled.asm)}")
    return compiled


def gpu_compiles(launches: list[Launch], triton_path: str | None = None) -> list[dict]:
    """Each launch's kernel variant compiled for sm_90, in a fresh process with an empty Triton cache and without
    the interpreter, in order: `{"seconds", "ptxas_log", "shared", "num_warps", "cubin"}` (`ptxas -v`'s report of
    the binary, the shared memory a launch asks for in bytes, the warps per program, the binary itself).
    `triton_path`: a folder holding another Triton install (`triton/`) to compile with, first on the path of the
    compiling process (e.g. the GPU machine's Triton beside this one's); this process's Triton by default."""
    requests = [_compile_request(launch) for launch in launches]
    environment = {name: value for name, value in os.environ.items() if name != "TRITON_INTERPRET"}
    # This checkout's package, as in this process; Triton prints ptxas's report when asked to.
    paths = [triton_path] if triton_path else []
    environment["PYTHONPATH"] = os.pathsep.join([*paths, str(REPOSITORY_ROOT), os.environ.get("PYTHONPATH", "")])
    environment["TRITON_DUMP_PTXAS_LOG"] = "1"
    with tempfile.TemporaryDirectory() as cache:  # an empty cache: every variant is compiled, ptxas runs
        environment["TRITON_CACHE_DIR"] = cache
        run = subprocess.run(
            [sys.executable, "-m", __spec__.name], input=pickle.dumps(requests), env=environment, cwd=REPOSITORY_ROOT,
            capture_output=True, check=False,
        )  # fmt: skip
    if run.returncode:
        raise RuntimeError(f"compiling for sm_90 failed:\n{run.stderr.decode()[-5000:]}")
    return pickle.loads(run.stdout)


def time_gpu_compiles(launches: list[Launch]) -> list[float]:
    """Seconds to compile each launch's kernel variant for sm_90 (`gpu_compiles`), in order."""
    return [compiled["seconds"] for compiled in gpu_compiles(launches)]


def _compile_requests_from_stdin():
    """`gpu_compiles`' process: compiles each request read from stdin, writes what `gpu_compiles` returns to
    stdout."""
    results = []
    for name, signature, constexprs, attrs, options in pickle.loads(sys.stdin.buffer.read()):
        start = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()) as printed:  # ptxas's report (TRITON_DUMP_PTXAS_LOG)
            compiled = compile_for_sm_90(_kernel(name), signature, constexprs, attrs, options)
        seconds = time.perf_counter() - start
        metadata = compiled.metadata
        results.append({"seconds": seconds, "ptxas_log": printed.getvalue(), "shared": metadata.shared,
                        "num_warps": metadata.num_warps, "cubin": compiled.asm["cubin"]})  # fmt: skip
    sys.stdout.buffer.write(pickle.dumps(results))


if __name__ == "__main__":
    _compile_requests_from_stdin()
