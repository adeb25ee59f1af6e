"""A float32 CPU matmul routed to oneDNN, for the S-LSTM step.

Hand-written because no library exposes it: PyTorch sends float32 `F.linear`/`addmm` on the CPU to MKL, which on
some CPUs (this project's AMD EPYC among them) runs at about half of oneDNN's speed for the same product, while
`torch.utils.mkldnn` only converts whole modules for inference (no autograd). `run_scripts/benchmark_speed.py`
measures both backends side by side.
"""

import re

import torch
from torch import nn


def _onednn_matmul_impl(inputs: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """`inputs @ weight.T` by oneDNN for dense float32 CPU tensors `(rows, in)`, `(out, in)`."""
    return torch.ops.mkldnn._linear_pointwise(inputs, weight, None, "none", [], None)


# A custom op, so that `torch.compile` keeps the oneDNN matmul as it is (inductor lowers `mkldnn._linear_pointwise`
# only for frozen weights) and fuses the elementwise work around it. The namespace follows the module name, so that
# the copy of this file loaded by `trust_remote_code` registers its own op instead of clashing with the package's.
_OP_NAMESPACE = "slstm_" + re.sub(r"\W", "_", __name__)


@torch.library.custom_op(f"{_OP_NAMESPACE}::onednn_matmul", mutates_args=())
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
        grad_inputs = _onednn_matmul(grad, weight.t().contiguous())  # grad @ W
    if ctx.needs_input_grad[1]:
        grad_weight = _onednn_matmul(grad.t().contiguous(), inputs.t().contiguous())  # grad.T @ inputs
    return grad_inputs, grad_weight


_onednn_matmul.register_autograd(_onednn_matmul_backward, setup_context=_onednn_matmul_setup_context)


def _use_onednn(inputs: torch.Tensor, weight: torch.Tensor) -> bool:
    return (
        ONEDNN_FLOAT32_MATMULS
        and inputs.device.type == "cpu"
        and inputs.dtype == weight.dtype == torch.float32
        and not torch.is_autocast_enabled("cpu")
        and _HAS_ONEDNN_LINEAR
    )


_HAS_ONEDNN_LINEAR = torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")
ONEDNN_FLOAT32_MATMULS = True
"""Route the S-LSTM step's float32 CPU matmuls (forward and backward) to oneDNN instead of `torch.mm`/`addmm`.

On CPUs where MKL takes a slow path (e.g. AMD), oneDNN is up to ~2x faster for the same float32 product
(`run_scripts/benchmark_speed.py` measures both). The result is the same matmul (float32 accumulation) up to summation
order. Set to `False` to use PyTorch's default backend. Other dtypes, autocast and other devices are unaffected."""


def linear(inputs: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """`nn.functional.linear`, by oneDNN for float32 CPU tensors when [`ONEDNN_FLOAT32_MATMULS`] is set."""
    if not _use_onednn(inputs, weight):
        return nn.functional.linear(inputs, weight, bias)
    flat = inputs.reshape(-1, inputs.shape[-1])
    output = _onednn_matmul(flat, weight).view(*inputs.shape[:-1], weight.shape[0])
    return output if bias is None else output + bias
