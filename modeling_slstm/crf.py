"""Linear-chain conditional random field (CRF) for token classification heads.

Written after pytorch-crf (``torchcrf.CRF``), which is unmaintained and lacks what the head needs: transition
constraints for tagging schemes, masks that do not start with 1 or have holes (e.g. left padding, masked special or
continuation sub-word tokens), max-marginals, and graphs that `torch.export` and ONNX can trace with a dynamic
sequence length. Parameter names, their ``[from, to]`` indexing and the likelihood match
``torchcrf.CRF(num_tags, batch_first=True)``, so its weights can be copied over as they are; what differs is the
loss: `ConditionalRandomField.forward` returns the *negative* log-likelihood averaged over the batch by default
(``reduction="mean"``), where ``torchcrf.CRF.forward`` returns the log-likelihood summed over the batch (its
``reduction="sum"``); ``-crf(emissions, tags, mask, reduction="sum")`` equals ``torchcrf.CRF(...)(emissions, tags,
mask)``. `ConditionalRandomField.log_likelihood` returns the per-sentence log-likelihood.

The chain of a sentence is its unmasked positions, in order; masked positions are skipped. Each chain is first moved
to the front of its row (`_chain_first`), so that the recursions see right padding only, as in pytorch-crf: with
emission scores ``e_t(j)`` at chain positions ``t = 1 .. n``,

- forward algorithm (likelihood): ``alpha_1(j) = start[j] + e_1(j)``,
  ``alpha_t(j) = logsumexp_i(alpha_{t-1}(i) + transitions[i, j]) + e_t(j)``,
  ``log Z = logsumexp_j(alpha_n(j) + end[j])``;
- Viterbi (decoding): the same with ``max`` for ``logsumexp``, remembering the best ``i`` of each ``j``; the
  backtrace starts from the best ``alpha_n(j) + end[j]``. Ties go to the lowest tag index, for the last tag and for
  each previous one;
- max-marginals: ``alpha_t(j) + beta_t(j) - max_j(alpha_n(j) + end[j])`` with ``max`` for ``logsumexp``, and the
  backward max scores ``beta_n(i) = end[i]``, ``beta_{t-1}(i) = max_j(transitions[i, j] + e_t(j) + beta_t(j))``.

A traced graph (`torch.export`, ONNX, `torch.compile`) cannot loop over a symbolic length: there `crf_parallel.py`
computes the same scores by log-depth scans (see `_recursions`). On a CUDA GPU the loops run inside Triton kernels
instead, one program per sentence (`triton_crf.py`): a training step of the CRF is then two launches and inference
one, whatever the sentence length (see `ConditionalRandomField.uses_kernels`). All scores are computed with autocast
disabled in float32, whatever the dtype of the emissions (float64 stays float64).

Forward methods check shapes and dtypes only, never values (a host sync, see `validation.py`): checks that read
values (0/1 masks, tags in range) are `validate_mask` and `ConditionalRandomField.validate_tags`, for the code where
data enters.
"""

from collections.abc import Callable, Sequence
from typing import NamedTuple

import torch
from torch import nn

from . import crf_parallel, kernel_dispatch
from .crf_parallel import MAX_TRACED_LENGTH
from .kernel_dispatch import triton_obstacles
from .tag_schemes import allowed_transitions as allowed_transitions_for_labels
from .triton_crf import KERNEL_DTYPES, MAX_KERNEL_TAGS, crf_log_likelihood, crf_viterbi
from .validation import IGNORE_INDEX, check_mask_values, named_on_failure

__all__ = ["MAX_TRACED_LENGTH", "ConditionalRandomField", "validate_mask"]

# Forbidden moves in the likelihood get this score rather than -inf, so that an invalid gold sequence costs a huge but
# finite loss instead of inf/NaN; exp(-1e4) is 0 in float32 and float64, so valid sequences are unaffected.
_LIKELIHOOD_PENALTY = -1e4

# Max-marginals of non-Viterbi tags that tie with the best path are pushed this far below 0, so that argmax picks the
# Viterbi tag. A power of two: exact in float16/bfloat16 and above float16's smallest normal (2**-14), so a cast of
# the logits to half precision keeps the tie broken.
_TIE_MARGIN = 2.0**-13

_REDUCTIONS = {"mean": torch.mean, "sum": torch.sum, "none": lambda nll: nll}


