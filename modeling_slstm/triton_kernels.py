"""Triton kernels of the fused S-LSTM step (`triton_step.py` wraps them; `docs/equations.md` states the equations and
the layout of the stacked weights and of the tensors below).

Only the elementwise parts of a step are here; every matmul stays in PyTorch (cuBLAS): per step `P = h̃^{t-1} W_h^T`
(every weight on the word states: the window blocks `W_d h_j`, `U_f h_j`, `U_g h_j`, `U_o h_j`) and the sentence terms
`γ̃^{t-1} W_G^T + b_G` (`V γ`, `W_f γ + b_f`, the keep and output gates' `W γ + b`). Two kernels, one launch each per
step, each running a word body and a sentence body side by side (Eq. 2 and Eq. 3 read only step `t-1` values), and
with sentence nodes a small third after the backward's:

- `step_forward_kernel`: `_word_update_forward` (Eq. 2): `W ξ_i` as the sum of the window blocks of `P` at the
  neighbours' rows, plus `U x_i + b` and `V γ`, each gate block of a word in a `(BLOCK_S, BLOCK_H)` tile of its own
  (the gates walked at compile time, their softmax elementwise across the tiles: nothing moves between threads);
  the normalised gates (softmax over the `2w + K + 2` gates), the output gate and content, the new cell and
  state, and the padding mask, in one pass; `_sentence_update_forward`
  (Eq. 3): the forget-gate scores of every real position, their softmax over positions (one pass, rescaled as the
  running maximum grows) together with the mean `U h̄` of the product's `U h_j` blocks, then the node's own cell and
  the node update.
- `step_backward_kernel`: as parallel as the forward, a program per tile of positions and hidden units (a fixed
  amount of work at any length). `_word_update_backward`: the gradients of the word pre-activations, written into
  the product's gradient `dP` (a tensor apart from the product: no program's writes wait for another's reads) at the
  rows they were read from (and summed over the steps for `U x + b`), and of the step `t-1` cells. A cell
  `c_j^{t-1}` is read by the `2w + 1` words around `j`, so each tile holds `w` halo rows on each side of the rows it
  owns, recomputed from the product, and takes their gates across rows (`tl.gather`). `_sentence_update_backward`:
  the gradients of the forget terms, of the keep and output gates (and `1/n` of them for each real position's
  `U h_j`), written into `dP`'s `U h` blocks, and of the word cells, from the statistics the forward saved. The sums
  over positions (of `V γ`, of the forget terms, of the sentence cells' gradient) are written per position block,
  and `step_sums_kernel` adds them up block after block: the same bits at every run, without atomics.

Every program works on one sentence `b`: the kernels move each pointer to sentence `b`'s rows once
(`ptr += b * row size`, as Triton's tutorials do), and the helpers below take pointers to that sentence, positions
within it, hidden indices and the sizes. Tensors are contiguous (the launchers make them so): the product
`(batch, seq, P)` with `P = ((2w + 1)·C + 3K)·H`, `U x + b` `(batch, seq, C·H)`, the sentence terms
`(batch, (C + 3K)·H)`, cells `(batch, seq, H)`, sentence cells `(batch, K, H)`, mask `(batch, seq)` (nonzero at real
positions), lengths `(batch,)`, the statistics `(batch, 4, K, H)`; `C` (`CONTEXT_BLOCKS`) is the number of gate blocks
a word's context feeds, `2w + K + 4`. A gradient of the cells comes in two parts `(2, batch, ...)`, through the words
and through the sentence nodes (written by the word and the sentence bodies of one launch; the next launch sums
them), one part without sentence nodes. Gate block order as in `SLSTMStateTransition`: window gates `l_w … f … r_w`,
one `s_k` per node, `i`, then `o`, `u`.

Loops over positions are `while` loops: Triton 3.6's interpreter cannot take a runtime bound in `range` under NumPy 2.4.
Every kernel reads its inputs in their own dtype (bfloat16, float16 or float32) and computes in float32.
"""

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

from .kernel_dispatch import KERNELS_INTERPRETED, RUN_TIME_SIZES, tl, triton


@triton.jit
def _tanh(x):
    """tanh from one exponential of `-2|x|` (no overflow for any x; `tl` has no stable tanh of its own)."""
    decay = tl.exp(-2.0 * tl.abs(x))
    magnitude = (1.0 - decay) / (1.0 + decay)
    return tl.where(x < 0, -magnitude, magnitude)


@triton.jit
def _product_width(hidden, WINDOW: tl.constexpr, NODES: tl.constexpr, CONTEXT_BLOCKS: tl.constexpr):
    """Columns of a product row: `2w + 1` window blocks of `C·H` (`W_d h_j`), then `U_f h_j`, `U_g h_j`, `U_o h_j`
    (`K·H` each)."""
    return ((2 * WINDOW + 1) * CONTEXT_BLOCKS + 3 * NODES) * hidden


@triton.jit
def _word_terms(
    product_ptr, input_terms_ptr, sentence_terms_ptr, position, slot_offsets, valid, seq, hidden,
    WINDOW: tl.constexpr, NODES: tl.constexpr, CONTEXT_BLOCKS: tl.constexpr,
):  # fmt: skip
    """Eq. 2's pre-activations `W ξ_i + U x_i + b + V γ`, float32, of the words at `position` and the offsets
    `slot_offsets` within a word's gate blocks (broadcast together, `valid` masks them). `W ξ_i` is the sum over the
    window of `W_d h_{i-w+d}`, read from block `d` of the product row of word `i - w + d` (zero beyond the edges)."""
    context_width = CONTEXT_BLOCKS * hidden
    product_width = _product_width(hidden, WINDOW, NODES, CONTEXT_BLOCKS)
    total = tl.load(input_terms_ptr + position * context_width + slot_offsets, mask=valid, other=0.0).to(tl.float32)
    for d in tl.static_range(2 * WINDOW + 1):
        neighbour = position + d - WINDOW
        inside = valid & (neighbour >= 0) & (neighbour < seq)
        offsets = neighbour * product_width + d * context_width + slot_offsets
        total += tl.load(product_ptr + offsets, mask=inside, other=0.0).to(tl.float32)
    if NODES > 0:
        total += tl.load(sentence_terms_ptr + slot_offsets, mask=valid, other=0.0).to(tl.float32)
    return total


