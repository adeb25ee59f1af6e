"""Masking is exact (a sentence gives the same outputs alone or inside a left/right padded batch) and word nodes only
exchange information through their window and the sentence node(s)."""

import pytest
import torch
from helpers import BOS, EOS, build, pad, random_ids, real, tagger_config, tiny_config

from modeling_slstm import SLSTMForSequenceClassification, SLSTMForTokenClassification, SLSTMModel

LENGTHS = (5, 1, 3, 2)  # mixed, including a one-token sentence
ATOL = 1e-5


def framed(lengths, seed=0):
    """Sentences framed by <s> … </s> (the tokenizer's output), so that the CRF inference chain skips the frame."""
    return [[BOS] + ids + [EOS] for ids in random_ids(lengths, seed)]


def token_labels(sentences, seed=1):
    """Random labels at the words, -100 at the <s>/</s> frame."""
    generator = torch.Generator().manual_seed(seed)
    return [[-100] + torch.randint(0, 5, (len(s) - 2,), generator=generator).tolist() + [-100] for s in sentences]


def run_alone_and_batched(model, sentences, side, labels=None, **kwargs):
    """Outputs of each sentence alone, and of the padded batch (with its mask); labels are padded with -100."""
    ids, mask = pad(sentences, side)
    batch_labels = pad(labels, side, value=-100)[0] if labels is not None else None
    with torch.no_grad():
        batched = model(input_ids=ids, attention_mask=mask, labels=batch_labels, **kwargs)
        alone = [
            model(input_ids=torch.tensor([s]), labels=None if labels is None else torch.tensor([labels[r]]), **kwargs)
            for r, s in enumerate(sentences)
        ]
    return alone, batched, mask


@pytest.mark.parametrize("initial_state", ["learned", "input"])
@pytest.mark.parametrize("side", ["right", "left"])
@pytest.mark.parametrize("num_sentence_nodes", [0, 1, 2])
def test_encoder_is_padding_invariant(side, num_sentence_nodes, initial_state):
    model = build(SLSTMModel, num_sentence_nodes=num_sentence_nodes, window_size=2, initial_state=initial_state)
    sentences = random_ids(LENGTHS)
    alone, batched, mask = run_alone_and_batched(model, sentences, side, output_hidden_states=True)
    assert len(batched.hidden_states) == model.config.num_steps + 1
    for row, single in enumerate(alone):
        states = real(batched.last_hidden_state, mask, row)
        torch.testing.assert_close(states, single.last_hidden_state[0], atol=ATOL, rtol=0)
        torch.testing.assert_close(batched.pooler_output[row], single.pooler_output[0], atol=ATOL, rtol=0)
        for step_batched, step_alone in zip(batched.hidden_states, single.hidden_states, strict=True):
            torch.testing.assert_close(real(step_batched, mask, row), step_alone[0], atol=ATOL, rtol=0)
    assert torch.all(batched.last_hidden_state[~mask] == 0)


@pytest.mark.parametrize("initial_state", ["learned", "input"])
@pytest.mark.parametrize("side", ["right", "left"])
@pytest.mark.parametrize("pooling", ["sentence", "attention", "mean"])
def test_sequence_classifier_is_padding_invariant(side, pooling, initial_state):
    model = build(
        SLSTMForSequenceClassification, classifier_pooling=pooling, num_labels=3, initial_state=initial_state
    )
    sentences = random_ids(LENGTHS)
    labels = torch.tensor([0, 2, 1, 2])
    ids, mask = pad(sentences, side)
    with torch.no_grad():
        batched = model(input_ids=ids, attention_mask=mask, labels=labels)
        alone = [model(input_ids=torch.tensor([s]), labels=labels[r : r + 1]) for r, s in enumerate(sentences)]
    torch.testing.assert_close(batched.logits, torch.cat([a.logits for a in alone]), atol=ATOL, rtol=0)
    expected_loss = torch.stack([a.loss for a in alone]).mean()  # CE is a batch mean of per-sentence losses
    torch.testing.assert_close(batched.loss, expected_loss, atol=ATOL, rtol=0)


