"""A plain PyTorch S-LSTM written straight from the equations, as a yardstick for the package's speed.

This is the implementation a researcher would write first from `docs/equations.md` (Eqs. 2-3 of Zhang, Liu & Song,
2018): every step, all gates of a word read one concatenation `[h_{i-1}; h_i; h_{i+1}; x_i; g]` through one
`nn.Linear`, the five cell gates are normalised with a softmax, and the sentence node takes a masked softmax over its
per-word forget gates. It does none of the package's work-saving (computing `U x_i` once, `V g` once per sentence,
avoiding the window copy), which is exactly what `run_scripts/benchmarks/benchmark_speed.py` measures the package against.

Scope: the paper's setting only (window 1, one sentence node, output gate, softmax of sigmoids). Positions where
`attention_mask` is 0 hold zero state and are left out of the sentence node, so right or left padding does not change
the outputs at real positions.
"""

import torch
from torch import nn


class ReferenceSLSTM(nn.Module):
    r"""
    S-LSTM encoder (window 1, one sentence node), one `nn.Linear` per node kind and gate family.

    Args:
        vocab_size (`int`): rows of the word embedding.
        embedding_dim (`int`, *optional*, defaults to 300): width of `x_i`.
        hidden_size (`int`, *optional*, defaults to 300): width `H` of every state and cell.
        num_steps (`int`, *optional*, defaults to 9): recurrent steps.
        embedding_dropout (`float`, *optional*, defaults to 0.5): dropout on `x_i` (the paper's only dropout).
        pad_token_id (`int`, *optional*, defaults to 0): the embedding's padding row.

    The parameters match the package's paper configuration one for one (3.69M outside the embedding at H = E = 300).
    """

    def __init__(
        self,
        vocab_size: int,
        embedding_dim: int = 300,
        hidden_size: int = 300,
        num_steps: int = 9,
        embedding_dropout: float = 0.5,
        pad_token_id: int = 0,
    ):
        super().__init__()
        self.hidden_size = hidden_size
        self.num_steps = num_steps
        self.embeddings = nn.Embedding(vocab_size, embedding_dim, padding_idx=pad_token_id)
        self.embedding_dropout = nn.Dropout(embedding_dropout)
        # h^0 = g^0, the paper's learned initial state.
        self.initial_state = nn.Parameter(torch.zeros(hidden_size))
        # Eq. 2: the gates l, r, f, s, i, o and the content u of a word, from [h_{i-1}; h_i; h_{i+1}; x_i; g].
        self.word_gates = nn.Linear(4 * hidden_size + embedding_dim, 7 * hidden_size)
        # Eq. 3: f_g and o of the sentence node, from [g; h̄]; the forget gate f_i of each word, from [g; h_i].
        self.sentence_forget_gate = nn.Linear(2 * hidden_size, hidden_size)
        self.sentence_output_gate = nn.Linear(2 * hidden_size, hidden_size)
        self.word_forget_gate = nn.Linear(2 * hidden_size, hidden_size)

    def forward(
        self, input_ids: torch.LongTensor, attention_mask: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        r"""
        Args:
            input_ids (`torch.LongTensor` of shape `(batch, seq)`): token ids.
            attention_mask (`torch.Tensor` of shape `(batch, seq)`, *optional*): 1 for real tokens, 0 for padding.

        Returns:
            `(word_states, sentence_state)`: `h^T` `(batch, seq, hidden)`, zero at padding; `g^T` `(batch, hidden)`.
        """
        x = self.embedding_dropout(self.embeddings(input_ids))  # (batch, seq, embedding)
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        mask = attention_mask.unsqueeze(-1).to(x.dtype)  # (batch, seq, 1)
        batch, seq, _ = x.shape
        h = self.initial_state.expand(batch, seq, -1) * mask  # (batch, seq, hidden)
        c = torch.zeros_like(h)
        g = self.initial_state.expand(batch, -1)  # (batch, hidden)
        c_g = torch.zeros_like(g)
        for _ in range(self.num_steps):
            # Both node kinds read the states of the previous step.
            (h, c), (g, c_g) = self.word_step(x, h, c, g, c_g, mask), self.sentence_step(h, c, g, c_g, mask)
        return h, g

    def word_step(self, x, h, c, g, c_g, mask):
        """Eq. 2 for every word: the new `(h, c)`, each `(batch, seq, hidden)`."""
        h_left, h_right = shift_right(h), shift_left(h)  # h_{i-1}, h_{i+1}: zero beyond the edges
        g_per_word = g.unsqueeze(1).expand_as(h)  # (batch, seq, hidden)
        pre = self.word_gates(torch.cat([h_left, h, h_right, x, g_per_word], dim=-1))  # (batch, seq, 7 * hidden)
        l, r, f, s, i, o, u = pre.chunk(7, dim=-1)
        # The five cell gates sum to one per hidden unit: a softmax over the gates of their sigmoids.
        l, r, f, s, i = torch.softmax(torch.sigmoid(torch.stack([l, r, f, s, i])), dim=0)
        c_new = l * shift_right(c) + f * c + r * shift_left(c) + s * c_g.unsqueeze(1) + i * torch.tanh(u)
        h_new = torch.sigmoid(o) * torch.tanh(c_new)
        return h_new * mask, c_new * mask  # padding holds zero state

    def sentence_step(self, h, c, g, c_g, mask):
        """Eq. 3: the new sentence state and cell, each `(batch, hidden)`."""
        h_mean = (h * mask).sum(1) / mask.sum(1).clamp(min=1)  # h̄ over real words: (batch, hidden)
        g_and_mean = torch.cat([g, h_mean], dim=-1)
        keep = torch.sigmoid(self.sentence_forget_gate(g_and_mean))  # f_g: (batch, hidden)
        output = torch.sigmoid(self.sentence_output_gate(g_and_mean))  # o: (batch, hidden)
        word_forget = torch.sigmoid(self.word_forget_gate(torch.cat([g.unsqueeze(1).expand_as(h), h], dim=-1)))
        word_forget = word_forget.masked_fill(mask == 0, float("-inf"))  # padding gets weight 0: (batch, seq, hidden)
        # Softmax over (f_1 … f_n, f_g), per hidden unit.
        weights = torch.softmax(torch.cat([word_forget, keep.unsqueeze(1)], dim=1), dim=1)  # (batch, seq + 1, hidden)
        c_g_new = (weights[:, :-1] * c).sum(1) + weights[:, -1] * c_g
        return output * torch.tanh(c_g_new), c_g_new


def shift_right(states: torch.Tensor) -> torch.Tensor:
    """`states[:, i - 1]` at position `i`, zero at the first position. `(batch, seq, hidden)` in and out."""
    return torch.cat([torch.zeros_like(states[:, :1]), states[:, :-1]], dim=1)


def shift_left(states: torch.Tensor) -> torch.Tensor:
    """`states[:, i + 1]` at position `i`, zero at the last position. `(batch, seq, hidden)` in and out."""
    return torch.cat([states[:, 1:], torch.zeros_like(states[:, :1])], dim=1)
