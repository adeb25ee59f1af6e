"""Tests of `modeling_slstm.tag_schemes`."""

import itertools
import random
import re

import pytest

from modeling_slstm.tag_schemes import (
    SCHEMES,
    allowed_transitions,
    convert_tag_sequence,
    detect_tag_scheme,
    is_span_tag,
    label_set_scheme,
    normalize_scheme_name,
    spans_to_tags,
    split_tag,
    tags_to_spans,
)

# One sentence in each scheme: adjacent same-type entities (LOC), adjacent different types (PER, ORG), single- and
# multi-token entities, and a type containing '-'.
SENTENCE = {
    "IOB1": ["I-PER", "I-PER", "I-ORG", "O", "I-LOC", "B-LOC", "I-LOC", "O", "I-creative-work"],
    "IOB2": ["B-PER", "I-PER", "B-ORG", "O", "B-LOC", "B-LOC", "I-LOC", "O", "B-creative-work"],
    "BIOES": ["B-PER", "E-PER", "S-ORG", "O", "S-LOC", "B-LOC", "E-LOC", "O", "S-creative-work"],
}
SENTENCE_SPANS = [("PER", 0, 2), ("ORG", 2, 3), ("LOC", 4, 5), ("LOC", 5, 7), ("creative-work", 8, 9)]


@pytest.mark.parametrize(
    ("name", "canonical"),
    [
        ("IOB1", "IOB1"),
        ("iob2", "IOB2"),
        ("BIO", "IOB2"),
        ("bio", "IOB2"),
        ("BIOES", "BIOES"),
        ("IOBES", "BIOES"),
        ("iobes", "BIOES"),
    ],
)
def test_normalize_scheme_name(name, canonical):
    assert normalize_scheme_name(name) == canonical


@pytest.mark.parametrize("name", ["BILOU", "", "IOB", None])
def test_unknown_scheme_name(name):
    with pytest.raises(ValueError) as error:
        normalize_scheme_name(name)
    assert str(error.value) == f"unknown tag scheme {name!r}; expected one of IOB1, IOB2 (BIO), BIOES (IOBES)"


@pytest.mark.parametrize(
    ("tag", "parts"),
    [
        ("O", ("O", None)),
        ("B-PER", ("B", "PER")),
        ("I-creative-work", ("I", "creative-work")),
        ("E-X", ("E", "X")),
        ("S-LOC", ("S", "LOC")),
    ],
)
def test_split_tag(tag, parts):
    assert split_tag(tag) == parts


@pytest.mark.parametrize("tag", ["X-PER", "B", "B-", "PER", "", "o", "O-PER", "b-PER", "-PER"])
def test_split_tag_rejects_malformed_tags(tag):
    with pytest.raises(ValueError, match=f"malformed tag {tag!r}"):
        split_tag(tag)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_detect_tag_scheme(scheme):
    other_sentence = ["O", "O"]
    assert detect_tag_scheme([other_sentence, SENTENCE[scheme]]) == scheme
    assert detect_tag_scheme(iter([other_sentence, SENTENCE[scheme]])) == scheme


@pytest.mark.parametrize(
    ("sequences", "scheme"),
    [
        ([["O", "O"], []], "IOB2"),
        ([], "IOB2"),
        ([["B-PER", "I-PER", "O"]], "IOB2"),
        ([["O", "I-PER"]], "IOB1"),
        ([["B-PER", "I-LOC"]], "IOB1"),
        ([["B-PER", "I-PER"], ["I-ORG", "O", "S-PER"]], "BIOES"),
    ],
)
def test_detect_tag_scheme_edge_cases(sequences, scheme):
    assert detect_tag_scheme(sequences) == scheme


def test_detect_tag_scheme_rejects_malformed_tags():
    with pytest.raises(ValueError, match="'NN'"):
        detect_tag_scheme([["O", "NN"]])


@pytest.mark.parametrize("scheme", SCHEMES)
def test_tags_to_spans(scheme):
    assert tags_to_spans(SENTENCE[scheme], scheme) == SENTENCE_SPANS
    assert tags_to_spans([], scheme) == []


@pytest.mark.parametrize(("source", "target"), itertools.product(SCHEMES, repeat=2))
def test_convert_hand_written_sentence(source, target):
    assert convert_tag_sequence(SENTENCE[source], source, target) == SENTENCE[target]


def test_convert_accepts_aliases():
    assert convert_tag_sequence(SENTENCE["IOB2"], "bio", "iobes") == SENTENCE["BIOES"]


@pytest.mark.parametrize(
    ("tags", "scheme", "spans"),
    [
        (["O", "I-PER", "I-PER"], "IOB2", [("PER", 1, 3)]),  # stray I- opens an entity
        (["B-PER", "I-LOC"], "IOB2", [("PER", 0, 1), ("LOC", 1, 2)]),
        (["B-PER", "I-PER", "O"], "BIOES", [("PER", 0, 2)]),  # unterminated entity
        (["E-PER", "I-PER", "S-LOC"], "BIOES", [("PER", 0, 1), ("PER", 1, 2), ("LOC", 2, 3)]),
    ],
)
def test_invalid_sequences_are_decoded_leniently(tags, scheme, spans):
    assert tags_to_spans(tags, scheme) == spans


@pytest.mark.parametrize("scheme", ["IOB1", "IOB2"])
def test_bioes_prefixes_are_rejected_in_iob_schemes(scheme):
    with pytest.raises(ValueError, match=f"'S-PER' at position 1 is not valid in scheme {scheme}"):
        tags_to_spans(["O", "S-PER"], scheme)