@triton.jit
def _word_node(
    product_ptr, input_terms_ptr, sentence_terms_ptr, cells_ptr, sentence_cells_ptr, positions, hidden_idx, seq,
    hidden, WINDOW: tl.constexpr, NODES: tl.constexpr, CONTEXT_BLOCKS: tl.constexpr, SIGMOID_SCORES: tl.constexpr,
):  # fmt: skip
    """Eq. 2 at `positions` `(BLOCK_S,)` (any integers: those outside `[0, seq)` read zeros) and `hidden_idx`
    `(BLOCK_H,)`: `(scores, gates, values, cell, output_gate, content)`, the first three tuples of one tile per
    normalised gate (`2w + K + 2` of them, in gate block order), the rest `(BLOCK_S, BLOCK_H)` tiles.

    Each gate block has a tile of its own, and the gates are walked at compile time: the softmax over the gates is
    an elementwise maximum and sum across the tiles, so that no value moves between threads."""
    normalized: tl.constexpr = 2 * WINDOW + NODES + 2
    position = positions[:, None]  # (BLOCK_S, 1)
    column = hidden_idx[None, :]  # (1, BLOCK_H)
    in_hidden = column < hidden
    in_row = (position >= 0) & (position < seq) & in_hidden  # (BLOCK_S, BLOCK_H)

    # Every load first, every gate block's pre-activations and every value's, so that their waits overlap.
    pre = ()
    for gate in tl.static_range(CONTEXT_BLOCKS):
        pre += (
            _word_terms(
                product_ptr, input_terms_ptr, sentence_terms_ptr, position, gate * hidden + column, in_row, seq,
                hidden, WINDOW, NODES, CONTEXT_BLOCKS,
            ),
        )  # fmt: skip
    # What each gate weighs: the cells c_{i-w} … c_{i+w} (zero beyond the edges), c_{g,k}, then u_i.
    values = ()
    for slot in tl.static_range(2 * WINDOW + 1):
        neighbour = position + slot - WINDOW
        in_window = (neighbour >= 0) & (neighbour < seq) & in_hidden
        values += (tl.load(cells_ptr + neighbour * hidden + column, mask=in_window, other=0.0).to(tl.float32),)
    for node in tl.static_range(NODES):
        values += (tl.load(sentence_cells_ptr + node * hidden + column, mask=in_hidden, other=0.0).to(tl.float32),)
    content = _tanh(pre[normalized + 1])  # u_i
    values += (content,)

    scores = ()
    for gate in tl.static_range(normalized):
        scores += (tl.sigmoid(pre[gate]) if SIGMOID_SCORES else pre[gate],)
    largest = scores[0]
    for gate in tl.static_range(1, normalized):
        largest = tl.maximum(largest, scores[gate])
    exps = ()
    total = tl.zeros_like(largest)
    for gate in tl.static_range(normalized):
        exps += (tl.exp(scores[gate] - largest),)
        total += exps[gate]
    gates = ()
    cell = tl.zeros_like(largest)
    for gate in tl.static_range(normalized):
        gates += (exps[gate] / total,)
        cell += gates[gate] * values[gate]
    return scores, gates, values, cell, tl.sigmoid(pre[normalized]), content


@triton.jit
def _cell_gradient(
    d_states_ptr, d_output_states_ptr, d_cells_ptr, mask_ptr, positions, hidden_idx, seq, hidden, cells_part, cell,
    output_gate, NODES: tl.constexpr,
):  # fmt: skip
    """The gradient reaching the cell `c_i^t` before the mask at `positions` (zero at padding and outside the
    sentence), from the gradients of the masked outputs `h^t` (the next step's, plus the encoder output's where
    `d_output_states_ptr` is given) and `c^t` (none after the last step; its parts through the next step's words and,
    `cells_part` further, its sentence nodes): `(d_cell, d_state, tanh(cell))`."""
    in_seq = (positions >= 0) & (positions < seq)
    real = tl.load(mask_ptr + positions, mask=in_seq, other=0.0) != 0
    keep = real[:, None] & (hidden_idx[None, :] < hidden)
    offsets = positions[:, None] * hidden + hidden_idx[None, :]
    d_state = tl.load(d_states_ptr + offsets, mask=keep, other=0.0).to(tl.float32)
    if d_output_states_ptr is not None:
        d_state += tl.load(d_output_states_ptr + offsets, mask=keep, other=0.0).to(tl.float32)
    squashed = _tanh(cell)
    d_cell = d_state * output_gate * (1.0 - squashed * squashed)
    if d_cells_ptr is not None:
        d_cell += tl.load(d_cells_ptr + offsets, mask=keep, other=0.0).to(tl.float32)
        if NODES > 0:
            d_cell += tl.load(d_cells_ptr + cells_part + offsets, mask=keep, other=0.0).to(tl.float32)
    return d_cell, d_state, squashed


@triton.jit
def _word_update_forward(
    product_ptr, input_terms_ptr, sentence_terms_ptr, cells_ptr, sentence_cells_ptr, mask_ptr, new_states_ptr,
    new_cells_ptr, positions, hidden_idx, seq, hidden, WINDOW: tl.constexpr, NODES: tl.constexpr,
    CONTEXT_BLOCKS: tl.constexpr, SIGMOID_SCORES: tl.constexpr,
):  # fmt: skip
    """Eq. 2 at `positions` `(BLOCK_S,)` and `hidden_idx` `(BLOCK_H,)`: `h^t`, `c^t`, zero at padding."""
    _, _, _, cell, output_gate, _ = _word_node(
        product_ptr, input_terms_ptr, sentence_terms_ptr, cells_ptr, sentence_cells_ptr, positions, hidden_idx, seq,
        hidden, WINDOW, NODES, CONTEXT_BLOCKS, SIGMOID_SCORES,
    )  # fmt: skip
    real = (tl.load(mask_ptr + positions, mask=positions < seq, other=0.0) != 0)[:, None]
    valid = (positions[:, None] < seq) & (hidden_idx[None, :] < hidden)
    offsets = positions[:, None] * hidden + hidden_idx[None, :]
    state = output_gate * _tanh(cell)
    tl.store(new_cells_ptr + offsets, tl.where(real, cell, 0.0).to(new_cells_ptr.dtype.element_ty), mask=valid)
    tl.store(new_states_ptr + offsets, tl.where(real, state, 0.0).to(new_states_ptr.dtype.element_ty), mask=valid)


@triton.jit
def _store_word_gradient(
    d_product_ptr, d_input_terms_ptr, values, position, slot_offsets, valid, seq, hidden, WINDOW: tl.constexpr,
    NODES: tl.constexpr, CONTEXT_BLOCKS: tl.constexpr, LATER_STEPS: tl.constexpr,
):  # fmt: skip
    """Stores `values`, the gradient of Eq. 2's pre-activations of the words at `position` (at `slot_offsets`,
    broadcast as in `_word_terms`): into block `d` of the product row `i - w + d` for every window offset `d` (the
    `W_d h` that word `i` read; `_zero_unread_blocks` writes the blocks that no word reads), and as the gradient of
    `U x_i + b` into `d_input_terms_ptr` (float32), with `LATER_STEPS` added to the later steps' gradient there."""
    context_width = CONTEXT_BLOCKS * hidden
    product_width = _product_width(hidden, WINDOW, NODES, CONTEXT_BLOCKS)
    dtype = d_product_ptr.dtype.element_ty
    # The offsets in int64, unlike `_word_terms`' int32 ones of the same elements: shared, they would stay live in
    # registers from the loads to the stores (under Triton 3.6 the paper configuration's backward took 140 registers
    # rather than 105).
    for d in tl.static_range(2 * WINDOW + 1):
        row = position + d - WINDOW
        offsets = row.to(tl.int64) * product_width + d * context_width + slot_offsets
        tl.store(d_product_ptr + offsets, values.to(dtype), mask=valid & (row >= 0) & (row < seq))
    input_offsets = position.to(tl.int64) * context_width + slot_offsets
    if LATER_STEPS:
        values += tl.load(d_input_terms_ptr + input_offsets, mask=valid, other=0.0)
    tl.store(d_input_terms_ptr + input_offsets, values, mask=valid)


