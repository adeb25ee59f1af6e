"""Triton kernels of the fused S-LSTM step (`triton_step.py` wraps them; `docs/equations.md` states the equations).

Only the elementwise parts of a step are here; every matmul stays in PyTorch (cuBLAS): per step `P = h̃^{t-1} W_h^T`
(every weight on the word states: the window blocks `W_d h_j`, `U_f h_j`, `U_g h_j`, `U_o h_j`) and the sentence terms
`γ̃^{t-1} W_G^T + b_G` (`V γ`, `W_f γ + b_f`, the keep and output gates' `W γ + b`). Two kernels, one launch each per
step, each running a word body and a sentence body side by side (Eq. 2 and Eq. 3 read only step `t-1` values):

- `step_forward_kernel`: `_word_update_forward` (Eq. 2): `W ξ_i` as the sum of the window blocks of `P` at the
  neighbours' rows, plus `U x_i + b` and `V γ`, the normalised gates (softmax over the `2w + K + 1` gates), the
  output gate and content, the new cell and state, and the padding mask, in one pass; `_sentence_update_forward`
  (Eq. 3): the forget-gate scores of every real position, their softmax over positions (one pass, rescaled as the
  running maximum grows) together with the mean `U h̄` of the product's `U h_j` blocks, then the node's own cell and
  the node update.
- `step_backward_kernel`: `_word_update_backward`: the gradients of the word pre-activations, written into the
  product's window blocks at the rows they were read from (and summed over the steps for `U x + b`), of the step
  `t-1` cells and, summed over positions, of `V γ` and the sentence cells. A cell `c_j^{t-1}` is read by the `2w + 1`
  words around `j`, so each program recomputes the gates of those neighbours rather than reading them from a saved
  tensor; the sums over positions run inside one program per (sentence, hidden block), in a fixed order:
  deterministic. `_sentence_update_backward`: the gradients of the forget terms, of the keep and output gates (and
  `1/n` of them for each real position's `U h_j`), of the word cells and of the sentence cells, from the statistics
  the forward saved.

Loops over positions are `while` loops: Triton 3.6's interpreter cannot take a runtime bound in `range` under NumPy 2.4.
Every kernel reads its inputs in their own dtype (bfloat16, float16 or float32) and computes in float32. Tensors are
contiguous: the product `(batch, seq, product width)`, `U x + b` `(batch, seq, blocks, hidden)`, sentence terms
`(batch, sentence width)`, cells
`(batch, seq, hidden)`, sentence cells `(batch, nodes, hidden)`, mask `(batch, seq)` (nonzero at real positions).
Gate block order as in `SLSTMStateTransition`: window gates `l_w … f … r_w`, one `s_k` per node, `i`, then `o`, `u`.
"""

from dataclasses import dataclass

from .kernel_dispatch import KERNELS_INTERPRETED, tl, triton


@triton.jit
def _tanh(x):
    """tanh from one exponential of `-2|x|` (no overflow for any x; `tl` has no stable tanh of its own)."""
    decay = tl.exp(-2.0 * tl.abs(x))
    magnitude = (1.0 - decay) / (1.0 + decay)
    return tl.where(x < 0, -magnitude, magnitude)


@triton.jit
def _word_terms(
    product_ptr,
    input_terms_ptr,
    sentence_terms_ptr,
    b,
    position,
    slot_offsets,
    valid,
    seq,
    hidden,
    product_width,
    sentence_width,
    WINDOW: tl.constexpr,
    NODES: tl.constexpr,
):
    """Eq. 2's pre-activations `W ξ_i + U x_i + b + V γ`, float32, of the words at `position` and the offsets
    `slot_offsets` within a word's gate blocks (broadcast together, `valid` masks them). `W ξ_i` is the sum over the
    window of `W_d h_{i-w+d}`, read from block `d` of the product row of word `i - w + d` (zero beyond the edges)."""
    context_width = (2 * WINDOW + NODES + 4) * hidden
    input_offsets = (b * seq + position) * context_width + slot_offsets
    total = tl.load(input_terms_ptr + input_offsets, mask=valid, other=0.0).to(tl.float32)
    for d in tl.static_range(2 * WINDOW + 1):
        neighbour = position + d - WINDOW
        inside = valid & (neighbour >= 0) & (neighbour < seq)
        offsets = (b * seq + neighbour) * product_width + d * context_width + slot_offsets
        total += tl.load(product_ptr + offsets, mask=inside, other=0.0).to(tl.float32)
    if NODES > 0:
        total += tl.load(sentence_terms_ptr + b * sentence_width + slot_offsets, mask=valid, other=0.0).to(tl.float32)
    return total


