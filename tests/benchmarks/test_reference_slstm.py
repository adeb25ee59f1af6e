"""The speed yardstick `run_scripts/benchmarks/support/reference_slstm.py` (a plain S-LSTM written from the equations)
computes what `SLSTMModel` computes: with the model's weights copied into it, on the paper configuration (window 1,
one sentence node, the learned initial state), the same word and sentence states on a padded batch."""

import torch
from helpers import pad, random_ids, randomize_

from modeling_slstm import SLSTMConfig, SLSTMModel
from run_scripts.benchmarks.support.reference_slstm import ReferenceSLSTM


def reference_with_weights_of(model: SLSTMModel) -> ReferenceSLSTM:
    """The reference S-LSTM holding `model`'s weights: the model's fused layers cut into the reference's per-family
    layers by the map of docs/equations.md (the model's gate order is l, f, r, s, i, o, u; the reference's
    l, r, f, s, i, o, u, reading [h_{i-1}; h_i; h_{i+1}; x_i; g])."""
    config, transition = model.config, model.transition
    hidden = config.hidden_size
    reference = ReferenceSLSTM(
        config.vocab_size, config.embedding_dim, hidden, config.num_steps, embedding_dropout=0.0
    ).to(torch.float64)

    def blocks(weight):  # (7 * hidden, columns) -> the reference's gate order
        l, f, r, s, i, o, u = weight.split(hidden)
        return torch.cat([l, r, f, s, i, o, u])

    with torch.no_grad():
        reference.embeddings.weight.copy_(model.embeddings.word_embeddings.weight)
        reference.initial_state.copy_(model.initial_states.learned_state)
        columns = [transition.word_window.weight, transition.word_input.weight, transition.word_sentence.weight]
        reference.word_gates.weight.copy_(torch.cat([blocks(weight) for weight in columns], dim=1))
        reference.word_gates.bias.copy_(blocks(transition.word_input.bias.unsqueeze(1)).squeeze(1))
        keep_rows, output_rows = transition.sentence_gates.weight.split(hidden)  # each reads [g; h̄]
        keep_bias, output_bias = transition.sentence_gates.bias.split(hidden)
        reference.sentence_forget_gate.weight.copy_(keep_rows)
        reference.sentence_forget_gate.bias.copy_(keep_bias)
        reference.sentence_output_gate.weight.copy_(output_rows)
        reference.sentence_output_gate.bias.copy_(output_bias)
        word_forget = [transition.word_forget_from_sentence.weight, transition.word_forget_from_word.weight]
        reference.word_forget_gate.weight.copy_(torch.cat(word_forget, dim=1))  # reads [g; h_i]
        reference.word_forget_gate.bias.copy_(transition.word_forget_from_sentence.bias)
    return reference.eval()


def test_reference_equals_the_model_on_the_paper_configuration():
    config = SLSTMConfig(vocab_size=30, embedding_dim=7, hidden_size=6, num_steps=9, embedding_dropout=0.0)
    torch.manual_seed(0)
    model = randomize_(SLSTMModel(config).to(torch.float64), scale=0.5).eval()
    reference = reference_with_weights_of(model)
    ids, mask = pad(random_ids([6, 1, 4]))
    with torch.no_grad():
        expected = model(input_ids=ids, attention_mask=mask)
        states, sentence_state = reference(ids, attention_mask=mask)
    torch.testing.assert_close(states, expected.last_hidden_state, rtol=0, atol=1e-10)
    torch.testing.assert_close(sentence_state, expected.pooler_output, rtol=0, atol=1e-10)


def test_a_swapped_gate_block_is_detected():
    """Guards the weight map itself: the reference with two gate families exchanged computes something else."""
    config = SLSTMConfig(vocab_size=30, embedding_dim=7, hidden_size=6, num_steps=3, embedding_dropout=0.0)
    torch.manual_seed(0)
    model = randomize_(SLSTMModel(config).to(torch.float64)).eval()
    reference = reference_with_weights_of(model)
    with torch.no_grad():
        weight = reference.word_gates.weight
        weight[:12] = torch.cat([weight[6:12], weight[:6]])  # l and r exchanged
        ids = torch.tensor([random_ids([5])[0]])
        assert (reference(ids)[0] - model(input_ids=ids).last_hidden_state).abs().max() > 1e-3