@triton.jit
def _zero_unread_blocks(
    d_product_ptr, positions, owned, hidden_idx, seq, hidden, WINDOW: tl.constexpr, NODES: tl.constexpr,
    CONTEXT_BLOCKS: tl.constexpr, GATES: tl.constexpr,
):  # fmt: skip
    """Writes zero into block `d` of the product's gradient at the `owned` rows of `positions` `(BLOCK_S,)` that no
    word reads (word `j + w - d` beyond the edges: the first `d - w` rows for `d > w`, the last `w - d` for `d < w`),
    every gate block at `hidden_idx` `(BLOCK_H,)` in one `(GATES, BLOCK_H)` tile per row: a few rows of the
    sentence, rather than a masked store of every tile row for each gate and window offset."""
    # The owned rows, first to last, (1, 1) each: Triton's interpreter refuses a mask made with a scalar from a
    # reduction (its dtype int32).
    first = tl.min(tl.where(owned, positions, seq), axis=0, keep_dims=True)[:, None]
    last = tl.max(tl.where(owned, positions, -1), axis=0, keep_dims=True)[:, None]
    slot = tl.arange(0, GATES)[:, None]
    column = hidden_idx[None, :]
    in_blocks = (slot < CONTEXT_BLOCKS) & (column < hidden)  # (GATES, BLOCK_H)
    context_width = CONTEXT_BLOCKS * hidden
    product_width = _product_width(hidden, WINDOW, NODES, CONTEXT_BLOCKS)
    zeros = tl.zeros([GATES, hidden_idx.shape[0]], dtype=d_product_ptr.dtype.element_ty)
    for d in tl.static_range(2 * WINDOW + 1):
        for k in tl.static_range(WINDOW - d if d < WINDOW else d - WINDOW):
            row = seq - 1 - k if d < WINDOW else k
            offsets = row * product_width + d * context_width + slot * hidden + column
            tl.store(d_product_ptr + offsets, zeros, mask=in_blocks & (first <= row) & (last >= row))


@triton.jit
def _shifted_rows(x, SHIFT: tl.constexpr):
    """`x` `(BLOCK_S, BLOCK_H)` with row `r` taken from row `r + SHIFT`: a move across the tile's rows (between
    threads), which elementwise code cannot make. Rows whose source lies beyond the tile take the nearest edge row:
    they are halo rows, never stored."""
    rows = tl.arange(0, x.shape[0])[:, None]
    source = tl.minimum(tl.maximum(rows + SHIFT, 0), x.shape[0] - 1)
    return tl.gather(x, tl.broadcast_to(source, x.shape), 0)


@triton.jit
def _word_update_backward(
    d_states_ptr, d_output_states_ptr, d_cells_ptr, product_ptr, input_terms_ptr, sentence_terms_ptr, cells_ptr,
    sentence_cells_ptr, mask_ptr, d_product_ptr, d_input_terms_ptr, d_prev_cells_ptr, positions, owned, hidden_idx,
    seq, hidden, cells_part, WINDOW: tl.constexpr, NODES: tl.constexpr, CONTEXT_BLOCKS: tl.constexpr,
    GATES: tl.constexpr, SIGMOID_SCORES: tl.constexpr, LATER_STEPS: tl.constexpr,
):  # fmt: skip
    """Gradients of Eq. 2 at the `owned` rows of `positions` `(BLOCK_S,)` and at `hidden_idx` `(BLOCK_H,)`: the
    window blocks of the product's gradient (of `W_d h_j`, at the rows they were read from, into `d_product_ptr`),
    `d_input_terms` (of `U x_i + b`, added to the later steps' with `LATER_STEPS`), `d_prev_cells` (of `c^{t-1}`);
    returns the tile's part of two sums over positions, `(GATES, BLOCK_H)` each: of every gate block's
    pre-activations (the gradient of the `V γ` block of the sentence terms) and of the values' (that of `c_g^{t-1}`
    through the words, at the sentence nodes' slots).

    `c_j^{t-1}` is read by the `2w + 1` words around `j`, so the tile's `w` rows on each side of the owned ones are
    halo rows: recomputed (Eq. 2 again, from the product) for their `∂L/∂c^t` and gates, never stored."""
    normalized: tl.constexpr = 2 * WINDOW + NODES + 2
    scores, gates, values, cell, output_gate, content = _word_node(
        product_ptr, input_terms_ptr, sentence_terms_ptr, cells_ptr, sentence_cells_ptr, positions, hidden_idx, seq,
        hidden, WINDOW, NODES, CONTEXT_BLOCKS, SIGMOID_SCORES,
    )  # fmt: skip
    d_cell, d_state, squashed = _cell_gradient(
        d_states_ptr, d_output_states_ptr, d_cells_ptr, mask_ptr, positions, hidden_idx, seq, hidden, cells_part,
        cell, output_gate, NODES,
    )  # fmt: skip
    position = positions[:, None]
    column = hidden_idx[None, :]
    stored = owned[:, None] & (column < hidden)  # (BLOCK_S, BLOCK_H)
    d_values = ()  # ∂L/∂value_k = gate_k ∂L/∂c, one (BLOCK_S, BLOCK_H) tile per normalised gate
    for gate in tl.static_range(normalized):
        d_values += (gates[gate] * d_cell,)

    # ∂L/∂c_j^{t-1}: c_j^{t-1} is the value of window slot `slot` of word j + w - slot, whose ∂L/∂value of that slot
    # it receives, from the row `w - slot` below in the tile.
    d_prev = d_values[WINDOW]
    for slot in tl.static_range(2 * WINDOW + 1):
        if slot != WINDOW:
            d_prev += _shifted_rows(d_values[slot], WINDOW - slot)
    cell_offsets = position * hidden + column
    tl.store(d_prev_cells_ptr + cell_offsets, d_prev.to(d_prev_cells_ptr.dtype.element_ty), mask=stored)
    d_content = d_values[normalized - 1] * (1.0 - content * content)
    d_output = d_state * squashed * output_gate * (1.0 - output_gate)

    # The gradient of each gate block's pre-activations, as `_word_node` reads them, stored and summed over the
    # tile's rows into row `gate` of the sums. Softmax backward with Σ_k gate_k value_k = cell:
    # ∂L/∂score_k = gate_k ∂L/∂c (value_k - c).
    slot_rows = tl.arange(0, GATES)[:, None]
    pre_sums = tl.zeros([GATES, hidden_idx.shape[0]], dtype=tl.float32)
    value_sums = tl.zeros([GATES, hidden_idx.shape[0]], dtype=tl.float32)
    for gate in tl.static_range(CONTEXT_BLOCKS):
        if gate < normalized:
            d_pre = d_values[gate] * (values[gate] - cell)
            if SIGMOID_SCORES:
                d_pre = d_pre * scores[gate] * (1.0 - scores[gate])
            if gate >= 2 * WINDOW + 1 and gate < 2 * WINDOW + 1 + NODES:  # c_g^{t-1}'s value
                value_sum = tl.sum(tl.where(stored, d_values[gate], 0.0), axis=0)
                value_sums = tl.where(slot_rows == gate, value_sum[None, :], value_sums)
        elif gate == normalized:
            d_pre = d_output
        else:
            d_pre = d_content
        _store_word_gradient(
            d_product_ptr, d_input_terms_ptr, d_pre, position, gate * hidden + column, stored, seq, hidden, WINDOW,
            NODES, CONTEXT_BLOCKS, LATER_STEPS,
        )  # fmt: skip
        pre_sums = tl.where(slot_rows == gate, tl.sum(tl.where(stored, d_pre, 0.0), axis=0)[None, :], pre_sums)
    _zero_unread_blocks(
        d_product_ptr, positions, owned, hidden_idx, seq, hidden, WINDOW, NODES, CONTEXT_BLOCKS, GATES
    )  # fmt: skip
    return pre_sums, value_sums


