"""Triton kernels of the fused S-LSTM step (`triton_step.py` wraps them; `docs/equations.md` states the equations).

Only the elementwise parts of a step are here; every matmul stays in PyTorch (cuBLAS). Four kernels:

- `word_update_forward_kernel` (Eq. 2): the three pre-activation terms `W ξ_i`, `U x_i + b` and `V γ` summed, the
  normalised gates (softmax over the `2w + K + 1` gates), the output gate and content, the new cell and state, and
  the padding mask, in one pass.
- `word_update_backward_kernel`: the gradients of the three terms, of the step `t-1` cells and of the sentence cells.
  A cell `c_j^{t-1}` is read by the `2w + 1` words around `j`, so each program recomputes the gates of those
  neighbours rather than reading them from a saved tensor; the sums over positions (of the `V γ` gradient and of the
  sentence cells' gradient) run inside one program per (sentence, hidden block), in a fixed order: deterministic.
- `sentence_update_forward_kernel` (Eq. 3): the forget-gate scores of every real position and of the node's own
  cell, their softmax over positions (one pass, rescaled as the running maximum grows) and the node update.
- `sentence_update_backward_kernel`: the gradients of the forget terms, of the keep and output gates, of the word
  cells and of the sentence cells, from the softmax's saved log-normaliser.

Loops over positions are `while` loops: Triton 3.6's interpreter cannot take a runtime bound in `range` under NumPy 2.4.
Every kernel reads its inputs in their own dtype (bfloat16, float16 or float32) and computes in float32. Tensors are
contiguous: word terms `(batch, seq, blocks, hidden)`, sentence terms `(batch, blocks, hidden)`, cells
`(batch, seq, hidden)`, sentence cells `(batch, nodes, hidden)`, mask `(batch, seq)` (nonzero at real positions).
Gate block order as in `SLSTMStateTransition`: window gates `l_w … f … r_w`, one `s_k` per node, `i`, then `o`, `u`.
"""

from dataclasses import dataclass

# `triton_step.load_kernels` imports this module when a fused step is first considered, and reports an ImportError.
# In a `try` block because transformers' check of a checkpoint's code files skips the imports there: a checkpoint
# loads (and runs the readable step) where Triton is not installed.
try:
    import triton
    import triton.language as tl
except ImportError as error:
    raise ImportError(f"the fused S-LSTM step needs Triton: {error}") from error

try:  # the kernels below are interpreted (TRITON_INTERPRET=1 when this module was imported) or compiled
    from triton.runtime.interpreter import InterpretedFunction
except ImportError:  # a Triton without an interpreter: kernels are always compiled
    InterpretedFunction = ()


@triton.jit
def _tanh(x):
    """tanh from one exponential of `-2|x|` (no overflow for any x; `tl` has no stable tanh of its own)."""
    decay = tl.exp(-2.0 * tl.abs(x))
    magnitude = (1.0 - decay) / (1.0 + decay)
    return tl.where(x < 0, -magnitude, magnitude)


@triton.jit
def _summed_terms(
    window_pre_ptr, input_terms_ptr, sentence_term_ptr, offsets, sentence_offsets, in_bounds, NODES: tl.constexpr
):
    """`W ξ_i + U x_i + b (+ V γ)` at `offsets` (word terms) and `sentence_offsets` (the sentence term), float32."""
    total = tl.load(window_pre_ptr + offsets, mask=in_bounds, other=0.0).to(tl.float32)
    total += tl.load(input_terms_ptr + offsets, mask=in_bounds, other=0.0).to(tl.float32)
    if NODES > 0:
        total += tl.load(sentence_term_ptr + sentence_offsets, mask=in_bounds, other=0.0).to(tl.float32)
    return total