@triton.jit
def _word_node(
    product_ptr,
    input_terms_ptr,
    sentence_terms_ptr,
    cells_ptr,
    sentence_cells_ptr,
    b,
    positions,
    hidden_idx,
    seq,
    hidden,
    product_width,
    sentence_width,
    WINDOW: tl.constexpr,
    NODES: tl.constexpr,
    GATES: tl.constexpr,
    SIGMOID_SCORES: tl.constexpr,
):
    """Eq. 2 at `positions` `(BLOCK_S,)` (any integers: those outside `[0, seq)` read zeros) and `hidden_idx`
    `(BLOCK_H,)`: `(scores, gates, values, cell, output_gate, content)`, the first three `(BLOCK_S, GATES, BLOCK_H)`
    (gate slots past the `2w + K + 1` normalised gates hold zero gates), the rest `(BLOCK_S, BLOCK_H)`."""
    normalized = 2 * WINDOW + NODES + 2
    gate = tl.arange(0, GATES)[None, :, None]
    position = positions[:, None]  # (BLOCK_S, 1)
    column = hidden_idx[None, :]  # (1, BLOCK_H)
    in_row = (position >= 0) & (position < seq) & (column < hidden)  # (BLOCK_S, BLOCK_H)

    # The normalised gates' pre-activations, (BLOCK_S, GATES, BLOCK_H).
    gate_mask = in_row[:, None, :] & (gate < normalized)
    pre = _word_terms(
        product_ptr,
        input_terms_ptr,
        sentence_terms_ptr,
        b,
        position[:, :, None],
        gate * hidden + column[:, None, :],
        gate_mask,
        seq,
        hidden,
        product_width,
        sentence_width,
        WINDOW,
        NODES,
    )
    if SIGMOID_SCORES:
        scores = tl.sigmoid(pre)
    else:
        scores = pre
    masked_scores = tl.where(gate < normalized, scores, float("-inf"))
    exps = tl.exp(masked_scores - tl.max(masked_scores, axis=1)[:, None, :])
    gates = exps / tl.sum(exps, axis=1)[:, None, :]

    output_pre = _word_terms(
        product_ptr,
        input_terms_ptr,
        sentence_terms_ptr,
        b,
        position,
        normalized * hidden + column,
        in_row,
        seq,
        hidden,
        product_width,
        sentence_width,
        WINDOW,
        NODES,
    )
    content_pre = _word_terms(
        product_ptr,
        input_terms_ptr,
        sentence_terms_ptr,
        b,
        position,
        (normalized + 1) * hidden + column,
        in_row,
        seq,
        hidden,
        product_width,
        sentence_width,
        WINDOW,
        NODES,
    )
    content = _tanh(content_pre)  # u_i

    # What each gate weighs: the cells c_{i-w} … c_{i+w} (zero beyond the edges), c_{g,k}, then u_i.
    neighbour = position[:, :, None] + gate - WINDOW
    in_hidden = column[:, None, :] < hidden
    in_window = (gate < 2 * WINDOW + 1) & (neighbour >= 0) & (neighbour < seq) & in_hidden
    values = tl.load(cells_ptr + (b * seq + neighbour) * hidden + column[:, None, :], mask=in_window, other=0.0).to(
        tl.float32
    )
    if NODES > 0:
        node = gate - (2 * WINDOW + 1)
        is_node = (node >= 0) & (node < NODES) & in_hidden
        node_cells = tl.load(
            sentence_cells_ptr + (b * NODES + node) * hidden + column[:, None, :], mask=is_node, other=0.0
        )
        values += node_cells.to(tl.float32)
    values = tl.where(gate == normalized - 1, content[:, None, :], values)
    cell = tl.sum(gates * values, axis=1)
    return scores, gates, values, cell, tl.sigmoid(output_pre), content


@triton.jit
def _cell_gradient(
    d_states_ptr,
    d_output_states_ptr,
    d_cells_ptr,
    d_cells_via_sentences_ptr,
    mask_ptr,
    b,
    positions,
    hidden_idx,
    seq,
    hidden,
    cell,
    output_gate,
):
    """The gradient reaching the cell `c_i^t` before the mask at `positions` (zero at padding and outside the
    sentence), from the gradients of the masked outputs `h^t` (the next step's, plus the encoder output's where
    `d_output_states_ptr` is given) and `c^t` (none after the last step; through the next step's words, and its
    sentence nodes where `d_cells_via_sentences_ptr` is given): `(d_cell, d_state, tanh(cell))`."""
    in_seq = (positions >= 0) & (positions < seq)
    real = tl.load(mask_ptr + b * seq + positions, mask=in_seq, other=0.0) != 0
    keep = real[:, None] & (hidden_idx[None, :] < hidden)
    offsets = (b * seq + positions[:, None]) * hidden + hidden_idx[None, :]
    d_state = tl.load(d_states_ptr + offsets, mask=keep, other=0.0).to(tl.float32)
    if d_output_states_ptr is not None:
        d_state += tl.load(d_output_states_ptr + offsets, mask=keep, other=0.0).to(tl.float32)
    squashed = _tanh(cell)
    d_cell = d_state * output_gate * (1.0 - squashed * squashed)
    if d_cells_ptr is not None:
        d_cell += tl.load(d_cells_ptr + offsets, mask=keep, other=0.0).to(tl.float32)
    if d_cells_via_sentences_ptr is not None:
        d_cell += tl.load(d_cells_via_sentences_ptr + offsets, mask=keep, other=0.0).to(tl.float32)
    return d_cell, d_state, squashed


@triton.jit
def _word_update_forward(
    product_ptr,
    input_terms_ptr,
    sentence_terms_ptr,
    cells_ptr,
    sentence_cells_ptr,
    mask_ptr,
    new_states_ptr,
    new_cells_ptr,
    b,
    position_block,
    hidden_block,
    seq,
    hidden,
    product_width,
    sentence_width,
    WINDOW: tl.constexpr,
    NODES: tl.constexpr,
    GATES: tl.constexpr,
    SIGMOID_SCORES: tl.constexpr,
    BLOCK_S: tl.constexpr,
    BLOCK_H: tl.constexpr,
):
    """Eq. 2 for a block of positions and hidden units of sentence `b`: `h^t`, `c^t`, zero at padding."""
    positions = position_block * BLOCK_S + tl.arange(0, BLOCK_S)
    hidden_idx = hidden_block * BLOCK_H + tl.arange(0, BLOCK_H)
    _, _, _, cell, output_gate, _ = _word_node(
        product_ptr,
        input_terms_ptr,
        sentence_terms_ptr,
        cells_ptr,
        sentence_cells_ptr,
        b,
        positions,
        hidden_idx,
        seq,
        hidden,
        product_width,
        sentence_width,
        WINDOW,
        NODES,
        GATES,
        SIGMOID_SCORES,
    )
    real = (tl.load(mask_ptr + b * seq + positions, mask=positions < seq, other=0.0) != 0)[:, None]
    valid = (positions[:, None] < seq) & (hidden_idx[None, :] < hidden)
    offsets = (b * seq + positions[:, None]) * hidden + hidden_idx[None, :]
    state = output_gate * _tanh(cell)
    tl.store(new_cells_ptr + offsets, tl.where(real, cell, 0.0).to(new_cells_ptr.dtype.element_ty), mask=valid)
    tl.store(new_states_ptr + offsets, tl.where(real, state, 0.0).to(new_states_ptr.dtype.element_ty), mask=valid)


