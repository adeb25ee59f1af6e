"""The fused S-LSTM step: the elementwise parts of Eq. 2 and Eq. 3 as Triton kernels (`triton_kernels.py`), each a
forward and a backward kernel behind a `torch.autograd.Function`, and the one check that decides where they run.

`SLSTMStateTransition` (`modeling_slstm.py`) keeps its readable PyTorch step beside these as the reference and the
fallback; `config.step_implementation` chooses (`uses_fused_step`). The matmuls stay in PyTorch either way.

Each kernel launch is a `torch.library.custom_op`, so `torch.compile` keeps the fused step in its graph (no graph
break) as an opaque call, and traces the autograd functions around them.

This module imports without Triton; the fused step then never runs (`"auto"` takes the readable step, `"triton"` is
an error that says why).
"""

import torch

from .configuration_slstm import STEP_IMPLEMENTATIONS
from .custom_operators import operator_name

try:  # Triton is optional: without it (or on a machine where it cannot load) the readable step runs
    from .triton_kernels import (
        is_interpreted,
        sentence_update_backward,
        sentence_update_forward,
        word_update_backward,
        word_update_forward,
    )

    TRITON_IMPORT_ERROR = None
    KERNELS_INTERPRETED = is_interpreted()
except ImportError as error:
    TRITON_IMPORT_ERROR = error
    KERNELS_INTERPRETED = False

FUSED_STEP_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
OPTIONS_NOT_COVERED = ("context_independent_content", "remove_output_gate")
"""Config switches the kernels do not implement (Levy et al.'s weighted-sum simplifications): set, the readable step
runs. The kernels cover every other option of the step: any `window_size` and `num_sentence_nodes` (0 included),
both `gate_normalization`s, `hidden_dropout` (applied before the kernels), both `initial_state`s (outside the step)."""

def options_not_covered(config) -> list[str]:
    """The switches of `config` set that the kernels do not cover, as `name=value` (empty when all are covered)."""
    return [f"{name}={getattr(config, name)!r}" for name in OPTIONS_NOT_COVERED if getattr(config, name)]


def fused_step_obstacles(config, states: torch.Tensor) -> list[str]:
    """Why the fused step cannot run for `config` on `states` (`h^{t-1}`), one reason a string; empty when it can."""
    obstacles = [f"{option} is not covered by the kernels" for option in options_not_covered(config)]
    if TRITON_IMPORT_ERROR is not None:
        obstacles.append(f"triton cannot be imported ({TRITON_IMPORT_ERROR})")
    elif not (states.is_cuda or (states.device.type == "cpu" and KERNELS_INTERPRETED)):
        obstacles.append(
            f"the tensors are on {states.device}, and the kernels need CUDA tensors (or CPU tensors with Triton's "
            "interpreter, TRITON_INTERPRET=1 set before modeling_slstm is imported)"
        )
    if states.dtype not in FUSED_STEP_DTYPES:
        obstacles.append(f"the dtype is {states.dtype}, and the kernels take {', '.join(map(str, FUSED_STEP_DTYPES))}")
    return obstacles


def uses_fused_step(config, states: torch.Tensor) -> bool:
    """Whether a step of a model with `config` on `states` (`h^{t-1}`) runs the Triton kernels, from
    `config.step_implementation`: `"eager"` never, `"auto"` when the tensors are on a CUDA GPU, Triton is importable,
    the dtype is float32, bfloat16 or float16 and the config's options are covered (else the readable step),
    `"triton"` always. Reads only the config and the tensor's device and dtype, never its values.

    Raises:
        `ValueError`: If `step_implementation` is none of `"auto"`, `"eager"`, `"triton"`, or is `"triton"` where
        the kernels cannot run (the message says why).
    """
    implementation = config.step_implementation
    if implementation not in STEP_IMPLEMENTATIONS:
        raise ValueError(f"step_implementation must be one of {STEP_IMPLEMENTATIONS}, got {implementation!r}")
    if implementation == "eager":
        return False
    runnable = (
        TRITON_IMPORT_ERROR is None
        and (states.is_cuda or (states.device.type == "cpu" and KERNELS_INTERPRETED))
        and states.dtype in FUSED_STEP_DTYPES
        and not any(getattr(config, name) for name in OPTIONS_NOT_COVERED)
    )
    if implementation == "auto":
        return runnable and states.is_cuda
    if not runnable:
        reasons = "; ".join(fused_step_obstacles(config, states))
        raise ValueError(f"step_implementation='triton' cannot run the fused step here: {reasons}")
    return True


def word_update_shapes(window_pre, input_terms, sentence_term, cells, *options):
    return torch.empty_like(cells), torch.empty_like(cells)


def word_update_backward_shapes(
    d_states, d_cells, window_pre, input_terms, sentence_term, cells, sentence_cells, *options
):
    return tuple(map(torch.empty_like, (window_pre, sentence_term, cells, sentence_cells)))


