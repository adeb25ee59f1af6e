"""Span tagging schemes (IOB1, IOB2/BIO, BIOES/IOBES): parsing, detection, conversion and CRF constraints.

A tag is either ``"O"`` (outside any entity) or ``"<prefix>-<type>"`` with a prefix among ``B`` (begin), ``I``
(inside), ``E`` (end) and ``S`` (single-token entity). Entity types may themselves contain ``-``
(``"B-creative-work"``), so a tag is split on its first ``-`` only.

The three schemes differ in how they mark entity boundaries:

- ``IOB1``: every entity token is ``I-X``; ``B-X`` only starts an entity that directly follows another ``X`` entity.
- ``IOB2`` (alias ``BIO``): every entity starts with ``B-X`` and continues with ``I-X``.
- ``BIOES`` (alias ``IOBES``): multi-token entities are ``B-X I-X* E-X``; single-token entities are ``S-X``.

Conversion goes through entity spans (`tags_to_spans`, then `spans_to_tags`), so it is exact for valid input and
resolves invalid input the way conlleval does (a stray ``I-X`` starts a new entity).

Pure Python on purpose: this module is copied next to the model code for ``trust_remote_code`` and is also used by the
training scripts.
"""

from collections.abc import Iterable, Sequence

SCHEMES = ("IOB1", "IOB2", "BIOES")
"""The canonical scheme names, what `normalize_scheme_name` returns (for users iterating over the schemes)."""

_SCHEME_ALIASES = {"IOB1": "IOB1", "IOB2": "IOB2", "BIO": "IOB2", "BIOES": "BIOES", "IOBES": "BIOES"}

ENTITY_PREFIXES = {"IOB1": "BI", "IOB2": "BI", "BIOES": "BIES"}
"""The prefixes of each scheme's entity tags, in the order a label list numbers them (``B``, ``I``, ``E``, ``S``)."""

_ENTITY_PREFIX_SET = frozenset(ENTITY_PREFIXES["BIOES"])
# Prefixes each scheme may use; a tag outside its scheme's set cannot be decoded unambiguously.
_SCHEME_PREFIXES = {scheme: frozenset(prefixes + "O") for scheme, prefixes in ENTITY_PREFIXES.items()}

Span = tuple[str, int, int]
"""An entity span ``(type, start, end)`` over token positions, ``end`` exclusive."""


def normalize_scheme_name(name: str) -> str:
    """Return the canonical name (``"IOB1"``, ``"IOB2"`` or ``"BIOES"``) of a scheme name or alias, case-insensitively.

    Raises:
        ValueError: if ``name`` is not a known scheme or alias.
    """
    canonical = _SCHEME_ALIASES.get(name.upper()) if isinstance(name, str) else None
    if canonical is None:
        raise ValueError(f"unknown tag scheme {name!r}; expected one of IOB1, IOB2 (BIO), BIOES (IOBES)")
    return canonical


def is_span_tag(tag: str) -> bool:
    """Whether ``tag`` is ``"O"`` or ``"<B|I|E|S>-<non-empty type>"``: a tag that `split_tag` splits (POS tags such as
    ``"NN"`` or ``"LABEL_0"`` are not)."""
    if tag == "O":
        return True
    prefix, separator, entity_type = tag.partition("-") if isinstance(tag, str) else ("", "", "")
    return bool(separator) and prefix in _ENTITY_PREFIX_SET and bool(entity_type)


def split_tag(tag: str) -> tuple[str, str | None]:
    """Split a tag into its prefix and entity type: ``"B-PER"`` -> ``("B", "PER")``, ``"O"`` -> ``("O", None)``.

    Only the first ``-`` separates, so ``"I-creative-work"`` -> ``("I", "creative-work")``.

    Raises:
        ValueError: if ``tag`` is neither ``"O"`` nor ``"<B|I|E|S>-<non-empty type>"``.
    """
    if not is_span_tag(tag):
        raise ValueError(f"malformed tag {tag!r}; expected 'O' or '<B|I|E|S>-<type>' such as 'B-PER'")
    if tag == "O":
        return "O", None
    prefix, _, entity_type = tag.partition("-")
    return prefix, entity_type


