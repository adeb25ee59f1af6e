"""Labels renamed after the model is built (transformers' `run_ner.py` with `--ignore_mismatched_sizes`: the model is
built from `num_labels`, with the placeholder names `LABEL_i`, then `config.id2label` is set): the CRF constraints
and the BIOES map follow the final labels, so the model that is trained, evaluated and saved is the one that
reloads."""

import pytest
import torch
from helpers import BIO_LABELS, BOS, EOS, pad, random_ids, tiny_config

from modeling_slstm import SLSTMForTokenClassification
from modeling_slstm.tag_schemes import allowed_transitions


def built_then_renamed(**settings) -> SLSTMForTokenClassification:
    """The upstream script's flow: a model built from `num_labels` alone, then its labels set on the config."""
    torch.manual_seed(0)
    model = SLSTMForTokenClassification(tiny_config(num_labels=len(BIO_LABELS), use_crf=True, **settings))
    assert model.config.id2label[0] == "LABEL_0"
    model.config.id2label = dict(enumerate(BIO_LABELS))
    model.config.label2id = {label: index for index, label in enumerate(BIO_LABELS)}
    return model


def framed_batch():
    sentences = [[BOS, *ids, EOS] for ids in random_ids([5, 2, 4])]
    ids, mask = pad(sentences)
    generator = torch.Generator().manual_seed(3)
    labels = torch.randint(0, len(BIO_LABELS), ids.shape, generator=generator)
    labels[(ids == BOS) | (ids == EOS) | ~mask] = -100
    return ids, mask, labels


@pytest.mark.parametrize("head_tag_scheme", [None, "BIOES"])
def test_trained_evaluated_and_reloaded_models_are_the_same(tmp_path, head_tag_scheme):
    model = built_then_renamed(head_tag_scheme=head_tag_scheme).train()
    ids, mask, labels = framed_batch()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    model(input_ids=ids, attention_mask=mask, labels=labels).loss.backward()
    optimizer.step()

    model.eval()
    with torch.no_grad():
        evaluated = model(input_ids=ids, attention_mask=mask, labels=labels)
    model.save_pretrained(tmp_path)
    reloaded = SLSTMForTokenClassification.from_pretrained(tmp_path).eval()
    with torch.no_grad():
        again = reloaded(input_ids=ids, attention_mask=mask, labels=labels)
    torch.testing.assert_close(again.loss, evaluated.loss, rtol=0, atol=0)
    torch.testing.assert_close(again.logits, evaluated.logits, rtol=0, atol=0)

    # The constraints in force are those of the final labels (BIOES tags for a BIOES head), as if built with them.
    tags = BIO_LABELS if head_tag_scheme is None else model.bioes.tags
    start, end, transitions = allowed_transitions(tags)
    for crf in (model.crf, reloaded.crf):
        assert crf.start_allowed.tolist() == list(start)
        assert crf.end_allowed.tolist() == list(end)
        assert crf.transition_allowed.tolist() == [list(row) for row in transitions]


def test_decoding_obeys_the_renamed_labels():
    """With the renamed IOB2 labels, no decoded path holds `O -> I-X` (the constraint the placeholders lacked)."""
    model = built_then_renamed().eval()
    with torch.no_grad():
        model.classifier.bias.copy_(torch.tensor([0.0, 0.0, 5.0, 0.0, 5.0]))  # emissions favour I-PER and I-LOC
        ids, mask, _ = framed_batch()
        predicted = model(input_ids=ids, attention_mask=mask).logits.argmax(-1)
    for row in range(ids.shape[0]):
        path = [BIO_LABELS[tag] for tag, token in zip(predicted[row].tolist(), ids[row].tolist()) if token > EOS]
        for previous, tag in zip(["O", *path], path):
            assert not (tag.startswith("I-") and previous[2:] != tag[2:]), path


def test_bioes_head_with_placeholder_labels_names_the_problem():
    model = SLSTMForTokenClassification(tiny_config(num_labels=5, use_crf=True, head_tag_scheme="BIOES"))
    ids, mask, _ = framed_batch()
    with pytest.raises(ValueError, match=r"BIOES head needs IOB2 labels .*LABEL_0"):
        model(input_ids=ids, attention_mask=mask)


def test_bioes_head_needs_an_odd_number_of_labels():
    with pytest.raises(ValueError, match="num_labels=4"):
        SLSTMForTokenClassification(tiny_config(num_labels=4, head_tag_scheme="BIOES"))


POS_LABELS = ['"', "$", "CD", "DT", "NN", "NNP", "VBZ"]  # an odd number: the BIOES head is built for them


def test_bioes_checkpoint_refuses_pos_labels_when_they_are_set(tmp_path):
    """transformers' `run_ner.py --ignore_mismatched_sizes` on POS data loads a BIOES checkpoint with `num_labels` of
    the POS tags, then sets `config.label2id`/`id2label`: the assignment fails, saying how to proceed, rather than the
    first training step. The way the message names (the checkpoint without its BIOES head) then trains."""
    built_then_renamed(head_tag_scheme="BIOES").save_pretrained(tmp_path)
    model = SLSTMForTokenClassification.from_pretrained(
        tmp_path, num_labels=len(POS_LABELS), ignore_mismatched_sizes=True
    )
    with pytest.raises(ValueError, match=r"needs IOB2 labels .*'\$'.*head_tag_scheme=None"):
        model.config.label2id = {label: index for index, label in enumerate(POS_LABELS)}
    with pytest.raises(ValueError, match=r"needs IOB2 labels .*'\$'.*head_tag_scheme=None"):
        model.config.id2label = dict(enumerate(POS_LABELS))

    model = SLSTMForTokenClassification.from_pretrained(
        tmp_path, num_labels=len(POS_LABELS), head_tag_scheme=None, ignore_mismatched_sizes=True
    )
    model.config.label2id = {label: index for index, label in enumerate(POS_LABELS)}
    model.config.id2label = dict(enumerate(POS_LABELS))
    ids, mask, _ = framed_batch()
    labels = torch.where(mask, ids % len(POS_LABELS), -100)
    output = model(input_ids=ids, attention_mask=mask, labels=labels)
    assert output.logits.shape == (*ids.shape, len(POS_LABELS))
    output.loss.backward()
