"""Triton kernels of the linear-chain CRF of `crf.py`: the likelihood with its gradient, Viterbi decoding and the
max-marginals, one program per sentence, each looping over the positions of its sentence inside the kernel.

`crf.py`'s plain loops launch a few operators per position; here the loss is two launches (the likelihood forward and
its backward) and decoding or the max-marginals one, whatever the sentence length. The recursions are those of
`crf.py` (its module docstring states them), on the emissions as they come: the kernels skip masked positions
themselves (left padding and holes included) instead of moving each chain to the front of its row.

- `log_likelihood_forward_kernel`: the forward algorithm ``alpha_t(j) = logsumexp_i(alpha_p(i) + transitions[i, j])
  + e_t(j)`` (``p`` the previous chain position), ``log Z = logsumexp_j(alpha_n(j) + end[j])``, and the gold path's
  score; it saves ``alpha`` and ``log Z`` for the backward.
- `log_likelihood_backward_kernel`: the backward algorithm ``beta_p(i) = logsumexp_j(transitions[i, j] + e_t(j) +
  beta_t(j))`` from ``beta_n = end``, run from the last position to the first, giving the gradient of ``log Z``: the
  marginals ``exp(alpha_t(j) + beta_t(j) - log Z)`` for the emissions, start and end scores, and the pairwise
  marginals ``exp(alpha_p(i) + transitions[i, j] + e_t(j) + beta_t(j) - log Z)`` for the transitions; minus the gold
  path's counts. The move gradients are written per sentence and summed over the batch in PyTorch (a fixed order:
  deterministic, unlike atomic adds).
- `viterbi_kernel`: Viterbi's forward pass (``max`` for ``logsumexp``, saving each tag's best previous tag, the lowest
  on ties as in `crf.py`), then, from the last position to the first, the backtrace and, with
  ``WITH_MAX_MARGINALS``, the backward max scores and the max-marginal logits of
  `ConditionalRandomField.max_marginals` (0 on the path, at most ``-tie_margin`` elsewhere, 0 at masked positions).

Tags are padded to a power of two (`BLOCK_TAGS`); a program holds ``(BLOCK_TAGS, BLOCK_TAGS)`` score tiles indexed
``[from, to]``. Emissions are read in their dtype (float32, bfloat16 or float16), everything is computed in float32.
Constraints are applied inside: forbidden moves score ``forbidden_score`` (a large finite penalty in the likelihood,
-inf in decoding) and get no gradient.

Triton is optional: this module imports without it (see `kernel_dispatch.py`), and `crf.py` then keeps its loops.
"""

import torch

from .custom_operators import operator_name
from .kernel_dispatch import RUN_TIME_SIZES, kernel_buffer, tl, triton
from .validation import IGNORE_INDEX

MAX_KERNEL_TAGS = 128
"""Most tags the kernels take: a program keeps ``(num_tags, num_tags)`` tiles (padded to a power of two) in
registers."""

KERNEL_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
"""Emission dtypes the kernels read (they compute in float32); float64 runs `crf.py`'s loops."""

_IGNORE_INDEX = tl.constexpr(IGNORE_INDEX)  # a kernel reads only constexpr globals


@triton.jit
def _allowed_moves(start_allowed_ptr, end_allowed_ptr, transition_allowed_ptr, num_tags, BLOCK_TAGS: tl.constexpr):
    """Which starts ``(BLOCK_TAGS,)``, ends ``(BLOCK_TAGS,)`` and transitions ``(BLOCK_TAGS, BLOCK_TAGS)`` the
    constraints allow; never those of padded tags."""
    tags = tl.arange(0, BLOCK_TAGS)
    real = tags < num_tags
    moves = tags[:, None] * num_tags + tags[None, :]
    start_allowed = tl.load(start_allowed_ptr + tags, mask=real, other=0) != 0
    end_allowed = tl.load(end_allowed_ptr + tags, mask=real, other=0) != 0
    transition_allowed = tl.load(transition_allowed_ptr + moves, mask=real[:, None] & real[None, :], other=0) != 0
    return start_allowed, end_allowed, transition_allowed


