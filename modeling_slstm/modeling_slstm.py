"""PyTorch Sentence-State LSTM (S-LSTM; Zhang, Liu & Song, ACL 2018).

Every word keeps its own state and all words are updated in parallel for a fixed number of steps: each step a word
reads its neighbours' states (local exchange) and the sentence node(s) (global exchange), while the sentence node
reads every word. Equation numbers refer to the paper; `docs/equations.md` of the repository states them and maps
every weight below to the paper's matrices.

Reading order, as in transformers' model files: the modules, [`SLSTMEmbeddings`] (the word representations `x_i`:
word embeddings, optionally followed by the character features of [`SLSTMCharCNN`] and a pretrained encoder's word
features, [`SLSTMSubwordFeatures`]), [`SLSTMStateTransition`] (one recurrent step, Eqs. 2-3), [`SLSTMInitialStates`]
(the states before the first step) and the sentence representations of [`SLSTMPooler`]; the pretrained base
[`SLSTMPreTrainedModel`]; the encoder [`SLSTMModel`] (`num_steps` transitions); then the task models, each with its
own `forward`: [`SLSTMForSequenceClassification`] and [`SLSTMForTokenClassification`] (softmax or the linear-chain
CRF of `crf.py`, with the tagging head of `token_tagging.py`).

On a CUDA GPU the step's elementwise parts run as fused Triton kernels (`triton_step.py`, `triton_kernels.py`) beside
the readable step here, which is their reference and the fallback (`config.step_implementation`).
"""

import re

import torch
from torch import nn
from transformers import AutoModel, PreTrainedModel
from transformers import initialization as init
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import BaseModelOutputWithPooling, SequenceClassifierOutput, TokenClassifierOutput

from .configuration_slstm import CHAR_PAD_ID, SLSTMConfig, word_representation_dim
from .cpu_matmul import SLSTMConv1d, SLSTMLinear
from .cpu_threads import with_cpu_inference_threads
from .crf import ConditionalRandomField
from .token_tagging import head_tag_count, tagging_loss_and_logits, update_head_for_labels
from .triton_step import RecurrenceOptions, fused_recurrence, uses_fused_step
from .validation import check_input_not_empty, check_labels_batch_size, naming_bad_values, real_token_mask


def sentence_lengths(attention_mask: torch.Tensor) -> torch.Tensor:
    """Real positions per row, `(batch, seq)` -> `(batch, 1)`, at least 1; counted in float32 whatever the model's
    dtype, because bfloat16 cannot count past 256 (257 rounds to 256)."""
    return attention_mask.sum(1, keepdim=True, dtype=torch.float32).clamp(min=1)