@triton.jit
def _word_node(
    window_pre_ptr,
    input_terms_ptr,
    sentence_term_ptr,
    cells_ptr,
    sentence_cells_ptr,
    b,
    positions,
    hidden_idx,
    seq,
    hidden,
    WINDOW: tl.constexpr,
    NODES: tl.constexpr,
    GATES: tl.constexpr,
    SIGMOID_SCORES: tl.constexpr,
):
    """Eq. 2 at `positions` `(BLOCK_S,)` (any integers: those outside `[0, seq)` read zeros) and `hidden_idx`
    `(BLOCK_H,)`: `(scores, gates, values, cell, output_gate, content)`, the first three `(BLOCK_S, GATES, BLOCK_H)`
    (gate slots past the `2w + K + 1` normalised gates hold zero gates), the rest `(BLOCK_S, BLOCK_H)`."""
    normalized = 2 * WINDOW + NODES + 2
    blocks = normalized + 2
    gate = tl.arange(0, GATES)[None, :, None]
    position = positions[:, None]  # (BLOCK_S, 1)
    column = hidden_idx[None, :]  # (1, BLOCK_H)
    in_row = (position >= 0) & (position < seq) & (column < hidden)  # (BLOCK_S, BLOCK_H)
    row = (b * seq + position) * (blocks * hidden)
    sentence_row = b * (blocks * hidden)

    # The normalised gates' pre-activations, (BLOCK_S, GATES, BLOCK_H).
    offsets = gate * hidden + column[:, None, :]
    gate_mask = in_row[:, None, :] & (gate < normalized)
    pre = _summed_terms(
        window_pre_ptr,
        input_terms_ptr,
        sentence_term_ptr,
        row[:, :, None] + offsets,
        sentence_row + offsets,
        gate_mask,
        NODES,
    )
    if SIGMOID_SCORES:
        scores = tl.sigmoid(pre)
    else:
        scores = pre
    masked_scores = tl.where(gate < normalized, scores, float("-inf"))
    exps = tl.exp(masked_scores - tl.max(masked_scores, axis=1)[:, None, :])
    gates = exps / tl.sum(exps, axis=1)[:, None, :]

    output_offsets = normalized * hidden + column
    output_pre = _summed_terms(
        window_pre_ptr,
        input_terms_ptr,
        sentence_term_ptr,
        row + output_offsets,
        sentence_row + output_offsets,
        in_row,
        NODES,
    )
    content_offsets = output_offsets + hidden
    content_pre = _summed_terms(
        window_pre_ptr,
        input_terms_ptr,
        sentence_term_ptr,
        row + content_offsets,
        sentence_row + content_offsets,
        in_row,
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
def _cell_gradient(d_states_ptr, d_cells_ptr, mask_ptr, b, positions, hidden_idx, seq, hidden, cell, output_gate):
    """The gradient reaching the cell `c_i^t` before the mask at `positions` (zero at padding and outside the
    sentence), from the gradients of the masked outputs `h^t`, `c^t`: `(d_cell, d_state, tanh(cell))`."""
    in_seq = (positions >= 0) & (positions < seq)
    real = tl.load(mask_ptr + b * seq + positions, mask=in_seq, other=0.0) != 0
    keep = real[:, None] & (hidden_idx[None, :] < hidden)
    offsets = (b * seq + positions[:, None]) * hidden + hidden_idx[None, :]
    d_state = tl.load(d_states_ptr + offsets, mask=keep, other=0.0).to(tl.float32)
    d_cell = tl.load(d_cells_ptr + offsets, mask=keep, other=0.0).to(tl.float32)
    squashed = _tanh(cell)
    return d_cell + d_state * output_gate * (1.0 - squashed * squashed), d_state, squashed


@triton.jit
def word_update_forward_kernel(
    window_pre_ptr,
    input_terms_ptr,
    sentence_term_ptr,
    cells_ptr,
    sentence_cells_ptr,
    mask_ptr,
    new_states_ptr,
    new_cells_ptr,
    seq,
    hidden,
    WINDOW: tl.constexpr,
    NODES: tl.constexpr,
    GATES: tl.constexpr,
    SIGMOID_SCORES: tl.constexpr,
    BLOCK_S: tl.constexpr,
    BLOCK_H: tl.constexpr,
):
    """Eq. 2 for a block of positions and hidden units of one sentence: `h^t`, `c^t`, zero at padding."""
    b = tl.program_id(0).to(tl.int64)
    positions = tl.program_id(1) * BLOCK_S + tl.arange(0, BLOCK_S)
    hidden_idx = tl.program_id(2) * BLOCK_H + tl.arange(0, BLOCK_H)
    _, _, _, cell, output_gate, _ = _word_node(
        window_pre_ptr,
        input_terms_ptr,
        sentence_term_ptr,
        cells_ptr,
        sentence_cells_ptr,
        b,
        positions,
        hidden_idx,
        seq,
        hidden,
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
    d_cells_ptr,
    window_pre_ptr,
    input_terms_ptr,
    sentence_term_ptr,
    cells_ptr,
    sentence_cells_ptr,
    mask_ptr,
    b,
    positions,
    hidden_idx,
    seq,
    hidden,
    SLOT: tl.constexpr,
    WINDOW: tl.constexpr,
    NODES: tl.constexpr,
    GATES: tl.constexpr,
    SIGMOID_SCORES: tl.constexpr,
):
    """`∂L/∂c_i^t · gate_SLOT` of the words at `positions`: what reaches the cell their window slot `SLOT` reads."""
    _, gates, _, cell, output_gate, _ = _word_node(
        window_pre_ptr,
        input_terms_ptr,
        sentence_term_ptr,
        cells_ptr,
        sentence_cells_ptr,
        b,
        positions,
        hidden_idx,
        seq,
        hidden,
        WINDOW,
        NODES,
        GATES,
        SIGMOID_SCORES,
    )
    d_cell, _, _ = _cell_gradient(
        d_states_ptr, d_cells_ptr, mask_ptr, b, positions, hidden_idx, seq, hidden, cell, output_gate
    )
    slot = tl.arange(0, GATES)[None, :, None] == SLOT
    return d_cell * tl.sum(tl.where(slot, gates, 0.0), axis=1)


@triton.jit
def word_update_backward_kernel(
    d_states_ptr,
    d_cells_ptr,
    window_pre_ptr,
    input_terms_ptr,
    sentence_term_ptr,
    cells_ptr,
    sentence_cells_ptr,
    mask_ptr,
    d_pre_ptr,
    d_sentence_term_ptr,
    d_prev_cells_ptr,
    d_sentence_cells_ptr,
    seq,
    hidden,
    WINDOW: tl.constexpr,
    NODES: tl.constexpr,
    GATES: tl.constexpr,
    SIGMOID_SCORES: tl.constexpr,
    BLOCK_S: tl.constexpr,
    BLOCK_H: tl.constexpr,
):
    """Gradients of Eq. 2 for all positions of one sentence and a block of hidden units (a loop over position
    blocks): `d_pre` (of the word terms, which `W ξ_i` and `U x_i + b` share), `d_prev_cells` (of `c^{t-1}`), and the
    sums over positions `d_sentence_term` (of `V γ`) and `d_sentence_cells` (of `c_g^{t-1}`)."""
    b = tl.program_id(0).to(tl.int64)
    hidden_idx = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    normalized = 2 * WINDOW + NODES + 2
    blocks = normalized + 2
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
            window_pre_ptr,
            input_terms_ptr,
            sentence_term_ptr,
            cells_ptr,
            sentence_cells_ptr,
            b,
            positions,
            hidden_idx,
            seq,
            hidden,
            WINDOW,
            NODES,
            GATES,
            SIGMOID_SCORES,
        )
        d_cell, d_state, squashed = _cell_gradient(
            d_states_ptr, d_cells_ptr, mask_ptr, b, positions, hidden_idx, seq, hidden, cell, output_gate
        )
        # Softmax backward with Σ_k gate_k value_k = cell: ∂L/∂score_k = gate_k ∂L/∂c (value_k - c).
        d_scores = gates * d_cell[:, None, :] * (values - cell[:, None, :])
        if SIGMOID_SCORES:
            d_scores = d_scores * scores * (1.0 - scores)
        d_output = d_state * squashed * output_gate * (1.0 - output_gate)
        content_gate = tl.sum(tl.where(gate == normalized - 1, gates, 0.0), axis=1)
        d_content = d_cell * content_gate * (1.0 - content * content)

        in_seq = (positions[:, None] < seq) & in_hidden  # (BLOCK_S, BLOCK_H)
        row = (b * seq + positions[:, None]) * (blocks * hidden)
        gate_mask = in_seq[:, None, :] & (gate < normalized)
        gate_offsets = row[:, :, None] + gate * hidden + column[:, None, :]
        tl.store(d_pre_ptr + gate_offsets, d_scores.to(d_pre_ptr.dtype.element_ty), mask=gate_mask)
        tl.store(d_pre_ptr + row + normalized * hidden + column, d_output.to(d_pre_ptr.dtype.element_ty), mask=in_seq)
        tl.store(
            d_pre_ptr + row + (normalized + 1) * hidden + column, d_content.to(d_pre_ptr.dtype.element_ty), mask=in_seq
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
                d_cells_ptr,
                window_pre_ptr,
                input_terms_ptr,
                sentence_term_ptr,
                cells_ptr,
                sentence_cells_ptr,
                mask_ptr,
                b,
                positions + offset,
                hidden_idx,
                seq,
                hidden,
                WINDOW - offset,
                WINDOW,
                NODES,
                GATES,
                SIGMOID_SCORES,
            )
            d_prev += _neighbour_cell_gradient(
                d_states_ptr,
                d_cells_ptr,
                window_pre_ptr,
                input_terms_ptr,
                sentence_term_ptr,
                cells_ptr,
                sentence_cells_ptr,
                mask_ptr,
                b,
                positions - offset,
                hidden_idx,
                seq,
                hidden,
                WINDOW + offset,
                WINDOW,
                NODES,
                GATES,
                SIGMOID_SCORES,
            )
        cell_offsets = (b * seq + positions[:, None]) * hidden + column
        tl.store(d_prev_cells_ptr + cell_offsets, d_prev.to(d_prev_cells_ptr.dtype.element_ty), mask=in_seq)
        start += BLOCK_S

    if NODES > 0:
        slot = tl.arange(0, GATES)[:, None]
        sentence_row = b * (blocks * hidden)
        dtype = d_sentence_term_ptr.dtype.element_ty
        tl.store(
            d_sentence_term_ptr + sentence_row + slot * hidden + column,
            gate_sums.to(dtype),
            mask=(slot < normalized) & in_hidden,
        )
        output_offsets = sentence_row + normalized * hidden + hidden_idx
        tl.store(d_sentence_term_ptr + output_offsets, output_sum.to(dtype), mask=hidden_idx < hidden)
        tl.store(d_sentence_term_ptr + output_offsets + hidden, content_sum.to(dtype), mask=hidden_idx < hidden)
        node = slot - (2 * WINDOW + 1)
        tl.store(
            d_sentence_cells_ptr + (b * NODES + node) * hidden + column,
            value_sums.to(d_sentence_cells_ptr.dtype.element_ty),
            mask=(node >= 0) & (node < NODES) & in_hidden,
        )