@triton.jit
def _neighbour_cell_gradient(
    d_states_ptr,
    d_output_states_ptr,
    d_cells_ptr,
    d_cells_via_sentences_ptr,
    product_ptr,
    input_terms_ptr,
    sentence_terms_ptr,
    cells_ptr,
    sentence_cells_ptr,
    mask_ptr,
    b,
    positions,
    hidden_idx,
    seq,
    hidden,
    product_width,
    sentence_width,
    SLOT: tl.constexpr,
    WINDOW: tl.constexpr,
    NODES: tl.constexpr,
    GATES: tl.constexpr,
    SIGMOID_SCORES: tl.constexpr,
):
    """`∂L/∂c_i^t · gate_SLOT` of the words at `positions`: what reaches the cell their window slot `SLOT` reads."""
    _, gates, _, cell, output_gate, _ = _word_node(
        product_ptr,
        input_terms_ptr,
        sentence_terms_ptr,
        cells_ptr,
        sentence_cells_ptr,
        b,
        positions,
        hidden_idx,
        seq,
        hidden,
        product_width,
        sentence_width,
        WINDOW,
        NODES,
        GATES,
        SIGMOID_SCORES,
    )
    d_cell, _, _ = _cell_gradient(
        d_states_ptr,
        d_output_states_ptr,
        d_cells_ptr,
        d_cells_via_sentences_ptr,
        mask_ptr,
        b,
        positions,
        hidden_idx,
        seq,
        hidden,
        cell,
        output_gate,
    )
    slot = tl.arange(0, GATES)[None, :, None] == SLOT
    return d_cell * tl.sum(tl.where(slot, gates, 0.0), axis=1)


@triton.jit
def _store_word_gradient(
    d_product_ptr,
    d_input_terms_ptr,
    values,
    b,
    position,
    slot_offsets,
    valid,
    seq,
    hidden,
    product_width,
    WINDOW: tl.constexpr,
    NODES: tl.constexpr,
    LATER_STEPS: tl.constexpr,
):
    """Stores `values`, the gradient of Eq. 2's pre-activations of the words at `position` (at `slot_offsets`,
    broadcast as in `_word_terms`): into block `d` of the product row `i - w + d` for every window offset `d` (the
    `W_d h` that word `i` read; blocks of rows that no word reads, beyond the edges, get zero), and as the gradient of
    `U x_i + b` into `d_input_terms_ptr` (float32), with `LATER_STEPS` added to the later steps' gradient there."""
    context_width = (2 * WINDOW + NODES + 4) * hidden
    for d in tl.static_range(2 * WINDOW + 1):
        row = position + d - WINDOW
        offsets = (b * seq + row) * product_width + d * context_width + slot_offsets
        dtype = d_product_ptr.dtype.element_ty
        tl.store(d_product_ptr + offsets, values.to(dtype), mask=valid & (row >= 0) & (row < seq))
        reader = position - d + WINDOW  # the word that reads block d of the row at `position`
        unread = valid & ((reader < 0) | (reader >= seq))
        own_row = (b * seq + position) * product_width + d * context_width + slot_offsets
        tl.store(d_product_ptr + own_row, tl.zeros_like(values).to(dtype), mask=unread)
    input_offsets = (b * seq + position) * context_width + slot_offsets
    if LATER_STEPS:
        values += tl.load(d_input_terms_ptr + input_offsets, mask=valid, other=0.0)
    tl.store(d_input_terms_ptr + input_offsets, values, mask=valid)


