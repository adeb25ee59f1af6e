"""Tests of the baseline encoders (`baselines`): padding invariance, heads, Auto round trip."""

import inspect
import itertools

import pytest
import torch
from transformers import AutoConfig, AutoModel, AutoModelForSequenceClassification, AutoModelForTokenClassification

from baselines import (
    BaselineEncoderConfig,
    BaselineForSequenceClassification,
    BaselineForTokenClassification,
    BaselineModel,
)
from modeling_slstm import SLSTMConfig, SLSTMForSequenceClassification, SLSTMForTokenClassification

ENCODERS = [("bilstm", 1), ("bilstm", 2), ("cnn", 2), ("transformer", 2), ("feed_forward", 2)]
LABELS = ["O", "B-PER", "I-PER", "E-PER", "S-PER"]


def tiny_config(encoder_type, num_layers, **kwargs):
    settings = {
        "encoder_type": encoder_type,
        "num_layers": num_layers,
        "vocab_size": 50,
        "embedding_dim": 12,
        "hidden_size": 16,
        "num_attention_heads": 4,
        "embedding_dropout": 0.0,
    }
    settings.update(kwargs)
    return BaselineEncoderConfig(**settings)


@pytest.fixture(autouse=True)
def register_auto_classes():
    """Register the baselines as the package `__init__` does (idempotent), so the test does not depend on it."""
    AutoConfig.register(BaselineEncoderConfig.model_type, BaselineEncoderConfig, exist_ok=True)
    AutoModel.register(BaselineEncoderConfig, BaselineModel, exist_ok=True)
    AutoModelForSequenceClassification.register(
        BaselineEncoderConfig, BaselineForSequenceClassification, exist_ok=True
    )
    AutoModelForTokenClassification.register(BaselineEncoderConfig, BaselineForTokenClassification, exist_ok=True)


@pytest.mark.parametrize("encoder_type,num_layers", ENCODERS)
def test_a_batch_of_zero_rows_is_named(encoder_type, num_layers):
    """As for the S-LSTM (test_config_and_errors.py): a `(0, seq)` batch is an error that names it."""
    model = BaselineForTokenClassification(tiny_config(encoder_type, num_layers, id2label=dict(enumerate(LABELS))))
    with pytest.raises(ValueError, match=r"The input batch is empty \(batch = 0, input shape \(0, 4\)\)"):
        model(torch.zeros(0, 4, dtype=torch.long), labels=torch.zeros(0, 4, dtype=torch.long))


@pytest.mark.parametrize("encoder_type,num_layers", ENCODERS)
def test_padding_invariance(encoder_type, num_layers):
    """A sentence gives the same outputs alone and inside a right-padded or left-padded batch."""
    torch.manual_seed(0)
    model = BaselineModel(tiny_config(encoder_type, num_layers)).eval()
    sentence = torch.randint(4, 50, (1, 5))
    alone = model(sentence)
    padded = torch.zeros(3, 9, dtype=torch.long)
    mask = torch.zeros(3, 9, dtype=torch.long)
    padded[0, :5], mask[0, :5] = sentence[0], 1  # right padding
    padded[1, 4:], mask[1, 4:] = sentence[0], 1  # left padding
    padded[2] = torch.randint(4, 50, (9,))  # a longer neighbour
    mask[2] = 1
    batch = model(padded, attention_mask=mask)
    for row, positions in ((0, slice(0, 5)), (1, slice(4, 9))):
        torch.testing.assert_close(
            batch.last_hidden_state[row, positions], alone.last_hidden_state[0], atol=1e-5, rtol=0
        )
        torch.testing.assert_close(batch.pooler_output[row], alone.pooler_output[0], atol=1e-5, rtol=0)
        assert batch.last_hidden_state[row][mask[row] == 0].abs().max() == 0
    assert batch.last_hidden_state.shape == (3, 9, 16) and batch.pooler_output.shape == (3, 16)


