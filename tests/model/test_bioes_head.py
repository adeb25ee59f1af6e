"""A token classifier that trains and decodes in BIOES while presenting IOB2 labels (`head_tag_scheme="BIOES"`): gold
conversion, the IOB2 logits of both heads, padding, save/load, and the error for labels that are not IOB2."""

import random

import pytest
import torch
from helpers import BIO_LABELS, BOS, EOS, build, pad, random_ids, real, tagger_config

from modeling_slstm import SLSTMForTokenClassification
from modeling_slstm.tag_schemes import convert_tag_sequence, spans_to_tags, split_tag
from modeling_slstm.token_tagging import BIOESTags, bioes_gold_tags, crf_inference_chain
from modeling_slstm.validation import IGNORE_INDEX

LABEL_MAP = BIOESTags(BIO_LABELS)


def random_iob2(length: int, rng: random.Random) -> list[str]:
    """A valid IOB2 sequence with entities of one to three tokens, adjacent entities of one type included."""
    spans, position = [], 0
    while position < length:
        size = rng.randint(1, 3)
        if rng.random() < 0.5 and position + size <= length:
            spans.append((rng.choice(["PER", "LOC"]), position, position + size))
            position += size
        else:
            position += 1
    return spans_to_tags(spans, length, "IOB2")


def labelled_batch(seed: int = 0) -> tuple[list[list[str]], torch.Tensor]:
    """IOB2 sentences and their label ids `(batch, seq)`: -100 at `<s>`/`</s>`, at unlabelled positions inside the
    sentence (e.g. continuation sub-words) and at the padding."""
    rng = random.Random(seed)
    sentences = [random_iob2(length, rng) for length in (7, 1, 12, 4)]
    rows = []
    for tags in sentences:
        ids = [BIO_LABELS.index(tag) for tag in tags]
        holes = [IGNORE_INDEX] * rng.randint(0, 1)
        rows.append([IGNORE_INDEX] + ids[:1] + holes + ids[1:] + [IGNORE_INDEX])
    return sentences, pad(rows, value=IGNORE_INDEX)[0]


def test_gold_tags_are_the_bioes_form_of_the_iob2_labels():
    """Exactly `convert_tag_sequence(IOB2 -> BIOES)` over the labelled positions; -100 stays."""
    for seed in range(5):
        sentences, labels = labelled_batch(seed)
        tags = bioes_gold_tags(labels, LABEL_MAP)
        assert torch.equal(tags == IGNORE_INDEX, labels == IGNORE_INDEX)
        for row, iob2 in enumerate(sentences):
            converted = [LABEL_MAP.tags[i] for i in tags[row][labels[row] != IGNORE_INDEX].tolist()]
            assert converted == convert_tag_sequence(iob2, "IOB2", "BIOES")


@pytest.mark.parametrize("labels", [BIO_LABELS, ["I-LOC", "B-PER", "O", "I-PER", "B-LOC"]], ids=["O-first", "I-first"])
def test_gold_tags_of_rows_labelled_to_their_last_column(labels):
    """Rows whose last column is labelled (no `</s>` or padding after it) end their entity there: a final `I-X` becomes
    `E-X`, a final `B-X` `S-X`, whatever label id 0 is (-100 is read as id 0 before it is put back)."""
    label_map = BIOESTags(labels)
    sentences = [
        ["B-PER", "I-PER", "O", "O", "B-LOC", "I-LOC"],
        ["B-LOC", "I-LOC", "I-LOC", "B-PER", "I-PER"],  # with a hole: as wide as the first
        ["O", "B-LOC", "I-LOC", "O", "O", "B-PER"],
        ["B-LOC", "I-LOC", "I-LOC"],  # then -100: ends before the last column
        ["B-PER", "B-PER"],
    ]
    rows = [[labels.index(tag) for tag in tags] for tags in sentences]
    rows[1].insert(2, IGNORE_INDEX)  # an unlabelled sub-word inside an entity
    label_ids = pad(rows, value=IGNORE_INDEX)[0]
    tags = bioes_gold_tags(label_ids, label_map)
    for row, iob2 in enumerate(sentences):
        converted = [label_map.tags[i] for i in tags[row][label_ids[row] != IGNORE_INDEX].tolist()]
        assert converted == convert_tag_sequence(iob2, "IOB2", "BIOES")


def bioes_model(use_crf: bool, seed: int = 0) -> SLSTMForTokenClassification:
    return build(SLSTMForTokenClassification, tagger_config(use_crf=use_crf, head_tag_scheme="BIOES"), seed=seed)


def emissions_of(model, **inputs) -> tuple[torch.Tensor, torch.Tensor]:
    """`(logits, emissions)`: the model's IOB2 logits and the BIOES emissions of its classifier (a forward hook)."""
    captured = []
    handle = model.classifier.register_forward_hook(lambda _, __, output: captured.append(output))
    with torch.no_grad():
        logits = model(**inputs).logits
    handle.remove()
    return logits, captured[0]


def framed_batch(side: str = "right"):
    ids, mask = pad([[BOS, *words, EOS] for words in random_ids([6, 1, 9])], side=side)
    return ids, mask