@triton.jit
def _word_update_backward(
    d_states_ptr,
    d_output_states_ptr,
    d_cells_ptr,
    d_cells_via_sentences_ptr,
    product_ptr,
    input_terms_ptr,
    sentence_terms_ptr,
    cells_ptr,
    sentence_cells_ptr,
    mask_ptr,
    d_product_ptr,
    d_input_terms_ptr,
    d_sentence_terms_ptr,
    d_prev_cells_ptr,
    d_prev_sentence_cells_ptr,
    b,
    hidden_block,
    seq,
    hidden,
    product_width,
    sentence_width,
    WINDOW: tl.constexpr,
    NODES: tl.constexpr,
    GATES: tl.constexpr,
    SIGMOID_SCORES: tl.constexpr,
    LATER_STEPS: tl.constexpr,
    BLOCK_S: tl.constexpr,
    BLOCK_H: tl.constexpr,
):
    """Gradients of Eq. 2 for all positions of one sentence and a block of hidden units (a loop over position
    blocks): the window blocks of `d_product` (of `W_d h_j`, at the rows they were read from), `d_input_terms` (of
    `U x_i + b`, added to the later steps' with `LATER_STEPS`), `d_prev_cells` (of `c^{t-1}`), and the sums over positions: the `V γ`
    block of `d_sentence_terms` and `d_prev_sentence_cells` (of `c_g^{t-1}`, through the words)."""
    hidden_idx = hidden_block * BLOCK_H + tl.arange(0, BLOCK_H)
    normalized = 2 * WINDOW + NODES + 2
    gate = tl.arange(0, GATES)[None, :, None]
    column = hidden_idx[None, :]
    in_hidden = column < hidden
    gate_sums = tl.zeros([GATES, BLOCK_H], dtype=tl.float32)  # Σ_i ∂L/∂pre of the normalised gates
    output_sum = tl.zeros([BLOCK_H], dtype=tl.float32)
    content_sum = tl.zeros([BLOCK_H], dtype=tl.float32)
    value_sums = tl.zeros([GATES, BLOCK_H], dtype=tl.float32)  # Σ_i ∂L/∂value of every gate (c_{g,k} for s_k)
    start = 0
    while start < seq:
        positions = start + tl.arange(0, BLOCK_S)
        scores, gates, values, cell, output_gate, content = _word_node(
            product_ptr,
            input_terms_ptr,
            sentence_terms_ptr,
            cells_ptr,
            sentence_cells_ptr,
            b,
            positions,
            hidden_idx,
            seq,
            hidden,
            product_width,
            sentence_width,
            WINDOW,
            NODES,
            GATES,
            SIGMOID_SCORES,
        )
        d_cell, d_state, squashed = _cell_gradient(
            d_states_ptr,
            d_output_states_ptr,
            d_cells_ptr,
            d_cells_via_sentences_ptr,
            mask_ptr,
            b,
            positions,
            hidden_idx,
            seq,
            hidden,
            cell,
            output_gate,
        )
        # Softmax backward with Σ_k gate_k value_k = cell: ∂L/∂score_k = gate_k ∂L/∂c (value_k - c).
        d_scores = gates * d_cell[:, None, :] * (values - cell[:, None, :])
        if SIGMOID_SCORES:
            d_scores = d_scores * scores * (1.0 - scores)
        d_output = d_state * squashed * output_gate * (1.0 - output_gate)
        content_gate = tl.sum(tl.where(gate == normalized - 1, gates, 0.0), axis=1)
        d_content = d_cell * content_gate * (1.0 - content * content)

        position = positions[:, None]
        in_seq = (position < seq) & in_hidden  # (BLOCK_S, BLOCK_H)
        gate_mask = in_seq[:, None, :] & (gate < normalized)
        _store_word_gradient(
            d_product_ptr,
            d_input_terms_ptr,
            d_scores,
            b,
            position[:, :, None],
            gate * hidden + column[:, None, :],
            gate_mask,
            seq,
            hidden,
            product_width,
            WINDOW,
            NODES,
            LATER_STEPS,
        )
        _store_word_gradient(
            d_product_ptr,
            d_input_terms_ptr,
            d_output,
            b,
            position,
            normalized * hidden + column,
            in_seq,
            seq,
            hidden,
            product_width,
            WINDOW,
            NODES,
            LATER_STEPS,
        )
        _store_word_gradient(
            d_product_ptr,
            d_input_terms_ptr,
            d_content,
            b,
            position,
            (normalized + 1) * hidden + column,
            in_seq,
            seq,
            hidden,
            product_width,
            WINDOW,
            NODES,
            LATER_STEPS,
        )
        gate_sums += tl.sum(tl.where(gate_mask, d_scores, 0.0), axis=0)
        output_sum += tl.sum(d_output, axis=0)
        content_sum += tl.sum(d_content, axis=0)
        value_sums += tl.sum(gates * d_cell[:, None, :], axis=0)

        # c_j^{t-1} is the value of slot w - e of word j + e, for e = -w … w.
        d_prev = d_cell * tl.sum(tl.where(gate == WINDOW, gates, 0.0), axis=1)
        for offset in tl.static_range(1, WINDOW + 1):
            d_prev += _neighbour_cell_gradient(
                d_states_ptr,
                d_output_states_ptr,
                d_cells_ptr,
                d_cells_via_sentences_ptr,
                product_ptr,
                input_terms_ptr,
                sentence_terms_ptr,
                cells_ptr,
                sentence_cells_ptr,
                mask_ptr,
                b,
                positions + offset,
                hidden_idx,
                seq,
                hidden,
                product_width,
                sentence_width,
                WINDOW - offset,
                WINDOW,
                NODES,
                GATES,
                SIGMOID_SCORES,
            )
            d_prev += _neighbour_cell_gradient(
                d_states_ptr,
                d_output_states_ptr,
                d_cells_ptr,
                d_cells_via_sentences_ptr,
                product_ptr,
                input_terms_ptr,
                sentence_terms_ptr,
                cells_ptr,
                sentence_cells_ptr,
                mask_ptr,
                b,
                positions - offset,
                hidden_idx,
                seq,
                hidden,
                product_width,
                sentence_width,
                WINDOW + offset,
                WINDOW,
                NODES,
                GATES,
                SIGMOID_SCORES,
            )
        cell_offsets = (b * seq + position) * hidden + column
        tl.store(d_prev_cells_ptr + cell_offsets, d_prev.to(d_prev_cells_ptr.dtype.element_ty), mask=in_seq)
        start += BLOCK_S

    if NODES > 0:
        slot = tl.arange(0, GATES)[:, None]
        sentence_row = b * sentence_width
        dtype = d_sentence_terms_ptr.dtype.element_ty
        tl.store(
            d_sentence_terms_ptr + sentence_row + slot * hidden + column,
            gate_sums.to(dtype),
            mask=(slot < normalized) & in_hidden,
        )
        output_offsets = sentence_row + normalized * hidden + hidden_idx
        tl.store(d_sentence_terms_ptr + output_offsets, output_sum.to(dtype), mask=hidden_idx < hidden)
        tl.store(d_sentence_terms_ptr + output_offsets + hidden, content_sum.to(dtype), mask=hidden_idx < hidden)
        node = slot - (2 * WINDOW + 1)
        tl.store(
            d_prev_sentence_cells_ptr + (b * NODES + node) * hidden + column,
            value_sums.to(d_prev_sentence_cells_ptr.dtype.element_ty),
            mask=(node >= 0) & (node < NODES) & in_hidden,
        )


@triton.jit
def _node_tile(b, hidden_idx, hidden, NODES: tl.constexpr, NODES_P: tl.constexpr):
    """The `(NODES_P, BLOCK_H)` tile of sentence nodes and hidden units: `(node, column, valid, offsets)`, the
    offsets into `(batch, nodes, hidden)` tensors."""
    node = tl.arange(0, NODES_P)[:, None]
    column = hidden_idx[None, :]
    valid = (node < NODES) & (column < hidden)
    return node, column, valid, (b * NODES + node) * hidden + column


