"""Linear-chain conditional random field (CRF) for token classification heads.

Hand-written rather than taken from pytorch-crf (``torchcrf.CRF``), which is unmaintained and lacks what the head
needs: transition constraints for tagging schemes, masks that do not start with 1 or have holes (e.g. masked special
or continuation sub-word tokens), a batched Viterbi backtrace (pytorch-crf backtracks each sentence in a Python loop)
and max-marginals. Parameter names, their ``[from, to]`` indexing and the likelihood match
``torchcrf.CRF(num_tags, batch_first=True)``, so its weights can be copied over as they are.

Masked positions are dropped and the remaining positions of each sentence form the chain: sentences are
left-compacted (a stable sort moves unmasked positions to the front), run through ordinary left-aligned recursions
that loop over positions only, and results are scattered back to the original positions. All scores are computed in
float32 with autocast disabled, whatever the dtype of the emissions (float64 stays float64).
"""

from collections.abc import Sequence

import torch
from torch import nn

from .tag_schemes import allowed_transitions as allowed_transitions_for_labels


IGNORE_TAG = -100
"""Tag `ConditionalRandomField.decode` writes at masked positions; the ``ignore_index`` of ``nn.CrossEntropyLoss``."""

# Forbidden moves in the likelihood get this score rather than -inf, so that an invalid gold sequence costs a huge but
# finite loss instead of inf/NaN; exp(-1e4) is 0 in float32, so valid sequences are unaffected.
_LIKELIHOOD_PENALTY = -1e4

# Max-marginals of non-Viterbi tags that tie with the best path are pushed this far below 0, so that argmax picks the
# Viterbi tag. A power of two: exact in float16/bfloat16 and above float16's smallest normal (2**-14), so a cast of
# the logits to half precision keeps the tie broken.
_TIE_MARGIN = 2.0**-13

_REDUCTIONS = {"mean": torch.mean, "sum": torch.sum, "none": lambda nll: nll}