@triton.jit
def _move_scores(
    start_ptr, end_ptr, transitions_ptr, start_allowed, end_allowed, transition_allowed, num_tags, forbidden_score,
    BLOCK_TAGS: tl.constexpr,
):  # fmt: skip
    """Start ``(BLOCK_TAGS,)``, end ``(BLOCK_TAGS,)`` and transition ``(BLOCK_TAGS, BLOCK_TAGS)`` scores in float32:
    ``forbidden_score`` where `_allowed_moves` forbids the move (padded tags included)."""
    tags = tl.arange(0, BLOCK_TAGS)
    real = tags < num_tags
    moves = tags[:, None] * num_tags + tags[None, :]
    start = tl.load(start_ptr + tags, mask=real, other=0.0).to(tl.float32)
    end = tl.load(end_ptr + tags, mask=real, other=0.0).to(tl.float32)
    transitions = tl.load(transitions_ptr + moves, mask=real[:, None] & real[None, :], other=0.0)
    return (
        tl.where(start_allowed, start, forbidden_score),
        tl.where(end_allowed, end, forbidden_score),
        tl.where(transition_allowed, transitions.to(tl.float32), forbidden_score),
    )


@triton.jit
def _scores_of(
    start_ptr, end_ptr, transitions_ptr, start_allowed_ptr, end_allowed_ptr, transition_allowed_ptr, num_tags,
    forbidden_score, BLOCK_TAGS: tl.constexpr,
):  # fmt: skip
    """`_allowed_moves`, then `_move_scores`: the allowed masks and the scores."""
    start_allowed, end_allowed, transition_allowed = _allowed_moves(
        start_allowed_ptr, end_allowed_ptr, transition_allowed_ptr, num_tags, BLOCK_TAGS
    )
    start, end, transitions = _move_scores(
        start_ptr, end_ptr, transitions_ptr, start_allowed, end_allowed, transition_allowed, num_tags,
        forbidden_score, BLOCK_TAGS,
    )  # fmt: skip
    return start_allowed, end_allowed, transition_allowed, start, end, transitions


@triton.jit(do_not_specialize=RUN_TIME_SIZES)
def log_likelihood_forward_kernel(
    emissions_ptr, tags_ptr, mask_ptr, start_ptr, end_ptr, transitions_ptr, start_allowed_ptr, end_allowed_ptr,
    transition_allowed_ptr, log_likelihood_ptr, alphas_ptr, log_partition_ptr, seq, num_tags, forbidden_score,
    BLOCK_TAGS: tl.constexpr,
):  # fmt: skip
    """One sentence's log-likelihood ``gold - log Z`` (0 without chain positions); ``alpha_t`` of every position
    (held over masked ones) and ``log Z`` for the backward. A gold tag outside ``[0, num_tags)`` at a chain position
    makes the log-likelihood and ``log Z`` (so the sentence's gradients) NaN."""
    b = tl.program_id(0).to(tl.int64)
    tags = tl.arange(0, BLOCK_TAGS)
    real = tags < num_tags
    _, _, _, start, end, transitions = _scores_of(
        start_ptr, end_ptr, transitions_ptr, start_allowed_ptr, end_allowed_ptr, transition_allowed_ptr, num_tags,
        forbidden_score, BLOCK_TAGS,
    )  # fmt: skip
    alpha = tl.zeros([BLOCK_TAGS], tl.float32)  # finite (unread) before the chain: no NaN in the logsumexp
    started = tl.full([], 0, tl.int1)  # whether a chain position came before
    # The gold path's terms, summed after the loop (the interpreter pays for every reduction): its emission and start
    # scores by tag, its transitions counted by move, and its last tag.
    gold_scores = tl.zeros([BLOCK_TAGS], tl.float32)
    gold_moves = tl.zeros([BLOCK_TAGS, BLOCK_TAGS], tl.float32)
    is_previous_tag = tags < 0
    bad_tag = tl.full([], 0, tl.int1)
    for position in range(seq):
        row = b * seq + position
        on_chain = tl.load(mask_ptr + row) != 0
        emission = tl.load(emissions_ptr + row * num_tags + tags, mask=real, other=float("-inf")).to(tl.float32)
        # logsumexp over the previous tag: (BLOCK_TAGS, 1) + (BLOCK_TAGS, BLOCK_TAGS) -> (BLOCK_TAGS,). Every column
        # holds finite scores (padded tags score `forbidden_score`), so the maximum is finite.
        scores = alpha[:, None] + transitions
        top = tl.max(scores, axis=0)
        reached = top + tl.log(tl.sum(tl.exp(scores - top[None, :]), axis=0))
        alpha = tl.where(on_chain, tl.where(started, reached, start) + emission, alpha)
        tl.store(alphas_ptr + row * BLOCK_TAGS + tags, alpha)
        tag = tl.load(tags_ptr + row)
        is_tag = (tags == tag) & on_chain
        gold_scores += tl.where(is_tag, tl.where(started, 0.0, start) + emission, 0.0)
        gold_moves += (is_previous_tag[:, None] & is_tag[None, :]).to(tl.float32)
        is_previous_tag = tl.where(on_chain, is_tag, is_previous_tag)
        bad_tag = bad_tag | (on_chain & ((tag < 0) | (tag >= num_tags)))
        started = started | on_chain
    top = tl.max(alpha + end, axis=0)
    log_partition = tl.where(started, top + tl.log(tl.sum(tl.exp(alpha + end - top), axis=0)), 0.0)
    gold_scores += tl.where(is_previous_tag, end, 0.0)
    gold = tl.sum(gold_scores, axis=0) + tl.sum(tl.sum(gold_moves * transitions, axis=1), axis=0)
    # A tag outside [0, num_tags) makes the sentence's loss and, through log Z, its gradients NaN: what the loops do
    # (an index error) cannot be raised from a kernel without waiting for the device.
    log_partition = tl.where(bad_tag, float("nan"), log_partition)
    tl.store(log_partition_ptr + b, log_partition)
    tl.store(log_likelihood_ptr + b, gold - log_partition)