@triton.jit
def _position_scores(
    product_ptr,
    forget_terms,
    mask_ptr,
    b,
    positions,
    node,
    column,
    seq,
    hidden,
    product_width,
    forget_column,
    NODES: tl.constexpr,
    SIGMOID_SCORES: tl.constexpr,
):
    """Eq. 3's forget-gate scores at `positions` `(BLOCK_S,)`, `(BLOCK_S, NODES_P, BLOCK_H)`: of
    `W_f γ + U_f h_j + b_f` (`U_f h_j` from the product rows, `forget_terms` `(NODES_P, BLOCK_H)` holds
    `W_f γ + b_f`), then the same with `-inf` at padding (weight exactly zero), and where the position is real:
    `(scores, masked_scores, real)`."""
    position = positions[:, None, None]
    real = (tl.load(mask_ptr + b * seq + positions, mask=positions < seq, other=0.0) != 0)[:, None, None]
    valid = (position < seq) & (node[None, :, :] < NODES) & (column[None, :, :] < hidden)
    offsets = (b * seq + position) * product_width + forget_column + node[None, :, :] * hidden + column[None, :, :]
    scores = tl.load(product_ptr + offsets, mask=valid, other=0.0).to(tl.float32) + forget_terms[None, :, :]
    if SIGMOID_SCORES:
        scores = tl.sigmoid(scores)
    return scores, tl.where(real & valid, scores, float("-inf")), real & valid


@triton.jit
def _word_cells(cells_ptr, b, positions, hidden_idx, seq, hidden):
    """`c_j^{t-1}` at `positions` `(BLOCK_S,)`, float32 `(BLOCK_S, BLOCK_H)`."""
    in_row = (positions[:, None] < seq) & (hidden_idx[None, :] < hidden)
    offsets = (b * seq + positions[:, None]) * hidden + hidden_idx[None, :]
    return tl.load(cells_ptr + offsets, mask=in_row, other=0.0).to(tl.float32)


@triton.jit
def _sentence_terms(
    sentence_terms_ptr, b, node, column, valid, hidden, sentence_width, sentence_column, NODES: tl.constexpr
):
    """The terms of Eq. 3 on `γ^{t-1}`, float32 on a `_node_tile`: `W_f γ + b_f`, `W_g γ + b_g` (keep gate) and
    `W_o γ + b_o` (output gate)."""
    offsets = b * sentence_width + sentence_column + node * hidden + column
    forget = tl.load(sentence_terms_ptr + offsets, mask=valid, other=0.0).to(tl.float32)
    keep = tl.load(sentence_terms_ptr + offsets + NODES * hidden, mask=valid, other=0.0).to(tl.float32)
    output = tl.load(sentence_terms_ptr + offsets + 2 * NODES * hidden, mask=valid, other=0.0).to(tl.float32)
    return forget, keep, output


@triton.jit
def _sentence_update_forward(
    product_ptr,
    sentence_terms_ptr,
    cells_ptr,
    sentence_cells_ptr,
    mask_ptr,
    lengths_ptr,
    new_states_ptr,
    new_cells_ptr,
    statistics_ptr,
    b,
    hidden_block,
    seq,
    hidden,
    product_width,
    forget_column,
    sentence_width,
    sentence_column,
    NODES: tl.constexpr,
    NODES_P: tl.constexpr,
    SIGMOID_SCORES: tl.constexpr,
    BLOCK_S: tl.constexpr,
    BLOCK_H: tl.constexpr,
):
    """Eq. 3 for all sentence nodes of one sentence and a block of hidden units: `g^t`, `c_g^t`, and (float32, for
    the backward) the statistics `(cell, log of the softmax's normaliser, keep score, output gate)`.

    One pass over the positions: the softmax over them (rescaled as the running maximum grows), and the sums of
    `U_g h_j` and `U_o h_j` from the product rows, which divided by the sentence's length are `U_g h̄`, `U_o h̄`; the
    node's own cell, whose keep score needs `h̄`, joins the softmax last."""
    hidden_idx = hidden_block * BLOCK_H + tl.arange(0, BLOCK_H)
    node, column, valid, node_offsets = _node_tile(b, hidden_idx, hidden, NODES, NODES_P)
    forget_terms, keep_pre, output_pre = _sentence_terms(
        sentence_terms_ptr, b, node, column, valid, hidden, sentence_width, sentence_column, NODES
    )
    largest = tl.full([NODES_P, BLOCK_H], -1.0e30, dtype=tl.float32)  # finite: a block of padding rescales by 1
    normalizer = tl.zeros([NODES_P, BLOCK_H], dtype=tl.float32)
    weighted = tl.zeros([NODES_P, BLOCK_H], dtype=tl.float32)
    keep_sum = tl.zeros([NODES_P, BLOCK_H], dtype=tl.float32)  # Σ_j U_g h_j
    output_sum = tl.zeros([NODES_P, BLOCK_H], dtype=tl.float32)  # Σ_j U_o h_j
    start = 0
    while start < seq:
        positions = start + tl.arange(0, BLOCK_S)
        _, scores, real = _position_scores(
            product_ptr,
            forget_terms,
            mask_ptr,
            b,
            positions,
            node,
            column,
            seq,
            hidden,
            product_width,
            forget_column,
            NODES,
            SIGMOID_SCORES,
        )
        new_largest = tl.maximum(largest, tl.max(scores, axis=0))
        rescale = tl.exp(largest - new_largest)
        exps = tl.exp(scores - new_largest[None, :, :])
        word_cells = _word_cells(cells_ptr, b, positions, hidden_idx, seq, hidden)
        normalizer = normalizer * rescale + tl.sum(exps, axis=0)
        weighted = weighted * rescale + tl.sum(exps * word_cells[:, None, :], axis=0)
        largest = new_largest
        mean_offsets = (b * seq + positions[:, None, None]) * product_width + forget_column + column[None, :, :]
        mean_offsets += (NODES + node[None, :, :]) * hidden
        keep_sum += tl.sum(tl.load(product_ptr + mean_offsets, mask=real, other=0.0).to(tl.float32), axis=0)
        output_terms = tl.load(product_ptr + mean_offsets + NODES * hidden, mask=real, other=0.0)
        output_sum += tl.sum(output_terms.to(tl.float32), axis=0)
        start += BLOCK_S
    length = tl.load(lengths_ptr + b)
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
    statistics_offsets = (b * 4 * NODES + node) * hidden + column
    tl.store(statistics_ptr + statistics_offsets, cell, mask=valid)
    tl.store(statistics_ptr + statistics_offsets + NODES * hidden, new_largest + tl.log(normalizer), mask=valid)
    tl.store(statistics_ptr + statistics_offsets + 2 * NODES * hidden, keep_score, mask=valid)
    tl.store(statistics_ptr + statistics_offsets + 3 * NODES * hidden, output_gate, mask=valid)