def sentence_update_shapes(word_forget, sentence_forget, sentence_pre, cells, sentence_cells, *options):
    new_states = cells.new_empty(sentence_cells.shape)
    saved = torch.empty_like(new_states, dtype=torch.float32)
    return new_states, torch.empty_like(new_states), saved, torch.empty_like(saved)


def sentence_update_backward_shapes(d_states, d_cells, word_forget, sentence_forget, sentence_pre, cells, *rest):
    return tuple(map(torch.empty_like, (word_forget, sentence_forget, sentence_pre, cells, rest[0])))


def operator(name: str, launcher, shapes):
    """`launcher` as the custom operator `name` of this module's namespace, with `shapes` as its fake (the output
    shapes and dtypes that `torch.compile` traces with)."""
    defined = torch.library.custom_op(operator_name(name), launcher, mutates_args=())
    defined.register_fake(shapes)
    return defined


if TRITON_IMPORT_ERROR is None:
    word_update_operator = operator("word_update", word_update_forward, word_update_shapes)
    word_update_backward_operator = operator("word_update_backward", word_update_backward, word_update_backward_shapes)
    sentence_update_operator = operator("sentence_update", sentence_update_forward, sentence_update_shapes)
    sentence_update_backward_operator = operator(
        "sentence_update_backward", sentence_update_backward, sentence_update_backward_shapes
    )


class FusedWordUpdate(torch.autograd.Function):
    """Eq. 2's elementwise part: `(W ξ_i, U x_i + b, V γ, c^{t-1}, c_g^{t-1}, mask)` -> `(h^t, c^t)`, as
    `SLSTMStateTransition.update_words` computes it from the same terms. Shapes: word terms
    `(batch, seq, blocks * hidden)`, `V γ` `(batch, blocks * hidden)` (`None` without sentence nodes), cells
    `(batch, seq, hidden)`, sentence cells `(batch, nodes, hidden)`, mask `(batch, seq, 1)`; then `window_size` and
    `sigmoid_scores` (`gate_normalization == "sigmoid_softmax"`)."""

    @staticmethod
    def forward(ctx, window_pre, input_terms, sentence_term, cells, sentence_cells, mask, window_size, sigmoid_scores):
        if sentence_term is None:  # no sentence nodes: the kernels never read it
            sentence_term = window_pre.new_empty(0)
        inputs = [t.contiguous() for t in (window_pre, input_terms, sentence_term, cells, sentence_cells, mask)]
        ctx.save_for_backward(*inputs)
        ctx.window_size, ctx.sigmoid_scores = window_size, sigmoid_scores
        return word_update_operator(*inputs, window_size, sigmoid_scores)

    @staticmethod
    def backward(ctx, d_states, d_cells):
        d_pre, d_sentence_term, d_prev_cells, d_sentence_cells = word_update_backward_operator(
            d_states.contiguous(), d_cells.contiguous(), *ctx.saved_tensors, ctx.window_size, ctx.sigmoid_scores
        )
        # `W ξ_i` and `U x_i + b` enter as a sum: both receive the pre-activations' gradient.
        d_sentence_term = d_sentence_term if ctx.needs_input_grad[2] else None
        return d_pre, d_pre, d_sentence_term, d_prev_cells, d_sentence_cells, None, None, None


class FusedSentenceUpdate(torch.autograd.Function):
    """Eq. 3's elementwise part: `(U_f h_j, W_f γ + b_f, W g + U h̄ + b, c^{t-1}, c_g^{t-1}, mask)` -> `(g^t, c_g^t)`,
    as `SLSTMStateTransition.update_sentence` computes it from the same terms. Shapes: `U_f h_j`
    `(batch, seq, nodes * hidden)`, `W_f γ + b_f` `(batch, nodes * hidden)`, the keep and output gates' terms
    `(batch, 2 * nodes * hidden)`, cells and mask as for [`FusedWordUpdate`]; then `sigmoid_scores`."""

    @staticmethod
    def forward(ctx, word_forget, sentence_forget, sentence_pre, cells, sentence_cells, mask, sigmoid_scores):
        inputs = [t.contiguous() for t in (word_forget, sentence_forget, sentence_pre, cells, sentence_cells, mask)]
        new_states, new_cells, saved_cells, log_normalizers = sentence_update_operator(*inputs, sigmoid_scores)
        ctx.save_for_backward(*inputs, saved_cells, log_normalizers)
        ctx.sigmoid_scores = sigmoid_scores
        return new_states, new_cells

    @staticmethod
    def backward(ctx, d_states, d_cells):
        gradients = sentence_update_backward_operator(
            d_states.contiguous(), d_cells.contiguous(), *ctx.saved_tensors, ctx.sigmoid_scores
        )
        return *gradients, None, None