def _starts_entity_as_inside(tag: tuple[str, str | None], previous: tuple[str, str | None] | None) -> bool:
    """Whether ``tag`` is an ``I-X`` that opens an entity (first token, after ``O`` or after another type)."""
    prefix, entity_type = tag
    return prefix == "I" and (previous is None or previous[1] != entity_type)


def detect_tag_scheme(tag_sequences: Iterable[Sequence[str]]) -> str:
    """Guess the scheme of a corpus from its tag sequences.

    Returns ``"BIOES"`` if any tag has an ``E-`` or ``S-`` prefix; otherwise ``"IOB1"`` if some ``I-X`` opens an
    entity (which only IOB1 allows); otherwise ``"IOB2"`` (also for data with only ``O`` tags).

    Args:
        tag_sequences (`Iterable[Sequence[str]]`): the tag sequences, e.g. one per sentence; read once.

    Raises:
        ValueError: if a tag is malformed (see `split_tag`).
    """
    inside_opens_entity = False
    for tags in tag_sequences:
        previous = None
        for tag in tags:
            parsed = split_tag(tag)
            if parsed[0] in "ES":
                return "BIOES"
            inside_opens_entity = inside_opens_entity or _starts_entity_as_inside(parsed, previous)
            previous = parsed
    return "IOB1" if inside_opens_entity else "IOB2"


def tags_to_spans(tags: Sequence[str], scheme: str) -> list[Span]:
    """Decode a tag sequence into entity spans ``(type, start, end)`` (``end`` exclusive), in order.

    Invalid sequences are decoded leniently, like conlleval: an ``I-X`` (or ``E-X``) that does not continue an ``X``
    entity starts a new one, and an unterminated BIOES entity ends before the next ``O``/``B``/``S`` or other type.

    Args:
        tags (`Sequence[str]`): the tags of one sequence.
        scheme (`str`): the scheme of ``tags`` (name or alias, see `normalize_scheme_name`).

    Raises:
        ValueError: if the scheme is unknown, a tag is malformed, or a tag's prefix is not used by the scheme
            (``E-``/``S-`` in IOB1/IOB2).
    """
    scheme = normalize_scheme_name(scheme)
    spans = []
    open_type, open_start = None, 0
    for position, tag in enumerate(tags):
        prefix, entity_type = split_tag(tag)
        if prefix not in _SCHEME_PREFIXES[scheme]:
            raise ValueError(f"tag {tag!r} at position {position} is not valid in scheme {scheme}")
        continues_open_entity = prefix in "IE" and entity_type == open_type
        if not continues_open_entity:
            if open_type is not None:
                spans.append((open_type, open_start, position))
            open_type, open_start = entity_type, position
        if prefix in "ES":
            spans.append((entity_type, open_start, position + 1))
            open_type = None
    if open_type is not None:
        spans.append((open_type, open_start, len(tags)))
    return spans


def _span_tags(span: Span, scheme: str, follows_same_type: bool) -> list[str]:
    """Encode one span's tokens; ``follows_same_type`` says an entity of the same type ends right before it."""
    entity_type, start, end = span
    length = end - start
    if scheme == "BIOES":
        if length == 1:
            return [f"S-{entity_type}"]
        return [f"B-{entity_type}"] + [f"I-{entity_type}"] * (length - 2) + [f"E-{entity_type}"]
    first_prefix = "B" if scheme == "IOB2" or follows_same_type else "I"
    return [f"{first_prefix}-{entity_type}"] + [f"I-{entity_type}"] * (length - 1)


