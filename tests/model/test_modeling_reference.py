"""`SLSTMModel` against a deliberately plain reference written from the equations in `docs/equations.md`.

The reference loops over sentences, positions, gates and sentence nodes, builds ξ_i by concatenating
h_{i-w} … h_{i+w} (zero vectors beyond the sentence edges), and normalises gates with an explicit exp / sum. It shares
nothing with the model but its weights, which `PaperParameters` slices out of the fused layers by the map in
`docs/equations.md` ("The map: fused weights → paper matrices"), so this test also checks that map.
"""

import pytest
import torch
from helpers import build, pad, random_ids

from modeling_slstm import SLSTMModel

LENGTHS = (1, 3, 5)
NUM_STEPS = 3


def sigmoid(x):
    return 1.0 / (1.0 + torch.exp(-x))


def normalised(pre_activations, gate_normalization):
    """Gates summing to one per hidden dimension: softmax of the sigmoids (paper) or of the raw values."""
    values = [sigmoid(p) if gate_normalization == "sigmoid_softmax" else p for p in pre_activations]
    exps = [torch.exp(v) for v in values]
    total = sum(exps)
    return [e / total for e in exps]


def blocks(tensor, size):
    return [tensor[k * size : (k + 1) * size] for k in range(tensor.shape[0] // size)]


class PaperParameters:
    """The paper's per-gate matrices W_k, U_k, V_k, b_k sliced out of the model's fused layers."""

    def __init__(self, model):
        config, t = model.config, model.transition
        self.H, self.w, self.K = config.hidden_size, config.window_size, config.num_sentence_nodes
        self.has_o, self.linear_u = not config.remove_output_gate, config.context_independent_content
        self.window = [f"l{d}" for d in range(self.w, 0, -1)] + ["f"] + [f"r{d}" for d in range(1, self.w + 1)]
        self.normalised = self.window + [f"s{k}" for k in range(self.K)] + ["i"]
        self.context = self.normalised + ["o"] * self.has_o + ["u"] * (not self.linear_u)
        inputs = self.context if not self.linear_u else self.context + ["u"]
        self.U = dict(zip(inputs, blocks(t.word_input.weight, self.H), strict=True))
        self.b = dict(zip(inputs, blocks(t.word_input.bias, self.H), strict=True))
        self.W = dict(zip(self.context, blocks(t.word_window.weight, self.H), strict=True))
        if self.K:
            self.V = dict(zip(self.context, blocks(t.word_sentence.weight, self.H), strict=True))
            gate_rows, gate_bias = blocks(t.sentence_gates.weight, self.H), blocks(t.sentence_gates.bias, self.H)
            split = self.K * self.H  # columns of [g_1; …; g_K], then h̄
            self.sentence = []
            for k in range(self.K):
                node = {
                    "W_g": gate_rows[k][:, :split], "U_g": gate_rows[k][:, split:], "b_g": gate_bias[k],
                    "W_f": blocks(t.word_forget_from_sentence.weight, self.H)[k],
                    "b_f": blocks(t.word_forget_from_sentence.bias, self.H)[k],
                    "U_f": blocks(t.word_forget_from_word.weight, self.H)[k],
                }  # fmt: skip
                if self.has_o:
                    o = self.K + k
                    node.update(W_o=gate_rows[o][:, :split], U_o=gate_rows[o][:, split:], b_o=gate_bias[o])
                self.sentence.append(node)


def reference_step(p, x, h, c, g, cg, gate_normalization):
    """One transition for one unpadded sentence: lists of (H,) vectors in, lists out. Both node kinds read t-1."""
    n, zero = len(x), torch.zeros(p.H, dtype=torch.float64)

    def at(states, j):
        return states[j] if 0 <= j < n else zero

    offsets = list(range(-p.w, p.w + 1))
    all_g = torch.cat(g) if p.K else None
    new_h, new_c = [], []
    for i in range(n):
        xi = torch.cat([at(h, i + d) for d in offsets])
        pre = {}
        for name in p.context:
            pre[name] = p.W[name] @ xi + p.U[name] @ x[i] + p.b[name]
            if p.K:
                pre[name] = pre[name] + p.V[name] @ all_g
        gate = dict(zip(p.normalised, normalised([pre[name] for name in p.normalised], gate_normalization)))
        content = p.U["u"] @ x[i] + p.b["u"] if p.linear_u else torch.tanh(pre["u"])
        cell = gate["i"] * content
        for name, d in zip(p.window, offsets):
            cell = cell + gate[name] * at(c, i + d)
        for k in range(p.K):
            cell = cell + gate[f"s{k}"] * cg[k]
        new_c.append(cell)
        new_h.append(sigmoid(pre["o"]) * torch.tanh(cell) if p.has_o else torch.tanh(cell))

    new_g, new_cg = [], []
    h_bar = sum(h) / n
    for k, node in enumerate(p.sentence if p.K else []):
        keep_pre = node["W_g"] @ all_g + node["U_g"] @ h_bar + node["b_g"]
        word_pre = [node["W_f"] @ all_g + node["U_f"] @ h[i] + node["b_f"] for i in range(n)]
        *word_forget, keep = normalised(word_pre + [keep_pre], gate_normalization)
        cell = keep * cg[k]
        for i in range(n):
            cell = cell + word_forget[i] * c[i]
        new_cg.append(cell)
        if p.has_o:
            new_g.append(sigmoid(node["W_o"] @ all_g + node["U_o"] @ h_bar + node["b_o"]) * torch.tanh(cell))
        else:
            new_g.append(torch.tanh(cell))
    return new_h, new_c, new_g, new_cg


def reference_initial_states(model, x):
    """`(h^0, c^0, g^0, c_g^0)` of one sentence with word representations `x` (list of vectors), as
    `config.initial_state` says: the learned `h^0` everywhere with zero cells, or each word's (projected) `x_i` as
    its state and cell, and their plain average for every sentence node."""
    K = model.config.num_sentence_nodes
    if model.config.initial_state == "learned":
        h0 = model.initial_states.learned_state
        zero = torch.zeros_like(h0)
        return [h0] * len(x), [zero] * len(x), [h0] * K, [zero] * K
    projection = model.initial_states.input_projection
    if isinstance(projection, torch.nn.Linear):
        h = [projection.weight @ x_i + projection.bias for x_i in x]
    else:
        h = list(x)
    mean = sum(h) / len(h)
    return h, list(h), [mean] * K, [mean] * K


def reference_forward(model, ids):
    """Word states of every step and the final sentence states of one sentence (list of ids)."""
    p = PaperParameters(model)
    x = [model.embeddings.word_embeddings.weight[i] for i in ids]
    h, c, g, cg = reference_initial_states(model, x)
    steps = [torch.stack(h)]
    for _ in range(model.config.num_steps):
        h, c, g, cg = reference_step(p, x, h, c, g, cg, model.config.gate_normalization)
        steps.append(torch.stack(h))
    return steps, g


SIMPLIFICATIONS = {
    "full": {},
    "linear_content": {"context_independent_content": True},
    "no_output_gate": {"remove_output_gate": True},
    "both": {"context_independent_content": True, "remove_output_gate": True},
}


@pytest.mark.parametrize("simplification", SIMPLIFICATIONS)
@pytest.mark.parametrize("gate_normalization", ["sigmoid_softmax", "softmax"])
@pytest.mark.parametrize("num_sentence_nodes", [0, 1, 2])
@pytest.mark.parametrize("window_size", [1, 2])
def test_model_matches_reference_recurrence(window_size, num_sentence_nodes, gate_normalization, simplification):
    assert_matches_reference(
        window_size=window_size,
        num_sentence_nodes=num_sentence_nodes,
        gate_normalization=gate_normalization,
        **SIMPLIFICATIONS[simplification],
    )


# `initial_state="input"` with embedding_dim 5 and hidden 6 goes through the projection; with equal widths through
# the identity. The initial states feed the same recurrence, checked above for every gate setting.
INPUT_INITIAL_STATES = {"projected": {}, "identity": {"embedding_dim": 6}}


@pytest.mark.parametrize("initial_state", INPUT_INITIAL_STATES)
@pytest.mark.parametrize("num_sentence_nodes", [0, 1, 2])
@pytest.mark.parametrize("window_size", [1, 2])
def test_model_matches_reference_from_the_input_initial_state(window_size, num_sentence_nodes, initial_state):
    assert_matches_reference(
        window_size=window_size,
        num_sentence_nodes=num_sentence_nodes,
        initial_state="input",
        **INPUT_INITIAL_STATES[initial_state],
    )


def assert_matches_reference(**settings):
    """For a float64 `SLSTMModel` of `NUM_STEPS` steps and `settings` at random weights: every step's word states, the
    final states and the pooled output of a padded batch of mixed lengths equal the reference's for each sentence
    alone (to 1e-10); padding holds zero state."""
    model = build(SLSTMModel, dtype=torch.float64, num_steps=NUM_STEPS, **settings)
    assert all(parameter.abs().min() > 0 for parameter in model.initial_states.parameters())  # random, not zero
    num_sentence_nodes = model.config.num_sentence_nodes
    sentences = random_ids(LENGTHS)
    ids, mask = pad(sentences)  # mixed lengths in one right-padded batch
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask, output_hidden_states=True)
        assert len(out.hidden_states) == NUM_STEPS + 1
        for row, sentence in enumerate(sentences):
            steps, g = reference_forward(model, sentence)
            n = len(sentence)
            for t, expected in enumerate(steps):
                torch.testing.assert_close(out.hidden_states[t][row, :n], expected, rtol=0, atol=1e-10)
                assert torch.all(out.hidden_states[t][row, n:] == 0)  # padding holds zero state
            torch.testing.assert_close(out.last_hidden_state[row, :n], steps[-1], rtol=0, atol=1e-10)
            pooled = g[0] if num_sentence_nodes else steps[-1].mean(0)
            torch.testing.assert_close(out.pooler_output[row], pooled, rtol=0, atol=1e-10)


def test_reference_differs_when_a_gate_block_is_swapped():
    """Guards the reference itself: permuting two gate blocks of the model's fused weights must be detected."""
    model = build(SLSTMModel, dtype=torch.float64, window_size=1, num_sentence_nodes=1)
    sentence = random_ids([4])[0]
    steps, _ = reference_forward(model, sentence)
    H = model.config.hidden_size
    with torch.no_grad():
        weight = model.transition.word_window.weight
        weight[: 2 * H] = torch.cat([weight[H : 2 * H], weight[:H]])  # swap l_1 and f
        swapped = model(input_ids=torch.tensor([sentence])).last_hidden_state[0]
    assert (swapped - steps[-1]).abs().max() > 1e-3