@triton.jit(do_not_specialize=RUN_TIME_SIZES)
def log_likelihood_backward_kernel(
    d_log_likelihood_ptr, emissions_ptr, tags_ptr, mask_ptr, start_ptr, end_ptr, transitions_ptr,
    start_allowed_ptr, end_allowed_ptr, transition_allowed_ptr, alphas_ptr, log_partition_ptr, d_emissions_ptr,
    d_moves_ptr, seq, num_tags, forbidden_score, BLOCK_TAGS: tl.constexpr,
):  # fmt: skip
    """One sentence's gradients of its log-likelihood times ``d_log_likelihood``: of the emissions (0 at masked
    positions) and, in ``d_moves`` ``(num_tags + 2, num_tags)``, of the transitions (rows ``0 .. num_tags - 1``), the
    start (row ``num_tags``) and the end scores (row ``num_tags + 1``); 0 for forbidden moves, whose score is a
    constant."""
    b = tl.program_id(0).to(tl.int64)
    tags = tl.arange(0, BLOCK_TAGS)
    real = tags < num_tags
    start_allowed, end_allowed, transition_allowed, _, end, transitions = _scores_of(
        start_ptr, end_ptr, transitions_ptr, start_allowed_ptr, end_allowed_ptr, transition_allowed_ptr, num_tags,
        forbidden_score, BLOCK_TAGS,
    )  # fmt: skip
    scale = tl.load(d_log_likelihood_ptr + b).to(tl.float32)
    log_partition = tl.load(log_partition_ptr + b)
    d_transitions = tl.zeros([BLOCK_TAGS, BLOCK_TAGS], tl.float32)
    d_start = tl.zeros([BLOCK_TAGS], tl.float32)
    d_end = tl.zeros([BLOCK_TAGS], tl.float32)
    later = tl.zeros([BLOCK_TAGS], tl.float32)  # e_t + beta_t of the next chain position t
    later_tag = tl.full([], 0, tl.int64)
    has_later = tl.full([], 0, tl.int1)
    for step in range(seq):
        row = b * seq + seq - 1 - step
        on_chain = tl.load(mask_ptr + row) != 0
        alpha = tl.load(alphas_ptr + row * BLOCK_TAGS + tags)
        emission = tl.load(emissions_ptr + row * num_tags + tags, mask=real, other=float("-inf")).to(tl.float32)
        tag = tl.load(tags_ptr + row).to(tl.int64)
        # logsumexp over the next tag: (BLOCK_TAGS, BLOCK_TAGS) + (1, BLOCK_TAGS) -> (BLOCK_TAGS,)
        scores = transitions + later[None, :]
        top = tl.max(scores, axis=1)
        beta = tl.where(has_later, top + tl.log(tl.sum(tl.exp(scores - top[:, None]), axis=1)), end)
        marginal = tl.exp(alpha + beta - log_partition)
        gold = (tags == tag).to(tl.float32)
        d_emission = tl.where(on_chain, scale * (gold - marginal), 0.0)
        tl.store(d_emissions_ptr + row * num_tags + tags, d_emission.to(d_emissions_ptr.dtype.element_ty), mask=real)
        pairs = tl.exp(alpha[:, None] + scores - log_partition)
        gold_pair = ((tags[:, None] == tag) & (tags[None, :] == later_tag)).to(tl.float32)
        d_transitions += tl.where(on_chain & has_later, gold_pair - pairs, 0.0)
        d_end = tl.where(on_chain & ~has_later, gold - marginal, d_end)
        d_start = tl.where(on_chain, gold - marginal, d_start)  # the first chain position is visited last
        later = tl.where(on_chain, emission + beta, later)
        later_tag = tl.where(on_chain, tag, later_tag)
        has_later = has_later | on_chain
    moves = b * (num_tags + 2) * num_tags + tags[:, None] * num_tags + tags[None, :]
    tl.store(d_moves_ptr + moves, tl.where(transition_allowed, scale * d_transitions, 0.0),
             mask=real[:, None] & real[None, :])  # fmt: skip
    start_row = d_moves_ptr + (b * (num_tags + 2) + num_tags) * num_tags + tags
    tl.store(start_row, tl.where(start_allowed, scale * d_start, 0.0), mask=real)
    tl.store(start_row + num_tags, tl.where(end_allowed, scale * d_end, 0.0), mask=real)


