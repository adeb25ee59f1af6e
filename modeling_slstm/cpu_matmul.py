"""CPU matmul backends of the S-LSTM layers. `SLSTMLinear`: the `nn.Linear` of every S-LSTM layer, with the CPU matmul
path chosen for the machine it runs on; `SLSTMConv1d`: the character CNN's `nn.Conv1d`, kept out of slow CPU bf16
likewise.

The oneDNN path calls a private PyTorch op; a probe at the first matmul checks that it exists and computes what
`torch.nn.functional.linear` does (`onednn_matmul_problem`), and otherwise the layers fall back to
`torch.nn.functional.linear` with one warning.

Hand-written because no library does this per machine: PyTorch sends float32 `F.linear` on the CPU to MKL, which
on AMD CPUs runs the S-LSTM step's products slower than oneDNN (about half its speed with AVX-512; with AVX2 only,
0.83x at 32 x 128 tokens and equal at 10-sentence batches); `torch.utils.mkldnn` only
converts whole modules for inference (no autograd). And CPU bf16 autocast, a large gain where the CPU has a fast bf16
path, makes matmuls slower where it has none: many times slower where bf16 is emulated, about twice on Intel CPUs
with avx512_bf16 but no AMX. `bf16_decision` says which CPUs get bf16 matmuls.

`SLSTMLinear` is a plain `nn.Linear` subclass (same parameters, same state dict), so PEFT/LoRA, forward hooks,
pruning and tools that select layers with `isinstance(module, nn.Linear)` see and replace it like any other
`nn.Linear`. Its forward only picks how the same product is computed; results differ from `nn.Linear` by float
summation order at most. Tools that match exact module types (`torch.ao.quantization.quantize_dynamic`) need the
plain classes: `as_plain_torch_modules(model)` swaps them in place.

How much each path gains on which CPUs is measured in docs/benchmarks.md.
"""

import logging
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache

import torch
from torch import nn

from .custom_operators import operator_name

logger = logging.getLogger(__name__)

MATMUL_BACKENDS = ("auto", "onednn", "default")
MATMUL_BACKEND_ENV = "SLSTM_MATMUL_BACKEND"


