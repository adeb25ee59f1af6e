"""The fused S-LSTM step: the elementwise parts of Eq. 2 and Eq. 3 as Triton kernels (`triton_kernels.py`), each a
forward and a backward kernel behind a `torch.autograd.Function`, and the one check that decides where they run.

`SLSTMStateTransition` (`modeling_slstm.py`) keeps its readable PyTorch step beside these as the reference and the
fallback; `config.step_implementation` chooses (`uses_fused_step`). The matmuls stay in PyTorch either way.

Each kernel launch is a `torch.library.custom_op`, so `torch.compile` keeps the fused step in its graph (no graph
break) as an opaque call, and traces the autograd functions around them.

This module imports without Triton (`load_kernels` imports the kernels when a step first asks); the fused step then never runs (`"auto"` takes the readable step, `"triton"` is
an error that says why).
"""

import functools
from types import SimpleNamespace

import torch

from .configuration_slstm import STEP_IMPLEMENTATIONS
from .custom_operators import operator_name


@functools.cache
def load_kernels() -> SimpleNamespace:
    """The Triton kernels (`triton_kernels.py`), imported when a fused step is first considered rather than at
    `import modeling_slstm` (the readable step does not need them): a namespace of the kernels, `tile_options` and
    `interpreted` (whether they run in Triton's interpreter), with `import_error` `None`; or, where Triton cannot be
    imported, only `import_error` (why) and `interpreted=False`."""
    try:
        from .triton_kernels import (
            is_interpreted,
            sentence_update_backward_kernel,
            sentence_update_forward_kernel,
            tile_options,
            word_update_backward_kernel,
            word_update_forward_kernel,
        )
    except ImportError as error:
        return SimpleNamespace(import_error=error, interpreted=False)
    return SimpleNamespace(
        import_error=None,
        interpreted=is_interpreted(),
        tile_options=tile_options,
        word_update_forward_kernel=word_update_forward_kernel,
        word_update_backward_kernel=word_update_backward_kernel,
        sentence_update_forward_kernel=sentence_update_forward_kernel,
        sentence_update_backward_kernel=sentence_update_backward_kernel,
    )


@torch.compiler.assume_constant_result
def triton_import_error() -> str:
    """Why Triton cannot be imported, empty when it can (a constant to `torch.compile`, which runs it once)."""
    error = load_kernels().import_error
    return "" if error is None else str(error)


@torch.compiler.assume_constant_result
def kernels_interpreted() -> bool:
    """Whether the kernels run in Triton's interpreter (`TRITON_INTERPRET=1` when they were first loaded)."""
    return load_kernels().interpreted


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
    import_error = triton_import_error()
    if import_error:
        obstacles.append(f"triton cannot be imported ({import_error})")
    elif not (states.is_cuda or (states.device.type == "cpu" and kernels_interpreted())):
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
    if implementation == "auto" and not states.is_cuda:
        return False  # on the CPU the readable step is the faster one
    obstacles = fused_step_obstacles(config, states)
    if implementation == "auto":
        return not obstacles
    if obstacles:
        raise ValueError(f"step_implementation='triton' cannot run the fused step here: {'; '.join(obstacles)}")
    return True


def next_power_of_2(value: int) -> int:
    return 1 << max(value - 1, 0).bit_length()