@pytest.mark.parametrize("side", ["right", "left"])
@pytest.mark.parametrize("use_crf", [False, True])
def test_token_classifier_is_padding_invariant(side, use_crf):
    model = build(SLSTMForTokenClassification, tagger_config(use_crf=use_crf))
    sentences = framed(LENGTHS)
    labels = token_labels(sentences)
    for with_labels in (False, True):  # the CRF chain comes from the labels or from the mask and special ids
        alone, batched, mask = run_alone_and_batched(model, sentences, side, labels if with_labels else None)
        for row, single in enumerate(alone):
            torch.testing.assert_close(real(batched.logits, mask, row), single.logits[0], atol=ATOL, rtol=0)
    # Loss (from the labelled run): CRF NLL is a mean over sentences; softmax CE is a mean over labelled tokens.
    if use_crf:
        expected = torch.stack([a.loss for a in alone]).mean()
    else:
        counts = torch.tensor([sum(label != -100 for label in row) for row in labels], dtype=torch.float32)
        expected = (torch.stack([a.loss for a in alone]) * counts).sum() / counts.sum()
    torch.testing.assert_close(batched.loss, expected, atol=ATOL, rtol=0)


def test_padding_content_is_ignored():
    """Whatever sits under a zero mask (here: real word ids, not the pad id) changes nothing."""
    model = build(SLSTMModel)
    ids, mask = pad(random_ids([3, 6]))
    noisy = ids.clone()
    noisy[~mask] = 7
    with torch.no_grad():
        clean, dirty = model(input_ids=ids, attention_mask=mask), model(input_ids=noisy, attention_mask=mask)
    torch.testing.assert_close(dirty.last_hidden_state, clean.last_hidden_state, atol=0, rtol=0)
    torch.testing.assert_close(dirty.pooler_output, clean.pooler_output, atol=0, rtol=0)


# Locality. A word's state at step t reads its neighbours' states at step t-1 and its own x_i; h^0 is the learned
# initial state, which does not depend on the input, so h_i^T depends on x_j exactly for |i - j| <= w * (T - 1).
# Likewise g^1 reads only h^0 and c^0, so the sentence node carries x to far words from step 3 on.

LENGTH = 12


def jacobian_rows(model, position):
    """|d sum(h_position^T) / d x_j| summed over the embedding, for every j: (LENGTH,)."""
    embeds = torch.randn(1, LENGTH, model.config.embedding_dim, dtype=torch.float64, requires_grad=True)
    model(inputs_embeds=embeds).last_hidden_state[0, position].sum().backward()
    return embeds.grad[0].abs().sum(-1)


@pytest.mark.parametrize("window_size, num_steps", [(1, 2), (2, 2), (1, 3), (2, 3)])
def test_receptive_field_without_sentence_node(window_size, num_steps):
    model = build(SLSTMModel, dtype=torch.float64, window_size=window_size, num_steps=num_steps, num_sentence_nodes=0)
    radius = window_size * (num_steps - 1)
    for position in (LENGTH // 2, 1):
        gradient = jacobian_rows(model, position)
        distance = (torch.arange(LENGTH) - position).abs()
        assert torch.all(gradient[distance > radius] == 0), gradient
        assert torch.all(gradient[distance <= radius] > 0), gradient  # every j in reach, the farthest included


@pytest.mark.parametrize("window_size", [1, 2])
def test_sentence_node_reaches_far_words(window_size):
    config = tiny_config(window_size=window_size, num_steps=3, num_sentence_nodes=1)
    model = build(SLSTMModel, config, dtype=torch.float64)
    gradient = jacobian_rows(model, LENGTH - 1)
    assert torch.all(gradient > 0), gradient
    # With two steps the sentence node only carries input-independent state (g^1 reads h^0, c^0).
    model.config.num_steps = 2
    gradient = jacobian_rows(model, LENGTH - 1)
    assert torch.all(gradient[: LENGTH - 1 - window_size] == 0), gradient