@triton.jit
def _node_tile(hidden_idx, hidden, NODES: tl.constexpr, NODES_P: tl.constexpr):
    """The `(NODES_P, BLOCK_H)` tile of sentence nodes and hidden units: `(node, column, valid, offsets)`, the
    offsets into a sentence's `(nodes, hidden)` rows."""
    node = tl.arange(0, NODES_P)[:, None]
    column = hidden_idx[None, :]
    valid = (node < NODES) & (column < hidden)
    return node, column, valid, node * hidden + column


@triton.jit
def _position_scores(
    forget_ptr, product_width, forget_terms, mask_ptr, positions, node, column, seq, hidden, NODES: tl.constexpr,
    SIGMOID_SCORES: tl.constexpr,
):  # fmt: skip
    """Eq. 3's forget-gate scores at `positions` `(BLOCK_S,)`, `(BLOCK_S, NODES_P, BLOCK_H)`: of
    `W_f γ + U_f h_j + b_f` (`U_f h_j` from the product rows, whose `U_f h` block `forget_ptr` points to in row 0;
    `forget_terms` `(NODES_P, BLOCK_H)` holds `W_f γ + b_f`), then the same with `-inf` at padding (weight exactly
    zero), and where the position is real: `(scores, masked_scores, real)`."""
    position = positions[:, None, None]
    real = (tl.load(mask_ptr + positions, mask=positions < seq, other=0.0) != 0)[:, None, None]
    valid = (position < seq) & (node[None, :, :] < NODES) & (column[None, :, :] < hidden)
    offsets = position * product_width + node[None, :, :] * hidden + column[None, :, :]
    scores = tl.load(forget_ptr + offsets, mask=valid, other=0.0).to(tl.float32) + forget_terms[None, :, :]
    if SIGMOID_SCORES:
        scores = tl.sigmoid(scores)
    return scores, tl.where(real & valid, scores, float("-inf")), real & valid


@triton.jit
def _word_cells(cells_ptr, positions, hidden_idx, seq, hidden):
    """`c_j^{t-1}` at `positions` `(BLOCK_S,)`, float32 `(BLOCK_S, BLOCK_H)`."""
    in_row = (positions[:, None] < seq) & (hidden_idx[None, :] < hidden)
    offsets = positions[:, None] * hidden + hidden_idx[None, :]
    return tl.load(cells_ptr + offsets, mask=in_row, other=0.0).to(tl.float32)


@triton.jit
def _sentence_terms(gate_terms_ptr, node_offsets, valid, hidden, NODES: tl.constexpr):
    """The terms of Eq. 3 on `γ^{t-1}`, float32 on a `_node_tile`, from `gate_terms_ptr` (the sentence terms' Eq. 3
    columns): `W_f γ + b_f`, `W_g γ + b_g` (keep gate) and `W_o γ + b_o` (output gate)."""
    forget = tl.load(gate_terms_ptr + node_offsets, mask=valid, other=0.0).to(tl.float32)
    keep = tl.load(gate_terms_ptr + NODES * hidden + node_offsets, mask=valid, other=0.0).to(tl.float32)
    output = tl.load(gate_terms_ptr + 2 * NODES * hidden + node_offsets, mask=valid, other=0.0).to(tl.float32)
    return forget, keep, output


@triton.jit
def _sentence_update_forward(
    forget_ptr, product_width, gate_terms_ptr, cells_ptr, sentence_cells_ptr, mask_ptr, lengths_ptr, new_states_ptr,
    new_cells_ptr, statistics_ptr, hidden_idx, seq, hidden, NODES: tl.constexpr, NODES_P: tl.constexpr,
    SIGMOID_SCORES: tl.constexpr, BLOCK_S: tl.constexpr,
):  # fmt: skip
    """Eq. 3 for all sentence nodes at `hidden_idx` `(BLOCK_H,)`: `g^t`, `c_g^t`, and (float32, for the backward) the
    statistics `(cell, log of the softmax's normaliser, keep score, output gate)`. `forget_ptr` points to the
    product's `U_f h` block (row 0), `gate_terms_ptr` to the sentence terms' `W_f γ + b_f` block.

    One pass over the positions: the softmax over them (rescaled as the running maximum grows), and the sums of
    `U_g h_j` and `U_o h_j` from the product rows, which divided by the sentence's length are `U_g h̄`, `U_o h̄`; the
    node's own cell, whose keep score needs `h̄`, joins the softmax last."""
    node, column, valid, node_offsets = _node_tile(hidden_idx, hidden, NODES, NODES_P)
    forget_terms, keep_pre, output_pre = _sentence_terms(gate_terms_ptr, node_offsets, valid, hidden, NODES)
    largest = tl.full(
        [NODES_P, hidden_idx.shape[0]], -1.0e30, dtype=tl.float32
    )  # finite: a padding block rescales by 1
    normalizer = tl.zeros([NODES_P, hidden_idx.shape[0]], dtype=tl.float32)
    weighted = tl.zeros([NODES_P, hidden_idx.shape[0]], dtype=tl.float32)
    keep_sum = tl.zeros([NODES_P, hidden_idx.shape[0]], dtype=tl.float32)  # Σ_j U_g h_j
    output_sum = tl.zeros([NODES_P, hidden_idx.shape[0]], dtype=tl.float32)  # Σ_j U_o h_j
    start = 0
    while start < seq:
        positions = start + tl.arange(0, BLOCK_S)
        _, scores, real = _position_scores(
            forget_ptr, product_width, forget_terms, mask_ptr, positions, node, column, seq, hidden, NODES,
            SIGMOID_SCORES,
        )  # fmt: skip
        new_largest = tl.maximum(largest, tl.max(scores, axis=0))
        rescale = tl.exp(largest - new_largest)
        exps = tl.exp(scores - new_largest[None, :, :])
        word_cells = _word_cells(cells_ptr, positions, hidden_idx, seq, hidden)
        normalizer = normalizer * rescale + tl.sum(exps, axis=0)
        weighted = weighted * rescale + tl.sum(exps * word_cells[:, None, :], axis=0)
        largest = new_largest
        keep_offsets = positions[:, None, None] * product_width + NODES * hidden + node_offsets[None, :, :]
        keep_sum += tl.sum(tl.load(forget_ptr + keep_offsets, mask=real, other=0.0).to(tl.float32), axis=0)
        output_terms = tl.load(forget_ptr + keep_offsets + NODES * hidden, mask=real, other=0.0)
        output_sum += tl.sum(output_terms.to(tl.float32), axis=0)
        start += BLOCK_S
    length = tl.load(lengths_ptr)
    keep_score = keep_pre + keep_sum / length  # W_g γ + U_g h̄ + b_g
    if SIGMOID_SCORES:
        keep_score = tl.sigmoid(keep_score)
    output_gate = tl.sigmoid(output_pre + output_sum / length)  # o = σ(W_o γ + U_o h̄ + b_o)
    new_largest = tl.maximum(largest, keep_score)
    rescale = tl.exp(largest - new_largest)
    own = tl.exp(keep_score - new_largest)
    previous_cell = tl.load(sentence_cells_ptr + node_offsets, mask=valid, other=0.0).to(tl.float32)
    normalizer = normalizer * rescale + own
    cell = (weighted * rescale + own * previous_cell) / normalizer
    state = output_gate * _tanh(cell)
    tl.store(new_cells_ptr + node_offsets, cell.to(new_cells_ptr.dtype.element_ty), mask=valid)
    tl.store(new_states_ptr + node_offsets, state.to(new_states_ptr.dtype.element_ty), mask=valid)
    statistic = NODES * hidden  # the statistics' columns: (cell, log normaliser, keep score, output gate) blocks
    tl.store(statistics_ptr + node_offsets, cell, mask=valid)
    tl.store(statistics_ptr + statistic + node_offsets, new_largest + tl.log(normalizer), mask=valid)
    tl.store(statistics_ptr + 2 * statistic + node_offsets, keep_score, mask=valid)
    tl.store(statistics_ptr + 3 * statistic + node_offsets, output_gate, mask=valid)