@triton.jit(do_not_specialize=RUN_TIME_SIZES)
def viterbi_kernel(
    emissions_ptr, mask_ptr, start_ptr, end_ptr, transitions_ptr, start_allowed_ptr, end_allowed_ptr,
    transition_allowed_ptr, best_previous_ptr, alphas_ptr, paths_ptr, max_marginals_ptr, seq, num_tags, tie_margin,
    lowest, WITH_MAX_MARGINALS: tl.constexpr, BLOCK_TAGS: tl.constexpr,
):  # fmt: skip
    """One sentence's best path (``IGNORE_INDEX`` at masked positions) and, ``WITH_MAX_MARGINALS``, its max-marginal
    logits: ``alpha_t(j) + beta_t(j) - max_j(alpha_n(j) + end[j])``, 0 on the path and at most ``-tie_margin``
    elsewhere, at least ``lowest``, 0 at masked positions. Scratch ``(batch, seq, BLOCK_TAGS)``: ``best_previous``
    (int32) and, ``WITH_MAX_MARGINALS``, ``alphas`` (float32)."""
    b = tl.program_id(0).to(tl.int64)
    tags = tl.arange(0, BLOCK_TAGS)
    real = tags < num_tags
    _, _, _, start, end, transitions = _scores_of(
        start_ptr, end_ptr, transitions_ptr, start_allowed_ptr, end_allowed_ptr, transition_allowed_ptr, num_tags,
        float("-inf"), BLOCK_TAGS,
    )  # fmt: skip
    alpha = tl.full([BLOCK_TAGS], float("-inf"), tl.float32)
    started = tl.full([], 0, tl.int1)
    for position in range(seq):
        row = b * seq + position
        on_chain = tl.load(mask_ptr + row) != 0
        emission = tl.load(emissions_ptr + row * num_tags + tags, mask=real, other=float("-inf")).to(tl.float32)
        # max over the previous tag of (alpha(i) + transitions[i, j]) + e(j), summed in the order of `crf._viterbi`
        # (the same float32 sums), and its argmax, the lowest tag on ties: (BLOCK_TAGS, BLOCK_TAGS) -> (BLOCK_TAGS,)
        reached, best_previous = tl.max((alpha[:, None] + transitions) + emission[None, :], axis=0,
                                        return_indices=True, return_indices_tie_break_left=True)  # fmt: skip
        alpha = tl.where(on_chain, tl.where(started, reached, start + emission), alpha)
        tl.store(best_previous_ptr + row * BLOCK_TAGS + tags, best_previous.to(tl.int32))
        if WITH_MAX_MARGINALS:
            tl.store(alphas_ptr + row * BLOCK_TAGS + tags, alpha)
        started = started | on_chain
    tl.debug_barrier()  # the backward pass reads what other threads of this program wrote
    best_score, tag = tl.max(alpha + end, axis=0, return_indices=True, return_indices_tie_break_left=True)
    best_score = tl.where(started, best_score, 0.0)  # -inf without chain positions (an empty sentence): no -inf + inf
    tag = tag.to(tl.int32)
    later = tl.zeros([BLOCK_TAGS], tl.float32)  # e_t + beta_t of the next chain position t
    has_later = tl.full([], 0, tl.int1)
    for step in range(seq):
        row = b * seq + seq - 1 - step
        on_chain = tl.load(mask_ptr + row) != 0
        tl.store(paths_ptr + row, tl.where(on_chain, tag, _IGNORE_INDEX).to(tl.int64))
        if WITH_MAX_MARGINALS:
            emission = tl.load(emissions_ptr + row * num_tags + tags, mask=real, other=float("-inf")).to(tl.float32)
            alpha = tl.load(alphas_ptr + row * BLOCK_TAGS + tags)
            # max over the next tag of transitions[i, j] + (e_t(j) + beta_t(j)), as `crf._backward_max_scores`
            beta = tl.where(has_later, tl.max(transitions + later[None, :], axis=1), end)
            logits = tl.where(tags == tag, 0.0, tl.minimum(alpha + beta - best_score, -tie_margin))
            logits = tl.where(on_chain, tl.maximum(logits, lowest), 0.0)
            tl.store(max_marginals_ptr + row * num_tags + tags, logits, mask=real)
            later = tl.where(on_chain, emission + beta, later)
            has_later = has_later | on_chain
        # The tag at the previous chain position (after the first one, the value is never used).
        tag = tl.where(on_chain, tl.load(best_previous_ptr + row * BLOCK_TAGS + tag), tag)