def _trailing_view(tensor: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """View a ``(batch, seq)`` tensor with singleton trailing dims so that it broadcasts against ``like``."""
    return tensor.view(*tensor.shape, *([1] * (like.dim() - tensor.dim())))


def _left_compaction(mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-sentence permutation moving the unmasked positions to the front, in order, and the compacted mask.

    Returns:
        ``order`` (batch, seq): original position of each compacted position; ``compact_mask`` (batch, seq): `True`
        on the first ``mask.sum(1)`` positions.
    """
    # A stable sort of 0 (kept) before 1 (masked) keeps the kept positions in their original order.
    order = torch.argsort((~mask).to(torch.uint8), dim=1, stable=True)  # (batch, seq)
    lengths = mask.sum(dim=1)  # (batch,)
    positions = torch.arange(mask.size(1), device=mask.device)  # (seq,)
    return order, positions < lengths[:, None]


def _gather_positions(values: torch.Tensor, order: torch.Tensor) -> torch.Tensor:
    """Reorder the positions (dim 1) of ``values`` (batch, seq, ...) by ``order`` (batch, seq)."""
    return values.gather(1, _trailing_view(order, values).expand_as(values))


def _restore_positions(
    values: torch.Tensor, order: torch.Tensor, compact_mask: torch.Tensor, fill: float
) -> torch.Tensor:
    """Inverse of the left compaction: ``values`` (batch, seq, ...) back at their original positions, ``fill`` at
    masked ones."""
    filled = values.masked_fill(~_trailing_view(compact_mask, values), fill)
    # `order` is a permutation of each row, so the scatter writes every position.
    return torch.empty_like(values).scatter(1, _trailing_view(order, values).expand_as(values), filled)


def _autocast_disabled(emissions: torch.Tensor) -> torch.autocast:
    return torch.autocast(device_type=emissions.device.type, enabled=False)


def _gold_score(
    emissions: torch.Tensor,
    tags: torch.Tensor,
    compact_mask: torch.Tensor,
    start: torch.Tensor,
    end: torch.Tensor,
    transitions: torch.Tensor,
) -> torch.Tensor:
    """Score (batch,) of the given tag sequences of left-aligned chains; tags past a chain's end must be valid ids."""
    emission_scores = emissions.gather(2, tags[..., None]).squeeze(2)  # (batch, seq)
    transition_scores = transitions[tags[:, :-1], tags[:, 1:]]  # (batch, seq - 1)
    last_positions = (compact_mask.sum(dim=1) - 1).clamp(min=0)  # (batch,)
    last_tags = tags.gather(1, last_positions[:, None]).squeeze(1)  # (batch,)
    return (
        start[tags[:, 0]]
        + torch.where(compact_mask, emission_scores, 0.0).sum(dim=1)
        + torch.where(compact_mask[:, 1:], transition_scores, 0.0).sum(dim=1)
        + end[last_tags]
    )


def _log_partition(
    emissions: torch.Tensor,
    compact_mask: torch.Tensor,
    start: torch.Tensor,
    end: torch.Tensor,
    transitions: torch.Tensor,
) -> torch.Tensor:
    """Log-sum-exp (batch,) of the scores of all tag sequences of left-aligned chains (forward algorithm)."""
    log_alpha = start + emissions[:, 0]  # (batch, num_tags)
    for position in range(1, emissions.size(1)):
        # (batch, from, to) -> (batch, to)
        step = torch.logsumexp(log_alpha[:, :, None] + transitions, dim=1) + emissions[:, position]
        # Past its end a chain keeps its final scores.
        log_alpha = torch.where(compact_mask[:, position, None], step, log_alpha)
    return torch.logsumexp(log_alpha + end, dim=1)


def _max_forward(
    emissions: torch.Tensor, compact_mask: torch.Tensor, start: torch.Tensor, transitions: torch.Tensor
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Max-product forward pass over left-aligned chains.

    Returns:
        ``scores`` (batch, seq, num_tags): best score of a path prefix ending in each tag at each position (emission
        included; past a chain's end, its final scores); ``backpointers``: for each position ``p >= 1``, the best
        previous tag (batch, num_tags) of each tag at ``p``.
    """
    score = start + emissions[:, 0]  # (batch, num_tags)
    scores, backpointers = [score], []
    for position in range(1, emissions.size(1)):
        # (batch, from, to) -> (batch, to)
        best, previous = (score[:, :, None] + transitions).max(dim=1)
        score = torch.where(compact_mask[:, position, None], best + emissions[:, position], score)
        scores.append(score)
        backpointers.append(previous)
    return torch.stack(scores, dim=1), backpointers


def _max_backward(
    emissions: torch.Tensor, compact_mask: torch.Tensor, end: torch.Tensor, transitions: torch.Tensor
) -> torch.Tensor:
    """Max-product backward pass: (batch, seq, num_tags) best score of the path suffix after each position given its
    tag (end transition included, the position's own emission excluded), over left-aligned chains."""
    score = end.expand(emissions.size(0), -1)  # (batch, num_tags)
    scores = [score]
    for position in range(emissions.size(1) - 2, -1, -1):
        # (batch, from, to) -> (batch, from)
        step = (transitions + (emissions[:, position + 1] + score)[:, None, :]).amax(dim=2)
        # At a chain's last position (and past it) only the end transition follows.
        score = torch.where(compact_mask[:, position + 1, None], step, end)
        scores.append(score)
    return torch.stack(scores[::-1], dim=1)


def _backtrack(backpointers: list[torch.Tensor], last_tags: torch.Tensor, compact_mask: torch.Tensor) -> torch.Tensor:
    """Best paths (batch, seq) of left-aligned chains from their best last tags (batch,), all sentences at once."""
    tag = last_tags  # (batch,)
    reversed_path = [tag]
    for position in range(len(backpointers), 0, -1):
        previous = backpointers[position - 1].gather(1, tag[:, None]).squeeze(1)  # (batch,)
        # Chains that end before `position` have not started backtracking: they keep their last tag.
        tag = torch.where(compact_mask[:, position], previous, tag)
        reversed_path.append(tag)
    return torch.stack(reversed_path[::-1], dim=1)


def _viterbi(
    emissions: torch.Tensor,
    compact_mask: torch.Tensor,
    start: torch.Tensor,
    end: torch.Tensor,
    transitions: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Viterbi over left-aligned chains: best paths (batch, seq), forward max scores (batch, seq, num_tags) and best
    path scores (batch,)."""
    scores, backpointers = _max_forward(emissions, compact_mask, start, transitions)
    best_score, last_tags = (scores[:, -1] + end).max(dim=1)  # (batch,)
    return _backtrack(backpointers, last_tags, compact_mask), scores, best_score


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

    def _validated(
        self, emissions: torch.Tensor, mask: torch.Tensor | None, tags: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Check the inputs; return the mask as bool (all `True` if `None`) and the tags as long."""
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
        mask = self._validated_mask(mask, batch_shape, emissions.device)
        if tags is not None:
            tags = self._validated_tags(tags, mask, batch_shape)
        return mask, tags

    @staticmethod
    def _validated_mask(mask: torch.Tensor | None, batch_shape: tuple, device: torch.device) -> torch.Tensor:
        if mask is None:
            return torch.ones(batch_shape, dtype=torch.bool, device=device)
        if tuple(mask.shape) != batch_shape:
            raise ValueError(
                f"mask must have the first two dimensions of emissions {batch_shape}, got {tuple(mask.shape)}"
            )
        if mask.dtype == torch.bool:
            return mask
        if mask.is_floating_point() or mask.is_complex():
            raise ValueError(f"mask must be a bool or 0/1 integer tensor, got dtype {mask.dtype}")
        if not ((mask == 0) | (mask == 1)).all():
            raise ValueError(f"an integer mask must hold only 0 and 1, got values {torch.unique(mask).tolist()}")
        return mask.bool()

    def _validated_tags(self, tags: torch.Tensor, mask: torch.Tensor, batch_shape: tuple) -> torch.Tensor:
        if tuple(tags.shape) != batch_shape:
            raise ValueError(
                f"tags must have the first two dimensions of emissions {batch_shape}, got {tuple(tags.shape)}"
            )
        if tags.is_floating_point() or tags.is_complex() or tags.dtype == torch.bool:
            raise ValueError(f"tags must be an integer tensor, got dtype {tags.dtype}")
        tags = tags.long()
        out_of_range = mask & ((tags < 0) | (tags >= self.num_tags))  # (batch, seq)
        if out_of_range.any():
            bad_values = torch.unique(tags[out_of_range]).tolist()
            raise ValueError(f"tags at unmasked positions must be in [0, {self.num_tags}), got {bad_values[:5]}")
        return tags

    def log_likelihood(
        self, emissions: torch.Tensor, tags: torch.Tensor, mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Log-likelihood of the gold tags of each sentence, over its unmasked positions (forward algorithm).

        Args:
            emissions (`torch.Tensor` of shape `(batch, seq, num_tags)`): tag scores of each position, any float dtype.
            tags (`torch.LongTensor` of shape `(batch, seq)`): gold tag ids; ignored at masked positions (may be -100).
            mask (`torch.BoolTensor` of shape `(batch, seq)`, *optional*): positions that belong to the chain; need not
                start with `True` and may have holes. 0/1 integer masks are accepted. Defaults to all positions.

        Returns:
            `torch.FloatTensor` of shape `(batch,)`, float32 (float64 for float64 inputs or parameters): 0 for
            sentences without unmasked positions.
        """
        mask, tags = self._validated(emissions, mask, tags)
        with _autocast_disabled(emissions):
            order, compact_mask = _left_compaction(mask)
            dtype = self._compute_dtype(emissions)
            emissions = _gather_positions(emissions.to(dtype), order)  # (batch, seq, num_tags)
            tags = _gather_positions(tags.masked_fill(~mask, 0), order)  # (batch, seq)
            start, end, transitions = self._scores(_LIKELIHOOD_PENALTY, dtype)
            gold = _gold_score(emissions, tags, compact_mask, start, end, transitions)  # (batch,)
            log_partition = _log_partition(emissions, compact_mask, start, end, transitions)  # (batch,)
            # An empty chain has a single, empty tag sequence: probability 1.
            return (gold - log_partition).masked_fill(~compact_mask[:, 0], 0.0)

    def forward(
        self,
        emissions: torch.Tensor,
        tags: torch.Tensor,
        mask: torch.Tensor | None = None,
        reduction: str = "mean",
    ) -> torch.Tensor:
        """Negative log-likelihood of the gold tags; arguments as in `log_likelihood`.

        Args:
            reduction (`str`, *optional*, defaults to `"mean"`): `"mean"` over the batch (sentences without unmasked
                positions count as 0), `"sum"`, or `"none"` for a `(batch,)` tensor.
        """
        if reduction not in _REDUCTIONS:
            raise ValueError(f"reduction must be one of {', '.join(map(repr, _REDUCTIONS))}, got {reduction!r}")
        return _REDUCTIONS[reduction](-self.log_likelihood(emissions, tags, mask))

    def decode(self, emissions: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """Best tag sequence of each sentence over its unmasked positions (batched Viterbi).

        Args:
            emissions (`torch.Tensor` of shape `(batch, seq, num_tags)`): tag scores of each position, any float dtype.
            mask (`torch.BoolTensor` of shape `(batch, seq)`, *optional*): as in `log_likelihood`.

        Returns:
            `torch.LongTensor` of shape `(batch, seq)`: tag ids, `IGNORE_TAG` (-100) at masked positions.
        """
        mask, _ = self._validated(emissions, mask)
        with _autocast_disabled(emissions):
            order, compact_mask = _left_compaction(mask)
            dtype = self._compute_dtype(emissions)
            emissions = _gather_positions(emissions.to(dtype), order)  # (batch, seq, num_tags)
            path, _, _ = _viterbi(emissions, compact_mask, *self._scores(float("-inf"), dtype))  # (batch, seq)
            return _restore_positions(path, order, compact_mask, IGNORE_TAG)

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
            order, compact_mask = _left_compaction(mask)
            dtype = self._compute_dtype(emissions)
            emissions = _gather_positions(emissions.to(dtype), order)  # (batch, seq, num_tags)
            start, end, transitions = self._scores(float("-inf"), dtype)
            path, forward_scores, best_score = _viterbi(emissions, compact_mask, start, end, transitions)
            backward_scores = _max_backward(emissions, compact_mask, end, transitions)  # (batch, seq, num_tags)
            max_marginals = forward_scores + backward_scores - best_score[:, None, None]
            max_marginals = _favour_path(max_marginals, path).clamp(min=torch.finfo(dtype).min)
            return _restore_positions(max_marginals, order, compact_mask, 0.0)