@triton.jit
def _sentence_cell_gradients(
    d_states_ptr, d_cells_ptr, sentence_cells_ptr, statistics_ptr, node_offsets, valid, hidden, sentence_cells_part,
    NODES: tl.constexpr, SIGMOID_SCORES: tl.constexpr,
):  # fmt: skip
    """What the gradients of Eq. 3 at every position need, on a `_node_tile`: from those of `g^t` and `c_g^t` (none
    after the last step; its parts through the next step's words and, at `sentence_cells_part`, its sentence nodes)
    and the statistics the forward saved, `(cell, log_normalizer, d_cell, keep_weight, d_keep, d_output)`: `c_g^t`,
    the log of its softmax's normaliser, `∂L/∂c_g^t`, the keep gate `f_g`, and the gradients of the keep and output
    gates' pre-activations."""
    statistic = NODES * hidden
    cell = tl.load(statistics_ptr + node_offsets, mask=valid, other=0.0)
    log_normalizer = tl.load(statistics_ptr + statistic + node_offsets, mask=valid, other=0.0)
    keep_score = tl.load(statistics_ptr + 2 * statistic + node_offsets, mask=valid, other=0.0)
    output_gate = tl.load(statistics_ptr + 3 * statistic + node_offsets, mask=valid, other=0.0)
    d_state = tl.load(d_states_ptr + node_offsets, mask=valid, other=0.0).to(tl.float32)
    squashed = _tanh(cell)
    d_cell = d_state * output_gate * (1.0 - squashed * squashed)
    if d_cells_ptr is not None:
        d_cell += tl.load(d_cells_ptr + node_offsets, mask=valid, other=0.0).to(tl.float32)
        d_cell += tl.load(d_cells_ptr + sentence_cells_part + node_offsets, mask=valid, other=0.0).to(tl.float32)
    keep_weight = tl.exp(keep_score - log_normalizer)  # f_{g,k}
    previous_cell = tl.load(sentence_cells_ptr + node_offsets, mask=valid, other=0.0).to(tl.float32)
    d_keep = keep_weight * d_cell * (previous_cell - cell)
    if SIGMOID_SCORES:
        d_keep = d_keep * keep_score * (1.0 - keep_score)
    d_output = d_state * squashed * output_gate * (1.0 - output_gate)
    return cell, log_normalizer, d_cell, d_keep, d_output, keep_weight


@triton.jit
def _sentence_update_backward(
    forget_ptr, d_forget_ptr, product_width, forget_terms, cells_ptr, mask_ptr, d_prev_cells_ptr, cell,
    log_normalizer, d_cell, d_keep, d_output, length, positions, hidden_idx, seq, hidden, NODES: tl.constexpr,
    NODES_P: tl.constexpr, SIGMOID_SCORES: tl.constexpr,
):  # fmt: skip
    """Gradients of Eq. 3 for all sentence nodes at `positions` `(BLOCK_S,)` (rows at `seq` or beyond are left out)
    and `hidden_idx` `(BLOCK_H,)`, from `_sentence_cell_gradients`' and `W_f γ + b_f` (`forget_terms`) on a
    `_node_tile`: the `U_f h_j`, `U_g h_j`, `U_o h_j` blocks of the product's gradient from `d_forget_ptr` on (the last
    two `1/n` of the keep and output gates' at real positions; `forget_ptr` points to the product's `U_f h` block),
    and the sentence nodes' part of `d_prev_cells` (of `c^{t-1}`); returns the tile's part of the sum over positions
    of the forget scores' gradient (that of `W_f γ + b_f`), `(NODES_P, BLOCK_H)`."""
    node, column, valid, node_offsets = _node_tile(hidden_idx, hidden, NODES, NODES_P)
    scores, masked_scores, real = _position_scores(
        forget_ptr, product_width, forget_terms, mask_ptr, positions, node, column, seq, hidden, NODES,
        SIGMOID_SCORES,
    )  # fmt: skip
    weights = tl.exp(masked_scores - log_normalizer[None, :, :])  # f_{j,k}, zero at padding
    word_cells = _word_cells(cells_ptr, positions, hidden_idx, seq, hidden)
    # Softmax backward with Σ_j f_j c_j + f_g c_g = c_g^t: ∂L/∂score_j = f_j ∂L/∂c_g^t (c_j - c_g^t).
    d_scores = weights * d_cell[None, :, :] * (word_cells[:, None, :] - cell[None, :, :])
    if SIGMOID_SCORES:
        d_scores = d_scores * scores * (1.0 - scores)
    in_seq = (positions[:, None, None] < seq) & valid[None, :, :]
    offsets = positions[:, None, None] * product_width + node_offsets[None, :, :]
    dtype = d_forget_ptr.dtype.element_ty
    tl.store(d_forget_ptr + offsets, d_scores.to(dtype), mask=in_seq)
    # h̄ = Σ_j h_j / n over the real positions j: U_g h_j and U_o h_j each receive 1/n of the gate's gradient.
    d_keep_share = tl.where(real, d_keep[None, :, :] / length, 0.0)
    d_output_share = tl.where(real, d_output[None, :, :] / length, 0.0)
    tl.store(d_forget_ptr + offsets + NODES * hidden, d_keep_share.to(dtype), mask=in_seq)
    tl.store(d_forget_ptr + offsets + 2 * NODES * hidden, d_output_share.to(dtype), mask=in_seq)
    d_prev = tl.sum(weights * d_cell[None, :, :], axis=1)  # (BLOCK_S, BLOCK_H): Σ_k f_{j,k} ∂L/∂c_{g,k}^t
    in_row = (positions[:, None] < seq) & (column < hidden)
    cell_offsets = positions[:, None] * hidden + column
    tl.store(d_prev_cells_ptr + cell_offsets, d_prev.to(d_prev_cells_ptr.dtype.element_ty), mask=in_row)
    return tl.sum(tl.where(in_seq, d_scores, 0.0), axis=0)