def _contiguous(*tensors: torch.Tensor | None) -> tuple[torch.Tensor | None, ...]:
    """The tensors as the kernels read them (each row after the previous one): contiguous, whatever layout a caller
    passes (expanded, sliced, transposed), copied only where needed; `None` stays `None`."""
    return tuple(None if tensor is None else tensor.contiguous() for tensor in tensors)


def _launch_settings(num_tags: int) -> dict:
    """``BLOCK_TAGS`` (the tags padded to a power of two) and warps for about 8 values of a score tile per thread."""
    block_tags = triton.next_power_of_2(num_tags)
    return {"BLOCK_TAGS": block_tags, "num_warps": min(16, max(1, block_tags * block_tags // 256))}


@torch.library.custom_op(operator_name("crf_log_likelihood"), mutates_args=())
def crf_log_likelihood(
    emissions: torch.Tensor,
    tags: torch.Tensor,
    mask: torch.Tensor,
    start: torch.Tensor,
    end: torch.Tensor,
    transitions: torch.Tensor,
    start_allowed: torch.Tensor,
    end_allowed: torch.Tensor,
    transition_allowed: torch.Tensor,
    forbidden_score: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Launches `log_likelihood_forward_kernel`: emissions ``(batch, seq, L)``, tags (long) and mask (bool)
    ``(batch, seq)``, the CRF's parameters and constraint buffers -> the log-likelihood ``(batch,)``, and the forward
    scores ``(batch, seq, BLOCK_TAGS)`` and ``log Z`` ``(batch,)`` that the backward reads (all float32). Takes any
    layout (`_contiguous`)."""
    emissions, tags, mask, start, end, transitions, start_allowed, end_allowed, transition_allowed = _contiguous(
        emissions, tags, mask, start, end, transitions, start_allowed, end_allowed, transition_allowed
    )
    batch, seq, num_tags = emissions.shape
    settings = _launch_settings(num_tags)
    log_likelihoods, log_partitions = (kernel_buffer(emissions, (batch,), torch.float32) for _ in range(2))
    alphas = kernel_buffer(emissions, (batch, seq, settings["BLOCK_TAGS"]), torch.float32)
    log_likelihood_forward_kernel[(batch,)](
        emissions_ptr=emissions, tags_ptr=tags, mask_ptr=mask, start_ptr=start, end_ptr=end,
        transitions_ptr=transitions, start_allowed_ptr=start_allowed, end_allowed_ptr=end_allowed,
        transition_allowed_ptr=transition_allowed, log_likelihood_ptr=log_likelihoods, alphas_ptr=alphas,
        log_partition_ptr=log_partitions, seq=seq, num_tags=num_tags, forbidden_score=forbidden_score, **settings,
    )  # fmt: skip
    return log_likelihoods, alphas, log_partitions


@crf_log_likelihood.register_fake
def _(emissions, tags, mask, start, end, transitions, start_allowed, end_allowed, transition_allowed, forbidden_score):
    batch, seq, num_tags = emissions.shape
    log_likelihoods = emissions.new_empty(batch, dtype=torch.float32)
    alphas = emissions.new_empty(batch, seq, triton.next_power_of_2(num_tags), dtype=torch.float32)
    return log_likelihoods, alphas, torch.empty_like(log_likelihoods)


@torch.library.custom_op(operator_name("crf_log_likelihood_backward"), mutates_args=())
def crf_log_likelihood_backward(
    d_log_likelihood: torch.Tensor,
    emissions: torch.Tensor,
    tags: torch.Tensor,
    mask: torch.Tensor,
    start: torch.Tensor,
    end: torch.Tensor,
    transitions: torch.Tensor,
    start_allowed: torch.Tensor,
    end_allowed: torch.Tensor,
    transition_allowed: torch.Tensor,
    alphas: torch.Tensor,
    log_partitions: torch.Tensor,
    forbidden_score: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Launches `log_likelihood_backward_kernel` -> the gradient of the emissions (their shape and dtype) and the
    per-sentence gradients of the moves ``(batch, L + 2, L)`` float32 (transitions, then the start and end rows).
    Takes any layout (`_contiguous`), e.g. the expanded gradient of a sum."""
    d_log_likelihood, emissions, tags, mask, start, end, transitions, *rest = _contiguous(
        d_log_likelihood, emissions, tags, mask, start, end, transitions, start_allowed, end_allowed,
        transition_allowed, alphas, log_partitions,
    )  # fmt: skip
    start_allowed, end_allowed, transition_allowed, alphas, log_partitions = rest
    batch, seq, num_tags = emissions.shape
    d_emissions = kernel_buffer(emissions, emissions.shape)
    d_moves = kernel_buffer(emissions, (batch, num_tags + 2, num_tags), torch.float32)
    log_likelihood_backward_kernel[(batch,)](
        d_log_likelihood_ptr=d_log_likelihood, emissions_ptr=emissions, tags_ptr=tags, mask_ptr=mask, start_ptr=start,
        end_ptr=end, transitions_ptr=transitions, start_allowed_ptr=start_allowed, end_allowed_ptr=end_allowed,
        transition_allowed_ptr=transition_allowed, alphas_ptr=alphas, log_partition_ptr=log_partitions,
        d_emissions_ptr=d_emissions, d_moves_ptr=d_moves, seq=seq, num_tags=num_tags, forbidden_score=forbidden_score,
        **_launch_settings(num_tags),
    )  # fmt: skip
    return d_emissions, d_moves


@crf_log_likelihood_backward.register_fake
def _(d_log_likelihood, emissions, *rest):
    batch, _, num_tags = emissions.shape
    d_moves = emissions.new_empty(batch, num_tags + 2, num_tags, dtype=torch.float32)
    return emissions.new_empty(emissions.shape), d_moves


def _save_for_backward(ctx, inputs, output):
    *tensors, ctx.forbidden_score = inputs
    _, alphas, log_partitions = output
    ctx.set_materialize_grads(False)  # no zero gradients made for the outputs saved for the backward
    ctx.mark_non_differentiable(alphas, log_partitions)  # the backward's inputs, not results to train on
    ctx.save_for_backward(*tensors, alphas, log_partitions)


def _log_likelihood_gradients(ctx, d_log_likelihood, _d_alphas, _d_log_partitions):
    emissions, _, _, start, end, transitions, *_ = ctx.saved_tensors
    d_emissions, d_moves = crf_log_likelihood_backward(d_log_likelihood, *ctx.saved_tensors, ctx.forbidden_score)
    d_parameters = (None, None, None)
    if any(ctx.needs_input_grad[3:6]):
        num_tags = emissions.size(-1)
        d_transitions, d_start, d_end = d_moves.sum(dim=0).split([num_tags, 1, 1])  # (L, L), (1, L), (1, L)
        d_parameters = (
            d_start.view(-1).to(start.dtype),
            d_end.view(-1).to(end.dtype),
            d_transitions.to(transitions.dtype),
        )
    return d_emissions, None, None, *d_parameters, None, None, None, None


crf_log_likelihood.register_autograd(_log_likelihood_gradients, setup_context=_save_for_backward)


@torch.library.custom_op(operator_name("crf_viterbi"), mutates_args=())
def crf_viterbi(
    emissions: torch.Tensor,
    mask: torch.Tensor,
    start: torch.Tensor,
    end: torch.Tensor,
    transitions: torch.Tensor,
    start_allowed: torch.Tensor,
    end_allowed: torch.Tensor,
    transition_allowed: torch.Tensor,
    tie_margin: float,
    with_max_marginals: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Launches `viterbi_kernel` -> the best paths ``(batch, seq)`` (long, ``IGNORE_INDEX`` at masked positions) and,
    ``with_max_marginals``, the max-marginal logits ``(batch, seq, L)`` float32 (else an empty tensor). Takes any
    layout (`_contiguous`)."""
    emissions, mask, start, end, transitions, start_allowed, end_allowed, transition_allowed = _contiguous(
        emissions, mask, start, end, transitions, start_allowed, end_allowed, transition_allowed
    )
    batch, seq, num_tags = emissions.shape
    settings = _launch_settings(num_tags)
    paths = kernel_buffer(emissions, (batch, seq), torch.long)
    max_marginals = kernel_buffer(emissions, (batch, seq, num_tags) if with_max_marginals else (0,), torch.float32)
    scratch = (batch, seq, settings["BLOCK_TAGS"])  # the best previous tags, and the forward scores
    viterbi_kernel[(batch,)](
        emissions_ptr=emissions, mask_ptr=mask, start_ptr=start, end_ptr=end, transitions_ptr=transitions,
        start_allowed_ptr=start_allowed, end_allowed_ptr=end_allowed, transition_allowed_ptr=transition_allowed,
        best_previous_ptr=kernel_buffer(emissions, scratch, torch.int32),
        alphas_ptr=kernel_buffer(emissions, scratch, torch.float32) if with_max_marginals else None, paths_ptr=paths,
        max_marginals_ptr=max_marginals if with_max_marginals else None, seq=seq, num_tags=num_tags,
        tie_margin=tie_margin, lowest=torch.finfo(torch.float32).min, WITH_MAX_MARGINALS=with_max_marginals,
        **settings,
    )  # fmt: skip
    return paths, max_marginals


@crf_viterbi.register_fake
def _(emissions, mask, start, end, transitions, start_allowed, end_allowed, transition_allowed, tie_margin,
      with_max_marginals):  # fmt: skip
    batch, seq, num_tags = emissions.shape
    max_marginals_shape = (batch, seq, num_tags) if with_max_marginals else (0,)
    paths = emissions.new_empty(batch, seq, dtype=torch.long)
    return paths, emissions.new_empty(max_marginals_shape, dtype=torch.float32)