def test_head_is_over_bioes_tags_with_bioes_constraints():
    model = bioes_model(use_crf=True)
    assert model.classifier.out_features == len(LABEL_MAP.tags) == 9
    assert model.crf.num_tags == 9
    b_per, e_per = LABEL_MAP.tags.index("B-PER"), LABEL_MAP.tags.index("E-PER")
    o = LABEL_MAP.tags.index("O")
    assert model.crf.transition_allowed[b_per, e_per] and not model.crf.transition_allowed[b_per, o]


IOB2_PREFIXES = {"B": "B", "S": "B", "I": "I", "E": "I"}


def iob2_of(bioes_id: int) -> int:
    """The IOB2 label id of a BIOES tag id."""
    tag = LABEL_MAP.tags[bioes_id]
    prefix, entity_type = split_tag(tag)
    return BIO_LABELS.index(tag if entity_type is None else f"{IOB2_PREFIXES[prefix]}-{entity_type}")


def test_crf_logits_decode_to_the_iob2_form_of_the_bioes_viterbi_path():
    model = bioes_model(use_crf=True)
    ids, mask = framed_batch()
    logits, emissions = emissions_of(model, input_ids=ids, attention_mask=mask)
    assert logits.shape == (*ids.shape, len(BIO_LABELS))
    chain = crf_inference_chain(ids, mask, model.config)
    viterbi = model.crf.decode(emissions, chain)  # (batch, seq) BIOES ids
    expected = viterbi[chain].apply_(iob2_of)
    assert torch.equal(logits.argmax(-1)[chain], expected)
    # the chosen label's logit is exactly 0 (the Viterbi max-marginal), the others below it
    assert torch.all(logits[chain].amax(-1) == 0)


def test_softmax_logits_are_log_probabilities_of_the_iob2_labels():
    model = bioes_model(use_crf=False)
    ids, mask = framed_batch()
    logits, emissions = emissions_of(model, input_ids=ids, attention_mask=mask)
    bioes_probabilities = emissions.softmax(-1)  # (batch, seq, 9)
    expected = torch.zeros(*ids.shape, len(BIO_LABELS))
    for tag_id, tag in enumerate(LABEL_MAP.tags):
        expected[..., iob2_of(tag_id)] += bioes_probabilities[..., tag_id]
    torch.testing.assert_close(logits.exp(), expected)


@pytest.mark.parametrize("use_crf", [True, False])
def test_loss_is_the_bioes_loss_of_the_converted_gold(use_crf):
    model = bioes_model(use_crf)
    _, labels = labelled_batch()
    ids = torch.randint(4, 20, labels.shape, generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids, dtype=torch.bool)
    captured = []
    model.classifier.register_forward_hook(lambda _, __, output: captured.append(output))
    loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
    gold = bioes_gold_tags(labels, LABEL_MAP)
    if use_crf:
        expected = model.crf(captured[0], gold, gold != IGNORE_INDEX)
    else:
        expected = torch.nn.functional.cross_entropy(captured[0].flatten(0, 1), gold.flatten())
    torch.testing.assert_close(loss, expected)


@pytest.mark.parametrize("use_crf", [True, False])
@pytest.mark.parametrize("side", ["right", "left"])
def test_padding_does_not_change_a_sentence(use_crf, side):
    model = bioes_model(use_crf)
    ids, mask = framed_batch(side)
    logits = model(input_ids=ids, attention_mask=mask).logits
    for row in range(ids.size(0)):
        alone = model(input_ids=real(ids, mask, row)[None], attention_mask=real(mask, mask, row)[None]).logits
        torch.testing.assert_close(real(logits, mask, row), alone[0], rtol=1e-5, atol=1e-6)


def test_save_and_load_keeps_the_bioes_head(tmp_path):
    model = bioes_model(use_crf=True)
    model.save_pretrained(tmp_path)
    loaded = SLSTMForTokenClassification.from_pretrained(tmp_path).eval()
    assert loaded.config.head_tag_scheme == "BIOES" and loaded.crf.num_tags == 9
    ids, mask = framed_batch()
    torch.testing.assert_close(
        loaded(input_ids=ids, attention_mask=mask).logits, model(input_ids=ids, attention_mask=mask).logits
    )


def test_labels_that_are_not_iob2_are_rejected():
    bioes_labels = ["O", "B-PER", "I-PER", "E-PER", "S-PER"]
    with pytest.raises(ValueError, match="needs IOB2 labels"):
        tagger_config(
            head_tag_scheme="BIOES",
            id2label=dict(enumerate(bioes_labels)),
            label2id={label: i for i, label in enumerate(bioes_labels)},
        )


def test_a_type_without_its_inside_label_is_rejected_by_name():
    """`B-PER` alone is a valid IOB2 label set, but a BIOES head needs `I-PER` to present `I-PER`/`E-PER` in IOB2;
    without it the head failed with a bare KeyError."""
    labels = ["O", "B-PER", "B-LOC", "I-LOC"]
    with pytest.raises(ValueError, match=r"B-X and I-X for every entity type X .* missing \['I-PER'\]"):
        tagger_config(
            head_tag_scheme="BIOES",
            id2label=dict(enumerate(labels)),
            label2id={label: i for i, label in enumerate(labels)},
        )


def test_unknown_head_tag_scheme_is_rejected():
    with pytest.raises(ValueError, match="head_tag_scheme must be None .* or 'BIOES', got 'IOBES'"):
        tagger_config(head_tag_scheme="IOBES")