STEP_RUN_TIME_SIZES = (*RUN_TIME_SIZES, "batch")
"""The step kernels' arguments that Triton compiles no variant for: the padded length, and the batch size, which
changes at an epoch's last batch."""


@triton.jit
def _program_and_sentence(LONG_SENTENCES: tl.constexpr):
    """`(p, b)`: the program of a step kernel within its sentence, and the sentence `b` (int64).

    CUDA launches up to 2^31 - 1 programs on axis 0 of a grid but 65,535 on axes 1 and 2. The sentences go on axis 0
    and their programs on axis 1 while these fit (`LONG_SENTENCES` off: the programs of a sentence grow with its
    length, about 10 per 8 words at hidden 300); past that, the programs on axis 0 and the sentences on axes 1 and 2,
    axis 1 fastest (`triton_step.sentence_axes`; rows of equal length, the programs past the batch's end return at
    once). Not always the latter: with the program on axis 0, whose range the compiler knows less narrowly, the
    paper configuration's backward takes 177 registers a thread rather than 124 (sm_90, Triton 3.9)."""
    if LONG_SENTENCES:
        program = tl.program_id(0)
        sentence = tl.program_id(2).to(tl.int64) * tl.num_programs(1) + tl.program_id(1)
    else:
        program = tl.program_id(1)
        sentence = tl.program_id(0).to(tl.int64)
    return program, sentence


@triton.jit
def _offset_unit(hidden, INT64_OFFSETS: tl.constexpr):
    """`hidden` as the offsets within a sentence multiply it: int64 with `INT64_OFFSETS`, else as it comes (int32).

    Every row of a sentence's tensors is a multiple of `hidden` wide, so every offset within a sentence is a
    product with it (positions times a row's width, gate slots times `hidden`); the pointers themselves are moved to
    the sentence's rows in int64 (`b` is). int32 offsets hold while a sentence's product, its largest tensor, has
    fewer than 2^31 values (`seq·P`): up to 298,261 words in the paper configuration (`P = 7,200`), 43,690 at hidden
    1024 and window 2 (`P = 49,152`). The launcher sets `INT64_OFFSETS` past that only (one more compiled variant,
    for such lengths): int64 offsets take the paper configuration's kernels in the long sentences' layout from 109
    registers a thread to 144 (forward) and from 177 to 190 and 231 (backward, the last step and the others; sm_90,
    Triton 3.9)."""
    return tl.cast(hidden, tl.int64) if INT64_OFFSETS else hidden