@triton.jit
def _position_scores(
    word_forget_ptr,
    forget_terms,
    mask_ptr,
    b,
    positions,
    node,
    column,
    seq,
    hidden,
    NODES: tl.constexpr,
    SIGMOID_SCORES: tl.constexpr,
):
    """Eq. 3's forget-gate scores at `positions` `(BLOCK_S,)`, `(BLOCK_S, NODES_P, BLOCK_H)`: of
    `W_f γ + U_f h_j + b_f` (`forget_terms` `(NODES_P, BLOCK_H)` holds `W_f γ + b_f`), then the same with `-inf` at
    padding (weight exactly zero): `(scores, masked_scores)`."""
    position = positions[:, None, None]
    real = tl.load(mask_ptr + b * seq + positions, mask=positions < seq, other=0.0) != 0
    valid = (position < seq) & (node[None, :, :] < NODES) & (column[None, :, :] < hidden)
    offsets = ((b * seq + position) * NODES + node[None, :, :]) * hidden + column[None, :, :]
    scores = tl.load(word_forget_ptr + offsets, mask=valid, other=0.0).to(tl.float32) + forget_terms[None, :, :]
    if SIGMOID_SCORES:
        scores = tl.sigmoid(scores)
    return scores, tl.where(real[:, None, None] & valid, scores, float("-inf"))