def spans_to_tags(spans: Iterable[Span], length: int, scheme: str) -> list[str]:
    """Encode entity spans as a tag sequence of ``length`` tokens in ``scheme`` (inverse of `tags_to_spans`).

    Args:
        spans (`Iterable[Span]`): non-overlapping ``(type, start, end)`` spans, ``end`` exclusive.
        length (`int`): the number of tokens.
        scheme (`str`): the target scheme (name or alias).

    Raises:
        ValueError: if the scheme is unknown, or a span is empty, out of ``[0, length)`` or overlaps another.
    """
    scheme = normalize_scheme_name(scheme)
    tags = ["O"] * length
    previous_end, previous_type = 0, None
    for span in sorted(spans, key=lambda span: span[1]):
        entity_type, start, end = span
        if not previous_end <= start < end <= length:
            raise ValueError(
                f"span {span!r} must be non-empty, lie within the {length} tokens and not overlap the previous "
                f"span (which ends at {previous_end})"
            )
        follows_same_type = start == previous_end and entity_type == previous_type
        tags[start:end] = _span_tags(span, scheme, follows_same_type)
        previous_end, previous_type = end, entity_type
    return tags


def convert_tag_sequence(tags: Sequence[str], source: str, target: str) -> list[str]:
    """Convert a tag sequence from scheme ``source`` to scheme ``target`` (names or aliases).

    Exact (round trips are the identity) for valid input; invalid input is first decoded leniently (see
    `tags_to_spans`), so the result is always valid in ``target``.

    Raises:
        ValueError: as `tags_to_spans` and `spans_to_tags`.
    """
    return spans_to_tags(tags_to_spans(tags, source), len(tags), target)


def label_set_scheme(labels: Iterable[str]) -> str | None:
    """Scheme of a label vocabulary (e.g. ``config.id2label.values()``), for choosing CRF constraints.

    Returns:
        ``"BIOES"`` if every label is ``O`` or ``B/I/E/S``-typed and some ``E-``/``S-`` label exists; ``"IOB2"`` if
        every label is ``O`` or ``B/I``-typed; ``None`` for anything else: labels that are not span tags (POS tags
        such as ``"NN"``, ``"LABEL_0"``), vocabularies without typed labels, and vocabularies where some type has
        ``I-``/``E-`` but no ``B-`` label. The latter is what IOB1 data yields, and IOB2/BIOES constraints would make
        such labels undecodable (IOB1 vocabularies are otherwise indistinguishable from IOB2 ones: convert IOB1 data
        with `convert_tag_sequence` before training with constraints).
    """
    labels = list(labels)
    if not all(is_span_tag(label) for label in labels):
        return None
    parsed = [split_tag(label) for label in labels]
    prefixes_by_type: dict[str, set[str]] = {}
    for prefix, entity_type in parsed:
        if entity_type is not None:
            prefixes_by_type.setdefault(entity_type, set()).add(prefix)
    if not prefixes_by_type:
        return None
    if any("B" not in prefixes and prefixes & {"I", "E"} for prefixes in prefixes_by_type.values()):
        return None
    uses_end_or_single = any(prefixes & {"E", "S"} for prefixes in prefixes_by_type.values())
    return "BIOES" if uses_end_or_single else "IOB2"


def _can_start(prefix: str, scheme: str) -> bool:
    return prefix in ("OBS" if scheme == "BIOES" else "OB")


def _can_end(prefix: str, scheme: str) -> bool:
    return scheme != "BIOES" or prefix in "OES"


def _can_follow(previous: tuple[str, str | None], current: tuple[str, str | None], scheme: str) -> bool:
    """Whether tag ``current`` may directly follow tag ``previous`` (both parsed by `split_tag`)."""
    (previous_prefix, previous_type), (current_prefix, current_type) = previous, current
    continues_entity = current_prefix in "IE" and previous_prefix in "BI" and previous_type == current_type
    if scheme == "BIOES":
        inside_entity = previous_prefix in "BI"
        return continues_entity if inside_entity else current_prefix in "OBS"
    return continues_entity if current_prefix == "I" else True