def _onednn_matmul_impl(inputs: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """`inputs @ weight.T` by oneDNN for dense float32 CPU tensors `(rows, in)`, `(out, in)`."""
    return torch.ops.mkldnn._linear_pointwise(inputs, weight, None, "none", [], None)


# A custom op, so that `torch.compile` keeps the oneDNN matmul as it is (inductor lowers `mkldnn._linear_pointwise`
# only for frozen weights) and fuses the elementwise work around it.
@torch.library.custom_op(operator_name("onednn_matmul"), mutates_args=())
def _onednn_matmul(inputs: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return _onednn_matmul_impl(inputs, weight)


@_onednn_matmul.register_fake
def _(inputs, weight):
    return inputs.new_empty(inputs.shape[0], weight.shape[0])


def _onednn_matmul_setup_context(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def _onednn_matmul_backward(ctx, grad):
    inputs, weight = ctx.saved_tensors
    grad = grad.contiguous()
    grad_inputs = grad_weight = None
    if ctx.needs_input_grad[0]:
        grad_inputs = _input_gradient(grad, weight)
    if ctx.needs_input_grad[1]:
        grad_weight = _onednn_matmul(grad.t().contiguous(), inputs.t().contiguous())  # grad.T @ inputs
    return grad_inputs, grad_weight


def _input_gradient(grad: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """`grad @ weight`: `(rows, out)` x `(out, in)` -> `(rows, in)`, by oneDNN reading the transposed weight as a view.

    oneDNN takes the weight as `(in, out)`: a transposed copy per call would cost more than oneDNN gains at small
    batches, while the view needs no copy at any batch size.
    """
    return _onednn_matmul(grad, weight.t())


_onednn_matmul.register_autograd(_onednn_matmul_backward, setup_context=_onednn_matmul_setup_context)


NATIVE_BF16_CPU_FLAGS = frozenset({"avx512_bf16", "amx_bf16", "bf16"})
"""/proc/cpuinfo flags of bf16 instructions: x86 AVX-512 BF16 and AMX, aarch64 BF16."""


@cache
def cpu_info() -> dict[str, str]:
    """The first processor's fields of /proc/cpuinfo (`parse_cpuinfo`); empty where there is no such file (macOS,
    Windows)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            return parse_cpuinfo(cpuinfo.read())
    except OSError:
        return {}


def parse_cpuinfo(text: str) -> dict[str, str]:
    """The first processor's `key: value` fields of a /proc/cpuinfo text ("vendor_id", "cpu family", "model",
    "model name", "flags" on x86; "Features" on aarch64, …)."""
    fields = {}
    for line in text.split("\n\n", 1)[0].splitlines():
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    return fields


def cpu_flags() -> frozenset[str]:
    """The CPU's instruction-set flags from /proc/cpuinfo (empty where there is none)."""
    info = cpu_info()
    return frozenset(info.get("flags", info.get("Features", "")).split())


def _backend_for_this_cpu() -> str:
    """The rule behind "auto": oneDNN where it was measured faster (AMD CPUs with AVX2 or AVX-512), PyTorch's default
    elsewhere, so that a CPU nobody measured keeps PyTorch's own choice.

    A rule rather than a timing at start-up: on the AVX2 EPYC the two backends are within timing noise at small
    batches, so a timing would pick either from one process to the next and change results by float summation order.
    """
    has_onednn_linear = torch.backends.mkldnn.is_available()
    is_amd = cpu_info().get("vendor_id") == "AuthenticAMD"
    amd_with_avx = is_amd and torch.backends.cpu.get_cpu_capability().startswith("AVX")
    return "onednn" if has_onednn_linear and amd_with_avx else "default"


_backend_override: str | None = None


def set_matmul_backend(backend: str | None) -> None:
    """Override the float32 CPU matmul backend for this process: "onednn", "default" (PyTorch's, MKL), "auto" (the
    per-machine rule) or `None` (back to the `SLSTM_MATMUL_BACKEND` environment variable, itself "auto" if unset).

    Models already compiled with `torch.compile` keep the backend they were traced with (see `selected_backend`)."""
    global _backend_override
    if backend is not None and backend not in MATMUL_BACKENDS:
        raise ValueError(f"matmul backend must be one of {MATMUL_BACKENDS} or None, got {backend!r}")
    _backend_override = backend
    _decide_backend.cache_clear()


@contextmanager
def matmul_backend(backend: str) -> Iterator[None]:
    """`set_matmul_backend(backend)` inside the block, and the override that was set before it after (benchmarks
    that must not depend on the CPU's rule, e.g. counting operators with PyTorch's matmuls as a GPU launches them)."""
    previous = _backend_override
    set_matmul_backend(backend)
    try:
        yield
    finally:
        set_matmul_backend(previous)


def onednn_matmul_problem() -> str | None:
    """Why the private oneDNN op cannot serve here (it is missing, raises, or computes another product than
    `torch.nn.functional.linear` on a small probe, both directions of the layer's matmuls), or `None` when it can.

    The op is private to PyTorch and ships inside every saved checkpoint's code, so a future PyTorch that removes or
    changes it must cost speed, never a model that runs: the layers then use `torch.nn.functional.linear`.
    """
    inputs = torch.linspace(-1.0, 1.0, 6).view(2, 3)  # (rows, in)
    weight = torch.linspace(-2.0, 2.0, 12).view(4, 3)  # (out, in)
    grad = torch.linspace(0.5, -0.5, 8).view(2, 4)  # (rows, out)
    try:
        forward = _onednn_matmul_impl(inputs, weight)
        backward = _onednn_matmul_impl(grad, weight.t())  # the input gradient reads the weight's transpose as a view
    except Exception as error:  # noqa: BLE001 (a private op: whatever it raises, it cannot be used)
        return f"torch.ops.mkldnn._linear_pointwise failed ({type(error).__name__}: {error})"
    expected = (nn.functional.linear(inputs, weight), grad @ weight)
    if not all(torch.allclose(got, want, atol=1e-5) for got, want in zip((forward, backward), expected)):
        return "torch.ops.mkldnn._linear_pointwise computed a different product than torch.nn.functional.linear"
    return None


@cache
def _decide_backend() -> str:
    requested = _backend_override or os.environ.get(MATMUL_BACKEND_ENV, "auto")
    if requested not in MATMUL_BACKENDS:
        raise ValueError(f"{MATMUL_BACKEND_ENV} must be one of {MATMUL_BACKENDS}, got {requested!r}")
    backend = _backend_for_this_cpu() if requested == "auto" else requested
    problem = onednn_matmul_problem() if backend == "onednn" else None
    if problem:
        logger.warning(
            "S-LSTM float32 CPU matmuls fall back to torch.nn.functional.linear: %s. The model's outputs are the same; "
            "only the oneDNN speed-up is lost.",
            problem,
        )
        backend = "default"
    logger.debug(
        "S-LSTM float32 CPU matmuls: %s (requested %s; CPU capability %s, vendor %s)",
        backend,
        requested,
        torch.backends.cpu.get_cpu_capability(),
        cpu_info().get("vendor_id", "unknown"),
    )
    return backend


# `assume_constant_result`: `torch.compile` calls these once while tracing and bakes the answer into the graph.
# Traced through, they would break the graph (dynamo cannot trace the CPU queries), and an `unfold` view crossing such
# a break gets wrong gradients from AOTAutograd (torch 2.13).
@torch.compiler.assume_constant_result
def selected_backend() -> str:
    """The float32 CPU matmul backend in use: "onednn" or "default". Decided once per process (logged at debug
    level) from `set_matmul_backend`, else the `SLSTM_MATMUL_BACKEND` environment variable, else the CPU rule;
    "default", with one warning, where the oneDNN op fails its probe (`onednn_matmul_problem`)."""
    return _decide_backend()


CPU_BF16_ENV = "SLSTM_CPU_BF16"
CPU_BF16_CHOICES = ("auto", "bf16", "float32")
PROBE_SHAPE = (1024, 1024, 1024)
"""(rows, in, out) of the probe's matmul: a training step's largest products are of this order (paper model)."""
PROBE_MARGIN = 0.8
"""The probe counts bf16 as faster when its matmul takes at most this share of float32's time: a model gains less
than its matmuls (autocast's casts, elementwise work), e.g. 1.86x matmuls gave 1.68x training on an AMD EPYC."""


@dataclass(frozen=True)
class Bf16Decision:
    """Whether the S-LSTM layers run their CPU matmuls in bf16 under bf16 autocast (`fast`), and why (`reason`)."""

    fast: bool
    reason: str


def measured_bf16_speed(vendor: str, flags: frozenset[str], onednn_bf16: bool) -> Bf16Decision | None:
    """The rule from the CPU kinds measured (docs/benchmarks.md, "bf16 on each CPU kind"), or `None` for a CPU that no
    measurement covers (the probe decides there).

    Args:
        vendor (`str`): /proc/cpuinfo's `vendor_id` ("AuthenticAMD", "GenuineIntel"; "" where there is none).
        flags (`frozenset[str]`): its instruction-set flags (empty where /proc/cpuinfo cannot be read).
        onednn_bf16 (`bool`): whether PyTorch has a oneDNN bf16 path (`torch.ops.mkldnn._is_mkldnn_bf16_supported()`;
            it also says yes on AVX-512 CPUs that only emulate bf16).
    """
    if not onednn_bf16:
        return Bf16Decision(False, "this PyTorch build has no oneDNN bf16 path")
    if flags and not flags & NATIVE_BF16_CPU_FLAGS:
        return Bf16Decision(False, "no bf16 instructions: emulated bf16 matmuls are many times slower than float32")
    if "amx_bf16" in flags:
        return Bf16Decision(True, "AMX bf16 tiles")
    if "avx512_bf16" in flags and vendor == "AuthenticAMD":
        return Bf16Decision(True, "avx512_bf16 on an AMD CPU, measured faster than float32")
    if "avx512_bf16" in flags and vendor == "GenuineIntel":
        return Bf16Decision(
            False, "avx512_bf16 without AMX on an Intel CPU: bf16 matmuls at about half float32's speed"
        )
    return None


def best_seconds_in_turn(calls: dict[str, Callable[[], object]], repeats: int, clock=time.perf_counter) -> dict:
    """`{name: the fewest seconds of one call}` over `repeats` rounds after one untimed round, the calls in turn within
    each round (so that a machine whose load changes slows both alike)."""
    for call in calls.values():
        call()
    best = dict.fromkeys(calls, float("inf"))
    for _ in range(repeats):
        for name, call in calls.items():
            start = clock()
            call()
            best[name] = min(best[name], clock() - start)
    return best


@dataclass(frozen=True)
class Bf16Probe:
    """The best seconds of one `PROBE_SHAPE` matmul in float32 (by the float32 backend in use) and in bf16."""

    float32_seconds: float
    bf16_seconds: float

    @property
    def bf16_faster(self) -> bool:
        return self.bf16_seconds <= PROBE_MARGIN * self.float32_seconds

    def describe(self) -> str:
        gflop = 2 * PROBE_SHAPE[0] * PROBE_SHAPE[1] * PROBE_SHAPE[2] / 1e9
        return (
            f"a {'x'.join(map(str, PROBE_SHAPE))} matmul ran at {gflop / self.bf16_seconds:.0f} GFLOP/s in bf16 and "
            f"{gflop / self.float32_seconds:.0f} in float32"
        )


def probe_bf16_matmul(repeats: int = 3) -> Bf16Probe:
    """Times one `PROBE_SHAPE` matmul in bf16 and in float32, in turn (`best_seconds_in_turn`)."""
    rows, in_features, out_features = PROBE_SHAPE
    generator = torch.Generator().manual_seed(0)
    inputs = torch.randn(rows, in_features, generator=generator)  # (rows, in)
    weight = torch.randn(out_features, in_features, generator=generator)  # (out, in)
    inputs_bf16, weight_bf16 = inputs.bfloat16(), weight.bfloat16()
    float32_layer = SLSTMLinear(in_features, out_features, bias=False)
    float32_layer.weight.data = weight
    # Autocast off: the probe runs at the first S-LSTM matmul under bf16 autocast, whose layer asks for this decision.
    with torch.no_grad(), torch.autocast("cpu", enabled=False):
        best = best_seconds_in_turn(
            {
                "float32": lambda: float32_layer(inputs),
                "bf16": lambda: nn.functional.linear(inputs_bf16, weight_bf16),
            },
            repeats,
        )
    return Bf16Probe(best["float32"], best["bf16"])


_cpu_bf16_override: str | None = None


def set_cpu_bf16(choice: str | None) -> None:
    """Override whether the S-LSTM layers run CPU matmuls in bf16 under bf16 autocast, for this process: "bf16",
    "float32", "auto" (the rule, else the probe) or `None` (back to the `SLSTM_CPU_BF16` environment variable, itself
    "auto" if unset). Models already compiled with `torch.compile` keep what they were traced with."""
    global _cpu_bf16_override
    if choice is not None and choice not in CPU_BF16_CHOICES:
        raise ValueError(f"CPU bf16 choice must be one of {CPU_BF16_CHOICES} or None, got {choice!r}")
    _cpu_bf16_override = choice
    _decide_bf16.cache_clear()


@cache
def _decide_bf16() -> Bf16Decision:
    requested = _cpu_bf16_override or os.environ.get(CPU_BF16_ENV, "auto")
    if requested not in CPU_BF16_CHOICES:
        raise ValueError(f"{CPU_BF16_ENV} must be one of {CPU_BF16_CHOICES}, got {requested!r}")
    if requested != "auto":
        return Bf16Decision(requested == "bf16", f"{CPU_BF16_ENV}={requested}")
    onednn_bf16 = bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    decision = measured_bf16_speed(cpu_info().get("vendor_id", ""), cpu_flags(), onednn_bf16)
    if decision is None:
        probe = probe_bf16_matmul()
        faster = "faster" if probe.bf16_faster else "not faster"
        decision = Bf16Decision(probe.bf16_faster, f"{probe.describe()} ({faster} than float32 by the probe's margin)")
        logger.info("S-LSTM CPU bf16 matmuls %s: %s", "on" if decision.fast else "off", decision.reason)
    return decision


def bf16_decision() -> Bf16Decision:
    """Whether bf16 matmuls run faster than float32 ones on this CPU, and why: decided once per process from
    `set_cpu_bf16`, else the `SLSTM_CPU_BF16` environment variable, else `measured_bf16_speed`'s rule for the CPU
    kinds measured, else a one-time probe (`probe_bf16_matmul`: bf16 counts as faster when its matmul takes at most
    `PROBE_MARGIN` of float32's time). Where the two are close a probe can answer differently from one process to the
    next (and bf16 changes results): `SLSTM_CPU_BF16` makes runs on such a CPU repeatable."""
    return _decide_bf16()


@torch.compiler.assume_constant_result
def cpu_has_fast_bf16() -> bool:
    """Whether the S-LSTM layers run their CPU matmuls in bf16 under bf16 autocast: where bf16 is faster than float32
    (`bf16_decision`). Elsewhere they keep float32, which is faster there (warned once).

    The one rule for bf16 on the CPU: the S-LSTM layers, and the repository's training scripts (their `--bf16`
    warning and launcher) and benchmarks all ask it."""
    return bf16_decision().fast


def _bf16_autocast_without_fast_path(inputs: torch.Tensor) -> bool:
    return (
        inputs.device.type == "cpu"
        and torch.is_autocast_enabled("cpu")
        and torch.get_autocast_dtype("cpu") == torch.bfloat16
        and not cpu_has_fast_bf16()
    )


def _float32_without_autocast(compute, inputs: torch.Tensor) -> torch.Tensor:
    """`compute(inputs)` in float32 with CPU autocast off (warned once): bf16 is not faster on this CPU."""
    _float32_matmuls_announced()
    with torch.autocast("cpu", enabled=False):
        return compute(inputs.float())


# A constant for `torch.compile` (run once while tracing, not traced: the warning reads the CPU capability, which
# dynamo cannot trace), so that a model compiled with `fullgraph=True` keeps one graph on such a CPU too.
@torch.compiler.assume_constant_result
def _float32_matmuls_announced() -> bool:
    _warn_float32_under_bf16_autocast()
    return True


@cache
def _warn_float32_under_bf16_autocast() -> None:
    logger.warning(
        "This CPU has no fast bf16 matmul path (%s; CPU capability %s): under bf16 autocast the S-LSTM layers keep "
        "their matmuls in float32.",
        bf16_decision().reason,
        torch.backends.cpu.get_cpu_capability(),
    )


class SLSTMLinear(nn.Linear):
    r"""
    `nn.Linear` whose CPU matmul takes the fastest path of the machine: float32 by oneDNN or PyTorch's default as
    [`selected_backend`] says, and float32 instead of bf16 under CPU autocast where the CPU has no fast bf16 path
    (warned once). Other devices and dtypes, `torch.export` and ONNX export take plain `nn.Linear`.

    Args:
        in_features (`int`), out_features (`int`), bias (`bool`, *optional*, defaults to `True`): as `nn.Linear`.
    """

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        """`(..., in_features)` -> `(..., out_features)`."""
        if _bf16_autocast_without_fast_path(inputs):
            return _float32_without_autocast(self._float32_cpu_linear, inputs)
        if inputs.device.type == "cpu" and inputs.dtype == torch.float32 and not torch.is_autocast_enabled("cpu"):
            return self._float32_cpu_linear(inputs)
        return super().forward(inputs)

    def _float32_cpu_linear(self, inputs: torch.Tensor) -> torch.Tensor:
        weight, bias = self.weight.float(), None if self.bias is None else self.bias.float()
        # Exporting first: the backend's one probe (real products compared) cannot run on an export's fake tensors.
        if torch.compiler.is_exporting() or selected_backend() != "onednn":
            return nn.functional.linear(inputs, weight, bias)
        flat = inputs.reshape(-1, inputs.shape[-1])  # (rows, in_features)
        output = _onednn_matmul(flat, weight).view(*inputs.shape[:-1], weight.shape[0])
        return output if bias is None else output + bias


class SLSTMConv1d(nn.Conv1d):
    r"""
    `nn.Conv1d` (of the character CNN) that, like [`SLSTMLinear`], keeps float32 under CPU bf16 autocast where the
    CPU has no fast bf16 path (warned once); everywhere else a plain `nn.Conv1d`.

    Args:
        as `nn.Conv1d`.
    """

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        """`(batch, in_channels, length)` -> `(batch, out_channels, length')`."""
        if _bf16_autocast_without_fast_path(inputs):
            return _float32_without_autocast(super().forward, inputs)
        return super().forward(inputs)


def as_plain_torch_modules(model: nn.Module) -> nn.Module:
    """Turns every `SLSTMLinear`/`SLSTMConv1d` of `model` into the `nn.Linear`/`nn.Conv1d` it extends, in place,
    and returns `model`: for tools that match exact module types, e.g. `quantize_dynamic(model, {nn.Linear})`. The
    model then computes with PyTorch's default kernels on every CPU.

    The subclasses hold no state of their own, only a `forward`, so switching each module's class keeps its
    parameters, buffers, hooks and state-dict keys as they are (no copy, nothing to reload)."""
    for module in model.modules():
        if type(module) in (SLSTMLinear, SLSTMConv1d):
            module.__class__ = module.__class__.__mro__[1]
    return model