@triton.jit
def _word_cells(cells_ptr, b, positions, hidden_idx, seq, hidden):
    """`c_j^{t-1}` at `positions` `(BLOCK_S,)`, float32 `(BLOCK_S, BLOCK_H)`."""
    in_row = (positions[:, None] < seq) & (hidden_idx[None, :] < hidden)
    offsets = (b * seq + positions[:, None]) * hidden + hidden_idx[None, :]
    return tl.load(cells_ptr + offsets, mask=in_row, other=0.0).to(tl.float32)


@triton.jit
def _node_tile(b, hidden_idx, hidden, NODES: tl.constexpr, NODES_P: tl.constexpr):
    """The `(NODES_P, BLOCK_H)` tile of sentence nodes and hidden units: `(node, column, valid, offsets)`, the
    offsets into `(batch, nodes, hidden)` tensors."""
    node = tl.arange(0, NODES_P)[:, None]
    column = hidden_idx[None, :]
    valid = (node < NODES) & (column < hidden)
    return node, column, valid, (b * NODES + node) * hidden + column


@triton.jit
def _sentence_gates(
    sentence_forget_ptr,
    sentence_pre_ptr,
    b,
    node,
    column,
    valid,
    hidden,
    NODES: tl.constexpr,
    SIGMOID_SCORES: tl.constexpr,
):
    """From `W_f γ + b_f` and `W g + U h̄ + b` of Eq. 3, on a `_node_tile`, float32: `W_f γ + b_f`, the keep gate's
    score and the output gate `o_k`."""
    forget_terms = tl.load(sentence_forget_ptr + (b * NODES + node) * hidden + column, mask=valid, other=0.0)
    offsets = b * (2 * NODES * hidden) + node * hidden + column
    keep = tl.load(sentence_pre_ptr + offsets, mask=valid, other=0.0).to(tl.float32)
    if SIGMOID_SCORES:
        keep = tl.sigmoid(keep)
    output_pre = tl.load(sentence_pre_ptr + offsets + NODES * hidden, mask=valid, other=0.0).to(tl.float32)
    return forget_terms.to(tl.float32), keep, tl.sigmoid(output_pre)