@triton.jit
def _sentence_update_backward(
    d_states_ptr,
    d_cells_ptr,
    d_cells_via_words_ptr,
    product_ptr,
    sentence_terms_ptr,
    cells_ptr,
    sentence_cells_ptr,
    mask_ptr,
    lengths_ptr,
    statistics_ptr,
    d_product_ptr,
    d_sentence_terms_ptr,
    d_prev_cells_ptr,
    d_prev_sentence_cells_ptr,
    b,
    hidden_block,
    seq,
    hidden,
    product_width,
    forget_column,
    sentence_width,
    sentence_column,
    NODES: tl.constexpr,
    NODES_P: tl.constexpr,
    SIGMOID_SCORES: tl.constexpr,
    BLOCK_S: tl.constexpr,
    BLOCK_H: tl.constexpr,
):
    """Gradients of Eq. 3 for sentence `b` and a block of hidden units (a loop over position blocks), from those of
    `g^t` and `c_g^t` (none after the last step; through the next step's sentence nodes, and its words where
    `d_cells_via_words_ptr` is given): the `U_f h_j`, `U_g h_j`, `U_o h_j` blocks of `d_product` (the last two `1/n`
    of the keep and output gates' at real positions), the `W_f γ + b_f`, keep and output blocks of
    `d_sentence_terms`, and `d_prev_cells` (of `c^{t-1}`) and `d_prev_sentence_cells` (of `c_g^{t-1}`), both
    through the sentence nodes."""
    hidden_idx = hidden_block * BLOCK_H + tl.arange(0, BLOCK_H)
    node, column, valid, node_offsets = _node_tile(b, hidden_idx, hidden, NODES, NODES_P)
    forget_terms, _, _ = _sentence_terms(
        sentence_terms_ptr, b, node, column, valid, hidden, sentence_width, sentence_column, NODES
    )
    statistics_offsets = (b * 4 * NODES + node) * hidden + column
    cell = tl.load(statistics_ptr + statistics_offsets, mask=valid, other=0.0)
    log_normalizer = tl.load(statistics_ptr + statistics_offsets + NODES * hidden, mask=valid, other=0.0)
    keep_score = tl.load(statistics_ptr + statistics_offsets + 2 * NODES * hidden, mask=valid, other=0.0)
    output_gate = tl.load(statistics_ptr + statistics_offsets + 3 * NODES * hidden, mask=valid, other=0.0)
    d_state = tl.load(d_states_ptr + node_offsets, mask=valid, other=0.0).to(tl.float32)
    squashed = _tanh(cell)
    d_cell = d_state * output_gate * (1.0 - squashed * squashed)
    if d_cells_ptr is not None:
        d_cell += tl.load(d_cells_ptr + node_offsets, mask=valid, other=0.0).to(tl.float32)
    if d_cells_via_words_ptr is not None:
        d_cell += tl.load(d_cells_via_words_ptr + node_offsets, mask=valid, other=0.0).to(tl.float32)
    keep_weight = tl.exp(keep_score - log_normalizer)  # f_{g,k}
    previous_cell = tl.load(sentence_cells_ptr + node_offsets, mask=valid, other=0.0).to(tl.float32)
    d_keep = keep_weight * d_cell * (previous_cell - cell)
    if SIGMOID_SCORES:
        d_keep = d_keep * keep_score * (1.0 - keep_score)
    d_output = d_state * squashed * output_gate * (1.0 - output_gate)
    length = tl.load(lengths_ptr + b)

    forget_sums = tl.zeros([NODES_P, BLOCK_H], dtype=tl.float32)
    dtype = d_product_ptr.dtype.element_ty
    start = 0
    while start < seq:
        positions = start + tl.arange(0, BLOCK_S)
        scores, masked_scores, real = _position_scores(
            product_ptr,
            forget_terms,
            mask_ptr,
            b,
            positions,
            node,
            column,
            seq,
            hidden,
            product_width,
            forget_column,
            NODES,
            SIGMOID_SCORES,
        )
        weights = tl.exp(masked_scores - log_normalizer[None, :, :])  # f_{j,k}, zero at padding
        word_cells = _word_cells(cells_ptr, b, positions, hidden_idx, seq, hidden)
        # Softmax backward with Σ_j f_j c_j + f_g c_g = c_g^t: ∂L/∂score_j = f_j ∂L/∂c_g^t (c_j - c_g^t).
        d_scores = weights * d_cell[None, :, :] * (word_cells[:, None, :] - cell[None, :, :])
        if SIGMOID_SCORES:
            d_scores = d_scores * scores * (1.0 - scores)
        in_seq = (positions[:, None, None] < seq) & valid[None, :, :]
        offsets = (b * seq + positions[:, None, None]) * product_width + forget_column
        offsets += node[None, :, :] * hidden + column[None, :, :]
        tl.store(d_product_ptr + offsets, d_scores.to(dtype), mask=in_seq)
        # h̄ = Σ_j h_j / n over the real positions j: U_g h_j and U_o h_j each receive 1/n of the gate's gradient.
        d_keep_share = tl.where(real, d_keep[None, :, :] / length, 0.0)
        d_output_share = tl.where(real, d_output[None, :, :] / length, 0.0)
        tl.store(d_product_ptr + offsets + NODES * hidden, d_keep_share.to(dtype), mask=in_seq)
        tl.store(d_product_ptr + offsets + 2 * NODES * hidden, d_output_share.to(dtype), mask=in_seq)
        forget_sums += tl.sum(tl.where(in_seq, d_scores, 0.0), axis=0)
        d_prev = tl.sum(weights * d_cell[None, :, :], axis=1)  # (BLOCK_S, BLOCK_H): Σ_k f_{j,k} ∂L/∂c_{g,k}^t
        in_row = (positions[:, None] < seq) & (column < hidden)
        cell_offsets = (b * seq + positions[:, None]) * hidden + column
        tl.store(d_prev_cells_ptr + cell_offsets, d_prev.to(d_prev_cells_ptr.dtype.element_ty), mask=in_row)
        start += BLOCK_S

    gate_offsets = b * sentence_width + sentence_column + node * hidden + column
    dtype = d_sentence_terms_ptr.dtype.element_ty
    tl.store(d_sentence_terms_ptr + gate_offsets, forget_sums.to(dtype), mask=valid)
    tl.store(d_sentence_terms_ptr + gate_offsets + NODES * hidden, d_keep.to(dtype), mask=valid)
    tl.store(d_sentence_terms_ptr + gate_offsets + 2 * NODES * hidden, d_output.to(dtype), mask=valid)
    d_sentence_cells = d_cell * keep_weight
    dtype = d_prev_sentence_cells_ptr.dtype.element_ty
    tl.store(d_prev_sentence_cells_ptr + node_offsets, d_sentence_cells.to(dtype), mask=valid)