@triton.jit(do_not_specialize=STEP_RUN_TIME_SIZES)
def step_forward_kernel(
    product_ptr, input_terms_ptr, sentence_terms_ptr, cells_ptr, sentence_cells_ptr, mask_ptr, lengths_ptr,
    new_states_ptr, new_cells_ptr, new_sentence_states_ptr, new_sentence_cells_ptr, statistics_ptr, seq, hidden,
    batch, WINDOW: tl.constexpr, NODES: tl.constexpr, NODES_P: tl.constexpr, CONTEXT_BLOCKS: tl.constexpr,
    SIGMOID_SCORES: tl.constexpr, WORD_BLOCK_S: tl.constexpr, WORD_BLOCK_H: tl.constexpr,
    SENTENCE_BLOCK_S: tl.constexpr, SENTENCE_BLOCK_H: tl.constexpr, LONG_SENTENCES: tl.constexpr,
    INT64_OFFSETS: tl.constexpr,
):  # fmt: skip
    """One step, Eq. 2 and Eq. 3 side by side in one launch (both read step `t-1` values only): program `p` of
    sentence `b` (`_program_and_sentence`) updates a block of hidden units of the sentence's nodes while `p` counts
    those blocks, and a block of positions and hidden units of its words after them. Offsets within a sentence as
    `_offset_unit` says."""
    program, b = _program_and_sentence(LONG_SENTENCES)
    if b >= batch:  # past the batch's end, in the last row of `sentence_axes`
        return
    word_hidden_blocks = tl.cdiv(hidden, WORD_BLOCK_H)
    sentence_programs = tl.cdiv(hidden, SENTENCE_BLOCK_H)
    hidden = _offset_unit(hidden, INT64_OFFSETS)
    product_width = _product_width(hidden, WINDOW, NODES, CONTEXT_BLOCKS)
    # Sentence b's rows of every tensor.
    product_ptr += b * seq * product_width
    input_terms_ptr += b * seq * CONTEXT_BLOCKS * hidden
    cells_ptr += b * seq * hidden
    mask_ptr += b * seq
    new_states_ptr += b * seq * hidden
    new_cells_ptr += b * seq * hidden
    if NODES > 0:
        sentence_terms_ptr += b * (CONTEXT_BLOCKS + 3 * NODES) * hidden
        sentence_cells_ptr += b * NODES * hidden
        new_sentence_states_ptr += b * NODES * hidden
        new_sentence_cells_ptr += b * NODES * hidden
        statistics_ptr += b * 4 * NODES * hidden
    # The sentence bodies first: the GPU starts programs in order, and theirs loop over the positions, so they run
    # while the word programs, each one block, take their turns.
    word_program = program
    if NODES > 0:
        word_program -= sentence_programs
        if word_program < 0:
            hidden_idx = program * SENTENCE_BLOCK_H + tl.arange(0, SENTENCE_BLOCK_H)
            _sentence_update_forward(
                product_ptr + (2 * WINDOW + 1) * CONTEXT_BLOCKS * hidden, product_width,
                sentence_terms_ptr + CONTEXT_BLOCKS * hidden, cells_ptr, sentence_cells_ptr, mask_ptr,
                lengths_ptr + b, new_sentence_states_ptr, new_sentence_cells_ptr, statistics_ptr, hidden_idx, seq,
                hidden, NODES, NODES_P, SIGMOID_SCORES, SENTENCE_BLOCK_S,
            )  # fmt: skip
    if word_program >= 0:
        positions = (word_program // word_hidden_blocks) * WORD_BLOCK_S + tl.arange(0, WORD_BLOCK_S)
        hidden_idx = (word_program % word_hidden_blocks) * WORD_BLOCK_H + tl.arange(0, WORD_BLOCK_H)
        _word_update_forward(
            product_ptr, input_terms_ptr, sentence_terms_ptr, cells_ptr, sentence_cells_ptr, mask_ptr, new_states_ptr,
            new_cells_ptr, positions, hidden_idx, seq, hidden, WINDOW, NODES, CONTEXT_BLOCKS, SIGMOID_SCORES,
        )  # fmt: skip


@triton.jit(do_not_specialize=STEP_RUN_TIME_SIZES)
def step_backward_kernel(
    d_states_ptr, d_output_states_ptr, d_cells_ptr, d_sentence_states_ptr, d_sentence_cells_ptr, product_ptr,
    input_terms_ptr, sentence_terms_ptr, cells_ptr, sentence_cells_ptr, mask_ptr, lengths_ptr, statistics_ptr,
    d_product_ptr, d_input_terms_ptr, partials_ptr, d_prev_cells_ptr, seq, hidden, batch, WINDOW: tl.constexpr,
    NODES: tl.constexpr, NODES_P: tl.constexpr, CONTEXT_BLOCKS: tl.constexpr, GATES: tl.constexpr,
    SIGMOID_SCORES: tl.constexpr, LATER_STEPS: tl.constexpr, BLOCK_S: tl.constexpr, BLOCK_H: tl.constexpr,
    TILES: tl.constexpr, LONG_SENTENCES: tl.constexpr, INT64_OFFSETS: tl.constexpr,
):  # fmt: skip
    """The gradients of one step in one launch, as parallel as the forward: program `p` of sentence `b`
    (`_program_and_sentence`; offsets within it as `_offset_unit` says) takes a position block of `TILES` tiles of
    `BLOCK_S - 2w` positions each (a tile's owned rows, with `w` halo rows on each side of them) and `BLOCK_H`
    hidden units of sentence `b` while `p` counts them, position blocks outer, and runs
    `_word_update_backward` and `_sentence_update_backward` on each tile: a fixed number of passes whatever the
    sentence's length. Every output element has one writer: the product's gradient (`d_product_ptr`, a tensor of its
    own, so nothing orders the reads of the product before the writes), `U x + b`'s (`d_input_terms_ptr`), the two
    parts of `c^{t-1}`'s (`d_prev_cells_ptr`: through the words, through the sentence nodes), and with sentence nodes
    each position block's partial sums of the gradients of the sentence terms and of `c_g^{t-1}` (`partials_ptr`,
    `(position blocks, batch·W + 2·batch·K·H)`: the sentence terms' `(batch, W)`, then `c_g^{t-1}`'s parts
    `(2, batch, K, H)`; what does not depend on the positions is in block 0's, zeros in the others'), which
    `step_sums_kernel` adds up in a fixed order. The previous step's launch sums the parts of the cells' gradients as
    it reads them (`d_cells_ptr`, `d_sentence_cells_ptr`; absent after the last step)."""
    program, b = _program_and_sentence(LONG_SENTENCES)
    if b >= batch:  # past the batch's end, in the last row of `sentence_axes`
        return
    hidden_blocks = tl.cdiv(hidden, BLOCK_H)
    block = program // hidden_blocks
    hidden_idx = (program % hidden_blocks) * BLOCK_H + tl.arange(0, BLOCK_H)
    hidden = _offset_unit(hidden, INT64_OFFSETS)
    batch = tl.cast(batch, tl.int64)
    product_width = _product_width(hidden, WINDOW, NODES, CONTEXT_BLOCKS)
    cells_part = batch * seq * hidden  # from part 0 to part 1 of a gradient of the word cells
    # Sentence b's rows of every tensor.
    d_states_ptr += b * seq * hidden
    if d_output_states_ptr is not None:
        d_output_states_ptr += b * seq * hidden
    if d_cells_ptr is not None:
        d_cells_ptr += b * seq * hidden
    product_ptr += b * seq * product_width
    d_product_ptr += b * seq * product_width
    input_terms_ptr += b * seq * CONTEXT_BLOCKS * hidden
    cells_ptr += b * seq * hidden
    mask_ptr += b * seq
    d_input_terms_ptr += b * seq * CONTEXT_BLOCKS * hidden
    d_prev_cells_ptr += b * seq * hidden
    forget_column = (2 * WINDOW + 1) * CONTEXT_BLOCKS * hidden  # where U_f h starts in a product row
    sentence_column = CONTEXT_BLOCKS * hidden  # where W_f γ + b_f starts in the sentence terms
    if NODES > 0:
        d_sentence_states_ptr += b * NODES * hidden
        if d_sentence_cells_ptr is not None:
            d_sentence_cells_ptr += b * NODES * hidden
        sentence_terms_ptr += b * (CONTEXT_BLOCKS + 3 * NODES) * hidden
        sentence_cells_ptr += b * NODES * hidden
        statistics_ptr += b * 4 * NODES * hidden
        node, column, valid, node_offsets = _node_tile(hidden_idx, hidden, NODES, NODES_P)
        forget_terms, _, _ = _sentence_terms(sentence_terms_ptr + sentence_column, node_offsets, valid, hidden, NODES)
        cell, log_normalizer, d_cell, d_keep, d_output, keep_weight = _sentence_cell_gradients(
            d_sentence_states_ptr, d_sentence_cells_ptr, sentence_cells_ptr, statistics_ptr, node_offsets, valid,
            hidden, batch * NODES * hidden, NODES, SIGMOID_SCORES,
        )  # fmt: skip
        length = tl.load(lengths_ptr + b)

    pre_sums = tl.zeros([GATES, BLOCK_H], dtype=tl.float32)  # Σ over the block's positions
    value_sums = tl.zeros([GATES, BLOCK_H], dtype=tl.float32)
    forget_sums = tl.zeros([NODES_P, BLOCK_H], dtype=tl.float32)
    rows = tl.arange(0, BLOCK_S)
    tile = 0
    while tile < TILES:
        first_owned = (block * TILES + tile) * (BLOCK_S - 2 * WINDOW)
        if first_owned < seq:
            positions = first_owned - WINDOW + rows
            owned = (rows >= WINDOW) & (rows < BLOCK_S - WINDOW) & (positions < seq)
            tile_pre_sums, tile_value_sums = _word_update_backward(
                d_states_ptr, d_output_states_ptr, d_cells_ptr, product_ptr, input_terms_ptr, sentence_terms_ptr,
                cells_ptr, sentence_cells_ptr, mask_ptr, d_product_ptr, d_input_terms_ptr, d_prev_cells_ptr,
                positions, owned, hidden_idx, seq, hidden, cells_part, WINDOW, NODES, CONTEXT_BLOCKS, GATES,
                SIGMOID_SCORES, LATER_STEPS,
            )  # fmt: skip
            pre_sums += tile_pre_sums
            value_sums += tile_value_sums
            if NODES > 0:
                forget_sums += _sentence_update_backward(
                    product_ptr + forget_column, d_product_ptr + forget_column, product_width, forget_terms,
                    cells_ptr, mask_ptr, d_prev_cells_ptr + cells_part, cell, log_normalizer, d_cell, d_keep,
                    d_output, length, tl.where(owned, positions, seq), hidden_idx, seq, hidden, NODES, NODES_P,
                    SIGMOID_SCORES,
                )  # fmt: skip
        tile += 1

    if NODES > 0:  # the block's partial sums
        sentence_width = (CONTEXT_BLOCKS + 3 * NODES) * hidden
        block_partials_ptr = partials_ptr + block * batch * (sentence_width + 2 * NODES * hidden)
        terms_partials_ptr = block_partials_ptr + b * sentence_width
        cells_partials_ptr = block_partials_ptr + batch * sentence_width + b * NODES * hidden
        slot = tl.arange(0, GATES)[:, None]
        in_hidden = hidden_idx[None, :] < hidden
        slot_offsets = slot * hidden + hidden_idx[None, :]
        tl.store(terms_partials_ptr + slot_offsets, pre_sums, mask=(slot < CONTEXT_BLOCKS) & in_hidden)
        tl.store(terms_partials_ptr + sentence_column + node_offsets, forget_sums, mask=valid)
        first = block == 0
        keep_offsets = sentence_column + NODES * hidden + node_offsets
        tl.store(terms_partials_ptr + keep_offsets, tl.where(first, d_keep, 0.0), mask=valid)
        tl.store(terms_partials_ptr + keep_offsets + NODES * hidden, tl.where(first, d_output, 0.0), mask=valid)
        # c_g^{t-1}'s through the words (the values at the sentence nodes' slots), then through the sentence nodes
        node_slot = slot - (2 * WINDOW + 1)
        node_mask = (node_slot >= 0) & (node_slot < NODES) & in_hidden
        tl.store(cells_partials_ptr + slot_offsets - (2 * WINDOW + 1) * hidden, value_sums, mask=node_mask)
        own_cell = tl.where(first, d_cell * keep_weight, 0.0)
        tl.store(cells_partials_ptr + batch * NODES * hidden + node_offsets, own_cell, mask=valid)


@triton.jit(do_not_specialize=("blocks", "terms_size", "size"))
def step_sums_kernel(
    partials_ptr, d_sentence_terms_ptr, d_prev_sentence_cells_ptr, blocks, terms_size, size, BLOCK: tl.constexpr
):
    """The sums over the position blocks of `step_backward_kernel`'s partial sums `(blocks, size)`, block after
    block (the same order at every run: the same bits), into the gradient of the sentence terms (the first
    `terms_size` columns) and of `c_g^{t-1}` (the rest), each in its own dtype. A program sums `BLOCK` columns; the
    blocks are few (the sentence's length over the backward's position block), and so is its work."""
    columns = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    in_size = columns < size
    total = tl.zeros([BLOCK], dtype=tl.float32)
    block = 0
    while block < blocks:  # a block's row after the previous one's (no int32 product `block * size`)
        total += tl.load(partials_ptr + columns, mask=in_size, other=0.0)
        partials_ptr += size
        block += 1
    is_term = columns < terms_size
    tl.store(d_sentence_terms_ptr + columns, total.to(d_sentence_terms_ptr.dtype.element_ty), mask=is_term)
    cells_ptr = d_prev_sentence_cells_ptr + (columns - terms_size)
    tl.store(cells_ptr, total.to(d_prev_sentence_cells_ptr.dtype.element_ty), mask=in_size & ~is_term)


STEP_KERNELS = ("step_forward_kernel", "step_backward_kernel", "step_sums_kernel")  # every kernel a step launches


@dataclass(frozen=True)
class KernelTiles:
    """How the kernels tile their work on a GPU (`benchmark_kernel_tiles.py` times the choices). The tiles are
    compile-time constants of the kernels, so they depend on the model's sizes only, never on the batch's padded
    length: each length would otherwise compile the kernels anew (`benchmark_compiles.py` counts the compiles).

    Args:
        values_per_tile (`int`, defaults to 2048): about how many values the forward's `slots` tiles of
            `(BLOCK_S, BLOCK_H)` (one per gate block) hold in all, so that its live tiles stay in registers: at 2048,
            16 values a thread with 4 warps (`benchmark_kernel_resources.py` prints the registers it takes).
        max_block_h (`int`, defaults to 32): the widest hidden block.
        num_warps (`int`, defaults to 4): warps per program (Triton's default).
        max_block_s (`int`, defaults to 32): the longest position block. A block holds this many positions whatever
            the sentences' length (masked past their end), so a longer one would mostly compute padding on short
            sentences (CoNLL-2003 batches are 8-24 positions wide); 32 keeps the sentence bodies, whose tiles hold
            one slot per node, to a few loop passes on long ones.
        backward_values_per_tile (`int`, defaults to 1024): the same for the backward's tiles, which keep more of
            them live (the gates, their gradients, what the forward recomputed): half the forward's, so that its
            programs too fit in 128 registers a thread.
        backward_max_block_h (`int`, defaults to 16): the backward's widest hidden block. Narrower than the
            forward's, so that its tiles are taller: each recomputes `2w` halo rows (at 8 rows and window 1, a
            quarter of its rows; at 4, half).
        backward_tiles_per_program (`int`, defaults to 1): how many tiles of positions a backward program takes,
            one after another (the same number at any length): its position block, over which it sums the
            gradients of the sentence terms before writing them (float32, one row of partial sums per block). More
            tiles, fewer partial sums to write and add up, but the loop keeps more registers live (the paper
            configuration's backward: 128 registers at 1, over 200 at 2).
    """

    values_per_tile: int = 2048
    max_block_h: int = 32
    num_warps: int = 4
    max_block_s: int = 32
    backward_values_per_tile: int = 1024
    backward_max_block_h: int = 16
    backward_tiles_per_program: int = 1


GPU_TILES = KernelTiles()
TILE_IN_THE_INTERPRETER = False


def use_tiles(tiles: KernelTiles, in_the_interpreter: bool = False):
    """Makes every later launch tile its work as `tiles` says: on a GPU, and with `in_the_interpreter` also in
    Triton's interpreter (for tests of the tiling; by default the interpreter takes a sentence per tile)."""
    global GPU_TILES, TILE_IN_THE_INTERPRETER
    GPU_TILES, TILE_IN_THE_INTERPRETER = tiles, in_the_interpreter


@contextlib.contextmanager
def using_tiles(tiles: KernelTiles, in_the_interpreter: bool = True) -> Iterator[None]:
    """`use_tiles(tiles, in_the_interpreter)` within the block; the tiling before it comes back after, also where the
    block raises."""
    previous = tiles_in_force()
    use_tiles(tiles, in_the_interpreter)
    try:
        yield
    finally:
        use_tiles(*previous)


def tiles_in_force() -> tuple[KernelTiles, bool]:
    """The tiling that `tile_options` follows now, `(tiles, in_the_interpreter)` as `use_tiles` last set them (so
    that `use_tiles(*tiles_in_force())` restores it)."""
    return GPU_TILES, TILE_IN_THE_INTERPRETER


def tile_options(seq: int, hidden: int, slots: int, backward: bool = False) -> dict[str, int]:
    """The launch options `BLOCK_S`, `BLOCK_H` (`slots` tiles of `(BLOCK_S, BLOCK_H)`) and `num_warps`, and with
    `backward` the backward's tiles and its `TILES` per program: on a GPU as `GPU_TILES` says, the same for every
    `seq` (one compile of each kernel for all lengths); in the interpreter, which compiles nothing and pays per
    program and per operation rather than per value, all of a sentence at once (unless `use_tiles` says otherwise)."""
    block_h = triton.next_power_of_2(hidden)
    if KERNELS_INTERPRETED and not TILE_IN_THE_INTERPRETER:
        options = {"BLOCK_S": triton.next_power_of_2(seq), "BLOCK_H": block_h, "num_warps": GPU_TILES.num_warps}
        return {**options, "TILES": 1} if backward else options
    values = GPU_TILES.backward_values_per_tile if backward else GPU_TILES.values_per_tile
    block_h = min(block_h, GPU_TILES.backward_max_block_h if backward else GPU_TILES.max_block_h)
    block_s = max(1, min(GPU_TILES.max_block_s, values // (slots * block_h)))
    options = {"BLOCK_S": block_s, "BLOCK_H": block_h, "num_warps": GPU_TILES.num_warps}
    return {**options, "TILES": GPU_TILES.backward_tiles_per_program} if backward else options
