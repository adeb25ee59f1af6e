"""Where the package's Triton kernels run: the one module that imports Triton, knows whether its kernels are
interpreted, checks a tensor's device, and chooses between the kernels and the PyTorch code they mirror
(`uses_kernels`), for the fused recurrence (`triton_step.py`) and the CRF (`crf.py`) alike; and the one function that
allocates what the kernels write (`kernel_buffer`).

Each caller names its own obstacles (options the kernels do not cover, dtypes, sizes) and adds `triton_obstacles`
(Triton missing, or the tensors on a device the kernels cannot reach); `uses_kernels` applies the one rule of
`config.step_implementation` to them.

Triton is optional. The kernel modules (`triton_kernels.py`, `triton_crf.py`) take `triton` and `tl` from here and are
imported as plain modules, so that go-to-definition follows every call into them. Where Triton cannot be imported,
`triton` and `tl` are `_WithoutTriton` stand-ins under which those modules still import: their `@triton.jit` functions
stay plain, never-launched Python functions, since `triton_obstacles` then names the import error. The import sits in
a `try` block, which transformers' check of a checkpoint's code files skips: a checkpoint loads (and runs the PyTorch
code) where Triton is not installed.
"""

import torch

STEP_IMPLEMENTATIONS = ("auto", "eager", "triton")
"""Values of `config.step_implementation` (and of the CRF's ``implementation`` argument): `"eager"` the PyTorch code,
`"triton"` the kernels (an error where they cannot run), `"auto"` the kernels on CUDA tensors where they can run."""


class _WithoutTriton:
    """Stands in for `triton` and `triton.language` where Triton cannot be imported: `jit` (also with options,
    `jit(do_not_specialize=...)`) leaves a kernel a plain function, and any other name (`tl.constexpr` in a signature
    or a module constant) is a no-op callable."""

    @staticmethod
    def jit(function=None, **options):
        return (lambda kernel: kernel) if function is None else function

    def __getattr__(self, name: str):
        return lambda *args, **kwargs: None


# TRITON_IMPORT_ERROR: why Triton cannot be imported, as an obstacle; `None` where it can.
try:
    import triton
    import triton.language as tl
except ImportError as error:
    triton = tl = _WithoutTriton()
    TRITON_IMPORT_ERROR = f"triton cannot be imported ({error})"
else:
    TRITON_IMPORT_ERROR = None


def _kernels_interpreted() -> bool:
    """Whether `triton.jit` makes kernels that Triton's interpreter runs on CPU tensors (`TRITON_INTERPRET=1` when
    this module was imported; the kernel modules, imported right after it, decorate theirs under the same setting)."""
    if TRITON_IMPORT_ERROR:
        return False
    try:
        from triton.runtime.interpreter import InterpretedFunction
    except ImportError:  # a Triton without an interpreter: kernels are always compiled
        return False
    return isinstance(triton.jit(_kernels_interpreted), InterpretedFunction)


RUN_TIME_SIZES = ("seq",)
"""Kernel arguments that Triton compiles no variant for (`triton.jit(do_not_specialize=RUN_TIME_SIZES)`): by default a
kernel is compiled anew for an integer argument that is 1, a multiple of 16, or neither, and the padded length `seq`
changes from batch to batch, while a compile takes seconds. The kernels gain nothing from knowing it: the step
kernels' row offsets are multiples of `hidden`, the CRF's of `BLOCK_TAGS` or `num_tags`, both fixed per model and
left specialised."""

KERNELS_INTERPRETED = _kernels_interpreted()
"""Whether the kernels run in Triton's interpreter (on CPU tensors) rather than compiled (on CUDA tensors)."""


def kernel_device_obstacle(tensor: torch.Tensor, interpreted: bool = KERNELS_INTERPRETED) -> str | None:
    """Why Triton kernels cannot run on `tensor`'s device, or None: they take CUDA tensors, or CPU tensors where they
    run in Triton's interpreter (`interpreted`, by default whether this process's kernels are)."""
    if tensor.is_cuda or (tensor.device.type == "cpu" and interpreted):
        return None
    return (
        f"the tensors are on {tensor.device}, and the kernels need CUDA tensors (or CPU tensors with Triton's "
        "interpreter, TRITON_INTERPRET=1 set before the package is imported)"
    )


def triton_obstacles(tensor: torch.Tensor) -> list[str]:
    """What keeps every Triton kernel from running on `tensor`: Triton missing, or the tensor's device (see
    `kernel_device_obstacle`); empty when neither does."""
    if TRITON_IMPORT_ERROR:
        return [TRITON_IMPORT_ERROR]
    device_obstacle = kernel_device_obstacle(tensor)
    return [] if device_obstacle is None else [device_obstacle]


def uses_kernels(implementation: str, tensor: torch.Tensor, obstacles: list[str], setting: str, kernels: str) -> bool:
    """Whether a call on `tensor` runs Triton kernels, from `implementation` (one of `STEP_IMPLEMENTATIONS`) and the
    caller's `obstacles` (why its kernels cannot run here, `triton_obstacles` included; empty when they can):
    `"eager"` never; `"auto"` on CUDA tensors without obstacles (on the CPU the PyTorch code is the faster, even in
    the interpreter); `"triton"` always, or an error naming the obstacles. Reads the device only, never values.

    Args:
        setting (`str`): the name of the caller's argument or config field, for the messages
            (`"step_implementation"`).
        kernels (`str`): what the kernels compute, for the message (`"the fused step"`).

    Raises:
        `ValueError`: If `implementation` is none of `STEP_IMPLEMENTATIONS`, or is `"triton"` where `obstacles` stand.
    """
    if implementation not in STEP_IMPLEMENTATIONS:
        raise ValueError(f"{setting} must be one of {STEP_IMPLEMENTATIONS}, got {implementation!r}")
    if implementation == "eager":
        return False
    if implementation == "auto":
        return tensor.is_cuda and not obstacles
    if obstacles:
        raise ValueError(f"{setting}='triton' cannot run {kernels} here: {'; '.join(obstacles)}")
    return True


def kernel_buffer(like: torch.Tensor, shape: tuple[int, ...], dtype: torch.dtype | None = None) -> torch.Tensor:
    """An empty contiguous tensor of `shape` on `like`'s device, in `dtype` (default `like`'s), for a kernel to write:
    every buffer that the kernels write is made here, so that the tests can hand out each one inside guard regions
    and catch a store outside it (a GPU runs such a store silently)."""
    return like.new_empty(shape, dtype=dtype)