@triton.jit
def step_forward_kernel(
    product_ptr,
    input_terms_ptr,
    sentence_terms_ptr,
    cells_ptr,
    sentence_cells_ptr,
    mask_ptr,
    lengths_ptr,
    new_states_ptr,
    new_cells_ptr,
    new_sentence_states_ptr,
    new_sentence_cells_ptr,
    statistics_ptr,
    seq,
    hidden,
    product_width,
    sentence_width,
    forget_column,
    sentence_column,
    WINDOW: tl.constexpr,
    NODES: tl.constexpr,
    NODES_P: tl.constexpr,
    GATES: tl.constexpr,
    SIGMOID_SCORES: tl.constexpr,
    WORD_BLOCK_S: tl.constexpr,
    WORD_BLOCK_H: tl.constexpr,
    SENTENCE_BLOCK_S: tl.constexpr,
    SENTENCE_BLOCK_H: tl.constexpr,
):
    """One step, Eq. 2 and Eq. 3 side by side in one launch (both read step `t-1` values only): program `(b, p)`
    updates a block of positions and hidden units of sentence `b`'s words while `p` counts word tiles, and a block of
    hidden units of its sentence nodes after them."""
    b = tl.program_id(0).to(tl.int64)
    program = tl.program_id(1)
    word_hidden_blocks = tl.cdiv(hidden, WORD_BLOCK_H)
    word_programs = tl.cdiv(seq, WORD_BLOCK_S) * word_hidden_blocks
    if program < word_programs:
        _word_update_forward(
            product_ptr=product_ptr,
            input_terms_ptr=input_terms_ptr,
            sentence_terms_ptr=sentence_terms_ptr,
            cells_ptr=cells_ptr,
            sentence_cells_ptr=sentence_cells_ptr,
            mask_ptr=mask_ptr,
            new_states_ptr=new_states_ptr,
            new_cells_ptr=new_cells_ptr,
            b=b,
            position_block=program // word_hidden_blocks,
            hidden_block=program % word_hidden_blocks,
            seq=seq,
            hidden=hidden,
            product_width=product_width,
            sentence_width=sentence_width,
            WINDOW=WINDOW,
            NODES=NODES,
            GATES=GATES,
            SIGMOID_SCORES=SIGMOID_SCORES,
            BLOCK_S=WORD_BLOCK_S,
            BLOCK_H=WORD_BLOCK_H,
        )
    elif NODES > 0:
        _sentence_update_forward(
            product_ptr=product_ptr,
            sentence_terms_ptr=sentence_terms_ptr,
            cells_ptr=cells_ptr,
            sentence_cells_ptr=sentence_cells_ptr,
            mask_ptr=mask_ptr,
            lengths_ptr=lengths_ptr,
            new_states_ptr=new_sentence_states_ptr,
            new_cells_ptr=new_sentence_cells_ptr,
            statistics_ptr=statistics_ptr,
            b=b,
            hidden_block=program - word_programs,
            seq=seq,
            hidden=hidden,
            product_width=product_width,
            forget_column=forget_column,
            sentence_width=sentence_width,
            sentence_column=sentence_column,
            NODES=NODES,
            NODES_P=NODES_P,
            SIGMOID_SCORES=SIGMOID_SCORES,
            BLOCK_S=SENTENCE_BLOCK_S,
            BLOCK_H=SENTENCE_BLOCK_H,
        )