def allowed_transitions(labels: Sequence[str]) -> tuple[list[bool], list[bool], list[list[bool]]] | None:
    """Which tags may start or end a sequence and which may follow which, under the scheme of ``labels``.

    IOB2: a sequence cannot start with ``I-X``, and ``I-X`` only follows ``B-X`` or ``I-X``. BIOES: a sequence starts
    with ``O``/``B``/``S`` and ends with ``O``/``E``/``S``; ``B-X`` and ``I-X`` are followed only by ``I-X`` or
    ``E-X``; ``O``, ``E`` and ``S`` only by ``O``, ``B`` or ``S``. Continuations must keep the entity type.

    Args:
        labels (`Sequence[str]`): the label of each tag id, e.g. ``[config.id2label[i] for i in range(num_labels)]``.

    Returns:
        ``(start_allowed, end_allowed, transition_allowed)``: lists of length ``L = len(labels)``, and an ``L x L``
        nested list indexed ``[from][to]``; or ``None`` when `label_set_scheme` finds no scheme (nothing to
        constrain).
    """
    labels = list(labels)
    scheme = label_set_scheme(labels)
    if scheme is None:
        return None
    parsed = [split_tag(label) for label in labels]
    start_allowed = [_can_start(prefix, scheme) for prefix, _ in parsed]
    end_allowed = [_can_end(prefix, scheme) for prefix, _ in parsed]
    transition_allowed = [[_can_follow(previous, current, scheme) for current in parsed] for previous in parsed]
    return start_allowed, end_allowed, transition_allowed


class BIOESLabelMap:
    """How a head that trains and decodes in BIOES presents itself in the IOB2 labels it was given.

    Every BIOES tag belongs to one IOB2 label (``B-X`` and ``S-X`` to ``B-X``; ``I-X`` and ``E-X`` to ``I-X``; ``O`` to
    ``O``), so an IOB2 label's score is the best (max-marginal) or total (probability) score of its at most two BIOES
    tags, and an IOB2 gold sequence has exactly one BIOES form: ``B-X``/``I-X`` stay when the next labelled token is
    ``I-X``, else become ``S-X``/``E-X``.

    Args:
        labels (`Sequence[str]`): the IOB2 labels by id (``config.id2label``), every type with ``B-`` and ``I-``.

    Attributes:
        tags (`list[str]`): the BIOES tags by id: the IOB2 labels in their order, then ``E-X`` and ``S-X`` per type.
        sources (`tuple[list[int], list[int]]`): for each IOB2 label, its two BIOES tag ids (the same id twice for
            ``O``).
        inside (`list[int]`): for each IOB2 label, the id of ``I-X`` of its type, or -1 for ``O``.
        kept, closed (`list[int]`): for each IOB2 label, its BIOES tag id when the entity continues after it
            (``B-X``, ``I-X``) and when it ends there (``S-X``, ``E-X``).
    """

    def __init__(self, labels: Sequence[str]):
        labels = list(labels)
        if label_set_scheme(labels) != "IOB2":
            raise ValueError(f"A BIOES head needs IOB2 labels (O, B-X, I-X for every type X), got {labels}")
        parsed = [split_tag(label) for label in labels]
        types = list(dict.fromkeys(entity_type for _, entity_type in parsed if entity_type is not None))
        # IOB2 label sets always hold B-X (`label_set_scheme`), but may lack I-X, which E-X needs to map to.
        missing = [f"I-{kind}" for kind in types if f"I-{kind}" not in labels]
        if missing:
            raise ValueError(
                f"A BIOES head needs B-X and I-X for every entity type X (multi-token entities are B-X I-X… in IOB2); "
                f"missing {missing} in {labels}"
            )
        self.tags = labels + [f"{prefix}-{entity_type}" for entity_type in types for prefix in "ES"]
        tag_ids = {tag: index for index, tag in enumerate(self.tags)}
        closing = {"B": "S", "I": "E", "O": "O"}
        self.kept = list(range(len(labels)))
        self.closed = [tag_ids[label if prefix == "O" else f"{closing[prefix]}-{kind}"] for label, (prefix, kind) in
                       zip(labels, parsed)]  # fmt: skip
        self.sources = (self.kept, self.closed)
        self.inside = [-1 if kind is None else tag_ids[f"I-{kind}"] for _, kind in parsed]