@triton.jit
def sentence_update_forward_kernel(
    word_forget_ptr,
    sentence_forget_ptr,
    sentence_pre_ptr,
    cells_ptr,
    sentence_cells_ptr,
    mask_ptr,
    new_states_ptr,
    new_cells_ptr,
    saved_cells_ptr,
    log_normalizers_ptr,
    seq,
    hidden,
    NODES: tl.constexpr,
    NODES_P: tl.constexpr,
    SIGMOID_SCORES: tl.constexpr,
    BLOCK_S: tl.constexpr,
    BLOCK_H: tl.constexpr,
):
    """Eq. 3 for all sentence nodes of one sentence and a block of hidden units: `g^t`, `c_g^t`, and (float32, for
    the backward) the cells and the log of the softmax's normaliser."""
    b = tl.program_id(0).to(tl.int64)
    hidden_idx = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    node, column, valid, node_offsets = _node_tile(b, hidden_idx, hidden, NODES, NODES_P)
    forget_terms, keep_score, output_gate = _sentence_gates(
        sentence_forget_ptr, sentence_pre_ptr, b, node, column, valid, hidden, NODES, SIGMOID_SCORES
    )
    # Softmax over (positions, own cell) in one pass: running maximum, normaliser and weighted sum of cells.
    largest = keep_score
    normalizer = tl.full([NODES_P, BLOCK_H], 1.0, dtype=tl.float32)
    weighted = tl.load(sentence_cells_ptr + node_offsets, mask=valid, other=0.0).to(tl.float32)
    start = 0
    while start < seq:
        positions = start + tl.arange(0, BLOCK_S)
        _, scores = _position_scores(
            word_forget_ptr, forget_terms, mask_ptr, b, positions, node, column, seq, hidden, NODES, SIGMOID_SCORES
        )
        new_largest = tl.maximum(largest, tl.max(scores, axis=0))
        rescale = tl.exp(largest - new_largest)
        exps = tl.exp(scores - new_largest[None, :, :])
        word_cells = _word_cells(cells_ptr, b, positions, hidden_idx, seq, hidden)
        normalizer = normalizer * rescale + tl.sum(exps, axis=0)
        weighted = weighted * rescale + tl.sum(exps * word_cells[:, None, :], axis=0)
        largest = new_largest
        start += BLOCK_S
    cell = weighted / normalizer
    state = output_gate * _tanh(cell)
    tl.store(new_cells_ptr + node_offsets, cell.to(new_cells_ptr.dtype.element_ty), mask=valid)
    tl.store(new_states_ptr + node_offsets, state.to(new_states_ptr.dtype.element_ty), mask=valid)
    tl.store(saved_cells_ptr + node_offsets, cell, mask=valid)
    tl.store(log_normalizers_ptr + node_offsets, largest + tl.log(normalizer), mask=valid)


