"""Linear-chain conditional random field (CRF) for token classification heads.

Hand-written rather than taken from pytorch-crf (``torchcrf.CRF``), which is unmaintained and lacks what the head
needs: transition constraints for tagging schemes, masks that do not start with 1 or have holes (e.g. masked special
or continuation sub-word tokens), max-marginals, and recursions that `torch.export` and ONNX can trace with a dynamic
sequence length. Parameter names, their ``[from, to]`` indexing and the likelihood match
``torchcrf.CRF(num_tags, batch_first=True)``, so its weights can be copied over as they are; what differs is the
loss: `ConditionalRandomField.forward` returns the *negative* log-likelihood averaged over the batch by default
(``reduction="mean"``), where ``torchcrf.CRF.forward`` returns the log-likelihood summed over the batch (its
``reduction="sum"``); ``-crf(emissions, tags, mask, reduction="sum")`` equals ``torchcrf.CRF(...)(emissions, tags,
mask)``. `ConditionalRandomField.log_likelihood` returns the per-sentence log-likelihood.

Masked positions are skipped: the chain of a sentence is its unmasked positions, in order. Each position has a
``(num_tags, num_tags)`` score matrix (transition plus emission; the semiring identity at masked positions), and the
forward and backward recursions multiply scores by these matrices in the log semiring (likelihood) or the max-plus
semiring (Viterbi, max-marginals). Eager calls go position by position, the fastest on a CPU at sentence lengths. A
traced graph (`torch.export`, ONNX, `torch.compile`) cannot loop over a symbolic length: there the positions form
blocks of `_BLOCK_SIZE`, the (associative) products of the blocks' matrices are combined by a scan in log2(number of
blocks) rounds, and each block then goes position by position from the scores at its edges; such a graph handles up
to `MAX_TRACED_LENGTH` positions. The same functions serve both; only `_scan_plan` differs. The Viterbi backtrace is a
composition of per-position maps, computed by pointer jumping. torch's ``scan`` higher-order op was the other
candidate: it exports (strict mode only) and becomes an ONNX ``Scan``, but eager calls compile its body and a
likelihood forward-backward took 150-240 ms instead of about 5. All scores are computed with autocast disabled in
float32, whatever the dtype of the emissions (float64 stays float64); the likelihood's matrix products run in float64
(see `_log_product`).

`torch.export` traces it with or without ``strict``. Forward methods check shapes and dtypes only: checks that read
values (0/1 masks, tags in range) are `validate_mask` and `ConditionalRandomField.validate_tags`, for the code where
data enters, and run inside the forward methods only where that is free (see `values_are_cheap_to_check`).
"""

from collections.abc import Callable, Sequence
from typing import NamedTuple

import torch
from torch import nn

from .tag_schemes import allowed_transitions as allowed_transitions_for_labels

IGNORE_INDEX = -100
"""Label of positions without a label (boundary tokens, padding, continuation sub-words) and the tag
`ConditionalRandomField.decode` writes at masked positions: the ``ignore_index`` of ``nn.CrossEntropyLoss``. The
package's one definition (the models and the training scripts import it)."""

MAX_TRACED_LENGTH = 4096
"""Longest sequence a traced CRF (`torch.export`, ONNX, `torch.compile`) handles: a traced graph has a fixed number of
scan rounds. `torch.export` records the bound (export with e.g. ``Dim("seq", max=MAX_TRACED_LENGTH)`` or
``Dim.DYNAMIC``), and its programs refuse longer inputs; ONNX graphs do not check it, and may be wrong beyond it.
Eager calls have no limit."""

# Forbidden moves in the likelihood get this score rather than -inf, so that an invalid gold sequence costs a huge but
# finite loss instead of inf/NaN; exp(-1e4) is 0 in float32 and float64, so valid sequences are unaffected.
_LIKELIHOOD_PENALTY = -1e4

# Max-marginals of non-Viterbi tags that tie with the best path are pushed this far below 0, so that argmax picks the
# Viterbi tag. A power of two: exact in float16/bfloat16 and above float16's smallest normal (2**-14), so a cast of
# the logits to half precision keeps the tie broken.
_TIE_MARGIN = 2.0**-13

# Positions per block in a traced graph (a power of two; see `_scan_plan`): each block goes position by position, the
# blocks are combined by a scan. Of 8, 16 and 32, 16 ran max-marginals fastest in onnxruntime for 14 to 128 tokens.
_BLOCK_SIZE = 16

_REDUCTIONS = {"mean": torch.mean, "sum": torch.sum, "none": lambda nll: nll}


def _autocast_disabled(emissions: torch.Tensor) -> torch.autocast:
    return torch.autocast(device_type=emissions.device.type, enabled=False)


def values_are_cheap_to_check(tensor: torch.Tensor) -> bool:
    """Whether forward methods check the values of their inputs (ids, labels, tags, masks): only for eager CPU
    tensors; the S-LSTM models use it too.

    Reading a value of a GPU tensor waits for the device to finish its queued work, and a traced graph
    (`torch.compile`, `torch.export`, ONNX) cannot branch on values; there the data-entry code (the tokenizer, the
    training scripts' data preparation) is what guarantees valid values. Without the check, an out-of-range tag at an
    unmasked position still fails (in the gather of its emission score) instead of giving a wrong loss, and a
    non-0/1 integer mask counts as `True` wherever it is nonzero.
    """
    return tensor.device.type == "cpu" and not torch.compiler.is_compiling() and not torch.jit.is_tracing()