@torch.library.custom_op(operator_name("word_update"), mutates_args=())
def word_update(
    window_pre: torch.Tensor,
    input_terms: torch.Tensor,
    sentence_term: torch.Tensor | None,
    cells: torch.Tensor,
    sentence_cells: torch.Tensor,
    mask: torch.Tensor,
    window_size: int,
    sigmoid_scores: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Launches `word_update_forward_kernel`: contiguous inputs as in `triton_kernels.py` (`sentence_term` and
    `sentence_cells` unread without sentence nodes) -> `(h^t, c^t)` in the dtype of `cells`."""
    kernels = load_kernels()
    batch, seq, hidden = cells.shape
    nodes = sentence_cells.shape[1]
    new_states, new_cells = torch.empty_like(cells), torch.empty_like(cells)
    gates = next_power_of_2(2 * window_size + nodes + 2)
    tiles = kernels.tile_options(seq, hidden, gates)
    grid = (batch, -(-seq // tiles["BLOCK_S"]), -(-hidden // tiles["BLOCK_H"]))
    kernels.word_update_forward_kernel[grid](
        window_pre_ptr=window_pre,
        input_terms_ptr=input_terms,
        sentence_term_ptr=sentence_term if nodes else None,
        cells_ptr=cells,
        sentence_cells_ptr=sentence_cells if nodes else None,
        mask_ptr=mask,
        new_states_ptr=new_states,
        new_cells_ptr=new_cells,
        seq=seq,
        hidden=hidden,
        WINDOW=window_size,
        NODES=nodes,
        GATES=gates,
        SIGMOID_SCORES=sigmoid_scores,
        **tiles,
    )
    return new_states, new_cells


@word_update.register_fake
def _(window_pre, input_terms, sentence_term, cells, sentence_cells, mask, window_size, sigmoid_scores):
    return torch.empty_like(cells), torch.empty_like(cells)


@torch.library.custom_op(operator_name("word_update_backward"), mutates_args=())
def word_update_backward(
    d_states: torch.Tensor,
    d_cells: torch.Tensor,
    window_pre: torch.Tensor,
    input_terms: torch.Tensor,
    sentence_term: torch.Tensor | None,
    cells: torch.Tensor,
    sentence_cells: torch.Tensor,
    mask: torch.Tensor,
    window_size: int,
    sigmoid_scores: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Launches `word_update_backward_kernel` -> gradients of `(word terms, sentence_term, cells, sentence_cells)`,
    each shaped and typed like its input (the word terms like `window_pre`)."""
    kernels = load_kernels()
    batch, seq, hidden = cells.shape
    nodes = sentence_cells.shape[1]
    d_pre, d_sentence_term, d_prev_cells, d_sentence_cells = word_update_gradients(
        window_pre, sentence_term, cells, sentence_cells
    )
    gates = next_power_of_2(2 * window_size + nodes + 2)
    tiles = kernels.tile_options(seq, hidden, gates)
    kernels.word_update_backward_kernel[(batch, -(-hidden // tiles["BLOCK_H"]))](
        d_states_ptr=d_states,
        d_cells_ptr=d_cells,
        window_pre_ptr=window_pre,
        input_terms_ptr=input_terms,
        sentence_term_ptr=sentence_term if nodes else None,
        cells_ptr=cells,
        sentence_cells_ptr=sentence_cells if nodes else None,
        mask_ptr=mask,
        d_pre_ptr=d_pre,
        d_sentence_term_ptr=d_sentence_term if nodes else None,
        d_prev_cells_ptr=d_prev_cells,
        d_sentence_cells_ptr=d_sentence_cells if nodes else None,
        seq=seq,
        hidden=hidden,
        WINDOW=window_size,
        NODES=nodes,
        GATES=gates,
        SIGMOID_SCORES=sigmoid_scores,
        **tiles,
    )
    return d_pre, d_sentence_term, d_prev_cells, d_sentence_cells


def word_update_gradients(window_pre, sentence_term, cells, sentence_cells):
    """Empty gradients of `(word terms, sentence_term, cells, sentence_cells)`; that of an absent `sentence_term`
    (no sentence nodes) is empty."""
    d_sentence_term = window_pre.new_empty(0) if sentence_term is None else torch.empty_like(sentence_term)
    return torch.empty_like(window_pre), d_sentence_term, torch.empty_like(cells), torch.empty_like(sentence_cells)


@word_update_backward.register_fake
def _(d_states, d_cells, window_pre, input_terms, sentence_term, cells, sentence_cells, mask, *options):
    return word_update_gradients(window_pre, sentence_term, cells, sentence_cells)


@torch.library.custom_op(operator_name("sentence_update"), mutates_args=())
def sentence_update(
    word_forget: torch.Tensor,
    sentence_forget: torch.Tensor,
    sentence_pre: torch.Tensor,
    cells: torch.Tensor,
    sentence_cells: torch.Tensor,
    mask: torch.Tensor,
    sigmoid_scores: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Launches `sentence_update_forward_kernel` -> `(g^t, c_g^t)` in the dtype of `cells`, and the float32 cells
    and log-normalisers `(batch, nodes, hidden)` that the backward reads."""
    kernels = load_kernels()
    batch, seq, hidden = cells.shape
    nodes = sentence_cells.shape[1]
    new_states, new_cells, saved_cells, log_normalizers = sentence_update_outputs(cells, sentence_cells)
    nodes_p = next_power_of_2(nodes)
    tiles = kernels.tile_options(seq, hidden, nodes_p)
    kernels.sentence_update_forward_kernel[(batch, -(-hidden // tiles["BLOCK_H"]))](
        word_forget_ptr=word_forget,
        sentence_forget_ptr=sentence_forget,
        sentence_pre_ptr=sentence_pre,
        cells_ptr=cells,
        sentence_cells_ptr=sentence_cells,
        mask_ptr=mask,
        new_states_ptr=new_states,
        new_cells_ptr=new_cells,
        saved_cells_ptr=saved_cells,
        log_normalizers_ptr=log_normalizers,
        seq=seq,
        hidden=hidden,
        NODES=nodes,
        NODES_P=nodes_p,
        SIGMOID_SCORES=sigmoid_scores,
        **tiles,
    )
    return new_states, new_cells, saved_cells, log_normalizers


def sentence_update_outputs(cells, sentence_cells):
    """Empty `(g^t, c_g^t)` in the dtype of `cells`, and float32 saved cells and log-normalisers."""
    new_states = cells.new_empty(sentence_cells.shape)
    saved = torch.empty_like(new_states, dtype=torch.float32)
    return new_states, torch.empty_like(new_states), saved, torch.empty_like(saved)


@sentence_update.register_fake
def _(word_forget, sentence_forget, sentence_pre, cells, sentence_cells, mask, sigmoid_scores):
    return sentence_update_outputs(cells, sentence_cells)


@torch.library.custom_op(operator_name("sentence_update_backward"), mutates_args=())
def sentence_update_backward(
    d_states: torch.Tensor,
    d_cells: torch.Tensor,
    word_forget: torch.Tensor,
    sentence_forget: torch.Tensor,
    sentence_pre: torch.Tensor,
    cells: torch.Tensor,
    sentence_cells: torch.Tensor,
    mask: torch.Tensor,
    saved_cells: torch.Tensor,
    log_normalizers: torch.Tensor,
    sigmoid_scores: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Launches `sentence_update_backward_kernel` -> gradients of `(word_forget, sentence_forget, sentence_pre,
    cells, sentence_cells)`, each shaped and typed like its input."""
    kernels = load_kernels()
    batch, seq, hidden = cells.shape
    nodes = sentence_cells.shape[1]
    gradients = sentence_update_backward_outputs(word_forget, sentence_forget, sentence_pre, cells, sentence_cells)
    nodes_p = next_power_of_2(nodes)
    tiles = kernels.tile_options(seq, hidden, nodes_p)
    d_word_forget, d_sentence_forget, d_sentence_pre, d_prev_cells, d_sentence_cells = gradients
    kernels.sentence_update_backward_kernel[(batch, -(-hidden // tiles["BLOCK_H"]))](
        d_states_ptr=d_states,
        d_cells_ptr=d_cells,
        word_forget_ptr=word_forget,
        sentence_forget_ptr=sentence_forget,
        sentence_pre_ptr=sentence_pre,
        cells_ptr=cells,
        sentence_cells_ptr=sentence_cells,
        mask_ptr=mask,
        saved_cells_ptr=saved_cells,
        log_normalizers_ptr=log_normalizers,
        d_word_forget_ptr=d_word_forget,
        d_sentence_forget_ptr=d_sentence_forget,
        d_sentence_pre_ptr=d_sentence_pre,
        d_prev_cells_ptr=d_prev_cells,
        d_sentence_cells_ptr=d_sentence_cells,
        seq=seq,
        hidden=hidden,
        NODES=nodes,
        NODES_P=nodes_p,
        SIGMOID_SCORES=sigmoid_scores,
        **tiles,
    )
    return gradients


def sentence_update_backward_outputs(*inputs):
    return tuple(map(torch.empty_like, inputs))


@sentence_update_backward.register_fake
def _(d_states, d_cells, word_forget, sentence_forget, sentence_pre, cells, sentence_cells, *saved):
    return sentence_update_backward_outputs(word_forget, sentence_forget, sentence_pre, cells, sentence_cells)


class FusedWordUpdate(torch.autograd.Function):
    """Eq. 2's elementwise part: `(W ξ_i, U x_i + b, V γ, c^{t-1}, c_g^{t-1}, mask)` -> `(h^t, c^t)`, as
    `SLSTMStateTransition.update_words` computes it from the same terms. Shapes: word terms
    `(batch, seq, blocks * hidden)`, `V γ` `(batch, blocks * hidden)` (`None` without sentence nodes), cells
    `(batch, seq, hidden)`, sentence cells `(batch, nodes, hidden)`, mask `(batch, seq, 1)`; then `window_size` and
    `sigmoid_scores` (`gate_normalization == "sigmoid_softmax"`)."""

    @staticmethod
    def forward(ctx, window_pre, input_terms, sentence_term, cells, sentence_cells, mask, window_size, sigmoid_scores):
        inputs = [
            t if t is None else t.contiguous()
            for t in (window_pre, input_terms, sentence_term, cells, sentence_cells, mask)
        ]
        ctx.save_for_backward(*inputs)
        ctx.window_size, ctx.sigmoid_scores = window_size, sigmoid_scores
        return word_update(*inputs, window_size, sigmoid_scores)

    @staticmethod
    def backward(ctx, d_states, d_cells):
        d_pre, d_sentence_term, d_prev_cells, d_sentence_cells = word_update_backward(
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
        new_states, new_cells, saved_cells, log_normalizers = sentence_update(*inputs, sigmoid_scores)
        ctx.save_for_backward(*inputs, saved_cells, log_normalizers)
        ctx.sigmoid_scores = sigmoid_scores
        return new_states, new_cells

    @staticmethod
    def backward(ctx, d_states, d_cells):
        gradients = sentence_update_backward(
            d_states.contiguous(), d_cells.contiguous(), *ctx.saved_tensors, ctx.sigmoid_scores
        )
        return *gradients, None, None
