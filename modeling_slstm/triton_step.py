"""The fused S-LSTM recurrence: all steps of Eq. 2 and Eq. 3 in one `torch.autograd.Function` (`FusedRecurrence`),
per step one matmul of the word states with all their weights, one `addmm` for the sentence states and one Triton
kernel (`triton_kernels.py`) for everything after them, forward and backward; and the one check that decides where it
runs (`uses_fused_step`).

`SLSTMStateTransition` (`modeling_slstm.py`) keeps its readable PyTorch step beside it as the reference and the
fallback; `config.step_implementation` chooses.

Each kernel launch is a `torch.library.custom_op`, so `torch.compile` keeps the fused recurrence in its graph (no
graph break) as an opaque call, and traces the autograd function around it.

This module imports without Triton (see `kernel_dispatch.py`); the fused recurrence then never runs (`"auto"` takes
the readable step, `"triton"` is an error that says why).
"""

from collections.abc import Sequence

import torch

from .custom_operators import operator_name
from .kernel_dispatch import triton_obstacles, uses_kernels
from .triton_kernels import step_backward_kernel, step_forward_kernel, tile_options

FUSED_STEP_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
OPTIONS_NOT_COVERED = ("context_independent_content", "remove_output_gate")
"""Config switches the kernels do not implement (Levy et al.'s weighted-sum simplifications): set, the readable step
runs. The kernels cover every other option of the step: any `window_size` and `num_sentence_nodes` (0 included),
both `gate_normalization`s, `hidden_dropout` (applied before the kernels), both `initial_state`s (outside the step)."""


def options_not_covered(config) -> list[str]:
    """The switches of `config` set that the kernels do not cover, as `name=value` (empty when all are covered)."""
    return [f"{name}={getattr(config, name)!r}" for name in OPTIONS_NOT_COVERED if getattr(config, name)]


def fused_step_obstacles(config, states: torch.Tensor, replaced_layers: Sequence[str] = ()) -> list[str]:
    """Why the fused step cannot run for `config` on `states` (`h^{t-1}`), one reason a string; empty when it can.
    `replaced_layers`: the step's linear layers that are no longer plain (`SLSTMStateTransition.replaced_layers`)."""
    obstacles = [f"{option} is not covered by the kernels" for option in options_not_covered(config)]
    if replaced_layers:
        obstacles.append(
            f"the step's layers {', '.join(replaced_layers)} are replaced (a PEFT adapter, a quantised layer), and "
            "the fused recurrence reads their weights bare, without what the replacement adds"
        )
    obstacles += triton_obstacles(states)
    if states.dtype not in FUSED_STEP_DTYPES:
        obstacles.append(f"the dtype is {states.dtype}, and the kernels take {', '.join(map(str, FUSED_STEP_DTYPES))}")
    return obstacles


def uses_fused_step(config, states: torch.Tensor, replaced_layers: Sequence[str] = ()) -> bool:
    """Whether a step of a model with `config` on `states` (`h^{t-1}`) runs the Triton kernels, from
    `config.step_implementation` (`kernel_dispatch.uses_kernels`): `"eager"` never, `"auto"` when the tensors are on a
    CUDA GPU, Triton is importable, the dtype is float32, bfloat16 or float16 and the config's options are covered
    (else the readable step), `"triton"` always. Reads only the config, the tensor's device and dtype (never its
    values) and which layers `replaced_layers` names (`"auto"` takes the readable step where any is, which runs the
    replacements).

    Raises:
        `ValueError`: If `step_implementation` is none of `"auto"`, `"eager"`, `"triton"`, or is `"triton"` where
        the kernels cannot run (the message says why).
    """
    obstacles = fused_step_obstacles(config, states, replaced_layers)
    return uses_kernels(config.step_implementation, states, obstacles, "step_implementation", "the fused step")


def next_power_of_2(value: int) -> int:
    """`triton.next_power_of_2`, without importing Triton."""
    return 1 << max(value - 1, 0).bit_length()


