"""PyTorch Sentence-State LSTM (S-LSTM; Zhang, Liu & Song, ACL 2018).

Every word keeps its own state and all words are updated in parallel for a fixed number of steps: each step a word
reads its neighbours' states (local exchange) and the sentence node(s) (global exchange), while the sentence node
reads every word. Equation numbers refer to the paper; `../shared/docs/slstm-equations.md` states them cleanly.
"""

import torch
from torch import nn
from transformers import PreTrainedModel
from transformers import initialization as init
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import BaseModelOutputWithPooling

from .configuration_slstm import SLSTMConfig
from .crf import ConditionalRandomField
from .fast_linear import linear
from .heads import SequenceClassificationHeadMixin, TokenClassificationHeadMixin, masked_mean
from .word_embeddings import WordEmbeddingsMixin, validated_attention_mask


def neighbourhood(states: torch.Tensor, window_size: int) -> torch.Tensor:
    """The states of positions `i - w ... i + w` for every position `i`, zero beyond the edges.

    Args:
        states (`torch.Tensor` of shape `(batch, seq, hidden)`): word states or cells, zero at padding.
        window_size (`int`): `w`.

    Returns:
        A view of shape `(batch, seq, 2w + 1, hidden)` over a zero-padded copy (no per-window copies).
    """
    padded = nn.functional.pad(states, (0, 0, window_size, window_size))  # (batch, seq + 2w, hidden)
    return padded.unfold(1, 2 * window_size + 1, 1).transpose(2, 3)  # (batch, seq, 2w + 1, hidden)