def test_spans_to_tags_rejects_bad_spans():
    with pytest.raises(ValueError, match="overlap"):
        spans_to_tags([("PER", 0, 2), ("LOC", 1, 3)], 4, "IOB2")
    with pytest.raises(ValueError, match="lie within the 2 tokens"):
        spans_to_tags([("PER", 1, 3)], 2, "BIOES")
    with pytest.raises(ValueError, match="non-empty"):
        spans_to_tags([("PER", 1, 1)], 2, "BIOES")


def random_spans(rng, length):
    """Random non-overlapping spans over ``length`` tokens, often adjacent and of the same type."""
    spans, position = [], rng.randrange(2)
    while position < length:
        end = min(length, position + rng.randint(1, 3))
        spans.append((rng.choice(["PER", "LOC", "creative-work"]), position, end))
        position = end + rng.choice([0, 0, 1, 2])
    return spans


def test_random_round_trips():
    rng = random.Random(0)
    for _ in range(300):
        length = rng.randint(0, 12)
        spans = random_spans(rng, length)
        encoded = {scheme: spans_to_tags(spans, length, scheme) for scheme in SCHEMES}
        for source, target in itertools.product(SCHEMES, repeat=2):
            assert tags_to_spans(encoded[source], source) == spans
            assert convert_tag_sequence(encoded[source], source, target) == encoded[target]


@pytest.mark.parametrize(("scheme", "prefixes"), [("IOB2", "BI"), ("BIOES", "BIES")])
def test_encoded_sequences_respect_allowed_transitions(scheme, prefixes):
    rng = random.Random(1)
    types = ["PER", "LOC", "creative-work"]
    labels = ["O"] + [f"{prefix}-{entity_type}" for entity_type in types for prefix in prefixes]
    start_allowed, end_allowed, transition_allowed = allowed_transitions(labels)
    for _ in range(200):
        length = rng.randint(1, 12)
        ids = [labels.index(tag) for tag in spans_to_tags(random_spans(rng, length), length, scheme)]
        assert start_allowed[ids[0]] and end_allowed[ids[-1]]
        assert all(transition_allowed[a][b] for a, b in itertools.pairwise(ids))


@pytest.mark.parametrize(
    ("labels", "scheme"),
    [
        (["O", "B-PER", "I-PER", "B-LOC", "I-LOC"], "IOB2"),
        (["B-creative-work", "O", "I-creative-work"], "IOB2"),
        (["O", "B-PER"], "IOB2"),
        (["O", "B-PER", "I-PER", "E-PER", "S-PER"], "BIOES"),
        (["O", "S-PER"], "BIOES"),
        (["NN", "VB", "DT"], None),
        (["LABEL_0", "LABEL_1"], None),
        (["O", "B-PER", "NN"], None),
        (["O"], None),
        ([], None),
        (["O", "I-PER", "I-LOC", "B-LOC"], None),  # IOB1 vocabulary: I-PER without B-PER
        (["O", "B-PER", "E-LOC", "S-LOC"], None),
    ],
)
def test_label_set_scheme(labels, scheme):
    assert label_set_scheme(labels) == scheme
    assert label_set_scheme(iter(labels)) == scheme


def test_allowed_transitions_iob2():
    labels = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
    T, F = True, False
    assert allowed_transitions(labels) == (
        [T, T, F, T, F],
        [T, T, T, T, T],
        [
            # to: O  B-PER I-PER B-LOC I-LOC
            [T, T, F, T, F],  # from O
            [T, T, T, T, F],  # from B-PER
            [T, T, T, T, F],  # from I-PER
            [T, T, F, T, T],  # from B-LOC
            [T, T, F, T, T],  # from I-LOC
        ],
    )


def test_allowed_transitions_bioes():
    labels = ["O", "B-PER", "I-PER", "E-PER", "S-PER", "B-LOC", "I-LOC", "E-LOC", "S-LOC"]
    T, F = True, False
    after_outside = [T, T, F, F, T, T, F, F, T]
    inside_per = [F, F, T, T, F, F, F, F, F]
    inside_loc = [F, F, F, F, F, F, T, T, F]
    assert allowed_transitions(labels) == (
        after_outside,
        [T, F, F, T, T, F, F, T, T],
        [
            after_outside,
            inside_per,
            inside_per,
            after_outside,
            after_outside,
            inside_loc,
            inside_loc,
            after_outside,
            after_outside,
        ],
    )


def test_allowed_transitions_without_scheme():
    assert allowed_transitions(["NN", "VB"]) is None
    assert allowed_transitions(["LABEL_0", "LABEL_1", "LABEL_2"]) is None


def test_is_span_tag_against_a_regular_expression():
    """Every string of up to 4 characters over an alphabet of prefixes, separators and type letters: a span tag
    exactly when it is `O` or `<B|I|E|S>-<non-empty type>`; `split_tag` splits exactly those."""
    span_tag = re.compile(r"O|[BIES]-.+")
    for length in range(5):
        for characters in itertools.product("BIESO-xb", repeat=length):
            tag = "".join(characters)
            assert is_span_tag(tag) == bool(span_tag.fullmatch(tag)), tag
            if is_span_tag(tag):
                split_tag(tag)
            else:
                with pytest.raises(ValueError, match="malformed tag"):
                    split_tag(tag)