def test_bilstm_pooler_is_final_states():
    """The BiLSTM pooler is the final forward state (last word) and the final backward state (first word)."""
    torch.manual_seed(0)
    model = BaselineModel(tiny_config("bilstm", 2)).eval()
    outputs = model(torch.randint(4, 50, (2, 6)))
    half = 8
    torch.testing.assert_close(outputs.pooler_output[:, :half], outputs.last_hidden_state[:, -1, :half])
    torch.testing.assert_close(outputs.pooler_output[:, half:], outputs.last_hidden_state[:, 0, half:])


def test_feed_forward_reads_each_word_alone():
    """The feed-forward baseline is relu(W2 relu(W1 x_i + b1) + b2) of each word's representation, computed by hand,
    and its pooler the mean over the real words."""
    torch.manual_seed(0)
    model = BaselineModel(tiny_config("feed_forward", 2)).eval()
    ids, mask = torch.randint(4, 50, (2, 6)), torch.tensor([[1] * 6, [1] * 4 + [0] * 2])
    outputs = model(ids, attention_mask=mask)
    first, second = model.encoder.layers
    words = model.embeddings.word_embeddings(ids)  # (batch, seq, 12)
    expected = torch.relu(second(torch.relu(first(words)))) * mask.unsqueeze(-1)
    torch.testing.assert_close(outputs.last_hidden_state, expected)
    torch.testing.assert_close(outputs.pooler_output[1], expected[1, :4].mean(0))