def _autocast_disabled(emissions: torch.Tensor) -> torch.autocast:
    return torch.autocast(device_type=emissions.device.type, enabled=False)


def validate_mask(mask: torch.Tensor) -> None:
    """Raise a `ValueError` if an integer ``mask`` holds values other than 0 and 1 (bool masks always pass).

    Reads the values: on a GPU this waits for the device, so call it where data enters (e.g. in a data collator).
    """
    check_mask_values(mask, "an integer mask")


class _Scores(NamedTuple):
    """The scores of a CRF's moves in the compute dtype, forbidden moves already scored (see
    `ConditionalRandomField._scores`)."""

    start: torch.Tensor
    """(L,): of starting a chain with each tag."""
    end: torch.Tensor
    """(L,): of ending a chain with each tag."""
    transitions: torch.Tensor
    """(L, L): of tag ``j`` following tag ``i`` at ``[i, j]``."""


def _chain_destinations(mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Where each position (batch, seq) goes when each sentence's chain (its unmasked positions, in order) moves to the
    front of its row, masked positions after it in order; and the mask (batch, seq) of the chain there."""
    chain_positions = mask.cumsum(dim=1) - 1  # (batch, seq): index of each unmasked position in its chain
    lengths = chain_positions[:, -1:] + 1  # (batch, 1)
    destinations = torch.where(mask, chain_positions, lengths + (~mask).cumsum(dim=1) - 1)
    return destinations, torch.arange(mask.size(1), device=mask.device) < lengths


def _position_index(destinations: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """``destinations`` (batch, seq) expanded to the shape of ``values`` (batch, seq, ...)."""
    return destinations.view(*destinations.shape, *[1] * (values.dim() - 2)).expand_as(values)


def _chain_first(values: torch.Tensor, destinations: torch.Tensor) -> torch.Tensor:
    """``values`` (batch, seq, ...) with each chain moved to the front (see `_chain_destinations`)."""
    # Each row of destinations is a permutation, so the scatter writes every position.
    return torch.empty_like(values).scatter(1, _position_index(destinations, values), values)


def _chain_back(values: torch.Tensor, destinations: torch.Tensor) -> torch.Tensor:
    """The inverse of `_chain_first`: ``values`` (batch, seq, ...) back at their positions."""
    return values.gather(1, _position_index(destinations, values))


def _forward_algorithm(emissions: torch.Tensor, mask: torch.Tensor, scores: _Scores) -> torch.Tensor:
    """Log partition function ``log Z`` (batch,) of each chain.

    Args: emissions (batch, seq, L) and mask (batch, seq) with the chain first (see `_chain_first`), the move scores.
    """
    start, end, transitions = scores
    alpha = start + emissions[:, 0]  # (batch, L)
    for position in range(1, emissions.size(1)):
        # logsumexp_i(alpha(i) + transitions[i, j] + e(j)): (batch, L, 1) + (L, L) + (batch, 1, L) -> (batch, L)
        next_alpha = torch.logsumexp(alpha.unsqueeze(2) + transitions + emissions[:, position].unsqueeze(1), dim=1)
        alpha = torch.where(mask[:, position, None], next_alpha, alpha)
    return torch.logsumexp(alpha + end, dim=1)


def _viterbi(
    emissions: torch.Tensor, mask: torch.Tensor, scores: _Scores, with_backward: bool
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """The best tag sequence of each chain, with the max scores of Viterbi's forward pass.

    Args: as `_forward_algorithm` (the chain first), forbidden moves scored -inf.

    Returns:
        ``path`` (batch, seq): the best tags (after the chain, its last tag). ``forward`` (batch, seq, L):
        ``alpha_t(j)``, the best score of the chain up to position ``t`` with tag ``j`` there (after the chain, at its
        last position). ``backward`` (see `_backward_max_scores`) if ``with_backward``, else `None`.
    """
    start, end, transitions = scores
    alpha = start + emissions[:, 0]  # (batch, L)
    forward = [alpha]
    for position in range(1, emissions.size(1)):
        # max_i(alpha(i) + transitions[i, j] + e(j)): (batch, L, L) -> (batch, L). `amax` rather than `max`, whose
        # indices take even a few tags through a CPU's thread pool, at every position: on a machine where another job
        # keeps a core busy, each trip waits for that core.
        next_alpha = (alpha.unsqueeze(2) + transitions + emissions[:, position].unsqueeze(1)).amax(dim=1)
        alpha = torch.where(mask[:, position, None], next_alpha, alpha)
        forward.append(alpha)
    forward = torch.stack(forward, dim=1)  # (batch, seq, L)
    # The best previous tag of each tag at every position at once, from the same sums: (batch, seq - 1, L, L) ->
    # (batch, seq - 1, L), the lowest on ties; then the backtrace from the best last tag, the lowest on ties.
    steps = (forward[:, :-1].unsqueeze(3) + transitions) + emissions[:, 1:].unsqueeze(2)
    previous = nn.functional.pad(steps.max(dim=2).indices, (0, 0, 1, 0))  # (batch, seq, L), unread at position 0
    last_tags = (alpha + end).argmax(dim=1)  # (batch,)
    path = crf_parallel.backtrace(previous, mask, last_tags, rounds=(emissions.size(1) - 1).bit_length())
    backward = _backward_max_scores(emissions, mask, end, transitions) if with_backward else None
    return path, forward, backward


def _backward_max_scores(
    emissions: torch.Tensor, mask: torch.Tensor, end: torch.Tensor, transitions: torch.Tensor
) -> torch.Tensor:
    """``beta_t(i)`` (batch, seq, L): the best score of the rest of the chain after position ``t`` given tag ``i`` at
    ``t``, the end score included. Arguments as `_viterbi`."""
    beta = end.expand(emissions.size(0), -1)  # (batch, L)
    backward = [beta]
    for position in range(emissions.size(1) - 1, 0, -1):
        # max_j(transitions[i, j] + e_t(j) + beta_t(j)): (L, L) + (batch, 1, L) -> (batch, L, L) -> (batch, L)
        previous_beta = (transitions + (emissions[:, position] + beta).unsqueeze(1)).amax(dim=2)
        beta = torch.where(mask[:, position, None], previous_beta, beta)
        backward.append(beta)
    return torch.stack(backward[::-1], dim=1)


def _is_traced(emissions: torch.Tensor) -> bool:
    """Whether the call is being traced (`torch.export`, ONNX, `torch.compile`)."""
    return torch.compiler.is_compiling() or not isinstance(emissions.size(1), int)


def _recursions(emissions: torch.Tensor) -> tuple[Callable, Callable]:
    """`_forward_algorithm` and `_viterbi`, or in a traced graph, which cannot loop over a symbolic sequence length,
    their log-depth versions from `crf_parallel.py`."""
    if _is_traced(emissions):
        return crf_parallel.log_partition, crf_parallel.viterbi
    return _forward_algorithm, _viterbi


def _gold_score(emissions: torch.Tensor, tags: torch.Tensor, mask: torch.Tensor, scores: _Scores) -> torch.Tensor:
    """Score (batch,) of the given tag sequences; arguments as `_forward_algorithm` (the chain first), tags (batch,
    seq) in ``[0, L)`` on the chain."""
    start, end, transitions = scores
    # Fails on an out-of-range tag at a chain position (CPU: IndexError; CUDA: device-side assert).
    emission_scores = emissions.gather(2, tags.unsqueeze(2)).squeeze(2)  # (batch, seq)
    # The tag before each: a roll rather than slices of length seq - 1, which would make `torch.export` fix the length.
    transition_scores = transitions[tags.roll(1, dims=1), tags]  # (batch, seq)
    has_previous = mask & (torch.arange(mask.size(1), device=mask.device) > 0)  # (batch, seq)
    last_tags = tags.gather(1, (mask.sum(dim=1, keepdim=True) - 1).clamp(min=0)).squeeze(1)  # (batch,)
    return (
        start[tags[:, 0]]
        + torch.where(mask, emission_scores, 0.0).sum(dim=1)
        + torch.where(has_previous, transition_scores, 0.0).sum(dim=1)
        + end[last_tags]
    )


def _favour_path(max_marginals: torch.Tensor, path: torch.Tensor) -> torch.Tensor:
    """Exactly 0 on ``path`` (batch, seq) and at most ``-_TIE_MARGIN`` elsewhere, so that argmax recovers ``path``
    despite exact ties and rounding in ``max_marginals`` (batch, seq, num_tags)."""
    # A comparison rather than `one_hot`, which on a CPU reads the path's smallest and largest values (a host sync).
    on_path = path.unsqueeze(-1) == torch.arange(max_marginals.size(-1), device=path.device)  # (batch, seq, tags)
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

    def kernel_obstacles(self, emissions: torch.Tensor) -> list[str]:
        """Why the Triton kernels cannot run on ``emissions``, one reason a string; empty when they can."""
        obstacles = triton_obstacles(emissions)
        if emissions.dtype not in KERNEL_DTYPES or self._compute_dtype(emissions) != torch.float32:
            obstacles.append(
                f"the emissions are {emissions.dtype} and the scores {self.transitions.dtype}, and the kernels "
                f"compute in float32 (emissions in {', '.join(map(str, KERNEL_DTYPES))})"
            )
        if self.num_tags > MAX_KERNEL_TAGS:
            obstacles.append(f"there are {self.num_tags} tags, and the kernels take at most {MAX_KERNEL_TAGS}")
        return obstacles

    def uses_kernels(self, emissions: torch.Tensor, implementation: str) -> bool:
        """Whether a call on ``emissions`` runs the Triton kernels of `triton_crf.py` rather than the loops (or, in a
        traced graph, the log-depth scans, whatever ``implementation`` says).

        ``implementation`` is the model's `config.step_implementation`: `"eager"` never, `"auto"` on CUDA tensors
        where the kernels can run, `"triton"` always (on CPU tensors under Triton's interpreter). Reads only the
        device, dtypes and sizes, never values.

        Raises:
            `ValueError`: If ``implementation`` is none of `"auto"`, `"eager"`, `"triton"`, or is `"triton"` where
            the kernels cannot run (the message says why).
        """
        if _is_traced(emissions):
            return False
        obstacles = self.kernel_obstacles(emissions)
        return kernel_dispatch.uses_kernels(
            implementation, emissions, obstacles, "implementation", "the CRF's kernels"
        )

    def _kernel_arguments(self, emissions: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """The emissions and mask, then the parameters and constraint buffers, in the order the kernels take them."""
        parameters = (self.start_transitions, self.end_transitions, self.transitions)
        constraints = (self.start_allowed, self.end_allowed, self.transition_allowed)
        return emissions, mask, *parameters, *constraints

    def extra_repr(self) -> str:
        return f"num_tags={self.num_tags}, constrained={self.allowed_transitions is not None}"

    def _compute_dtype(self, emissions: torch.Tensor) -> torch.dtype:
        """float32, or float64 when the emissions or the parameters are float64 (e.g. for gradcheck)."""
        return torch.promote_types(torch.promote_types(emissions.dtype, self.transitions.dtype), torch.float32)

    def _scores(self, forbidden_score: float, dtype: torch.dtype) -> _Scores:
        """Start (L,), end (L,) and transition (L, L) scores in ``dtype``; forbidden moves score
        ``forbidden_score``."""
        return _Scores(
            self.start_transitions.to(dtype).masked_fill(~self.start_allowed, forbidden_score),
            self.end_transitions.to(dtype).masked_fill(~self.end_allowed, forbidden_score),
            self.transitions.to(dtype).masked_fill(~self.transition_allowed, forbidden_score),
        )

    def validate_tags(self, tags: torch.Tensor, mask: torch.Tensor | None = None) -> None:
        """Raise a `ValueError` if ``tags`` at unmasked positions are outside ``[0, num_tags)``, or (see
        `validate_mask`) if an integer ``mask`` holds values other than 0 and 1.

        Reads the values: on a GPU this waits for the device, so call it where data enters (e.g. in a data collator);
        the forward methods do not run it.

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
        """Check the shapes and dtypes of the inputs (not their values: see `validate_tags`); return the mask as
        bool (all `True` if `None`) and the tags as long."""
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
        self,
        emissions: torch.Tensor,
        tags: torch.Tensor,
        mask: torch.Tensor | None = None,
        implementation: str = "auto",
    ) -> torch.Tensor:
        """Log-likelihood of the gold tags of each sentence, over its unmasked positions (forward algorithm).

        Args:
            emissions (`torch.Tensor` of shape `(batch, seq, num_tags)`): tag scores of each position, any float dtype.
            tags (`torch.LongTensor` of shape `(batch, seq)`): gold tag ids; ignored at masked positions (may be -100).
                At unmasked positions they must be in ``[0, num_tags)`` (see `validate_tags`).
            mask (`torch.BoolTensor` of shape `(batch, seq)`, *optional*): positions that belong to the chain; need not
                start with `True` and may have holes. 0/1 integer masks are accepted. Defaults to all positions.
            implementation (`str`, *optional*, defaults to `"auto"`): the loops or the Triton kernels (see
                `uses_kernels`).

        Returns:
            `torch.FloatTensor` of shape `(batch,)`, float32 (float64 for float64 inputs or parameters): 0 for
            sentences without unmasked positions.
        """
        mask, tags = self._validated(emissions, mask, tags)
        # Not checked beforehand (a host sync): a tag out of range fails in an indexing, named here (on a CPU).
        with named_on_failure(lambda: self.validate_tags(tags, mask)):
            return self._log_likelihood(emissions, tags, mask, implementation)

    def _log_likelihood(
        self, emissions: torch.Tensor, tags: torch.Tensor, mask: torch.Tensor, implementation: str
    ) -> torch.Tensor:
        """`log_likelihood` of validated inputs (a bool `mask`, long `tags`)."""
        if self.uses_kernels(emissions, implementation):
            emissions, mask, *scores = self._kernel_arguments(emissions, mask)
            log_likelihood, _, _ = crf_log_likelihood(emissions, tags, mask, *scores, _LIKELIHOOD_PENALTY)
            return log_likelihood
        with _autocast_disabled(emissions):
            dtype = self._compute_dtype(emissions)
            emissions = emissions.to(dtype)
            scores = self._scores(_LIKELIHOOD_PENALTY, dtype)
            destinations, chain_mask = _chain_destinations(mask)  # (batch, seq)
            emissions = _chain_first(emissions, destinations)  # (batch, seq, L)
            tags = _chain_first(tags.masked_fill(~mask, 0), destinations)  # (batch, seq)
            gold = _gold_score(emissions, tags, chain_mask, scores)  # (batch,)
            forward_algorithm, _ = _recursions(emissions)
            log_partition = forward_algorithm(emissions, chain_mask, scores)  # (batch,)
            # An empty chain has a single, empty tag sequence: probability 1.
            return (gold - log_partition).masked_fill(~mask.any(dim=1), 0.0)

    def forward(
        self,
        emissions: torch.Tensor,
        tags: torch.Tensor,
        mask: torch.Tensor | None = None,
        reduction: str = "mean",
        implementation: str = "auto",
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
        return _REDUCTIONS[reduction](-self.log_likelihood(emissions, tags, mask, implementation))

    def _paths_and_max_marginals(
        self, emissions: torch.Tensor, mask: torch.Tensor, with_backward: bool
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Best paths (batch, seq) and max-marginals (batch, seq, L) (if ``with_backward``; else `None`) of
        ``emissions`` in the compute dtype, at the positions of ``mask``; meaningless at masked positions."""
        scores = self._scores(float("-inf"), emissions.dtype)
        destinations, chain_mask = _chain_destinations(mask)  # (batch, seq)
        emissions = _chain_first(emissions, destinations)  # (batch, seq, L)
        _, viterbi = _recursions(emissions)
        path, forward, backward = viterbi(emissions, chain_mask, scores, with_backward)
        if not with_backward:
            return _chain_back(path, destinations), None
        best_score = (forward[:, -1] + scores.end).amax(dim=-1)  # (batch,)
        max_marginals = forward + backward - best_score[:, None, None]  # (batch, seq, L)
        return _chain_back(path, destinations), _chain_back(max_marginals, destinations)

    def decode(
        self, emissions: torch.Tensor, mask: torch.Tensor | None = None, implementation: str = "auto"
    ) -> torch.Tensor:
        """Best tag sequence of each sentence over its unmasked positions (Viterbi).

        Args:
            emissions (`torch.Tensor` of shape `(batch, seq, num_tags)`): tag scores of each position, any float dtype.
            mask (`torch.BoolTensor` of shape `(batch, seq)`, *optional*), implementation (`str`, *optional*,
                defaults to `"auto"`): as in `log_likelihood`.

        Returns:
            `torch.LongTensor` of shape `(batch, seq)`: tag ids, `IGNORE_INDEX` (-100) at masked positions.
        """
        mask, _ = self._validated(emissions, mask)
        if self.uses_kernels(emissions, implementation):
            paths, _ = crf_viterbi(*self._kernel_arguments(emissions.detach(), mask), _TIE_MARGIN, False)
            return paths
        with _autocast_disabled(emissions):
            emissions = emissions.to(self._compute_dtype(emissions))
            path, _ = self._paths_and_max_marginals(emissions, mask, with_backward=False)
            return torch.where(mask, path, IGNORE_INDEX)

    def max_marginals(
        self, emissions: torch.Tensor, mask: torch.Tensor | None = None, implementation: str = "auto"
    ) -> torch.Tensor:
        """Max-marginal of each tag at each position, relative to the best path (max-product forward-backward).

        Entry ``[b, i, y]`` is the score of the best tag sequence of sentence ``b`` that has tag ``y`` at position
        ``i``, minus the score of the best sequence: at most 0, and exactly 0 on the `decode` path, which wins exact
        ties (other tags are then just below 0), so ``max_marginals(...).argmax(-1)`` equals `decode` at every
        unmasked position. Tags that no allowed sequence can reach get the lowest finite value rather than -inf.

        Args:
            emissions (`torch.Tensor` of shape `(batch, seq, num_tags)`): tag scores of each position, any float dtype.
            mask (`torch.BoolTensor` of shape `(batch, seq)`, *optional*), implementation (`str`, *optional*,
                defaults to `"auto"`): as in `log_likelihood`.

        Returns:
            `torch.FloatTensor` of shape `(batch, seq, num_tags)`, float32 (float64 for float64 inputs or parameters):
            0 at masked positions. Differentiable (with the kernels, the loops' gradient, recomputed in the backward).
        """
        mask, _ = self._validated(emissions, mask)
        if self.uses_kernels(emissions, implementation):
            parameters = (self.start_transitions, self.end_transitions, self.transitions)
            return _MaxMarginalsByKernels.apply(self, emissions, mask, *parameters)
        return self._max_marginals_by_loops(emissions, mask)

    def _max_marginals_by_loops(self, emissions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """`max_marginals` (batch, seq, L) by the loops (the scans in a traced graph), ``mask`` a bool tensor."""
        with _autocast_disabled(emissions):
            dtype = self._compute_dtype(emissions)
            path, max_marginals = self._paths_and_max_marginals(emissions.to(dtype), mask, with_backward=True)
            max_marginals = _favour_path(max_marginals, path).clamp(min=torch.finfo(dtype).min)
            return torch.where(mask[..., None], max_marginals, 0.0)


class _MaxMarginalsByKernels(torch.autograd.Function):
    """`ConditionalRandomField.max_marginals` by the Viterbi kernel, with the loops' gradient: the kernel has no
    backward of its own, and a loss on the max-marginals (the tagger's logits) is rare, so the backward recomputes
    them with the loops and differentiates those (with the loss on the CRF's likelihood alone it never runs).

    Inputs: the CRF, emissions `(batch, seq, L)`, the bool mask `(batch, seq)` and the CRF's start, end and transition
    scores (so that autograd routes their gradients here). Returns the max-marginals `(batch, seq, L)` float32.
    """

    @staticmethod
    def forward(ctx, crf, emissions, mask, start, end, transitions):
        ctx.crf = crf
        ctx.save_for_backward(emissions, mask)
        _, max_marginals = crf_viterbi(*crf._kernel_arguments(emissions, mask), _TIE_MARGIN, True)
        return max_marginals

    @staticmethod
    def backward(ctx, d_max_marginals):
        emissions, mask = ctx.saved_tensors
        crf = ctx.crf
        needed = (ctx.needs_input_grad[1], *ctx.needs_input_grad[3:])  # emissions, start, end, transitions
        with torch.enable_grad():
            emissions = emissions.detach().requires_grad_()
            inputs = (emissions, crf.start_transitions, crf.end_transitions, crf.transitions)
            max_marginals = crf._max_marginals_by_loops(emissions, mask)
            wanted = [tensor for tensor, is_needed in zip(inputs, needed) if is_needed]
            gradients = iter(torch.autograd.grad(max_marginals, wanted, d_max_marginals, allow_unused=True))
        d_emissions, d_start, d_end, d_transitions = (next(gradients) if is_needed else None for is_needed in needed)
        return None, d_emissions, None, d_start, d_end, d_transitions