def validate_mask(mask: torch.Tensor) -> None:
    """Raise a `ValueError` if an integer ``mask`` holds values other than 0 and 1 (bool masks always pass).

    Reads the values: on a GPU this waits for the device, so call it where data enters (e.g. in a data collator).
    """
    if mask.dtype != torch.bool and not ((mask == 0) | (mask == 1)).all():
        raise ValueError(f"an integer mask must hold only 0 and 1, got values {torch.unique(mask).tolist()}")


def _max_plus_product(left: torch.Tensor, right: torch.Tensor) -> torch.Tensor:
    """Max-plus matrix product ``max_k left[..., i, k] + right[..., k, j]``: (..., m, k) x (..., k, n) -> (..., m, n)."""
    return (left.unsqueeze(-1) + right.unsqueeze(-3)).amax(dim=-2)


def _log_product(left: torch.Tensor, right: torch.Tensor) -> torch.Tensor:
    """Log-semiring matrix product ``logsumexp_k left[..., i, k] + right[..., k, j]``: (..., m, k) x (..., k, n).

    A matmul of exponentials, shifted by the row maxima of ``left`` and the column maxima of ``right``, so memory stays
    (..., m, n) rather than (..., m, k, n). In float64 (float32 on MPS, which has no float64): a term underflows only if
    it lies ~700 below both maxima, which only paths through forbidden moves do; in float32, allowed paths would be
    lost for emissions of around 60. The shifts are constants for autograd: the result does not depend on them.
    """
    dtype = torch.float32 if left.device.type == "mps" else torch.float64
    left_max = left.detach().amax(dim=-1, keepdim=True)  # (..., m, 1)
    right_max = right.detach().amax(dim=-2, keepdim=True)  # (..., 1, n)
    total = (left - left_max).to(dtype).exp() @ (right - right_max).to(dtype).exp()  # (..., m, n)
    # The smallest normal rather than 0, whose log would give -inf and NaN gradients. A tensor, not a Python float:
    # the ONNX exporter would round a float64 scalar through float32, to 0.
    smallest = total.new_tensor(torch.finfo(dtype).tiny)
    return total.clamp(min=smallest).log().to(left.dtype) + left_max + right_max


class _Semiring(NamedTuple):
    """How the scores of alternative paths combine: the best one (max-plus: Viterbi, max-marginals) or log-sum-exp
    (log: likelihood)."""

    zero: float
    """Score of an impossible move: the off-diagonal of the identity matrix."""
    reduce: Callable[..., torch.Tensor]
    """Combines alternatives along ``dim``: `torch.amax` or `torch.logsumexp`."""
    matrix_product: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]

    def vector_product(self, vector: torch.Tensor, matrices: torch.Tensor) -> torch.Tensor:
        """(..., L) x (..., L, L) -> (..., L): combined over the tag of ``vector``."""
        return self.reduce(vector.unsqueeze(-1) + matrices, dim=-2)


_MAX_PLUS = _Semiring(float("-inf"), torch.amax, _max_plus_product)
_LOG = _Semiring(_LIKELIHOOD_PENALTY, torch.logsumexp, _log_product)


class _ScanPlan(NamedTuple):
    """How the positions of a chain are split into blocks, and the scan rounds over blocks and over positions."""

    block_size: int
    num_blocks: int | torch.SymInt
    block_rounds: int
    position_rounds: int


def _scan_plan(length: int | torch.SymInt) -> _ScanPlan:
    """The scan of a chain of ``length`` positions.

    Eager calls use one block: the recursions then run position by position, which on a CPU is the fastest for
    sentence lengths (a scan over blocks does ``num_tags`` times more work, in matrix products). A traced graph
    (`torch.export`, ONNX, `torch.compile`) needs loops whose lengths do not depend on the sequence length: see
    `_blocked_scan_plan`.
    """
    if isinstance(length, int) and not torch.compiler.is_compiling():
        return _ScanPlan(length, 1, 0, (length - 1).bit_length())
    return _blocked_scan_plan(length)


def _blocked_scan_plan(length: int | torch.SymInt) -> _ScanPlan:
    """Blocks of `_BLOCK_SIZE` positions, and scans with enough rounds for `MAX_TRACED_LENGTH` positions.

    One more block than needed (of identity matrices): a symbolic size that may be 1 makes `torch.export` specialise
    on it, and this block count is at least 2.
    """
    # No message argument: with one, strict `torch.export` fails (torch 2.13). Export reports the bound itself
    # (e.g. "Suggested fixes: seq = Dim('seq', max=4096)"), and so does the exported program on a longer input.
    torch._check(length <= MAX_TRACED_LENGTH)
    # ceil(length / _BLOCK_SIZE) + 1 as a single floor division: sympy could not prove that the block count divides
    # the padded length if it read `_BLOCK_SIZE * (q + 2)` as `_BLOCK_SIZE * q + 2 * _BLOCK_SIZE`.
    num_blocks = (length + 2 * _BLOCK_SIZE - 1) // _BLOCK_SIZE
    max_blocks = (MAX_TRACED_LENGTH + 2 * _BLOCK_SIZE - 1) // _BLOCK_SIZE
    return _ScanPlan(_BLOCK_SIZE, num_blocks, (max_blocks - 1).bit_length(), (MAX_TRACED_LENGTH - 1).bit_length())