class SLSTMStateTransition(GradientCheckpointingLayer):
    r"""
    One S-LSTM state transition `H^{t-1} -> H^t`: word nodes (Eq. 2) and sentence nodes (Eq. 3). The same module (the
    same parameters) is applied at every step.

    The word-node pre-activations `W ξ_i + U x_i + V g + b` are split by cost: `U x_i + b` does not change across
    steps and is computed once per forward (`input_terms`); `V g` is one vector per sentence, broadcast over its
    words; only `W ξ_i` is a per-token, per-step matmul, done as one matmul over all positions.

    Gate blocks, each of width `hidden_size`, in this order: the `2w + 1` window gates (`l_w … l_1, f, r_1 … r_w`,
    matching the cells `c_{i-w} … c_{i+w}`), one `s_k` per sentence node, the content gate `i` (these are normalised
    together), then the output gate `o` (unless `remove_output_gate`) and the content `u` (unless
    `context_independent_content`, where `u_i = U_u x_i + b_u` comes from the input alone).

    Args:
        config ([`SLSTMConfig`]): `hidden_size`, `embedding_dim`, `window_size`, `num_sentence_nodes`,
            `gate_normalization`, `context_independent_content`, `remove_output_gate`, `hidden_dropout` are read.
    """

    def __init__(self, config: SLSTMConfig):
        super().__init__()
        hidden = config.hidden_size
        self.hidden_size = hidden
        self.window_size = config.window_size
        self.window_width = 2 * config.window_size + 1
        self.num_sentence_nodes = config.num_sentence_nodes
        self.num_normalized_gates = self.window_width + self.num_sentence_nodes + 1
        self.has_output_gate = not config.remove_output_gate
        self.has_recurrent_content = not config.context_independent_content
        self.softmax_of_sigmoid = config.gate_normalization == "sigmoid_softmax"
        self.num_context_blocks = self.num_normalized_gates + self.has_output_gate + self.has_recurrent_content
        num_input_blocks = self.num_normalized_gates + self.has_output_gate + 1

        # Eq. 2: U x_i + b, W ξ_i, V g^{t-1}.
        self.word_input = nn.Linear(config.embedding_dim, num_input_blocks * hidden)
        self.word_window = nn.Linear(self.window_width * hidden, self.num_context_blocks * hidden, bias=False)
        self.hidden_dropout = nn.Dropout(config.hidden_dropout)
        if self.num_sentence_nodes:
            sentence_width = self.num_sentence_nodes * hidden
            self.word_sentence = nn.Linear(sentence_width, self.num_context_blocks * hidden, bias=False)
            # Eq. 3: f_g and o read g^{t-1} (all sentence nodes, so they exchange information) and the word mean;
            # the per-word forget gates f_i read g^{t-1} and h_i^{t-1}.
            num_sentence_blocks = 1 + self.has_output_gate
            self.sentence_gates = nn.Linear(sentence_width + hidden, num_sentence_blocks * sentence_width)
            self.word_forget_from_sentence = nn.Linear(sentence_width, sentence_width)
            self.word_forget_from_word = nn.Linear(hidden, sentence_width, bias=False)

    def input_terms(self, inputs_embeds: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """`U x_i + b` for all gates, computed once per forward because `x_i` does not change across steps.

        Args:
            inputs_embeds (`torch.Tensor` of shape `(batch, seq, embedding_dim)`)

        Returns:
            `(gate_terms, content)`: `(batch, seq, num_context_blocks * hidden)` and, with a context-independent
            content layer, the content `u_i` `(batch, seq, hidden)` (else `None`).
        """
        terms = self.word_input(inputs_embeds)  # (batch, seq, num_input_blocks * hidden)
        if self.has_recurrent_content:
            return terms, None
        gate_terms, content = terms.split([self.num_context_blocks * self.hidden_size, self.hidden_size], dim=-1)
        return gate_terms.contiguous(), content

    def normalize(self, pre_activations: torch.Tensor, dim: int) -> torch.Tensor:
        """Gates that sum to one along `dim`; float32 so that low-precision autocast cannot skew the weights."""
        if self.softmax_of_sigmoid:
            pre_activations = torch.sigmoid(pre_activations)
        # At least float32 (float64 stays float64, e.g. for gradcheck).
        dtype = torch.promote_types(pre_activations.dtype, torch.float32)
        return torch.softmax(pre_activations, dim=dim, dtype=dtype)

    def forward(
        self,
        word_states: torch.Tensor,
        word_cells: torch.Tensor,
        sentence_states: torch.Tensor,
        sentence_cells: torch.Tensor,
        input_gate_terms: torch.Tensor,
        input_content: torch.Tensor | None,
        mask: torch.Tensor,
        lengths: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        r"""
        Args:
            word_states, word_cells (`torch.Tensor` of shape `(batch, seq, hidden)`): `h^{t-1}`, `c^{t-1}`, zero at
                padding.
            sentence_states, sentence_cells (`torch.Tensor` of shape `(batch, num_sentence_nodes, hidden)`):
                `g^{t-1}`, `c_g^{t-1}`.
            input_gate_terms, input_content: from [`~SLSTMStateTransition.input_terms`].
            mask (`torch.Tensor` of shape `(batch, seq, 1)`): 1.0 at real positions, 0.0 at padding.
            lengths (`torch.Tensor` of shape `(batch, 1)`): number of real positions (at least 1).

        Returns:
            `(h^t, c^t, g^t, c_g^t)`, shaped like the inputs. Both node kinds read step `t-1` values only.
        """
        word_states = self.hidden_dropout(word_states)
        sentence_states = self.hidden_dropout(sentence_states)
        new_word_states, new_word_cells = self.update_words(
            word_states, word_cells, sentence_states, sentence_cells, input_gate_terms, input_content, mask
        )
        if self.num_sentence_nodes:
            sentence_states, sentence_cells = self.update_sentence(
                word_states, word_cells, sentence_states, sentence_cells, mask, lengths
            )
        return new_word_states, new_word_cells, sentence_states, sentence_cells

    def update_words(self, h, c, g, c_g, input_gate_terms, input_content, mask):
        """Eq. 2, all words at once.

        Written for speed, with the same math as the equations: one matmul `W ξ_i` over all positions (by oneDNN for
        float32 on CPU, see [`linear`]); the pre-activations and gates are cut with `split` (whose backward is one
        concatenation) rather than slicing (whose backward writes a zero tensor per slice).
        """
        batch, seq, hidden = h.shape
        xi = neighbourhood(h, self.window_size).reshape(batch, seq, self.window_width * hidden)  # ξ_i
        bias = input_gate_terms.view(batch, seq, self.num_context_blocks, hidden)  # U x_i + b
        if self.num_sentence_nodes:
            sentence_term = linear(g.flatten(1), self.word_sentence.weight)  # V g^{t-1}: (batch, blocks * hidden)
            bias = bias + sentence_term.view(batch, 1, self.num_context_blocks, hidden)
        pre = linear(xi, self.word_window.weight).view(batch, seq, self.num_context_blocks, hidden) + bias

        # (i, l, f, r, s) = softmax over the gates, per hidden dimension.
        blocks = [self.num_normalized_gates, int(self.has_output_gate), int(self.has_recurrent_content)]
        gate_pre, output_pre, content_pre = pre.split(blocks, dim=2)
        gates = self.normalize(gate_pre, dim=2)  # (batch, seq, gates, hidden)
        window_gates, sentence_gates, content_gate = gates.split(
            [self.window_width, self.num_sentence_nodes, 1], dim=2
        )

        content = torch.tanh(content_pre.squeeze(2)) if self.has_recurrent_content else input_content  # u_i
        cells = (window_gates * neighbourhood(c, self.window_size)).sum(2) + content_gate.squeeze(2) * content
        if self.num_sentence_nodes:
            cells = cells + (sentence_gates * c_g.unsqueeze(1)).sum(2)  # s ⊙ c_g^{t-1}
        states = torch.tanh(cells)
        if self.has_output_gate:
            states = torch.sigmoid(output_pre.squeeze(2)) * states  # o ⊙ tanh(c)
        # Padding and positions beyond the edges hold zero state, so they contribute nothing to neighbours.
        cells = cells.to(h.dtype) * mask
        states = states.to(h.dtype) * mask
        return states, cells

    def update_sentence(self, h, c, g, c_g, mask, lengths):
        """Eq. 3 for every sentence node at once."""
        batch, seq, hidden = h.shape
        nodes = self.num_sentence_nodes
        mean_state = h.sum(1) / lengths  # h̄ over real positions (h is zero at padding): (batch, hidden)
        flat_g = g.flatten(1)  # (batch, nodes * hidden)
        sentence_pre = linear(
            torch.cat([flat_g, mean_state], dim=-1), self.sentence_gates.weight, self.sentence_gates.bias
        )
        sentence_pre = sentence_pre.view(batch, -1, nodes, hidden)  # W g + U h̄ + b: (batch, 1 + o, nodes, hidden)
        keep_pre, output_pre = sentence_pre.split([1, int(self.has_output_gate)], dim=1)
        sentence_forget = linear(flat_g, self.word_forget_from_sentence.weight, self.word_forget_from_sentence.bias)
        word_pre = linear(h, self.word_forget_from_word.weight).view(batch, seq, nodes, hidden) + sentence_forget.view(
            batch, 1, nodes, hidden
        )  # f̂_i = W_f g + U_f h_i + b_f

        if self.softmax_of_sigmoid:
            word_pre = torch.sigmoid(word_pre)
            keep_pre = torch.sigmoid(keep_pre)
        # softmax over (f_0 … f_{n+1}, f_g): padding gets -inf, i.e. weight exactly zero.
        word_pre = word_pre.masked_fill(mask.unsqueeze(-1) == 0, float("-inf"))
        dtype = torch.promote_types(word_pre.dtype, torch.float32)
        weights = torch.softmax(torch.cat([word_pre, keep_pre], dim=1), dim=1, dtype=dtype)
        word_weights, keep_weights = weights.split([seq, 1], dim=1)
        cells = (word_weights * c.unsqueeze(2)).sum(1) + keep_weights.squeeze(1) * c_g  # (batch, nodes, hidden)
        states = torch.tanh(cells)
        if self.has_output_gate:
            states = torch.sigmoid(output_pre.squeeze(1)) * states
        return states.to(h.dtype), cells.to(h.dtype)


class SLSTMPreTrainedModel(PreTrainedModel):
    r"""
    Weight initialisation and loading for the S-LSTM models.

    `_init_weights` choices: gate matrices (`nn.Linear`) uniform in `±1/sqrt(hidden_size)`, as `torch.nn.LSTM`
    initialises its gates, so that every gate starts in sigmoid's linear range whatever the window or node count;
    biases zero; word embeddings normal with `config.initializer_range` (replaced by pretrained vectors when given)
    and a zero padding row; the learned initial state `h^0` zero; the CRF's own `reset_parameters` (pytorch-crf's uniform
    `±0.1` scores, and the scheme constraints, which are masks rather than parameters).
    """

    config_class = SLSTMConfig
    base_model_prefix = "slstm"
    supports_gradient_checkpointing = True
    _no_split_modules = ["SLSTMStateTransition"]

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            bound = self.config.hidden_size**-0.5
            init.uniform_(module.weight, -bound, bound)
            if module.bias is not None:
                init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            init.normal_(module.weight, mean=0.0, std=self.config.initializer_range)
            if module.padding_idx is not None:
                init.zeros_(module.weight[module.padding_idx])
        elif isinstance(module, SLSTMModel):
            init.zeros_(module.initial_state)
        elif isinstance(module, ConditionalRandomField):
            # Also rewrites the constraint buffers, which checkpoints do not hold.
            module.reset_parameters()


class SLSTMModel(WordEmbeddingsMixin, SLSTMPreTrainedModel):
    r"""
    The bare S-LSTM encoder: word embeddings, then `num_steps` state transitions.

    Args:
        config ([`SLSTMConfig`]): model configuration.

    Any `attention_mask` is exact: a masked position holds zero state, is left out of the sentence-node mean and
    softmax, and so contributes nothing; a sentence gives the same outputs alone, right-padded or left-padded.
    """

    def __init__(self, config: SLSTMConfig):
        super().__init__(config)
        self.init_word_embeddings(config)
        self.transition = SLSTMStateTransition(config)
        # h^0 = g^0: the paper's learned initial state; cells start at zero.
        self.initial_state = nn.Parameter(torch.zeros(config.hidden_size))
        self.post_init()

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        **kwargs,
    ) -> BaseModelOutputWithPooling | tuple:
        r"""
        Args:
            input_ids (`torch.LongTensor` of shape `(batch, seq)`): token ids; boundary tokens `<s>`/`</s>` come from
                the tokenizer, the model inserts none.
            attention_mask (`torch.Tensor` of shape `(batch, seq)`, *optional*): 1 for real tokens, 0 for padding.
                Defaults to all ones.
            inputs_embeds (`torch.Tensor` of shape `(batch, seq, embedding_dim)`, *optional*): instead of `input_ids`.
            output_hidden_states (`bool`, *optional*): also return the word states `h^0 … h^T`.
            return_dict (`bool`, *optional*): return a [`BaseModelOutputWithPooling`] instead of a tuple.

        Returns:
            `last_hidden_state` `(batch, seq, hidden)`: the final word states (zero at padding); `pooler_output`
            `(batch, hidden)`: the first sentence node's final state, or the masked mean of the word states when there
            is no sentence node; `hidden_states`: `num_steps + 1` tensors `(batch, seq, hidden)` when asked.
        """
        output_hidden_states = (
            output_hidden_states if output_hidden_states is not None else self.config.output_hidden_states
        )
        return_dict = return_dict if return_dict is not None else self.config.return_dict
        inputs_embeds = self.embed(input_ids, inputs_embeds)
        batch, seq, _ = inputs_embeds.shape
        attention_mask = validated_attention_mask(attention_mask, batch, seq, inputs_embeds.device)

        mask = attention_mask.unsqueeze(-1).to(inputs_embeds.dtype)  # (batch, seq, 1)
        lengths = mask.sum(1).clamp(min=1)  # (batch, 1)
        input_gate_terms, input_content = self.transition.input_terms(self.embedding_dropout(inputs_embeds))

        hidden = self.config.hidden_size
        initial = self.initial_state.to(inputs_embeds.dtype)
        word_states = initial.expand(batch, seq, hidden) * mask  # (batch, seq, hidden)
        word_cells = torch.zeros_like(word_states)
        sentence_states = initial.expand(batch, self.config.num_sentence_nodes, hidden)  # (batch, nodes, hidden)
        sentence_cells = torch.zeros_like(sentence_states)

        all_word_states = (word_states,) if output_hidden_states else None
        for _ in range(self.config.num_steps):
            word_states, word_cells, sentence_states, sentence_cells = self.transition(
                word_states,
                word_cells,
                sentence_states,
                sentence_cells,
                input_gate_terms,
                input_content,
                mask,
                lengths,
            )
            if output_hidden_states:
                all_word_states += (word_states,)

        if self.config.num_sentence_nodes:
            pooled = sentence_states[:, 0]
        else:
            pooled = masked_mean(word_states, attention_mask)
        if not return_dict:
            return tuple(v for v in (word_states, pooled, all_word_states) if v is not None)
        return BaseModelOutputWithPooling(
            last_hidden_state=word_states, pooler_output=pooled, hidden_states=all_word_states
        )


class SLSTMForSequenceClassification(SequenceClassificationHeadMixin, SLSTMPreTrainedModel):
    r"""
    S-LSTM with a sentence classifier: `y = softmax(W_c r + b_c)` where `r` follows `config.classifier_pooling`
    (the sentence state `g`, the paper's additive attention over word states, or their mean). `labels` `(batch,)`
    (or `(batch, num_labels)` for multi-label / regression) give a loss that follows `config.problem_type`.

    Args:
        config ([`SLSTMConfig`]): model configuration; `num_labels`, `classifier_pooling`, `classifier_dropout`.
    """

    def __init__(self, config: SLSTMConfig):
        super().__init__(config)
        self.slstm = SLSTMModel(config)
        self.init_sequence_classification_head(config)
        self.post_init()


class SLSTMForTokenClassification(TokenClassificationHeadMixin, SLSTMPreTrainedModel):
    r"""
    S-LSTM with a per-word tagger: a linear layer on the final word states, then a softmax or (with
    `config.use_crf`) a linear-chain CRF, exposed as `model.crf`. See [`TokenClassificationHeadMixin`] for the
    loss, the CRF chain and the meaning of `logits`.

    Args:
        config ([`SLSTMConfig`]): model configuration; `num_labels`/`id2label`, `use_crf`, `crf_constraints`,
            `classifier_dropout`.
    """

    def __init__(self, config: SLSTMConfig):
        super().__init__(config)
        self.slstm = SLSTMModel(config)
        self.init_token_classification_head(config)
        self.post_init()


SLSTMConfig.register_for_auto_class()
SLSTMModel.register_for_auto_class("AutoModel")
SLSTMForSequenceClassification.register_for_auto_class("AutoModelForSequenceClassification")
SLSTMForTokenClassification.register_for_auto_class("AutoModelForTokenClassification")

__all__ = [
    "SLSTMPreTrainedModel",
    "SLSTMModel",
    "SLSTMForSequenceClassification",
    "SLSTMForTokenClassification",
]