def launch_options(product, sentence_terms, cells, sentence_cells, window_size: int) -> tuple[int, int, dict]:
    """What both step kernels are launched with: `(word tiles, sentence programs, keyword arguments)`, the word tiles
    as `(position blocks, hidden blocks)`, the arguments the sizes, where Eq. 3's blocks start (`U_f h_j`, then
    `U_g h_j`, `U_o h_j`, in the product rows; `W_f γ + b_f`, then the keep and output gates' terms, in the sentence
    terms; each the last `3 * nodes * hidden` columns), the gate and node counts and the tiles."""
    _, seq, hidden = cells.shape
    nodes = sentence_cells.shape[1]
    gates, nodes_p = next_power_of_2(2 * window_size + nodes + 2), next_power_of_2(max(nodes, 1))
    word_tiles, sentence_tiles = tile_options(seq, hidden, gates), tile_options(seq, hidden, nodes_p)
    sentence_width = 0 if sentence_terms is None else sentence_terms.shape[-1]
    options = {
        "seq": seq,
        "hidden": hidden,
        "product_width": product.shape[-1],
        "sentence_width": sentence_width,
        "forget_column": product.shape[-1] - 3 * nodes * hidden,
        "sentence_column": sentence_width - 3 * nodes * hidden,
        "WINDOW": window_size,
        "NODES": nodes,
        "NODES_P": nodes_p,
        "GATES": gates,
        "WORD_BLOCK_S": word_tiles["BLOCK_S"],
        "WORD_BLOCK_H": word_tiles["BLOCK_H"],
        "SENTENCE_BLOCK_S": sentence_tiles["BLOCK_S"],
        "SENTENCE_BLOCK_H": sentence_tiles["BLOCK_H"],
        "num_warps": word_tiles["num_warps"],
    }
    word_tile_counts = (-(-seq // word_tiles["BLOCK_S"]), -(-hidden // word_tiles["BLOCK_H"]))
    sentence_programs = -(-hidden // sentence_tiles["BLOCK_H"]) if nodes else 0
    return word_tile_counts, sentence_programs, options


def contiguous(*tensors: torch.Tensor | None) -> tuple[torch.Tensor | None, ...]:
    """`tensors` in the layout the kernels read (row-major, no gaps, no stride 0), `None` kept."""
    return tuple(None if tensor is None else tensor.contiguous() for tensor in tensors)


@torch.library.custom_op(operator_name("step_update"), mutates_args=())
def step_update(
    product: torch.Tensor,
    input_terms: torch.Tensor,
    sentence_terms: torch.Tensor | None,
    cells: torch.Tensor,
    sentence_cells: torch.Tensor,
    mask: torch.Tensor,
    lengths: torch.Tensor,
    window_size: int,
    sigmoid_scores: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Launches `step_forward_kernel` (Eqs. 2 and 3 of one step): the product `h̃^{t-1} W_h^T`
    `(batch, seq, product width)`, `U x + b` `(batch, seq, blocks * hidden)`, the sentence terms
    `(batch, sentence width)` (`None` without sentence nodes), `c^{t-1}`, `c_g^{t-1}`, the mask and lengths ->
    `(h^t, c^t, g^t, c_g^t)` in the dtype of the cells, and the float32 statistics `(batch, 4, nodes, hidden)` that
    the backward reads. The kernel reads its tensors as contiguous: any other layout is copied to one here."""
    product, input_terms, sentence_terms, cells, sentence_cells, mask, lengths = contiguous(
        product, input_terms, sentence_terms, cells, sentence_cells, mask, lengths
    )
    (position_blocks, hidden_blocks), sentence_programs, options = launch_options(
        product, sentence_terms, cells, sentence_cells, window_size
    )
    outputs = step_update_outputs(cells, sentence_cells)
    new_states, new_cells, new_sentence_states, new_sentence_cells, statistics = outputs
    nodes = sentence_cells.shape[1]
    step_forward_kernel[(cells.shape[0], position_blocks * hidden_blocks + sentence_programs)](
        product_ptr=product,
        input_terms_ptr=input_terms,
        sentence_terms_ptr=sentence_terms,
        cells_ptr=cells,
        sentence_cells_ptr=sentence_cells if nodes else None,
        mask_ptr=mask,
        lengths_ptr=lengths,
        new_states_ptr=new_states,
        new_cells_ptr=new_cells,
        new_sentence_states_ptr=new_sentence_states if nodes else None,
        new_sentence_cells_ptr=new_sentence_cells if nodes else None,
        statistics_ptr=statistics if nodes else None,
        SIGMOID_SCORES=sigmoid_scores,
        **options,
    )
    return outputs


def step_update_outputs(cells, sentence_cells):
    """Empty `(h^t, c^t)` like `cells`, `(g^t, c_g^t)` like `sentence_cells`, and float32 statistics
    `(batch, 4, nodes, hidden)`."""
    batch, nodes, hidden = sentence_cells.shape
    statistics = sentence_cells.new_empty(batch, 4, nodes, hidden, dtype=torch.float32)
    sentence_outputs = (torch.empty_like(sentence_cells), torch.empty_like(sentence_cells), statistics)
    return torch.empty_like(cells), torch.empty_like(cells), *sentence_outputs


@step_update.register_fake
def _(product, input_terms, sentence_terms, cells, sentence_cells, mask, lengths, window_size, sigmoid_scores):
    return step_update_outputs(cells, sentence_cells)


@torch.library.custom_op(operator_name("step_update_backward"), mutates_args=("d_input_terms",))
def step_update_backward(
    d_states: torch.Tensor,
    d_output_states: torch.Tensor | None,
    d_cells: torch.Tensor | None,
    d_sentence_states: torch.Tensor | None,
    d_sentence_cells: torch.Tensor | None,
    d_input_terms: torch.Tensor,
    later_steps: bool,
    product: torch.Tensor,
    input_terms: torch.Tensor,
    sentence_terms: torch.Tensor | None,
    cells: torch.Tensor,
    sentence_cells: torch.Tensor,
    mask: torch.Tensor,
    lengths: torch.Tensor,
    statistics: torch.Tensor | None,
    window_size: int,
    sigmoid_scores: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Launches `step_backward_kernel`, from the gradients of `h^t` (`d_states`, plus `d_output_states` where the
    encoder's output `h^t` has one), `c^t`, `g^t` and `c_g^t` (the cells' `None` after the last step, else each the
    pair of parts through the words and through the sentence nodes that this returned for the next step, stacked) ->
    the gradients of the product, of the sentence terms, and of `c^{t-1}` and `c_g^{t-1}`, each of the two a pair
    `(2, ...)` of the parts through the words and through the sentence nodes. The gradient of `U x + b` is written
    into `d_input_terms` (float32), or with `later_steps` added to it (the sum over the later steps).

    The kernel reads its tensors as contiguous: any other layout is copied to one here (upstream gradients often
    come expanded or sliced); `d_input_terms`, written in place, must be contiguous."""
    if not d_input_terms.is_contiguous():
        raise ValueError(
            f"d_input_terms must be contiguous (the kernel writes it in place), got strides {d_input_terms.stride()}"
        )
    d_states, d_output_states, d_cells, d_sentence_states, d_sentence_cells = contiguous(
        d_states, d_output_states, d_cells, d_sentence_states, d_sentence_cells
    )
    product, input_terms, sentence_terms, cells, sentence_cells, mask, lengths, statistics = contiguous(
        product, input_terms, sentence_terms, cells, sentence_cells, mask, lengths, statistics
    )
    (_, hidden_blocks), sentence_programs, options = launch_options(
        product, sentence_terms, cells, sentence_cells, window_size
    )
    gradients = step_update_gradients(product, sentence_terms, cells, sentence_cells)
    d_product, d_sentence_terms, d_prev_cells, d_prev_sentence_cells = gradients
    nodes = sentence_cells.shape[1]
    step_backward_kernel[(cells.shape[0], hidden_blocks + sentence_programs)](
        d_states_ptr=d_states,
        d_output_states_ptr=d_output_states,
        d_cells_ptr=None if d_cells is None else d_cells[0],
        d_cells_via_sentences_ptr=None if d_cells is None or not nodes else d_cells[1],
        d_sentence_states_ptr=d_sentence_states,
        d_sentence_cells_ptr=None if d_sentence_cells is None or not nodes else d_sentence_cells[1],
        d_sentence_cells_via_words_ptr=None if d_sentence_cells is None or not nodes else d_sentence_cells[0],
        product_ptr=product,
        input_terms_ptr=input_terms,
        sentence_terms_ptr=sentence_terms,
        cells_ptr=cells,
        sentence_cells_ptr=sentence_cells if nodes else None,
        mask_ptr=mask,
        lengths_ptr=lengths,
        statistics_ptr=statistics,
        d_product_ptr=d_product,
        d_input_terms_ptr=d_input_terms,
        d_sentence_terms_ptr=d_sentence_terms if nodes else None,
        d_prev_cells_ptr=d_prev_cells[0],
        d_prev_cells_via_sentences_ptr=d_prev_cells[1] if nodes else None,
        d_prev_sentence_cells_ptr=d_prev_sentence_cells[1] if nodes else None,
        d_prev_sentence_cells_via_words_ptr=d_prev_sentence_cells[0] if nodes else None,
        SIGMOID_SCORES=sigmoid_scores,
        LATER_STEPS=later_steps,
        **options,
    )
    return gradients


def step_update_gradients(product, sentence_terms, cells, sentence_cells):
    """Empty gradients of the product and the sentence terms (empty without sentence nodes), and the pairs of parts
    `(2, *shape)` of the gradients of `c^{t-1}` and `c_g^{t-1}` (one part without sentence nodes)."""
    parts = 2 if sentence_cells.shape[1] else 1
    d_sentence_terms = product.new_empty(0) if sentence_terms is None else torch.empty_like(sentence_terms)
    d_prev_cells = cells.new_empty(parts, *cells.shape)
    d_prev_sentence_cells = sentence_cells.new_empty(parts, *sentence_cells.shape)
    return torch.empty_like(product), d_sentence_terms, d_prev_cells, d_prev_sentence_cells


@step_update_backward.register_fake
def _(d_states, d_output_states, d_cells, d_sentence_states, d_sentence_cells, d_input_terms, later_steps, product,
      input_terms, sentence_terms, cells, sentence_cells, *rest):  # fmt: skip
    return step_update_gradients(product, sentence_terms, cells, sentence_cells)


def product_weight(window_weight, forget_from_word, sentence_gates_weight, window_width: int) -> torch.Tensor:
    """`W_h`: every weight that multiplies `h^{t-1}`, stacked so that one matmul per step computes them all:
    Eq. 2's `W_d` for each window offset `d = 0 … 2w` (column block `d` of `word_window`, `(C·H, H)` each), then with
    sentence nodes Eq. 3's `U_f` `(K·H, H)` and `U_g`, `U_o` (the `h̄` columns of `sentence_gates`, `(2K·H, H)`)."""
    hidden = window_weight.shape[1] // window_width
    blocks = list(window_weight.split(hidden, dim=1))
    if forget_from_word is not None:
        blocks += [forget_from_word, sentence_gates_weight[:, -hidden:]]
    return torch.cat(blocks)


def sentence_weight(word_sentence, forget_weight, forget_bias, gates_weight, gates_bias):
    """`(W_G, b_G)`: every weight that multiplies `γ^{t-1}`, stacked: Eq. 2's `V` `(C·H, K·H)`, Eq. 3's `W_f`
    `(K·H, K·H)`, `W_g` and `W_o` (the `γ` columns of `sentence_gates`, `(2K·H, K·H)`), and their biases (none for
    `V`, whose bias is in `U x + b`)."""
    sentence_width = word_sentence.shape[1]
    weight = torch.cat([word_sentence, forget_weight, gates_weight[:, :sentence_width]])
    bias = torch.cat([word_sentence.new_zeros(word_sentence.shape[0]), forget_bias, gates_bias])
    return weight, bias


def dropped(states: torch.Tensor, rate: float, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor | None]:
    """What a step's matmuls read: `states` dropped out at `rate` (the draw of `nn.Dropout`), in `dtype`, and the
    dropout's keep mask (`None` at rate 0, where nothing is launched)."""
    if not rate:
        return states.to(dtype), None
    dropped_states, keep = torch.ops.aten.native_dropout(states, rate, True)
    return dropped_states.to(dtype), keep


def undropped(gradient: torch.Tensor, keep: torch.Tensor | None, rate: float) -> torch.Tensor:
    """The gradient of `dropped`'s input from that of its output."""
    return gradient if keep is None else torch.ops.aten.native_dropout_backward(gradient, keep, 1.0 / (1.0 - rate))


STEP_SAVED = 8
"""Tensors saved per step: `h̃^{t-1}` (dropped, in the matmuls' dtype) and its keep mask, `c^{t-1}`, `γ̃^{t-1}` and its
keep mask, `c_g^{t-1}`, the sentence terms and the sentence kernel's statistics."""


class FusedRecurrence(torch.autograd.Function):
    """All `num_steps` steps of Eqs. 2-3 with the Triton kernels, forward and backward, as
    `SLSTMStateTransition.forward` computes them step by step.

    Each step is two matmuls and one kernel launch: `P = h̃^{t-1} W_h^T` (every weight on the word states,
    `product_weight`: the kernel reads `W ξ_i` as the sum of the window blocks of `P` at the neighbours' rows, `U_f h_j`
    from its block, and `U h̄` as the mean of the `U_g h_j`, `U_o h_j` blocks) and `γ̃^{t-1} W_G^T + b_G` (every weight
    on the sentence states, `sentence_weight`). Only each step's inputs are saved (what gradient checkpointing of
    every step would keep); the backward recomputes `P`, launches the backward kernel, then two matmuls for the
    gradients of `h^{t-1}` and `γ^{t-1}`, and sums the weight gradient of `W_h` step by step in place; that of `W_G`
    is one matmul over all steps at the end (its inputs are one vector per sentence).

    Inputs: `U x + b` `(batch, seq, C·H)` (its dtype is the matmuls', autocast's where autocast is on), `h^0`, `c^0`
    `(batch, seq, H)`, `g^0`, `c_g^0` `(batch, K, H)`, the float mask `(batch, seq, 1)` and lengths `(batch, 1)`;
    the weights of `word_window`, `word_forget_from_word`, `sentence_gates` (weight, bias), `word_sentence`,
    `word_forget_from_sentence` (weight, bias), all but the first `None` without sentence nodes; then `num_steps`,
    `window_size`, `sigmoid_scores` (`gate_normalization == "sigmoid_softmax"`) and the hidden dropout rate (0 in
    evaluation). Returns `h^1 … h^T` and, with sentence nodes, `g^T`.
    """

    @staticmethod
    def forward(
        ctx, input_terms, h, c, g, c_g, mask, lengths, window_weight, forget_from_word, gates_weight, gates_bias,
        word_sentence, forget_weight, forget_bias, num_steps, window_size, sigmoid_scores, dropout_rate,
    ):  # fmt: skip
        nodes = g.shape[1]
        dtype = input_terms.dtype
        ctx.set_materialize_grads(False)
        with torch.autocast(h.device.type, enabled=False):
            words_weight = product_weight(window_weight, forget_from_word, gates_weight, 2 * window_size + 1).to(dtype)
            sentences_weight = sentences_bias = None
            if nodes:
                weights = sentence_weight(word_sentence, forget_weight, forget_bias, gates_weight, gates_bias)
                sentences_weight, sentences_bias = (weight.to(dtype) for weight in weights)
            input_terms, mask, lengths = input_terms.contiguous(), mask.contiguous(), lengths.contiguous()
            c, c_g = c.contiguous(), c_g.contiguous()  # the initial cells may be expanded views
            saved, outputs = [], []
            for _ in range(num_steps):
                h_in, h_keep = dropped(h, dropout_rate, dtype)  # h̃^{t-1}
                product = torch.mm(h_in.flatten(0, 1), words_weight.t()).view(*h.shape[:2], -1)  # (batch, seq, R)
                g_in = g_keep = sentence_terms = statistics = None
                if nodes:
                    g_in, g_keep = dropped(g, dropout_rate, dtype)  # γ̃^{t-1}
                    sentence_terms = torch.addmm(sentences_bias, g_in.flatten(1), sentences_weight.t())  # (batch, W)
                h, new_c, new_g, new_c_g, statistics = step_update(
                    product, input_terms, sentence_terms, c, c_g, mask, lengths, window_size, sigmoid_scores
                )
                saved += [h_in, h_keep, c, g_in, g_keep, c_g, sentence_terms, statistics if nodes else None]
                del product  # freed before the next step allocates its own
                c, g, c_g = new_c, new_g if nodes else g, new_c_g if nodes else c_g
                outputs.append(h)
        ctx.save_for_backward(input_terms, mask, lengths, words_weight, sentences_weight, *saved)
        ctx.options = (num_steps, window_size, sigmoid_scores, dropout_rate)
        ctx.weight_dtype = window_weight.dtype
        ctx.state_dtype = h.dtype
        return (*outputs, g) if nodes else tuple(outputs)

    @staticmethod
    def backward(ctx, *d_outputs):
        num_steps, window_size, sigmoid_scores, dropout_rate = ctx.options
        input_terms, mask, lengths, words_weight, sentences_weight, *saved = ctx.saved_tensors
        steps = [saved[step * STEP_SAVED : (step + 1) * STEP_SAVED] for step in range(num_steps)]
        last_cells, last_sentence_cells = steps[-1][2], steps[-1][5]
        nodes = last_sentence_cells.shape[1]
        d_states = d_outputs[num_steps - 1]
        d_states = torch.zeros_like(last_cells) if d_states is None else d_states.contiguous()
        d_sentence_states = d_outputs[num_steps] if nodes else None
        if nodes and d_sentence_states is None:
            d_sentence_states = torch.zeros_like(last_sentence_cells)
        d_output_states = d_cells = d_sentence_cells = d_words_weight = None
        d_input_terms = torch.empty_like(input_terms, dtype=torch.float32)  # summed over the steps by the kernel
        d_sentence_terms_per_step = []
        with torch.autocast(input_terms.device.type, enabled=False):
            for step in reversed(range(num_steps)):
                h_in, h_keep, c, _, g_keep, c_g, sentence_terms, statistics = steps[step]  # γ̃ read at the end
                flat_h_in = h_in.flatten(0, 1)  # (batch * seq, H)
                product = torch.mm(flat_h_in, words_weight.t()).view(*c.shape[:2], -1)
                # The cells' gradients in two parts (through the words, through the sentence nodes): (2, ...).
                d_product, d_sentence_terms, d_cells, d_sentence_cells = step_update_backward(
                    d_states, d_output_states, d_cells, d_sentence_states, d_sentence_cells, d_input_terms,
                    step < num_steps - 1, product, input_terms, sentence_terms, c, c_g, mask, lengths, statistics,
                    window_size, sigmoid_scores,
                )  # fmt: skip
                if nodes:
                    d_sentence_terms_per_step.append(d_sentence_terms)
                    d_g_in = torch.mm(d_sentence_terms, sentences_weight)  # (batch, K·H)
                    d_sentence_states = undropped(d_g_in.view_as(c_g), g_keep, dropout_rate)
                flat_d_product = d_product.flatten(0, 1)  # (batch * seq, R)
                d_states = undropped(torch.mm(flat_d_product, words_weight).view_as(c), h_keep, dropout_rate)
                if d_words_weight is None:
                    d_words_weight = torch.mm(flat_d_product.t(), flat_h_in)
                else:
                    d_words_weight.addmm_(flat_d_product.t(), flat_h_in)
                d_output_states = d_outputs[step - 1] if step else None
                del product, d_product, flat_d_product  # freed before the next step allocates its own
            sentence_gradients = (None,) * 6
            if nodes:
                sentence_gradients = sentence_weight_gradients(
                    d_sentence_terms_per_step[::-1], [step[3] for step in steps], d_words_weight, nodes
                )
            d_window, d_forget_from_word = window_weight_gradients(d_words_weight, 2 * window_size + 1, nodes)
        weight_gradients = [d_window, d_forget_from_word, *sentence_gradients]
        weight_gradients = [None if d is None else d.to(ctx.weight_dtype) for d in weight_gradients]
        return (
            d_input_terms.to(input_terms.dtype),
            d_states.to(ctx.state_dtype),
            d_cells.sum(0),
            d_sentence_states.to(ctx.state_dtype) if nodes else None,
            d_sentence_cells.sum(0) if nodes else None,
            None,
            None,
            *weight_gradients,
            None,
            None,
            None,
            None,
        )


def window_weight_gradients(d_words_weight: torch.Tensor, window_width: int, nodes: int):
    """The gradients of `word_window.weight` `(C·H, (2w+1)·H)` and `word_forget_from_word.weight` (`None` without
    sentence nodes) from that of `W_h` (`product_weight`)."""
    hidden = d_words_weight.shape[1]
    context_width = (d_words_weight.shape[0] - 3 * nodes * hidden) // window_width
    d_blocks, d_forget_from_word, _ = d_words_weight.split(
        [window_width * context_width, nodes * hidden, 2 * nodes * hidden]
    )
    d_window = d_blocks.view(window_width, context_width, hidden).transpose(0, 1).reshape(context_width, -1)
    return d_window, d_forget_from_word if nodes else None


def sentence_weight_gradients(d_sentence_terms_per_step, sentence_inputs, d_words_weight, nodes: int):
    """The gradients of `sentence_gates` (weight, bias), `word_sentence` and `word_forget_from_sentence` (weight,
    bias), each step's sentence-term gradients `(batch, W)` and dropped sentence states `γ̃^{t-1}` `(batch, K, H)`
    stacked into one matmul; `U_g`, `U_o`'s gradient (the `h̄` columns of `sentence_gates`) comes from `W_h`'s."""
    hidden = d_words_weight.shape[1]
    d_terms = torch.cat(d_sentence_terms_per_step)  # (steps * batch, W)
    inputs = torch.cat(sentence_inputs).flatten(1)  # (steps * batch, K·H)
    sizes = [d_terms.shape[1] - 3 * nodes * hidden, nodes * hidden, 2 * nodes * hidden]
    d_word_sentence, d_forget_weight, d_gates_on_sentence = torch.mm(d_terms.t(), inputs).split(sizes)
    _, d_forget_bias, d_gates_bias = d_terms.sum(0).split(sizes)
    d_gates_weight = torch.cat([d_gates_on_sentence, d_words_weight[-2 * nodes * hidden :]], dim=1)
    return d_gates_weight, d_gates_bias, d_word_sentence, d_forget_weight, d_forget_bias