def brute_force_crf_loss(crf, emissions: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean over the sentences of `log Z - score(gold)`, in float64, where `Z` sums `exp(score)` over every tag path
    on the labelled real positions that the CRF's constraints allow, enumerated one by one.

    Args: emissions `(batch, seq, tags)`, labels `(batch, seq)` (-100: no label), mask `(batch, seq)`."""
    start, end, transitions = (p.detach().double() for p in (crf.start_transitions, crf.end_transitions,
                                                              crf.transitions))  # fmt: skip

    def score(sentence_emissions, path):
        steps = sum(transitions[a, b] for a, b in itertools.pairwise(path))
        return sentence_emissions[range(len(path)), list(path)].sum() + start[path[0]] + end[path[-1]] + steps

    def allowed(path):
        moves = all(crf.transition_allowed[a, b] for a, b in itertools.pairwise(path))
        return bool(crf.start_allowed[path[0]] and crf.end_allowed[path[-1]] and moves)

    losses = []
    for sentence_emissions, sentence_labels, sentence_mask in zip(emissions.detach().double(), labels, mask.bool()):
        chain = (sentence_labels != -100) & sentence_mask
        selected, gold = sentence_emissions[chain], tuple(sentence_labels[chain].tolist())  # (k, tags), (k,)
        paths = itertools.product(range(crf.num_tags), repeat=len(gold))
        log_partition = torch.logsumexp(torch.stack([score(selected, p) for p in paths if allowed(p)]), 0)
        losses.append(log_partition - score(selected, gold))
    return torch.stack(losses).mean()


@pytest.mark.parametrize("encoder_type,num_layers", ENCODERS[1:])
def test_heads_train_and_round_trip(tmp_path, encoder_type, num_layers):
    """Both heads (token classification with a CRF) give the loss of their logits (the CRF's by enumerating the tag
    paths, the classifier's cross-entropy by hand), train, and reload through Auto."""
    torch.manual_seed(0)
    id2label = dict(enumerate(LABELS))
    config = tiny_config(
        encoder_type, num_layers, use_crf=True, id2label=id2label, label2id={v: k for k, v in id2label.items()}
    )
    tagger = BaselineForTokenClassification(config)
    input_ids = torch.randint(4, 50, (2, 7))
    mask = torch.ones(2, 7, dtype=torch.long)
    mask[1, 5:] = 0
    labels = torch.tensor([[-100, 4, 1, 2, 3, 0, -100], [-100, 0, 4, 0, -100, -100, -100]])
    tagger.eval()  # no dropout: the emissions below are those the loss saw
    output = tagger(input_ids, attention_mask=mask, labels=labels)
    emissions = tagger.classifier(tagger.encoder(input_ids, attention_mask=mask).last_hidden_state)
    expected = brute_force_crf_loss(tagger.crf, emissions, labels, mask)
    torch.testing.assert_close(output.loss.double(), expected, rtol=1e-5, atol=1e-5)
    output.loss.backward()
    assert tagger.crf is not None and tagger.encoder.embeddings.word_embeddings.weight.grad is not None

    tagger.save_pretrained(tmp_path / "tagger")
    reloaded = AutoModelForTokenClassification.from_pretrained(tmp_path / "tagger")
    assert type(reloaded) is BaselineForTokenClassification
    reloaded.eval()
    torch.testing.assert_close(
        reloaded(input_ids, attention_mask=mask).logits, tagger(input_ids, attention_mask=mask).logits
    )

    classifier = BaselineForSequenceClassification(tiny_config(encoder_type, num_layers, num_labels=3))
    output = classifier.eval()(input_ids, attention_mask=mask, labels=torch.tensor([0, 2]))
    assert output.logits.shape == (2, 3)
    log_probabilities = output.logits.double() - output.logits.double().exp().sum(-1, keepdim=True).log()
    expected = -(log_probabilities[0, 0] + log_probabilities[1, 2]) / 2
    torch.testing.assert_close(output.loss.double(), expected, rtol=1e-6, atol=1e-6)
    classifier.save_pretrained(tmp_path / "classifier")
    assert AutoConfig.from_pretrained(tmp_path / "classifier").encoder_type == encoder_type
    assert type(AutoModel.from_pretrained(tmp_path / "classifier")) is BaselineModel


def test_config_validation():
    with pytest.raises(ValueError, match="encoder_type"):
        BaselineEncoderConfig(encoder_type="gru")
    with pytest.raises(ValueError, match="even"):
        BaselineEncoderConfig(encoder_type="bilstm", hidden_size=15)
    with pytest.raises(ValueError, match="divide"):
        BaselineEncoderConfig(encoder_type="transformer", hidden_size=16, num_attention_heads=3)


def test_input_longer_than_learned_positions_is_a_clear_error():
    """It was a bare `IndexError: index out of range in self` from the position embedding."""
    model = BaselineModel(tiny_config("transformer", 1, position_embedding_type="learned", max_position_embeddings=8))
    model(input_ids=torch.randint(4, 50, (2, 8)))  # as many tokens as positions: fine
    with pytest.raises(ValueError, match=r"Input of 9 tokens, but learned positions cover at most .* = 8 tokens"):
        model(input_ids=torch.randint(4, 50, (2, 9)))


@pytest.mark.parametrize(
    "baseline_class, slstm_class",
    [
        (BaselineForSequenceClassification, SLSTMForSequenceClassification),
        (BaselineForTokenClassification, SLSTMForTokenClassification),
    ],
)
def test_copied_forwards_stay_identical_to_the_slstm_ones(baseline_class, slstm_class):
    # Each task model owns its `forward` ("copy, don't abstract"); the baselines' copies must not drift from the
    # S-LSTM originals, or the comparison would no longer change the encoder only.
    assert inspect.getsource(baseline_class.forward) == inspect.getsource(slstm_class.forward)
    # The same heads around each encoder, which each model keeps under its own `base_model_prefix`.
    baseline_model = baseline_class(BaselineEncoderConfig(use_crf=True, id2label=dict(enumerate(LABELS))))
    slstm_model = slstm_class(SLSTMConfig(use_crf=True, id2label=dict(enumerate(LABELS))))
    assert baseline_model.base_model_prefix == "encoder" and slstm_model.base_model_prefix == "slstm"
    heads = [{name for name, _ in model.named_children()} - {model.base_model_prefix}
             for model in (baseline_model, slstm_model)]  # fmt: skip
    assert heads[0] == heads[1]