@triton.jit
def step_backward_kernel(
    d_states_ptr,
    d_output_states_ptr,
    d_cells_ptr,
    d_cells_via_sentences_ptr,
    d_sentence_states_ptr,
    d_sentence_cells_ptr,
    d_sentence_cells_via_words_ptr,
    product_ptr,
    input_terms_ptr,
    sentence_terms_ptr,
    cells_ptr,
    sentence_cells_ptr,
    mask_ptr,
    lengths_ptr,
    statistics_ptr,
    d_product_ptr,
    d_input_terms_ptr,
    d_sentence_terms_ptr,
    d_prev_cells_ptr,
    d_prev_cells_via_sentences_ptr,
    d_prev_sentence_cells_ptr,
    d_prev_sentence_cells_via_words_ptr,
    seq,
    hidden,
    product_width,
    sentence_width,
    forget_column,
    sentence_column,
    WINDOW: tl.constexpr,
    NODES: tl.constexpr,
    NODES_P: tl.constexpr,
    GATES: tl.constexpr,
    SIGMOID_SCORES: tl.constexpr,
    LATER_STEPS: tl.constexpr,
    WORD_BLOCK_S: tl.constexpr,
    WORD_BLOCK_H: tl.constexpr,
    SENTENCE_BLOCK_S: tl.constexpr,
    SENTENCE_BLOCK_H: tl.constexpr,
):
    """The gradients of one step in one launch: program `(b, p)` runs `_word_update_backward` for a block of hidden
    units of sentence `b` while `p` counts word hidden blocks, `_sentence_update_backward` after them. Each writes
    its own columns of `d_product` and `d_sentence_terms`; the cells' gradients come in two parts, through the words
    and through the sentence nodes, which the previous step's launch sums as it reads them."""
    b = tl.program_id(0).to(tl.int64)
    program = tl.program_id(1)
    word_programs = tl.cdiv(hidden, WORD_BLOCK_H)
    if program < word_programs:
        _word_update_backward(
            d_states_ptr=d_states_ptr,
            d_output_states_ptr=d_output_states_ptr,
            d_cells_ptr=d_cells_ptr,
            d_cells_via_sentences_ptr=d_cells_via_sentences_ptr,
            product_ptr=product_ptr,
            input_terms_ptr=input_terms_ptr,
            sentence_terms_ptr=sentence_terms_ptr,
            cells_ptr=cells_ptr,
            sentence_cells_ptr=sentence_cells_ptr,
            mask_ptr=mask_ptr,
            d_product_ptr=d_product_ptr,
            d_input_terms_ptr=d_input_terms_ptr,
            d_sentence_terms_ptr=d_sentence_terms_ptr,
            d_prev_cells_ptr=d_prev_cells_ptr,
            d_prev_sentence_cells_ptr=d_prev_sentence_cells_via_words_ptr,
            b=b,
            hidden_block=program,
            seq=seq,
            hidden=hidden,
            product_width=product_width,
            sentence_width=sentence_width,
            WINDOW=WINDOW,
            NODES=NODES,
            GATES=GATES,
            SIGMOID_SCORES=SIGMOID_SCORES,
            LATER_STEPS=LATER_STEPS,
            BLOCK_S=WORD_BLOCK_S,
            BLOCK_H=WORD_BLOCK_H,
        )
    elif NODES > 0:
        _sentence_update_backward(
            d_states_ptr=d_sentence_states_ptr,
            d_cells_ptr=d_sentence_cells_ptr,
            d_cells_via_words_ptr=d_sentence_cells_via_words_ptr,
            product_ptr=product_ptr,
            sentence_terms_ptr=sentence_terms_ptr,
            cells_ptr=cells_ptr,
            sentence_cells_ptr=sentence_cells_ptr,
            mask_ptr=mask_ptr,
            lengths_ptr=lengths_ptr,
            statistics_ptr=statistics_ptr,
            d_product_ptr=d_product_ptr,
            d_sentence_terms_ptr=d_sentence_terms_ptr,
            d_prev_cells_ptr=d_prev_cells_via_sentences_ptr,
            d_prev_sentence_cells_ptr=d_prev_sentence_cells_ptr,
            b=b,
            hidden_block=program - word_programs,
            seq=seq,
            hidden=hidden,
            product_width=product_width,
            forget_column=forget_column,
            sentence_width=sentence_width,
            sentence_column=sentence_column,
            NODES=NODES,
            NODES_P=NODES_P,
            SIGMOID_SCORES=SIGMOID_SCORES,
            BLOCK_S=SENTENCE_BLOCK_S,
            BLOCK_H=SENTENCE_BLOCK_H,
        )


@dataclass(frozen=True)
class KernelTiles:
    """How the kernels tile their work on a GPU (`benchmark_kernel_tiles.py` times the choices).

    Args:
        values_per_tile (`int`, defaults to 4096): about how many values a `(BLOCK_S, slots, BLOCK_H)` tile holds, so
            that it stays in registers.
        max_block_h (`int`, defaults to 32): the widest hidden block.
        num_warps (`int`, defaults to 4): warps per program (Triton's default).
    """

    values_per_tile: int = 4096
    max_block_h: int = 32
    num_warps: int = 4


GPU_TILES = KernelTiles()
TILE_IN_THE_INTERPRETER = False


def use_tiles(tiles: KernelTiles, in_the_interpreter: bool = False):
    """Makes every later launch tile its work as `tiles` says: on a GPU, and with `in_the_interpreter` also in
    Triton's interpreter (for tests of the tiling; by default the interpreter takes a sentence per tile)."""
    global GPU_TILES, TILE_IN_THE_INTERPRETER
    GPU_TILES, TILE_IN_THE_INTERPRETER = tiles, in_the_interpreter


def tile_options(seq: int, hidden: int, slots: int) -> dict[str, int]:
    """The launch options `BLOCK_S`, `BLOCK_H` (tiles `(BLOCK_S, slots, BLOCK_H)`) and `num_warps`: on a GPU as
    `GPU_TILES` says; in the interpreter, which pays per program and per operation rather than per value, all of a
    sentence at once (unless `use_tiles` says otherwise)."""
    block_s, block_h = triton.next_power_of_2(seq), triton.next_power_of_2(hidden)
    if not KERNELS_INTERPRETED or TILE_IN_THE_INTERPRETER:
        block_h = min(block_h, GPU_TILES.max_block_h)
        block_s = max(1, min(block_s, GPU_TILES.values_per_tile // (slots * block_h)))
    return {"BLOCK_S": block_s, "BLOCK_H": block_h, "num_warps": GPU_TILES.num_warps}