def masked_mean(states: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Mean over real positions: `(batch, seq, hidden)`, bool `(batch, seq)` -> `(batch, hidden)`; zero for a row
    without real positions."""
    mask = attention_mask.unsqueeze(-1).to(states.dtype)  # (batch, seq, 1)
    counts = sentence_lengths(attention_mask)  # (batch, 1)
    return ((states * mask).sum(1) / counts).to(states.dtype)


def neighbourhood(states: torch.Tensor, window_size: int) -> torch.Tensor:
    """The states of positions `i - w ... i + w` for every position `i`, zero beyond the edges.

    Args:
        states (`torch.Tensor` of shape `(batch, seq, hidden)`): word states or cells, zero at padding.
        window_size (`int`): `w`.

    Returns:
        A tensor of shape `(batch, seq, 2w + 1, hidden)`, contiguous, so that `ξ_i` is a view of it.

    Stacked shifted slices rather than an `unfold` view: the backward of `unfold` (`unfold_backward`) was the
    largest elementwise cost of a training step, while the backward of the stack is 2w + 1 slice additions.
    """
    seq = states.shape[1]
    padded = nn.functional.pad(states, (0, 0, window_size, window_size))  # (batch, seq + 2w, hidden)
    # 2w + 1 tensors (batch, seq, hidden): the states at offsets -w … +w
    shifted = [padded[:, offset : offset + seq] for offset in range(2 * window_size + 1)]
    return torch.stack(shifted, dim=2)  # (batch, seq, 2w + 1, hidden)


class SLSTMCharCNN(nn.Module):
    r"""
    Character features of every word (Ma & Hovy, 2016): character embeddings, dropout, a convolution of width
    `char_kernel_size` with `char_hidden_size` filters over the word's characters, then the maximum over them.

    A CNN rather than a character BiLSTM (Lample et al., 2016, which the S-LSTM authors' NER code uses with 2 x 150
    units): the two reach the same NER accuracy (CoNLL-2003 F1 91.21 with a char-CNN, 90.94 with a char-BiLSTM, both
    under a BiLSTM-CRF; Reimers & Gurevych, 2017, found no consistent difference), while the CNN is one convolution
    over all the words of a batch at once, where a BiLSTM steps through the characters one by one (far slower on a
    CPU), and, like the rest of the model, it is exact under padding and traces with dynamic shapes for
    `torch.export` and ONNX.

    Exact under padding: padding characters (id 0) read as the convolution's own zero padding and are left out of the
    maximum, so a word's features do not depend on how wide `char_ids` is; a token without characters (padding)
    gets zero features.

    Args:
        config ([`SLSTMConfig`]): `char_vocab_size`, `char_embedding_dim`, `char_hidden_size`, `char_kernel_size`
            and `char_dropout` are read.
    """

    def __init__(self, config):
        super().__init__()
        self.char_embeddings = nn.Embedding(config.char_vocab_size, config.char_embedding_dim, padding_idx=CHAR_PAD_ID)
        self.dropout = nn.Dropout(config.char_dropout)
        self.convolution = SLSTMConv1d(
            config.char_embedding_dim,
            config.char_hidden_size,
            config.char_kernel_size,
            padding=config.char_kernel_size // 2,
        )

    def forward(self, char_ids: torch.LongTensor) -> torch.Tensor:
        """`(batch, seq, chars)` -> `(batch, seq, char_hidden_size)`."""
        batch, seq, width = char_ids.shape
        char_ids = char_ids.reshape(batch * seq, width)  # one row per word
        padding = (char_ids == CHAR_PAD_ID).unsqueeze(1)  # (words, 1, chars)
        embeds = self.dropout(self.char_embeddings(char_ids)).transpose(1, 2)  # (words, char_dim, chars)
        # Zeroed whatever the padding row holds, so that padding reads exactly like the convolution's zero padding.
        features = self.convolution(embeds.masked_fill(padding, 0.0))  # (words, filters, chars)
        pooled = features.masked_fill(padding, torch.finfo(features.dtype).min).amax(-1)  # (words, filters)
        pooled = pooled.masked_fill(padding.all(-1), 0.0)  # a word without characters: zero, not the lowest float
        return pooled.view(batch, seq, -1)


def layer_index(parameter_name: str) -> int | None:
    """The layer number in a transformer parameter name (`encoder.layer.4.attention...` -> 4), `None` outside the
    layer stack (embeddings, pooler)."""
    found = re.search(r"(?:^|\.)(?:layer|layers|h|block|blocks)\.(\d+)\.", parameter_name)
    return int(found.group(1)) if found else None


class SLSTMSubwordFeatures(nn.Module):
    r"""
    Word features from a pretrained subword encoder (any `AutoModel` of `config.feature_encoder_config`, e.g. a
    BERT): the encoder reads the sentence's subwords, and every word gets the pooled last hidden states of its own
    subwords (`config.feature_pooling`: their mean, or the first one's). `<s>` and `</s>` get the states of the
    encoder's own framing tokens (e.g. `[CLS]` and `[SEP]`), which [`SLSTMTokenizer`] maps to them.

    Exact under padding: the encoder masks padded subwords, padded subwords belong to no word, and padded words get
    zero features. The encoder is frozen with `feature_encoder_trainable_layers=0` (the default) and then also stays
    in evaluation mode when the model trains, so that a word's features are the same in training and evaluation (no
    dropout inside the encoder); `k > 0` trains its top `k` layers, -1 all of it.

    Args:
        config ([`SLSTMConfig`]): `feature_encoder_config`, `feature_pooling` and `feature_encoder_trainable_layers`
            are read.
    """

    def __init__(self, config):
        super().__init__()
        self.encoder = AutoModel.from_config(config.feature_encoder_config)
        self.first_subword_only = config.feature_pooling == "first"
        self.trainable_layers = config.feature_encoder_trainable_layers
        self.trained_parameter_names = frozenset(self.names_to_train())
        self.freeze_untrained_layers()

    def names_to_train(self) -> list[str]:
        """The encoder weights that `feature_encoder_trainable_layers` trains: none, those of the top `k` layers, or
        all; never the encoder's pooler, which the features do not read (a distributed run would find it unused)."""
        num_layers = self.encoder.config.num_hidden_layers
        names = []
        for name, _ in self.encoder.named_parameters():
            index = layer_index(name)
            top_layer = index is not None and index >= num_layers - self.trainable_layers
            trainable = self.trainable_layers == -1 or (self.trainable_layers > 0 and top_layer)
            if trainable and not name.startswith("pooler."):
                names.append(name)
        return names

    def freeze_untrained_layers(self) -> None:
        """Sets `requires_grad` of every encoder weight from `trained_parameter_names`. Run at construction and by
        every `train()`/`eval()`: `from_pretrained` replaces the parameters with new ones that require gradients,
        then calls `eval()`."""
        for name, parameter in self.encoder.named_parameters():
            parameter.requires_grad_(name in self.trained_parameter_names)

    def load_pretrained_encoder(self, pretrained_model_name_or_path: str, **kwargs) -> None:
        """Copies the weights of a pretrained encoder (`AutoModel.from_pretrained(pretrained_model_name_or_path,
        **kwargs)`) into this one, as a fresh model needs; a loaded S-LSTM checkpoint holds them already.

        Raises:
            `ValueError`: If the pretrained encoder's weights do not match this encoder's (another architecture or
            size than `config.feature_encoder_config`).
        """
        pretrained = AutoModel.from_pretrained(pretrained_model_name_or_path, **kwargs)
        try:
            self.encoder.load_state_dict(pretrained.state_dict())
        except RuntimeError as error:  # missing, unexpected or differently shaped weights
            raise ValueError(
                f"The encoder at {pretrained_model_name_or_path} does not match config.feature_encoder_config: {error}"
            ) from error

    def train(self, mode: bool = True):
        super().train(mode)
        self.freeze_untrained_layers()
        if self.trainable_layers == 0:
            self.encoder.eval()
        return self

    def forward(
        self,
        subword_ids: torch.LongTensor,
        subword_attention_mask: torch.Tensor,
        subword_to_word: torch.LongTensor,
        seq_length: int,
    ) -> torch.Tensor:
        """`subword_ids`, `subword_attention_mask` and `subword_to_word` `(batch, subwords)` -> word features
        `(batch, seq_length, feature hidden size)`; `subword_to_word` holds the position of each subword's word in
        the word sequence (only read where the mask is 1)."""
        states = self.encoder(input_ids=subword_ids, attention_mask=subword_attention_mask).last_hidden_state
        positions = torch.arange(seq_length, device=subword_to_word.device)  # (seq,)
        # membership[b, i, j]: subword j of sentence b belongs to word i
        membership = (subword_to_word.unsqueeze(1) == positions[:, None]) & subword_attention_mask.bool().unsqueeze(1)
        if self.first_subword_only:
            membership = membership & (membership.cumsum(-1) == 1)  # (batch, seq, subwords)
        weights = membership.to(states.dtype)
        counts = weights.sum(-1, keepdim=True).clamp(min=1)  # (batch, seq, 1)
        return torch.bmm(weights, states) / counts  # (batch, seq, feature hidden size)


class SLSTMEmbeddings(nn.Module):
    r"""
    The word representations `x_i` the recurrence reads: the word embedding (or the given `inputs_embeds`), followed
    with `config.use_char_features` by the word's character features ([`SLSTMCharCNN`]) and with a
    `config.feature_encoder_config` by its pretrained encoder features ([`SLSTMSubwordFeatures`]), then dropout over
    all of them.

    Args:
        config ([`SLSTMConfig`]): `vocab_size`, `embedding_dim`, `pad_token_id` (a zero, untrained row),
            `embedding_dropout`, the character fields (`use_char_features`, `char_vocab_size`, ...) and the feature
            fields (`feature_encoder_config`, ...) are read.
    """

    def __init__(self, config):
        super().__init__()
        self.output_dim = word_representation_dim(config)
        self.word_embeddings = nn.Embedding(config.vocab_size, config.embedding_dim, padding_idx=config.pad_token_id)
        self.char_encoder = SLSTMCharCNN(config) if config.use_char_features else None
        self.subword_features = SLSTMSubwordFeatures(config) if config.feature_encoder_config is not None else None
        self.dropout = nn.Dropout(config.embedding_dropout)

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        char_ids: torch.LongTensor | None = None,
        subword_ids: torch.LongTensor | None = None,
        subword_attention_mask: torch.Tensor | None = None,
        subword_to_word: torch.LongTensor | None = None,
    ) -> torch.Tensor:
        """Exactly one of `input_ids` `(batch, seq)` or `inputs_embeds` `(batch, seq, embedding_dim)` (the word
        embedding part only), with character features `char_ids` `(batch, seq, max_word_length)`, with encoder
        features `subword_ids`, `subword_attention_mask` and `subword_to_word` `(batch, subwords)` ->
        `(batch, seq, output_dim)`. Inputs of a feature the model does not have are ignored."""
        if (input_ids is None) == (inputs_embeds is None):
            passed = "both" if input_ids is not None else "neither"
            raise ValueError(f"Pass exactly one of input_ids or inputs_embeds, got {passed}")
        if inputs_embeds is None:
            if input_ids.dim() != 2:
                raise ValueError(f"input_ids must have shape (batch, seq), got {tuple(input_ids.shape)}")
            # The embedding's own size, not the config's at construction: `resize_token_embeddings` and
            # `set_input_embeddings` replace the embedding.
            vocab_size = self.word_embeddings.num_embeddings
            with naming_bad_values(input_ids, vocab_size, "input_ids", "vocab_size"):
                inputs_embeds = self.word_embeddings(input_ids)  # (batch, seq, embedding_dim)
        elif inputs_embeds.dim() != 3 or inputs_embeds.shape[-1] != self.word_embeddings.embedding_dim:
            raise ValueError(
                f"inputs_embeds must have shape (batch, seq, {self.word_embeddings.embedding_dim}), got "
                f"{tuple(inputs_embeds.shape)}"
            )
        check_input_not_empty(inputs_embeds.shape[:2])
        if self.char_encoder is not None:
            chars = self.char_features(char_ids, inputs_embeds)  # (batch, seq, char_hidden_size)
            inputs_embeds = torch.cat([inputs_embeds, chars], dim=-1)  # (batch, seq, embedding_dim + char features)
        if self.subword_features is not None:
            self.check_subword_inputs(subword_ids, subword_attention_mask, subword_to_word, inputs_embeds)
            vocab_size = self.subword_features.encoder.get_input_embeddings().num_embeddings
            with naming_bad_values(subword_ids, vocab_size, "subword_ids", "the feature encoder's vocab_size"):
                features = self.subword_features(
                    subword_ids, subword_attention_mask, subword_to_word, inputs_embeds.shape[1]
                )
            features = features.to(inputs_embeds.dtype)
            inputs_embeds = torch.cat([inputs_embeds, features], dim=-1)  # (batch, seq, output_dim)
        return self.dropout(inputs_embeds)

    def check_subword_inputs(
        self,
        subword_ids: torch.LongTensor | None,
        subword_attention_mask: torch.Tensor | None,
        subword_to_word: torch.LongTensor | None,
        word_embeds: torch.Tensor,
    ) -> None:
        """Checks the three subword inputs against each other and against the words `word_embeds`
        `(batch, seq, ...)`."""
        subword_inputs = {"subword_ids": subword_ids, "subword_attention_mask": subword_attention_mask,
                          "subword_to_word": subword_to_word}  # fmt: skip
        missing = [name for name, value in subword_inputs.items() if value is None]
        if missing:
            raise ValueError(
                "This model reads a pretrained encoder's word features (config.feature_encoder_config is set): pass "
                f"subword_ids, subword_attention_mask and subword_to_word of shape (batch, subwords), as an "
                f"SLSTMTokenizer built with a subword_tokenizer returns them; missing: {', '.join(missing)}"
            )
        batch = word_embeds.shape[0]
        for name, value in subword_inputs.items():
            if value.dim() != 2 or value.shape != subword_ids.shape or value.shape[0] != batch:
                raise ValueError(
                    f"{name} must have shape (batch, subwords) with batch = {batch} like the input and the shape of "
                    f"subword_ids {tuple(subword_ids.shape)}, got {tuple(value.shape)}"
                )

    def char_features(self, char_ids: torch.LongTensor | None, word_embeds: torch.Tensor) -> torch.Tensor:
        """Checked `char_ids` `(batch, seq, max_word_length)` -> features `(batch, seq, char_hidden_size)` in the
        dtype of the word embeddings `word_embeds` `(batch, seq, embedding_dim)`."""
        if char_ids is None:
            raise ValueError(
                "This model reads character features (config.use_char_features=True): pass char_ids of shape "
                "(batch, seq, max_word_length), as SLSTMTokenizer returns them"
            )
        if char_ids.dim() != 3 or char_ids.shape[:2] != word_embeds.shape[:2]:
            raise ValueError(
                f"char_ids must have shape (batch, seq, max_word_length) with (batch, seq) = "
                f"{tuple(word_embeds.shape[:2])} like the input, got {tuple(char_ids.shape)}"
            )
        char_vocab_size = self.char_encoder.char_embeddings.num_embeddings
        with naming_bad_values(char_ids, char_vocab_size, "char_ids", "char_vocab_size"):
            return self.char_encoder(char_ids).to(word_embeds.dtype)


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

    Two implementations, chosen by [`SLSTMModel`] at every call from `config.step_implementation` (read when the
    model runs, so it can be changed on a built model): this module's `forward`, the readable PyTorch step
    (`update_words`, `update_sentence`) called once per step, and `fused_recurrence`, all steps at once with the
    elementwise parts as Triton kernels and the matmuls merged (`FusedRecurrence` of `triton_step.py`).

    Args:
        config ([`SLSTMConfig`]): `hidden_size`, `word_representation_dim` (the word embedding plus the character
            and encoder features, when the config has them), `window_size`, `num_sentence_nodes`,
            `gate_normalization`, `context_independent_content`, `remove_output_gate`, `hidden_dropout` are read, and
            `step_implementation` at every call.
    """

    def __init__(self, config: SLSTMConfig):
        super().__init__()
        self.config = config
        hidden = config.hidden_size
        self.hidden_size = hidden
        self.window_size = config.window_size
        self.window_width = 2 * config.window_size + 1
        self.num_sentence_nodes = config.num_sentence_nodes
        self.num_normalized_gates = self.window_width + self.num_sentence_nodes + 1
        self.remove_output_gate = config.remove_output_gate
        self.context_independent_content = config.context_independent_content
        self.sigmoid_softmax = config.gate_normalization == "sigmoid_softmax"
        self.num_output_gates = 0 if config.remove_output_gate else 1
        self.num_recurrent_contents = 0 if config.context_independent_content else 1
        self.num_context_blocks = self.num_normalized_gates + self.num_output_gates + self.num_recurrent_contents
        num_input_blocks = self.num_normalized_gates + self.num_output_gates + 1

        # Eq. 2: U x_i + b, W ξ_i, V g^{t-1}.
        self.word_input = SLSTMLinear(config.word_representation_dim, num_input_blocks * hidden)
        self.word_window = SLSTMLinear(self.window_width * hidden, self.num_context_blocks * hidden, bias=False)
        # At rate 0 (the paper configurations) an identity: nothing to launch twice per step.
        self.hidden_dropout = nn.Dropout(config.hidden_dropout) if config.hidden_dropout else nn.Identity()
        if self.num_sentence_nodes:
            sentence_width = self.num_sentence_nodes * hidden
            self.word_sentence = SLSTMLinear(sentence_width, self.num_context_blocks * hidden, bias=False)
            # Eq. 3: f_g and o read g^{t-1} (all sentence nodes, so they exchange information) and the word mean;
            # the per-word forget gates f_i read g^{t-1} and h_i^{t-1}.
            num_sentence_blocks = 1 + self.num_output_gates
            self.sentence_gates = SLSTMLinear(sentence_width + hidden, num_sentence_blocks * sentence_width)
            self.word_forget_from_sentence = SLSTMLinear(sentence_width, sentence_width)
            self.word_forget_from_word = SLSTMLinear(hidden, sentence_width, bias=False)

    def input_terms(self, inputs_embeds: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """`U x_i + b` for all gates, computed once per forward because `x_i` does not change across steps.

        Args:
            inputs_embeds (`torch.Tensor` of shape `(batch, seq, word_representation_dim)`): the word
                representations `x_i`.

        Returns:
            `(gate_terms, content)`: `(batch, seq, num_context_blocks * hidden)` and, with a context-independent
            content layer, the content `u_i` `(batch, seq, hidden)` (else `None`).
        """
        terms = self.word_input(inputs_embeds)  # (batch, seq, num_input_blocks * hidden)
        if not self.context_independent_content:
            return terms, None
        gate_terms, content = terms.split([self.num_context_blocks * self.hidden_size, self.hidden_size], dim=-1)
        return gate_terms.contiguous(), content

    def gate_scores(self, pre_activations: torch.Tensor) -> torch.Tensor:
        """What the gate softmax normalises: the sigmoids of the pre-activations (the paper's) or, with
        `gate_normalization="softmax"`, the pre-activations themselves."""
        return torch.sigmoid(pre_activations) if self.sigmoid_softmax else pre_activations

    def normalize(self, scores: torch.Tensor, dim: int) -> torch.Tensor:
        """Softmax of `gate_scores` along `dim`: gates that sum to one. Float32 at least, so that low-precision
        autocast cannot skew the weights (float64 stays float64, e.g. for gradcheck)."""
        return torch.softmax(scores, dim=dim, dtype=torch.promote_types(scores.dtype, torch.float32))

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

    def word_terms(self, h: torch.Tensor, g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The terms of Eq. 2's pre-activations that change every step, from `h^{t-1}` `(batch, seq, hidden)` and
        `g^{t-1}` `(batch, nodes, hidden)`: `W ξ_i` `(batch, seq, blocks * hidden)`, one matmul over all positions, and
        `V g^{t-1}` `(batch, blocks * hidden)`, one vector per sentence (`None` without sentence nodes)."""
        batch, seq, hidden = h.shape
        xi = neighbourhood(h, self.window_size).reshape(batch, seq, self.window_width * hidden)  # ξ_i
        sentence_term = self.word_sentence(g.flatten(1)) if self.num_sentence_nodes else None
        return self.word_window(xi), sentence_term

    def update_words(
        self,
        h: torch.Tensor,
        c: torch.Tensor,
        g: torch.Tensor,
        c_g: torch.Tensor,
        input_gate_terms: torch.Tensor,
        input_content: torch.Tensor | None,
        mask: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Eq. 2, all words at once: `(h^{t-1}, c^{t-1}, g^{t-1}, c_g^{t-1})` (shapes as in `forward`) -> `(h^t, c^t)`
        `(batch, seq, hidden)`.

        Written for speed, with the same math as the equations: one matmul `W ξ_i` over all positions; the
        pre-activations and gates are cut with `split` (whose backward is one concatenation) rather than slicing
        (whose backward writes a zero tensor per slice).
        """
        batch, seq, hidden = h.shape
        blocks = self.num_context_blocks
        window_term, sentence_term = self.word_terms(h, g)
        constant_terms = input_gate_terms.view(batch, seq, blocks, hidden)  # U x_i + b
        if self.num_sentence_nodes:
            constant_terms = constant_terms + sentence_term.view(batch, 1, blocks, hidden)  # + V g^{t-1}
        pre = window_term.view(batch, seq, blocks, hidden) + constant_terms  # W ξ_i + U x_i + V g + b

        # Eq. 2's normalised gates (l_w … f … r_w, s_k, i) sum to one per hidden dimension; o and u are separate.
        gate_pre, output_pre, content_pre = pre.split(
            [self.num_normalized_gates, self.num_output_gates, self.num_recurrent_contents], dim=2
        )  # (batch, seq, normalised gates | 1 or 0 | 1 or 0, hidden)
        gates = self.normalize(self.gate_scores(gate_pre), dim=2)  # (batch, seq, normalised gates, hidden)

        content = input_content.unsqueeze(2) if self.context_independent_content else torch.tanh(content_pre)  # u_i
        # What each normalised gate weighs, in the gates' order: c_{i-w} … c_{i+w}, c_g^{t-1} per node, u_i.
        gated_values = torch.cat(
            [neighbourhood(c, self.window_size), c_g.unsqueeze(1).expand(batch, seq, -1, -1), content], dim=2
        )  # (batch, seq, normalised gates, hidden)
        cells = (gates * gated_values).sum(2)  # c_i = Σ_k l/f/r_k ⊙ c_{i+k} + s ⊙ c_g + i ⊙ u_i: (batch, seq, hidden)
        states = torch.tanh(cells)
        if not self.remove_output_gate:
            states = torch.sigmoid(output_pre.squeeze(2)) * states  # o ⊙ tanh(c)
        # Padding and positions beyond the edges hold zero state, so they contribute nothing to neighbours.
        cells = cells.to(h.dtype) * mask
        states = states.to(h.dtype) * mask
        return states, cells

    def sentence_terms(
        self, h: torch.Tensor, g: torch.Tensor, lengths: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The matmuls of Eq. 3, from `h^{t-1}` `(batch, seq, hidden)`, `g^{t-1}` `(batch, nodes, hidden)` and the
        `lengths` `(batch, 1)`: `W g + U h̄ + b` of the keep then output gates `(batch, (1 + o) * nodes * hidden)`,
        `W_f g + b_f` `(batch, nodes * hidden)` and `U_f h_j` `(batch, seq, nodes * hidden)`."""
        mean_state = (h.sum(1) / lengths).to(h.dtype)  # h̄ over real positions (h is zero at padding): (batch, hidden)
        flat_g = g.flatten(1)  # (batch, nodes * hidden)
        gate_terms = self.sentence_gates(torch.cat([flat_g, mean_state], dim=-1))
        return gate_terms, self.word_forget_from_sentence(flat_g), self.word_forget_from_word(h)

    def update_sentence(
        self,
        h: torch.Tensor,
        c: torch.Tensor,
        g: torch.Tensor,
        c_g: torch.Tensor,
        mask: torch.Tensor,
        lengths: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Eq. 3 for every sentence node at once: `(h^{t-1}, c^{t-1}, g^{t-1}, c_g^{t-1})` (shapes as in `forward`)
        -> `(g^t, c_g^t)` `(batch, nodes, hidden)`."""
        batch, seq, hidden = h.shape
        nodes = self.num_sentence_nodes
        gate_terms, sentence_forget, word_forget = self.sentence_terms(h, g, lengths)
        sentence_pre = gate_terms.view(batch, -1, nodes, hidden)  # W g + U h̄ + b: (batch, 1 + o, nodes, hidden)
        keep_pre, output_pre = sentence_pre.split([1, self.num_output_gates], dim=1)
        sentence_forget = sentence_forget.view(batch, 1, nodes, hidden)  # W_f g + b_f
        word_pre = word_forget.view(batch, seq, nodes, hidden) + sentence_forget  # U_f h_i + W_f g + b_f

        # (f_0 … f_{n+1}, f_g) sum to one over the real positions and g; padding gets -inf, i.e. weight exactly zero.
        word_scores = self.gate_scores(word_pre).masked_fill(mask.unsqueeze(-1) == 0, float("-inf"))
        scores = torch.cat([word_scores, self.gate_scores(keep_pre)], dim=1)  # (batch, seq + 1, nodes, hidden)
        weights = self.normalize(scores, dim=1)  # (batch, seq + 1, nodes, hidden)
        gated_values = torch.cat([c.unsqueeze(2).expand(-1, -1, nodes, -1), c_g.unsqueeze(1)], dim=1)  # c_i, c_g
        cells = (weights * gated_values).sum(1)  # c_g = Σ_i f_i ⊙ c_i + f_g ⊙ c_g^{t-1}: (batch, nodes, hidden)
        states = torch.tanh(cells)
        if not self.remove_output_gate:
            states = torch.sigmoid(output_pre.squeeze(1)) * states  # o ⊙ tanh(c_g)
        return states.to(h.dtype), cells.to(h.dtype)

    def replaced_layers(self) -> list[str]:
        """The step's linear layers whose weights `fused_recurrence` reads directly, and that something replaced
        (a PEFT adapter, a quantised layer): the fused path would skip what the replacement adds."""
        read_directly = ("word_window", "word_forget_from_word", "sentence_gates", "word_sentence",
                         "word_forget_from_sentence")  # fmt: skip
        layers = {name: getattr(self, name, None) for name in read_directly}  # absent without sentence nodes
        return [name for name, layer in layers.items() if layer is not None and type(layer) is not SLSTMLinear]

    def fused_recurrence(
        self,
        word_states: torch.Tensor,
        word_cells: torch.Tensor,
        sentence_states: torch.Tensor,
        sentence_cells: torch.Tensor,
        input_gate_terms: torch.Tensor,
        mask: torch.Tensor,
        lengths: torch.Tensor,
    ) -> tuple[tuple[torch.Tensor, ...], torch.Tensor]:
        """All `config.num_steps` steps of Eqs. 2-3 at once with the Triton kernels (`FusedRecurrence` of
        `triton_step.py`): two matmuls and one kernel launch per step, the weight gradients summed inside its backward.
        Arguments as for `forward` (the initial states; `input_content` is not covered by the kernels) ->
        `((h^1, …, h^T), g^T)`, `g^T` `(batch, 0, hidden)` without sentence nodes. Hidden dropout is drawn
        as `forward` draws it, in the same order."""
        options = RecurrenceOptions(self.config.num_steps, self.window_size, self.sigmoid_softmax,
                                    self.config.hidden_dropout if self.training else 0.0)  # fmt: skip
        return fused_recurrence(
            self, word_states, word_cells, sentence_states, sentence_cells, input_gate_terms, mask, lengths, options
        )


class SLSTMInitialStates(nn.Module):
    r"""
    The states before the first step, `(h^0, c^0, g^0, c_g^0)`, as `config.initial_state` says (`docs/equations.md`,
    "Initial state"):

    - `"learned"` (the paper's): `h_i^0 = g^0 = h^0`, one learned vector (`learned_state`, zero at initialisation),
      and every cell zero;
    - `"input"` (the authors' released classification code): `h_i^0 = c_i^0 = P x_i` and `g^0 = c_g^0 =` their mean
      over the real positions, with `P` a learned linear map (`input_projection`) when `word_representation_dim`
      differs from `hidden_size`, the identity otherwise.

    Padding gets zero states and cells either way, and is left out of the mean, so the outputs stay exact under
    padding.

    Args:
        config ([`SLSTMConfig`]): `initial_state`, `hidden_size`, `word_representation_dim` and
            `num_sentence_nodes` are read.
    """

    def __init__(self, config: SLSTMConfig):
        super().__init__()
        self.num_sentence_nodes = config.num_sentence_nodes
        self.from_input = config.initial_state == "input"
        self.learned_state = None if self.from_input else nn.Parameter(torch.zeros(config.hidden_size))
        needs_projection = self.from_input and config.word_representation_dim != config.hidden_size
        self.input_projection = (
            SLSTMLinear(config.word_representation_dim, config.hidden_size) if needs_projection else nn.Identity()
        )

    def forward(
        self, inputs_embeds: torch.Tensor, mask: torch.Tensor, lengths: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """`x` `(batch, seq, word_representation_dim)`, `mask` `(batch, seq, 1)` (1.0 at real positions), `lengths`
        `(batch, 1)` -> `(h^0, c^0)` `(batch, seq, hidden)` and `(g^0, c_g^0)` `(batch, nodes, hidden)`."""
        batch, seq, _ = inputs_embeds.shape
        if self.from_input:
            word_states = self.input_projection(inputs_embeds) * mask  # P x_i: (batch, seq, hidden)
            mean_state = (word_states.sum(1) / lengths).to(word_states.dtype)  # (batch, hidden)
            sentence_states = mean_state.unsqueeze(1).expand(batch, self.num_sentence_nodes, -1)  # (batch, nodes, H)
            return word_states, word_states, sentence_states, sentence_states
        initial = self.learned_state.to(inputs_embeds.dtype)  # h^0: (hidden,)
        word_states = initial.expand(batch, seq, -1) * mask  # (batch, seq, hidden)
        sentence_states = initial.expand(batch, self.num_sentence_nodes, -1)  # (batch, nodes, hidden)
        return word_states, torch.zeros_like(word_states), sentence_states, torch.zeros_like(sentence_states)


class SLSTMAttentionPooling(nn.Module):
    r"""
    The paper's attention over word states (Sec. 3.3): `r = Σ_t α_t h_t`, `α_t ∝ exp(uᵀ tanh(W_α h_t + b_α))`, with
    padding given weight exactly zero; a row without real positions pools to zero (not NaN).

    Args:
        hidden_size (`int`): width of the word states.
    """

    def __init__(self, hidden_size: int):
        super().__init__()
        self.projection = SLSTMLinear(hidden_size, hidden_size)  # W_α, b_α
        self.query = SLSTMLinear(hidden_size, 1, bias=False)  # u

    def forward(self, states: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """`(batch, seq, hidden)`, bool `(batch, seq)` -> `(batch, hidden)`."""
        scores = self.query(torch.tanh(self.projection(states))).squeeze(-1)  # (batch, seq)
        dtype = torch.promote_types(scores.dtype, torch.float32)  # float64 stays float64
        # The lowest finite score rather than -inf: exp underflows to exactly 0 next to any real score, and a row
        # without real positions gets uniform weights that the mask then zeroes, instead of 0/0.
        scores = scores.to(dtype).masked_fill(~attention_mask, torch.finfo(dtype).min)
        weights = torch.softmax(scores, dim=-1) * attention_mask  # (batch, seq)
        # A weighted sum rather than a batched matmul, which bf16 autocast would run slowly on CPUs without native bf16.
        return (weights.to(states.dtype).unsqueeze(-1) * states).sum(dim=1)  # (batch, hidden)


class SLSTMPooler(nn.Module):
    r"""
    The sentence representation a sequence classifier reads, as `config.classifier_pooling` says: `"sentence"` (the
    encoder's `pooler_output`, the sentence node `g`), `"attention"` ([`SLSTMAttentionPooling`]) or `"mean"` (masked
    mean of the word states).

    Args:
        config ([`SLSTMConfig`]): `classifier_pooling` and `hidden_size` are read.
    """

    def __init__(self, config):
        super().__init__()
        self.pooling = config.classifier_pooling
        self.attention = SLSTMAttentionPooling(config.hidden_size) if self.pooling == "attention" else None

    def forward(
        self, last_hidden_state: torch.Tensor, pooler_output: torch.Tensor, attention_mask: torch.Tensor
    ) -> torch.Tensor:
        """`(batch, seq, hidden)`, `(batch, hidden)`, bool `(batch, seq)` -> `(batch, hidden)`."""
        if self.pooling == "attention":
            return self.attention(last_hidden_state, attention_mask)
        if self.pooling == "mean":
            return masked_mean(last_hidden_state, attention_mask)
        return pooler_output


class SLSTMPreTrainedModel(PreTrainedModel):
    r"""
    Weight initialisation and loading for the S-LSTM models.

    `_init_weights` choices: gate matrices (`nn.Linear`) uniform in `±1/sqrt(hidden_size)`, as `torch.nn.LSTM`
    initialises its gates, so that every gate starts in sigmoid's linear range whatever the window or node count;
    biases zero; word embeddings normal with `config.initializer_range` (replaced by pretrained vectors when given)
    and a zero padding row (character embeddings likewise); the learned initial state `h^0` zero (the input
    projection of `initial_state="input"` is a gate-like linear layer); the CRF's own
    `reset_parameters` (pytorch-crf's uniform `±0.1` scores, and the scheme constraints, which are masks rather than
    parameters). The character CNN's convolution gets PyTorch's `nn.Conv1d` initialisation (uniform in
    `±1/sqrt(fan_in)`, fan-in `char_embedding_dim * char_kernel_size`, which is unrelated to `hidden_size`).
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
        elif isinstance(module, nn.Conv1d):
            # PyTorch's own `nn.Conv1d` draw, here as well so that it also fills a convolution missing from a loaded
            # checkpoint (e.g. character features added to a word-only model), which would otherwise stay unset.
            bound = module.weight[0].numel() ** -0.5  # 1 / sqrt(fan_in)
            init.uniform_(module.weight, -bound, bound)
            init.uniform_(module.bias, -bound, bound)
        elif isinstance(module, SLSTMInitialStates) and module.learned_state is not None:
            init.zeros_(module.learned_state)
        elif isinstance(module, ConditionalRandomField):
            # Also rewrites the constraint buffers, which checkpoints do not hold.
            module.reset_parameters()


class SLSTMModel(SLSTMPreTrainedModel):
    r"""
    The bare S-LSTM encoder: word representations ([`SLSTMEmbeddings`]), then `num_steps` state transitions
    ([`SLSTMStateTransition`], the same parameters at every step).

    Args:
        config ([`SLSTMConfig`]): model configuration.

    Any `attention_mask` is exact: a masked position holds zero state, is left out of the sentence-node mean and
    softmax, and so contributes nothing; a sentence gives the same outputs alone, right-padded or left-padded.
    """

    def __init__(self, config: SLSTMConfig):
        super().__init__(config)
        self.embeddings = SLSTMEmbeddings(config)
        self.transition = SLSTMStateTransition(config)
        self.initial_states = SLSTMInitialStates(config)
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.embeddings.word_embeddings

    def set_input_embeddings(self, value: nn.Embedding):
        self.embeddings.word_embeddings = value

    @with_cpu_inference_threads
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        char_ids: torch.LongTensor | None = None,
        subword_ids: torch.LongTensor | None = None,
        subword_attention_mask: torch.Tensor | None = None,
        subword_to_word: torch.LongTensor | None = None,
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
            inputs_embeds (`torch.Tensor` of shape `(batch, seq, embedding_dim)`, *optional*): the word embeddings,
                instead of `input_ids`. With character features they are the word part only: the character features
                are still computed from `char_ids` and appended.
            char_ids (`torch.LongTensor` of shape `(batch, seq, max_word_length)`, *optional*): the character ids
                of every token, as `SLSTMTokenizer` returns them (0 = padding). Required when
                `config.use_char_features`, ignored otherwise.
            subword_ids, subword_attention_mask, subword_to_word (`torch.LongTensor` of shape `(batch, subwords)`,
                *optional*): the feature encoder's subword ids and mask, and the position in `input_ids` of the word
                each subword belongs to (`<s>`/`</s>` for the encoder's framing tokens), as `SLSTMTokenizer` returns
                them when built with a `subword_tokenizer`. Required when `config.feature_encoder_config` is set,
                ignored otherwise.
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
        inputs_embeds = self.embeddings(
            input_ids, inputs_embeds, char_ids, subword_ids, subword_attention_mask, subword_to_word
        )  # (batch, seq, word_representation_dim)
        batch, seq, _ = inputs_embeds.shape
        if attention_mask is not None and attention_mask.shape != (batch, seq):
            raise ValueError(
                f"attention_mask must have the shape of the input, (batch, seq) = {(batch, seq)}, "
                f"got {tuple(attention_mask.shape)}"
            )
        attention_mask = real_token_mask(attention_mask, inputs_embeds)  # (batch, seq)

        mask = attention_mask.unsqueeze(-1).to(inputs_embeds.dtype)  # (batch, seq, 1)
        lengths = sentence_lengths(attention_mask)  # (batch, 1)
        input_gate_terms, input_content = self.transition.input_terms(inputs_embeds)

        word_states, word_cells, sentence_states, sentence_cells = self.initial_states(inputs_embeds, mask, lengths)

        all_word_states = (word_states,) if output_hidden_states else None
        if uses_fused_step(self.config, word_states, self.transition.replaced_layers()):
            steps, sentence_states = self.transition.fused_recurrence(
                word_states, word_cells, sentence_states, sentence_cells, input_gate_terms, mask, lengths
            )  # h^1 … h^T, g^T
            word_states = steps[-1]
            all_word_states = all_word_states + steps if output_hidden_states else None
        else:
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
            pooled = sentence_states[:, 0]  # (batch, hidden)
        else:
            pooled = masked_mean(word_states, attention_mask)  # (batch, hidden)
        if not return_dict:
            return tuple(v for v in (word_states, pooled, all_word_states) if v is not None)
        return BaseModelOutputWithPooling(
            last_hidden_state=word_states, pooler_output=pooled, hidden_states=all_word_states
        )


class SLSTMForSequenceClassification(SLSTMPreTrainedModel):
    r"""
    S-LSTM with a sentence classifier: `y = softmax(W_c r + b_c)` where `r` follows `config.classifier_pooling`
    ([`SLSTMPooler`]: the sentence state `g`, the paper's additive attention over word states, or their mean). The loss
    is `transformers`' own sequence-classification loss, which follows `config.problem_type` (single-label,
    multi-label or regression). It is a batch mean that the Trainer must not rescale by `num_items_in_batch`
    (`accepts_loss_kwargs = False`): the regression and multi-label losses cannot honour it.

    Args:
        config ([`SLSTMConfig`]): model configuration; `num_labels`, `classifier_pooling`, `classifier_dropout`.
    """

    accepts_loss_kwargs = False

    def __init__(self, config: SLSTMConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.slstm = SLSTMModel(config)
        self.pooler = SLSTMPooler(config)
        self.dropout = nn.Dropout(config.classifier_dropout)
        self.classifier = SLSTMLinear(config.hidden_size, config.num_labels)
        self.post_init()

    @with_cpu_inference_threads
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        char_ids: torch.LongTensor | None = None,
        subword_ids: torch.LongTensor | None = None,
        subword_attention_mask: torch.Tensor | None = None,
        subword_to_word: torch.LongTensor | None = None,
        labels: torch.Tensor | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        **kwargs,
    ) -> SequenceClassifierOutput | tuple:
        r"""
        Args:
            input_ids, attention_mask, inputs_embeds, char_ids, subword_ids, subword_attention_mask, subword_to_word,
                output_hidden_states: as for [`SLSTMModel`].
            labels (`torch.Tensor` of shape `(batch,)`, or `(batch, num_labels)` for multi-label / regression).

        Returns:
            `logits` `(batch, num_labels)`, `loss` when `labels` are given, `hidden_states` when asked.
        """
        return_dict = return_dict if return_dict is not None else self.config.return_dict
        outputs = self.base_model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            inputs_embeds=inputs_embeds,
            char_ids=char_ids,
            subword_ids=subword_ids,
            subword_attention_mask=subword_attention_mask,
            subword_to_word=subword_to_word,
            output_hidden_states=output_hidden_states,
            return_dict=True,
        )
        mask = real_token_mask(attention_mask, outputs.last_hidden_state)  # (batch, seq)
        features = self.pooler(outputs.last_hidden_state, outputs.pooler_output, mask)  # (batch, hidden)
        logits = self.classifier(self.dropout(features))  # (batch, num_labels)

        loss = None
        if labels is not None:
            check_labels_batch_size(labels, logits.shape[0])
            with naming_bad_values(labels, self.num_labels, "labels", "num_labels"):
                loss = self.loss_function(labels, logits, self.config)
        if not return_dict:
            return tuple(v for v in (loss, logits, outputs.hidden_states) if v is not None)
        return SequenceClassifierOutput(loss=loss, logits=logits, hidden_states=outputs.hidden_states)


class SLSTMForTokenClassification(SLSTMPreTrainedModel):
    r"""
    S-LSTM with a per-word tagger: dropout and a linear layer on the final word states give emissions
    `(batch, seq, num_labels)`; then a softmax (cross-entropy over positions whose label is not -100) or, with
    `config.use_crf`, a linear-chain CRF (`self.crf`, a [`ConditionalRandomField`]).

    CRF chain: at training (when `labels` are given) the chain is the positions whose label is not -100, so the
    boundary tokens `<s>`/`</s>`, padding and non-first sub-words (labelled -100 by the usual alignment) are left
    out, as is any position where `attention_mask` is 0. At inference it is the positions where `attention_mask` is 1
    and the token is not `pad`/`bos`/`eos`; with `inputs_embeds` instead of `input_ids` the token ids are unknown, so
    the chain is the whole `attention_mask`, boundary positions included (give `labels`, or leave the boundary
    tokens out of `inputs_embeds`, to keep them off the chain).
    The CRF loss is the negative log-likelihood averaged over the sentences of the batch that have labelled
    positions (a sentence whose labels are all -100, e.g. an empty filler, counts for nothing), so the Trainer must not
    rescale it (`accepts_loss_kwargs` is `False` with the CRF); the softmax loss honours the Trainer's
    `num_items_in_batch` (a token-level mean over the whole accumulated, all-process batch).

    With the CRF, `logits` are the CRF's max-marginals (for each position and tag, the score of the best tag path
    through that tag, minus the best path's score), so `logits.argmax(-1)` is the Viterbi path at every chain
    position and the `Trainer`'s metrics and `pipeline("token-classification")` decode with the CRF unchanged;
    positions off the chain have logits 0.

    With `config.head_tag_scheme="BIOES"` (and IOB2 labels in `id2label`) the emissions and the CRF are over the
    BIOES tags of `BIOESLabelMap(labels).tags`: gold IOB2 labels are converted by the head, and each IOB2 label's
    logit joins its two BIOES tags (the larger max-marginal with the CRF, so the argmax is the IOB2 form of the BIOES
    Viterbi path; the log of the summed probabilities with the softmax). Users, metrics and the pipeline see IOB2.

    The head's pieces (the BIOES tags, the CRF chains, the loss and logits) are those of `token_tagging.py`, which the
    baseline encoders' token classifiers share.

    Args:
        config ([`SLSTMConfig`]): model configuration; `num_labels`/`id2label`, `use_crf`, `crf_constraints`,
            `head_tag_scheme`, `classifier_dropout`.
    """

    def __init__(self, config: SLSTMConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.slstm = SLSTMModel(config)
        self.dropout = nn.Dropout(config.classifier_dropout)
        num_head_tags = head_tag_count(config)
        self.classifier = SLSTMLinear(config.hidden_size, num_head_tags)
        self.crf = ConditionalRandomField(num_head_tags) if config.use_crf else None
        self.bioes = None  # the BIOES tags of a BIOES head (`token_tagging.BIOESTags`)
        self.head_built_for = None  # the label names that the BIOES tags and the CRF constraints were built from
        update_head_for_labels(self)
        self.post_init()

    @property
    def accepts_loss_kwargs(self) -> bool:
        return not self.config.use_crf

    @with_cpu_inference_threads
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        char_ids: torch.LongTensor | None = None,
        subword_ids: torch.LongTensor | None = None,
        subword_attention_mask: torch.Tensor | None = None,
        subword_to_word: torch.LongTensor | None = None,
        labels: torch.LongTensor | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        **kwargs,
    ) -> TokenClassifierOutput | tuple:
        r"""
        Args:
            input_ids, attention_mask, inputs_embeds, char_ids, subword_ids, subword_attention_mask, subword_to_word,
                output_hidden_states: as for [`SLSTMModel`].
            labels (`torch.LongTensor` of shape `(batch, seq)`, *optional*): tag ids, -100 where there is no label.
            kwargs: `num_items_in_batch` from the Trainer (softmax head only).

        Returns:
            `logits` `(batch, seq, num_labels)` (see the class docstring), `loss` when `labels` are given.
        """
        return_dict = return_dict if return_dict is not None else self.config.return_dict
        update_head_for_labels(self)
        outputs = self.base_model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            inputs_embeds=inputs_embeds,
            char_ids=char_ids,
            subword_ids=subword_ids,
            subword_attention_mask=subword_attention_mask,
            subword_to_word=subword_to_word,
            output_hidden_states=output_hidden_states,
            return_dict=True,
        )
        emissions = self.classifier(self.dropout(outputs.last_hidden_state))  # (batch, seq, head tags)
        loss, logits = tagging_loss_and_logits(
            emissions, labels, input_ids, attention_mask, self.crf, self.bioes, self.config, **kwargs
        )  # logits: (batch, seq, num_labels)
        if not return_dict:
            return tuple(v for v in (loss, logits, outputs.hidden_states) if v is not None)
        return TokenClassifierOutput(loss=loss, logits=logits, hidden_states=outputs.hidden_states)


AUTO_CLASSES = {
    "AutoModel": SLSTMModel,
    "AutoModelForSequenceClassification": SLSTMForSequenceClassification,
    "AutoModelForTokenClassification": SLSTMForTokenClassification,
}
"""The Auto class of every model, the one table behind both ways of loading: checkpoints carry the code for these
(`register_for_auto_class`, below) and the installed package registers them (`__init__.py`). `AUTO_MAP` of
`configuration_slstm.py` writes the same names into every saved config (tested equal)."""

SLSTMConfig.register_for_auto_class()
for _auto_class_name, _model_class in AUTO_CLASSES.items():
    _model_class.register_for_auto_class(_auto_class_name)


__all__ = [
    "AUTO_CLASSES",
    "SLSTMForSequenceClassification",
    "SLSTMForTokenClassification",
    "SLSTMModel",
    "SLSTMPreTrainedModel",
]