@triton.jit
def sentence_update_backward_kernel(
    d_states_ptr,
    d_cells_ptr,
    word_forget_ptr,
    sentence_forget_ptr,
    sentence_pre_ptr,
    cells_ptr,
    sentence_cells_ptr,
    mask_ptr,
    saved_cells_ptr,
    log_normalizers_ptr,
    d_word_forget_ptr,
    d_sentence_forget_ptr,
    d_sentence_pre_ptr,
    d_prev_cells_ptr,
    d_sentence_cells_ptr,
    seq,
    hidden,
    NODES: tl.constexpr,
    NODES_P: tl.constexpr,
    SIGMOID_SCORES: tl.constexpr,
    BLOCK_S: tl.constexpr,
    BLOCK_H: tl.constexpr,
):
    """Gradients of Eq. 3 for one sentence and a block of hidden units (a loop over position blocks):
    `d_word_forget` (of `U_f h_j`), `d_prev_cells` (of `c^{t-1}`, summed over the nodes), and per node
    `d_sentence_forget` (of `W_f γ + b_f`, summed over positions), `d_sentence_pre` (keep and output gates) and
    `d_sentence_cells` (of `c_g^{t-1}`)."""
    b = tl.program_id(0).to(tl.int64)
    hidden_idx = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    node, column, valid, node_offsets = _node_tile(b, hidden_idx, hidden, NODES, NODES_P)
    forget_terms, keep_score, output_gate = _sentence_gates(
        sentence_forget_ptr, sentence_pre_ptr, b, node, column, valid, hidden, NODES, SIGMOID_SCORES
    )
    cell = tl.load(saved_cells_ptr + node_offsets, mask=valid, other=0.0)
    log_normalizer = tl.load(log_normalizers_ptr + node_offsets, mask=valid, other=0.0)
    d_state = tl.load(d_states_ptr + node_offsets, mask=valid, other=0.0).to(tl.float32)
    squashed = _tanh(cell)
    d_cell = tl.load(d_cells_ptr + node_offsets, mask=valid, other=0.0).to(tl.float32)
    d_cell += d_state * output_gate * (1.0 - squashed * squashed)

    forget_sums = tl.zeros([NODES_P, BLOCK_H], dtype=tl.float32)
    start = 0
    while start < seq:
        positions = start + tl.arange(0, BLOCK_S)
        scores, masked_scores = _position_scores(
            word_forget_ptr, forget_terms, mask_ptr, b, positions, node, column, seq, hidden, NODES, SIGMOID_SCORES
        )
        weights = tl.exp(masked_scores - log_normalizer[None, :, :])  # f_{j,k}, zero at padding
        word_cells = _word_cells(cells_ptr, b, positions, hidden_idx, seq, hidden)
        # Softmax backward with Σ_j f_j c_j + f_g c_g = c_g^t: ∂L/∂score_j = f_j ∂L/∂c_g^t (c_j - c_g^t).
        d_scores = weights * d_cell[None, :, :] * (word_cells[:, None, :] - cell[None, :, :])
        if SIGMOID_SCORES:
            d_scores = d_scores * scores * (1.0 - scores)
        in_seq = (positions[:, None, None] < seq) & valid[None, :, :]
        offsets = ((b * seq + positions[:, None, None]) * NODES + node[None, :, :]) * hidden + column[None, :, :]
        tl.store(d_word_forget_ptr + offsets, d_scores.to(d_word_forget_ptr.dtype.element_ty), mask=in_seq)
        forget_sums += tl.sum(tl.where(in_seq, d_scores, 0.0), axis=0)
        d_prev = tl.sum(weights * d_cell[None, :, :], axis=1)  # (BLOCK_S, BLOCK_H): Σ_k f_{j,k} ∂L/∂c_{g,k}^t
        in_row = (positions[:, None] < seq) & (column < hidden)
        cell_offsets = (b * seq + positions[:, None]) * hidden + column
        tl.store(d_prev_cells_ptr + cell_offsets, d_prev.to(d_prev_cells_ptr.dtype.element_ty), mask=in_row)
        start += BLOCK_S

    keep_weight = tl.exp(keep_score - log_normalizer)  # f_{g,k}
    previous_cell = tl.load(sentence_cells_ptr + node_offsets, mask=valid, other=0.0).to(tl.float32)
    d_keep = keep_weight * d_cell * (previous_cell - cell)
    if SIGMOID_SCORES:
        d_keep = d_keep * keep_score * (1.0 - keep_score)
    d_output = d_state * squashed * output_gate * (1.0 - output_gate)
    gate_offsets = b * (2 * NODES * hidden) + node * hidden + column
    dtype = d_sentence_pre_ptr.dtype.element_ty
    tl.store(d_sentence_pre_ptr + gate_offsets, d_keep.to(dtype), mask=valid)
    tl.store(d_sentence_pre_ptr + gate_offsets + NODES * hidden, d_output.to(dtype), mask=valid)
    tl.store(d_sentence_forget_ptr + node_offsets, forget_sums.to(d_sentence_forget_ptr.dtype.element_ty), mask=valid)
    tl.store(
        d_sentence_cells_ptr + node_offsets,
        (d_cell * keep_weight).to(d_sentence_cells_ptr.dtype.element_ty),
        mask=valid,
    )


def is_interpreted() -> bool:
    """Whether the kernels run in Triton's interpreter (on CPU tensors): `TRITON_INTERPRET=1` when this module was
    imported."""
    return isinstance(word_update_forward_kernel, InterpretedFunction)


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
    if not is_interpreted() or TILE_IN_THE_INTERPRETER:
        block_h = min(block_h, GPU_TILES.max_block_h)
        block_s = max(1, min(block_s, GPU_TILES.values_per_tile // (slots * block_h)))
    return {"BLOCK_S": block_s, "BLOCK_H": block_h, "num_warps": GPU_TILES.num_warps}