# Slices of symbolic lengths are written as padding followed by `narrow`, so that the bounds hold by construction:
# `torch.export` cannot prove e.g. `length <= 16 * ((length + 31) // 16)` and would fix the length. Padding and
# `torch.where`, not `torch.cat`: inductor (torch 2.13) writes the inputs of a concatenation into its buffer and, with
# dynamic shapes, then gets the strides of tensors saved for backward wrong.
def _pad_positions(values: torch.Tensor, before: int | torch.SymInt, after: int | torch.SymInt) -> torch.Tensor:
    """``values`` (batch, n, ...) with zeros (`False`) added before and after its positions (dim 1)."""
    return nn.functional.pad(values, [0, 0] * (values.dim() - 2) + [before, after])


def _is_position(values: torch.Tensor, position: int | torch.SymInt) -> torch.Tensor:
    """Bool (n, 1, ...) that broadcasts against ``values`` (batch, n, ...): `True` at ``position`` of dim 1."""
    positions = torch.arange(values.size(1), device=values.device) == position  # (n,)
    return positions.view(-1, *([1] * (values.dim() - 2)))


def _shift_in(first: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """``values`` (batch, n, ...) moved one step along dim 1: ``first`` (batch, 1, ...) enters at 0, the last leaves."""
    moved = _pad_positions(values, 1, 0).narrow(1, 0, values.size(1))
    return torch.where(_is_position(values, 0), first, moved)


def _shift_out(values: torch.Tensor, last: torch.Tensor) -> torch.Tensor:
    """``values`` (batch, n, ...) moved one step back along dim 1: the first leaves, ``last`` (batch, 1, ...) enters."""
    moved = _pad_positions(values, 0, 1).narrow(1, 1, values.size(1))
    return torch.where(_is_position(values, values.size(1) - 1), last, moved)


def _take_first(values: torch.Tensor, length: int | torch.SymInt) -> torch.Tensor:
    """``values[:, :length]`` for ``length <= values.size(1)``."""
    return _pad_positions(values, 0, length).narrow(1, 0, length)


def _step_matrices(
    emissions: torch.Tensor, mask: torch.Tensor, start: torch.Tensor, transitions: torch.Tensor, zero: float
) -> torch.Tensor:
    """Score matrices (batch, seq, L, L) of each position: entry ``[b, p, i, j]`` scores tag ``j`` at position ``p``
    after tag ``i`` at the previous chain position.

    That is ``transitions[i, j] + emissions[b, p, j]``; at the first chain position ``start[j] + emissions[b, p, j]``
    in every row ``i``, so that row 0 of the identity starts the chain; the identity (``zero`` off the diagonal) at
    masked positions, which the chain skips.
    """
    num_tags = emissions.size(-1)
    first = mask & (mask.cumsum(dim=1) == 1)  # (batch, seq)
    moves = torch.where(first[..., None, None], start.expand(num_tags, num_tags), transitions)  # (batch, seq, L, L)
    return torch.where(mask[..., None, None], moves + emissions[:, :, None, :], _identity(num_tags, zero, emissions))


def _identity(num_tags: int, zero: float, like: torch.Tensor) -> torch.Tensor:
    """Identity (L, L) of a semiring whose impossible score is ``zero``, with the dtype and device of ``like``."""
    eye = torch.eye(num_tags, dtype=torch.bool, device=like.device)
    return torch.where(eye, 0.0, zero).to(like.dtype)


def _blocks(steps: torch.Tensor, identity: torch.Tensor, plan: _ScanPlan) -> torch.Tensor:
    """(batch, seq, L, L) -> (batch, num_blocks, block_size, L, L), padded with identity matrices at the end."""
    if plan.num_blocks == 1:  # eager plans, whose one block is the sequence (see `_block_edges`)
        return steps.unsqueeze(1)
    padded_length = plan.num_blocks * plan.block_size
    padding = identity.expand(steps.size(0), padded_length, *identity.shape)
    padded = torch.cat([steps, padding], dim=1).narrow(1, 0, padded_length)
    return padded.unflatten(1, (plan.num_blocks, plan.block_size))


def _block_products(blocks: torch.Tensor, product: Callable) -> torch.Tensor:
    """Product (batch, num_blocks, L, L) of each block's matrices (batch, num_blocks, block_size, L, L), by halving
    (``block_size`` is a power of two)."""
    while blocks.size(2) > 1:
        blocks = product(blocks[:, :, 0::2], blocks[:, :, 1::2])
    return blocks.squeeze(2)


def _inclusive_scan(
    matrices: torch.Tensor, identity: torch.Tensor, product: Callable, rounds: int, reverse: bool = False
) -> torch.Tensor:
    """Hillis-Steele scan of (batch, n, L, L) over dim 1: the product of entries ``0 .. j`` at ``j`` (``j .. n - 1``
    with ``reverse``); ``rounds`` must be at least ``log2(n)``."""
    size = matrices.size(1)
    for round_index in range(rounds):
        # After this round, entry j holds the product of 2 ** (round_index + 1) consecutive entries (fewer at an edge).
        shift = 2**round_index
        padding = identity.expand(matrices.size(0), shift, *identity.shape)
        if reverse:
            matrices = product(matrices, torch.cat([matrices, padding], dim=1).narrow(1, shift, size))
        else:
            matrices = product(torch.cat([padding, matrices], dim=1).narrow(1, 0, size), matrices)
    return matrices


def _block_edges(
    blocks: torch.Tensor,
    start: torch.Tensor,
    end: torch.Tensor,
    identity: torch.Tensor,
    semiring: _Semiring,
    rounds: int,
    with_backward: bool,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Scores (batch, num_blocks, L) on entering each block (from ``start`` (batch, 1, L)) and, ``with_backward``, of
    what follows it (up to ``end`` (L,)), by scans over the products of the blocks."""
    batch, num_blocks = blocks.shape[:2]
    final = end.expand(batch, 1, -1)  # (batch, 1, L)
    # Statically known either way: eager plans have one block, traced plans at least two.
    if num_blocks == 1:
        return start, final if with_backward else None
    totals = _block_products(blocks, semiring.matrix_product)  # (batch, num_blocks, L, L)
    prefixes = _inclusive_scan(totals, identity, semiring.matrix_product, rounds)
    entering = _shift_in(start, semiring.vector_product(start, prefixes))  # (batch, num_blocks, L)
    if not with_backward:
        return entering, None
    suffixes = _inclusive_scan(totals, identity, semiring.matrix_product, rounds, reverse=True)
    return entering, _shift_out(semiring.vector_product(end, suffixes.transpose(-1, -2)), final)


def _chain_scores(
    steps: torch.Tensor, end: torch.Tensor, semiring: _Semiring, plan: _ScanPlan, with_backward: bool
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Forward and, ``with_backward``, backward scores (batch, seq, L) of the step matrices (batch, seq, L, L).

    Returns:
        ``forward[b, p, y]``: combined score (``semiring``) of the chain up to position ``p`` with tag ``y`` there,
        its emission included; ``backward[b, p, y]``: of the rest of the chain after ``p`` given tag ``y`` at ``p``,
        the end transition included. At masked positions, the scores of the chain position before (forward) or after
        (backward).
    """
    batch, length, num_tags = steps.shape[:3]
    identity = _identity(num_tags, semiring.zero, steps)
    blocks = _blocks(steps, identity, plan)  # (batch, num_blocks, block_size, L, L)
    start = identity[:1].expand(batch, 1, num_tags)  # row 0 starts the chain (see `_step_matrices`)
    entering, leaving = _block_edges(blocks, start, end, identity, semiring, plan.block_rounds, with_backward)
    # Inside the blocks, position by position, all blocks at once.
    steps_in_block = blocks.unbind(dim=2)  # block_size x (batch, num_blocks, L, L)
    forward, score = [], entering
    for step in steps_in_block:
        score = semiring.vector_product(score, step)
        forward.append(score)
    forward = _take_first(torch.stack(forward, dim=2).flatten(1, 2), length)
    if not with_backward:
        return forward, None
    backward, score = [], leaving
    for step in reversed(steps_in_block):
        backward.append(score)
        score = semiring.vector_product(score, step.transpose(-1, -2))
    return forward, _take_first(torch.stack(backward[::-1], dim=2).flatten(1, 2), length)


def _first_argmax_step(scores: torch.Tensor, transitions: torch.Tensor) -> torch.Tensor:
    """``argmax_i scores[..., i] + transitions[i, j]`` (..., L), the lowest ``i`` on ties, for ``scores`` (..., L).

    A loop over ``i``: `torch.argmax` over so few entries is several times slower on a CPU.
    """
    best = scores[..., :1] + transitions[0]  # (..., L)
    best_tags = torch.zeros_like(best, dtype=torch.long)
    for tag in range(1, transitions.size(0)):
        candidate = scores[..., tag : tag + 1] + transitions[tag]
        better = candidate > best
        best = torch.where(better, candidate, best)
        best_tags = best_tags.masked_fill(better, tag)
    return best_tags


def _best_paths(
    forward: torch.Tensor, end: torch.Tensor, transitions: torch.Tensor, mask: torch.Tensor, rounds: int
) -> torch.Tensor:
    """Viterbi paths (batch, seq) from the forward max scores (batch, seq, L): the best tag sequence at chain positions,
    and at masked positions the tag of the next chain position (of the last one after the chain).

    The backtrace ``tag[p - 1] = previous[p][tag[p]]`` is a composition of maps, computed by pointer jumping in
    ``rounds`` >= log2(seq) steps. Ties go to the lowest tag, as in a sequential backtrace.
    """
    batch, length, num_tags = forward.shape
    tags = torch.arange(num_tags, device=forward.device).expand(batch, 1, num_tags)  # (batch, 1, L)
    # Best previous tag of each tag at p, from the forward scores at p - 1 (meaningless at p = 0, which has none).
    before = _shift_in(forward.new_zeros(batch, 1, num_tags), forward)  # (batch, seq, L)
    previous = _first_argmax_step(before, transitions)  # (batch, seq, L)
    # maps[p]: tag at p given the tag at p + 1 (given the last tag at the end).
    maps = _shift_out(torch.where(mask[..., None], previous, tags), tags)  # (batch, seq, L)
    for round_index in range(rounds):
        shift = 2**round_index
        later = torch.cat([maps, tags.expand(batch, shift, num_tags)], dim=1).narrow(1, shift, length)
        maps = maps.gather(2, later)  # maps[p] o maps[p + shift]
    last_tags = (forward[:, -1] + end).argmax(dim=-1)  # (batch,)
    return maps.gather(2, last_tags[:, None, None].expand(batch, length, 1)).squeeze(2)


def _left_compacted(values: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The values (batch, seq) at unmasked positions moved to the front of each row, in order, and the mask (batch,
    seq) of the filled front positions."""
    chain_positions = mask.cumsum(dim=1) - 1  # (batch, seq): index of each unmasked position in its chain
    lengths = chain_positions[:, -1:] + 1  # (batch, 1)
    # Masked positions go after the chain, in order: each row is a permutation, so the scatter writes every position.
    destinations = torch.where(mask, chain_positions, lengths + (~mask).cumsum(dim=1) - 1)
    compacted = torch.empty_like(values).scatter(1, destinations, values)
    return compacted, torch.arange(values.size(1), device=values.device) < lengths


def _gold_score(
    emissions: torch.Tensor,
    tags: torch.Tensor,
    mask: torch.Tensor,
    start: torch.Tensor,
    end: torch.Tensor,
    transitions: torch.Tensor,
) -> torch.Tensor:
    """Score (batch,) of the given tag sequences over their chains; tags at masked positions are ignored."""
    tags = tags.masked_fill(~mask, 0)
    # Fails on an out-of-range tag at an unmasked position (CPU: IndexError; CUDA: device-side assert).
    emission_scores = emissions.gather(2, tags[..., None]).squeeze(2)  # (batch, seq)
    chain_tags, chain_mask = _left_compacted(tags, mask)  # (batch, seq)
    previous_tags = _shift_in(chain_tags[:, :1], chain_tags)  # (batch, seq)
    has_previous = chain_mask & _shift_in(torch.zeros_like(chain_mask[:, :1]), chain_mask)
    last_tags = chain_tags.gather(1, (chain_mask.sum(dim=1, keepdim=True) - 1).clamp(min=0)).squeeze(1)  # (batch,)
    return (
        start[chain_tags[:, 0]]
        + torch.where(mask, emission_scores, 0.0).sum(dim=1)
        + torch.where(has_previous, transitions[previous_tags, chain_tags], 0.0).sum(dim=1)
        + end[last_tags]
    )


def _favour_path(max_marginals: torch.Tensor, path: torch.Tensor) -> torch.Tensor:
    """Exactly 0 on ``path`` (batch, seq) and at most ``-_TIE_MARGIN`` elsewhere, so that argmax recovers ``path``
    despite exact ties and rounding in ``max_marginals`` (batch, seq, num_tags)."""
    on_path = nn.functional.one_hot(path, max_marginals.size(-1)).bool()  # (batch, seq, num_tags)
    return torch.where(on_path, 0.0, max_marginals.clamp(max=-_TIE_MARGIN))


def _constraint_lists(allowed_transitions: tuple, num_tags: int) -> tuple[list[bool], list[bool], list[list[bool]]]:
    """Check a ``(start_allowed, end_allowed, transition_allowed)`` triple and return it as Python lists."""
    if not isinstance(allowed_transitions, (tuple, list)) or len(allowed_transitions) != 3:
        raise ValueError(
            "allowed_transitions must be a (start_allowed, end_allowed, transition_allowed) triple, got "
            f"{type(allowed_transitions).__name__}"
        )
    expected_shapes = ((num_tags,), (num_tags,), (num_tags, num_tags))
    constraints = [torch.as_tensor(values, dtype=torch.bool, device="cpu") for values in allowed_transitions]
    shapes = tuple(tuple(constraint.shape) for constraint in constraints)
    if shapes != expected_shapes:
        raise ValueError(
            f"allowed_transitions must have shapes {expected_shapes} for num_tags={num_tags}, got {shapes}"
        )
    start_allowed, end_allowed, transition_allowed = (constraint.tolist() for constraint in constraints)
    return start_allowed, end_allowed, transition_allowed


class ConditionalRandomField(nn.Module):
    """Linear-chain CRF over ``num_tags`` tags, with optional tagging-scheme constraints.

    The score of a tag sequence ``y_1 .. y_n`` over the unmasked positions of a sentence is
    ``start[y_1] + sum_i emissions[i, y_i] + sum_i transitions[y_i, y_{i+1}] + end[y_n]``.

    Constraints are kept in non-persistent bool buffers: checkpoints hold only the three parameters (the same keys as
    pytorch-crf), and the constraints are rebuilt from the labels when the module is constructed, e.g. by
    `from_labels` with the model config's ``id2label``. Forbidden moves can never be decoded (their score is -inf in
    `decode` and `max_marginals`) and cost a large finite penalty in the likelihood.

    Args:
        num_tags (`int`):
            Number of tags ``L``.
        allowed_transitions (`tuple`, *optional*, defaults to `None`):
            ``(start_allowed, end_allowed, transition_allowed)`` of booleans with shapes ``(L,)``, ``(L,)`` and
            ``(L, L)`` indexed ``[from, to]`` (nested lists or tensors), as returned by
            `tag_schemes.allowed_transitions`. `None` allows every move.

    Attributes:
        start_transitions (`nn.Parameter` of shape `(L,)`): score of starting a sentence with each tag.
        end_transitions (`nn.Parameter` of shape `(L,)`): score of ending a sentence with each tag.
        transitions (`nn.Parameter` of shape `(L, L)`): score of tag ``j`` following tag ``i`` at ``[i, j]``.
        start_allowed, end_allowed, transition_allowed (bool buffers of shapes `(L,)`, `(L,)`, `(L, L)`): the
            constraints, all `True` without any.
        allowed_transitions (`tuple` of lists or `None`): the constraints as given, as Python lists.
    """

    def __init__(self, num_tags: int, allowed_transitions: tuple | None = None) -> None:
        if not isinstance(num_tags, int) or num_tags <= 0:
            raise ValueError(f"num_tags must be a positive integer, got {num_tags!r}")
        super().__init__()
        self.num_tags = num_tags
        self.allowed_transitions = (
            None if allowed_transitions is None else _constraint_lists(allowed_transitions, num_tags)
        )
        self.start_transitions = nn.Parameter(torch.empty(num_tags))
        self.end_transitions = nn.Parameter(torch.empty(num_tags))
        self.transitions = nn.Parameter(torch.empty(num_tags, num_tags))
        self.register_buffer("start_allowed", torch.empty(num_tags, dtype=torch.bool), persistent=False)
        self.register_buffer("end_allowed", torch.empty(num_tags, dtype=torch.bool), persistent=False)
        self.register_buffer("transition_allowed", torch.empty(num_tags, num_tags, dtype=torch.bool), persistent=False)
        self.reset_parameters()

    @classmethod
    def from_labels(cls, labels: Sequence[str], use_constraints: bool = True) -> "ConditionalRandomField":
        """Build a CRF over ``labels`` (the label of each tag id), constrained by their tagging scheme.

        Args:
            labels (`Sequence[str]`): e.g. ``[config.id2label[i] for i in range(config.num_labels)]``.
            use_constraints (`bool`, *optional*, defaults to `True`): apply the IOB2/BIOES constraints of
                `tag_schemes.allowed_transitions`; labels without a scheme (e.g. POS tags) get none either way.
        """
        labels = list(labels)
        constraints = allowed_transitions_for_labels(labels) if use_constraints else None
        return cls(len(labels), allowed_transitions=constraints)

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """Draw the scores uniformly from [-0.1, 0.1] and (re)write the constraint buffers.

        The init is pytorch-crf's: small enough that early training is driven by the emissions, and the same
        distribution keeps results comparable with pytorch-crf baselines.

        transformers v5 builds models on the meta device and, when loading a checkpoint, leaves non-persistent buffers
        uninitialised, so a model's ``_init_weights`` must call this method on its CRF. There, transformers guards the
        ``nn.init`` functions so that parameters loaded from the checkpoint are kept; the buffers are always rewritten
        from `allowed_transitions`.
        """
        nn.init.uniform_(self.start_transitions, -0.1, 0.1)
        nn.init.uniform_(self.end_transitions, -0.1, 0.1)
        nn.init.uniform_(self.transitions, -0.1, 0.1)
        self._write_constraint_buffers()

    def set_allowed_transitions(self, allowed_transitions: tuple | None) -> None:
        """Replace the constraints (as `allowed_transitions` of `__init__`; `None` for none), e.g. when the labels of
        a model change after it was built. The scores are kept."""
        self.allowed_transitions = (
            None if allowed_transitions is None else _constraint_lists(allowed_transitions, self.num_tags)
        )
        self._write_constraint_buffers()

    @torch.no_grad()
    def _write_constraint_buffers(self) -> None:
        # Without constraints a scalar True broadcasts over each buffer: every move is allowed.
        constraints = self.allowed_transitions or (True, True, True)
        for buffer, values in zip((self.start_allowed, self.end_allowed, self.transition_allowed), constraints):
            buffer.copy_(torch.tensor(values, dtype=torch.bool))

    def extra_repr(self) -> str:
        return f"num_tags={self.num_tags}, constrained={self.allowed_transitions is not None}"

    def _compute_dtype(self, emissions: torch.Tensor) -> torch.dtype:
        """float32, or float64 when the emissions or the parameters are float64 (e.g. for gradcheck)."""
        return torch.promote_types(torch.promote_types(emissions.dtype, self.transitions.dtype), torch.float32)

    def _scores(self, forbidden_score: float, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Start (L,), end (L,) and transition (L, L) scores in ``dtype``; forbidden moves score
        ``forbidden_score``."""
        return (
            self.start_transitions.to(dtype).masked_fill(~self.start_allowed, forbidden_score),
            self.end_transitions.to(dtype).masked_fill(~self.end_allowed, forbidden_score),
            self.transitions.to(dtype).masked_fill(~self.transition_allowed, forbidden_score),
        )

    def validate_tags(self, tags: torch.Tensor, mask: torch.Tensor | None = None) -> None:
        """Raise a `ValueError` if ``tags`` at unmasked positions are outside ``[0, num_tags)``, or (see
        `validate_mask`) if an integer ``mask`` holds values other than 0 and 1.

        Reads the values: on a GPU this waits for the device, so call it where data enters (e.g. in a data collator).
        The forward methods run it themselves only on eager CPU tensors.

        Args:
            tags (`torch.LongTensor` of shape `(batch, seq)`): tag ids; any value at masked positions.
            mask (`torch.Tensor` of shape `(batch, seq)`, *optional*): bool or 0/1 integers; defaults to all positions.
        """
        if mask is not None:
            validate_mask(mask)
        out_of_range = (tags < 0) | (tags >= self.num_tags)  # (batch, seq)
        if mask is not None:
            out_of_range &= mask.bool()
        if out_of_range.any():
            bad_values = torch.unique(tags[out_of_range]).tolist()
            raise ValueError(f"tags at unmasked positions must be in [0, {self.num_tags}), got {bad_values[:5]}")

    def _validated(
        self, emissions: torch.Tensor, mask: torch.Tensor | None, tags: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Check the shapes and dtypes of the inputs (and their values where `values_are_cheap_to_check`); return
        the mask as bool (all `True` if `None`) and the tags as long."""
        if not isinstance(emissions, torch.Tensor) or emissions.dim() != 3:
            shape = tuple(emissions.shape) if isinstance(emissions, torch.Tensor) else type(emissions).__name__
            raise ValueError(f"emissions must be a 3-D tensor (batch, seq, num_tags), got {shape}")
        if emissions.size(2) != self.num_tags:
            raise ValueError(
                f"the last dimension of emissions must be num_tags={self.num_tags}, got shape {tuple(emissions.shape)}"
            )
        if emissions.size(1) == 0:
            raise ValueError(f"emissions must have at least one position, got shape {tuple(emissions.shape)}")
        if not emissions.is_floating_point():
            raise ValueError(f"emissions must be a floating-point tensor, got dtype {emissions.dtype}")
        batch_shape = tuple(emissions.shape[:2])
        if mask is not None:
            self._check_mask_type(mask, batch_shape)
        if tags is not None:
            self._check_tags_type(tags, batch_shape)
        if values_are_cheap_to_check(emissions):
            if tags is not None:
                self.validate_tags(tags, mask)
            elif mask is not None:
                validate_mask(mask)
        if mask is None:
            mask = torch.ones(batch_shape, dtype=torch.bool, device=emissions.device)
        return mask.bool(), None if tags is None else tags.long()

    @staticmethod
    def _check_mask_type(mask: torch.Tensor, batch_shape: tuple) -> None:
        if tuple(mask.shape) != batch_shape:
            raise ValueError(
                f"mask must have the first two dimensions of emissions {batch_shape}, got {tuple(mask.shape)}"
            )
        if mask.is_floating_point() or mask.is_complex():
            raise ValueError(f"mask must be a bool or 0/1 integer tensor, got dtype {mask.dtype}")

    @staticmethod
    def _check_tags_type(tags: torch.Tensor, batch_shape: tuple) -> None:
        if tuple(tags.shape) != batch_shape:
            raise ValueError(
                f"tags must have the first two dimensions of emissions {batch_shape}, got {tuple(tags.shape)}"
            )
        if tags.is_floating_point() or tags.is_complex() or tags.dtype == torch.bool:
            raise ValueError(f"tags must be an integer tensor, got dtype {tags.dtype}")

    def log_likelihood(
        self, emissions: torch.Tensor, tags: torch.Tensor, mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Log-likelihood of the gold tags of each sentence, over its unmasked positions (forward algorithm).

        Args:
            emissions (`torch.Tensor` of shape `(batch, seq, num_tags)`): tag scores of each position, any float dtype.
            tags (`torch.LongTensor` of shape `(batch, seq)`): gold tag ids; ignored at masked positions (may be -100).
                At unmasked positions they must be in ``[0, num_tags)`` (see `validate_tags`).
            mask (`torch.BoolTensor` of shape `(batch, seq)`, *optional*): positions that belong to the chain; need not
                start with `True` and may have holes. 0/1 integer masks are accepted. Defaults to all positions.

        Returns:
            `torch.FloatTensor` of shape `(batch,)`, float32 (float64 for float64 inputs or parameters): 0 for
            sentences without unmasked positions.
        """
        mask, tags = self._validated(emissions, mask, tags)
        with _autocast_disabled(emissions):
            dtype = self._compute_dtype(emissions)
            emissions = emissions.to(dtype)
            start, end, transitions = self._scores(_LIKELIHOOD_PENALTY, dtype)
            gold = _gold_score(emissions, tags, mask, start, end, transitions)  # (batch,)
            steps = _step_matrices(emissions, mask, start, transitions, _LOG.zero)  # (batch, seq, L, L)
            forward, _ = _chain_scores(steps, end, _LOG, _scan_plan(emissions.size(1)), with_backward=False)
            log_partition = torch.logsumexp(forward[:, -1] + end, dim=-1)  # (batch,)
            # An empty chain has a single, empty tag sequence: probability 1.
            return (gold - log_partition).masked_fill(~mask.any(dim=1), 0.0)

    def forward(
        self,
        emissions: torch.Tensor,
        tags: torch.Tensor,
        mask: torch.Tensor | None = None,
        reduction: str = "mean",
    ) -> torch.Tensor:
        """Negative log-likelihood of the gold tags; arguments as in `log_likelihood`.

        Unlike ``torchcrf.CRF.forward``, which returns the log-likelihood summed over the batch, this is a loss: the
        *negative* log-likelihood, averaged over the batch by default.

        Args:
            reduction (`str`, *optional*, defaults to `"mean"`): `"mean"` over the batch (sentences without unmasked
                positions count as 0), `"sum"`, or `"none"` for a `(batch,)` tensor.
        """
        if reduction not in _REDUCTIONS:
            raise ValueError(f"reduction must be one of {', '.join(map(repr, _REDUCTIONS))}, got {reduction!r}")
        return _REDUCTIONS[reduction](-self.log_likelihood(emissions, tags, mask))

    def _viterbi(
        self, emissions: torch.Tensor, mask: torch.Tensor, with_backward: bool
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor]:
        """Best paths (batch, seq) (see `_best_paths`), forward and, ``with_backward``, backward max scores (batch,
        seq, L) (see `_chain_scores`) and best path scores (batch,) of ``emissions`` in the compute dtype."""
        start, end, transitions = self._scores(_MAX_PLUS.zero, emissions.dtype)
        steps = _step_matrices(emissions, mask, start, transitions, _MAX_PLUS.zero)  # (batch, seq, L, L)
        plan = _scan_plan(emissions.size(1))
        forward, backward = _chain_scores(steps, end, _MAX_PLUS, plan, with_backward)
        path = _best_paths(forward, end, transitions, mask, plan.position_rounds)  # (batch, seq)
        best_score = (forward[:, -1] + end).amax(dim=-1)  # (batch,)
        return path, forward, backward, best_score

    def decode(self, emissions: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """Best tag sequence of each sentence over its unmasked positions (Viterbi).

        Args:
            emissions (`torch.Tensor` of shape `(batch, seq, num_tags)`): tag scores of each position, any float dtype.
            mask (`torch.BoolTensor` of shape `(batch, seq)`, *optional*): as in `log_likelihood`.

        Returns:
            `torch.LongTensor` of shape `(batch, seq)`: tag ids, `IGNORE_INDEX` (-100) at masked positions.
        """
        mask, _ = self._validated(emissions, mask)
        with _autocast_disabled(emissions):
            path, _, _, _ = self._viterbi(emissions.to(self._compute_dtype(emissions)), mask, with_backward=False)
            return torch.where(mask, path, IGNORE_INDEX)

    def max_marginals(self, emissions: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """Max-marginal of each tag at each position, relative to the best path (max-product forward-backward).

        Entry ``[b, i, y]`` is the score of the best tag sequence of sentence ``b`` that has tag ``y`` at position
        ``i``, minus the score of the best sequence: at most 0, and exactly 0 on the `decode` path, which wins exact
        ties (other tags are then just below 0), so ``max_marginals(...).argmax(-1)`` equals `decode` at every
        unmasked position. Tags that no allowed sequence can reach get the lowest finite value rather than -inf.

        Args:
            emissions (`torch.Tensor` of shape `(batch, seq, num_tags)`): tag scores of each position, any float dtype.
            mask (`torch.BoolTensor` of shape `(batch, seq)`, *optional*): as in `log_likelihood`.

        Returns:
            `torch.FloatTensor` of shape `(batch, seq, num_tags)`, float32 (float64 for float64 inputs or parameters):
            0 at masked positions.
        """
        mask, _ = self._validated(emissions, mask)
        with _autocast_disabled(emissions):
            dtype = self._compute_dtype(emissions)
            path, forward, backward, best_score = self._viterbi(emissions.to(dtype), mask, with_backward=True)
            max_marginals = forward + backward - best_score[:, None, None]  # (batch, seq, num_tags)
            max_marginals = _favour_path(max_marginals, path).clamp(min=torch.finfo(dtype).min)
            return torch.where(mask[..., None], max_marginals, 0.0)
