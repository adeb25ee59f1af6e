"""Log-depth recursions of the linear-chain CRF of `crf.py`, for traced graphs (`torch.export`, ONNX,
`torch.compile`).

A traced graph cannot loop over a symbolic sequence length, so the position-by-position loops of `crf.py` would fix
the length the graph was traced with. Here the loops have lengths that do not depend on the sequence length:

- Each position has a ``(num_tags, num_tags)`` score matrix (transition plus emission; the semiring identity at masked
  positions, which the chain skips), and the forward and backward scores are products of these matrices in the log
  semiring (likelihood) or the max-plus semiring (Viterbi, max-marginals).
- The positions form blocks of `_BLOCK_SIZE`; the (associative) products of the blocks' matrices are combined by a
  Hillis-Steele scan in log2(number of blocks) rounds, and each block then goes position by position from the scores
  at its edges. A graph therefore handles up to `MAX_TRACED_LENGTH` positions.
- The Viterbi backtrace ``tag[p - 1] = previous[p][tag[p]]`` is a composition of per-position maps, computed by
  pointer jumping in log2(`MAX_TRACED_LENGTH`) rounds.

torch's ``scan`` higher-order op was the other candidate: it exports only in strict mode. The functions take the
arguments of `crf.py`'s loops and return what they return, so `tests/model/test_crf.py` runs every check on both.
"""

from collections.abc import Callable
from typing import NamedTuple

import torch
from torch import nn

MAX_TRACED_LENGTH = 4096
"""Longest sequence a traced CRF (`torch.export`, ONNX, `torch.compile`) handles: a traced graph has a fixed number of
scan rounds. `torch.export` records the bound (export with e.g. ``Dim("seq", max=MAX_TRACED_LENGTH)`` or
``Dim.DYNAMIC``), and its programs refuse longer inputs; ONNX graphs do not check it, and may be wrong beyond it.
Eager calls have no limit."""

# Positions per block (a power of two): each block goes position by position, the blocks are combined by a scan. Of 8,
# 16 and 32, 16 ran max-marginals fastest in onnxruntime for 14 to 128 tokens.
_BLOCK_SIZE = 16

# Score of an impossible move in the log semiring (the off-diagonal of its identity): finite, so that no gradient is
# NaN; exp(-1e4) is 0 in float32 and float64.
_LOG_ZERO = -1e4


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
_LOG = _Semiring(_LOG_ZERO, torch.logsumexp, _log_product)


class _ScanPlan(NamedTuple):
    """How the positions of a chain are split into blocks, and the scan rounds over blocks and over positions."""

    block_size: int
    num_blocks: int | torch.SymInt
    block_rounds: int
    position_rounds: int


def _scan_plan(length: int | torch.SymInt) -> _ScanPlan:
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


def _identity(num_tags: int, zero: float, like: torch.Tensor) -> torch.Tensor:
    """Identity (L, L) of a semiring whose impossible score is ``zero``, with the dtype and device of ``like``."""
    eye = torch.eye(num_tags, dtype=torch.bool, device=like.device)
    return torch.where(eye, 0.0, zero).to(like.dtype)


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


def _blocks(steps: torch.Tensor, identity: torch.Tensor, plan: _ScanPlan) -> torch.Tensor:
    """(batch, seq, L, L) -> (batch, num_blocks, block_size, L, L), padded with identity matrices at the end."""
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
    final = end.expand(blocks.size(0), 1, -1)  # (batch, 1, L)
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
    """Forward and, ``with_backward``, backward scores (batch, seq, L) of the step matrices (batch, seq, L, L): as the
    loops of `crf.py` compute them (see `crf._viterbi` and `crf._backward_max_scores`)."""
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


def backtrace(previous: torch.Tensor, mask: torch.Tensor, last_tags: torch.Tensor, rounds: int) -> torch.Tensor:
    """Viterbi paths (batch, seq) from the best previous tag of each tag at each position, ``previous`` (batch, seq,
    L) (unread at position 0), the chain ``mask`` (batch, seq) (the tag stays over masked positions) and the last tags
    (batch,), as `crf._viterbi`'s sequential backtrace ``tag[p - 1] = previous[p][tag[p]]`` would follow them.

    That backtrace is a composition of maps, computed here by pointer jumping in ``rounds`` >= log2(seq) steps: a few
    operators whatever the length, rather than a few per position (each a round trip through a CPU's thread pool).
    """
    batch, length, num_tags = previous.shape
    tags = torch.arange(num_tags, device=previous.device).expand(batch, 1, num_tags)  # (batch, 1, L)
    # maps[p]: tag at p given the tag at p + 1 (given the last tag at the end).
    maps = _shift_out(torch.where(mask[..., None], previous, tags), tags)  # (batch, seq, L)
    for round_index in range(rounds):
        shift = 2**round_index
        later = torch.cat([maps, tags.expand(batch, shift, num_tags)], dim=1).narrow(1, shift, length)
        maps = maps.gather(2, later)  # maps[p] o maps[p + shift]
    return maps.gather(2, last_tags[:, None, None].expand(batch, length, 1)).squeeze(2)


def _best_paths(
    forward: torch.Tensor, end: torch.Tensor, transitions: torch.Tensor, mask: torch.Tensor, rounds: int
) -> torch.Tensor:
    """Viterbi paths (batch, seq) from the forward max scores (batch, seq, L), as `crf._viterbi` backtraces them
    (`backtrace`). Ties go to the lowest tag, as in the sequential backtrace."""
    batch, _, num_tags = forward.shape
    # Best previous tag of each tag at p, from the forward scores at p - 1 (meaningless at p = 0, which has none).
    before = _shift_in(forward.new_zeros(batch, 1, num_tags), forward)  # (batch, seq, L)
    previous = _first_argmax_step(before, transitions)  # (batch, seq, L)
    last_tags = (forward[:, -1] + end).argmax(dim=-1)  # (batch,)
    return backtrace(previous, mask, last_tags, rounds)


def log_partition(emissions: torch.Tensor, mask: torch.Tensor, scores: tuple[torch.Tensor, ...]) -> torch.Tensor:
    """Log partition function (batch,) of each chain: `crf._forward_algorithm` (same arguments) by log-depth scans."""
    start, end, transitions = scores
    steps = _step_matrices(emissions, mask, start, transitions, _LOG.zero)  # (batch, seq, L, L)
    forward, _ = _chain_scores(steps, end, _LOG, _scan_plan(emissions.size(1)), with_backward=False)
    return torch.logsumexp(forward[:, -1] + end, dim=-1)


def viterbi(
    emissions: torch.Tensor, mask: torch.Tensor, scores: tuple[torch.Tensor, ...], with_backward: bool
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Best paths (batch, seq), forward and, ``with_backward``, backward max scores (batch, seq, L): `crf._viterbi`
    (same arguments) by log-depth scans and pointer jumping."""
    start, end, transitions = scores
    steps = _step_matrices(emissions, mask, start, transitions, _MAX_PLUS.zero)  # (batch, seq, L, L)
    plan = _scan_plan(emissions.size(1))
    forward, backward = _chain_scores(steps, end, _MAX_PLUS, plan, with_backward)
    return _best_paths(forward, end, transitions, mask, plan.position_rounds), forward, backward
