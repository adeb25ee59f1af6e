"""Baseline encoders the S-LSTM paper compares with: stacked BiLSTM, stacked CNN and Transformer encoder; and a
position-wise feed-forward "encoder" (no sequence model), the MLP head over a pretrained encoder's features.

They are baselines, not S-LSTM: their task models have the S-LSTM task models' heads (pooling, classifier, CRF), a
copy of their `forward` and the same word representations, and train through the same `run_scripts`, so an accuracy
or speed comparison changes the encoder only. They live outside `modeling_slstm` so that an S-LSTM checkpoint
carries S-LSTM code only. Each encoder is built from a stock PyTorch module (`nn.LSTM`, `nn.Conv1d`,
`nn.TransformerEncoder`) so that the library's fast kernels (cuDNN / oneDNN) are the ones measured.

Every encoder is exact under padding: a sentence gives the same outputs alone or inside a right- or left-padded batch
(padding outputs are zero).
"""

import math

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence
from transformers import PreTrainedModel
from transformers import initialization as init
from transformers.modeling_outputs import BaseModelOutputWithPooling, SequenceClassifierOutput, TokenClassifierOutput

from modeling_slstm.cpu_matmul import SLSTMLinear
from modeling_slstm.cpu_threads import with_cpu_inference_threads
from modeling_slstm.crf import ConditionalRandomField
from modeling_slstm.modeling_slstm import SLSTMEmbeddings, SLSTMPooler, masked_mean
from modeling_slstm.token_tagging import head_tag_count, tagging_loss_and_logits, update_head_for_labels
from modeling_slstm.validation import check_labels_batch_size, naming_bad_values, real_token_mask

from .configuration_baselines import BaselineEncoderConfig


class BiLSTMEncoder(nn.Module):
    r"""
    Stacked bidirectional `nn.LSTM` (`hidden_size // 2` units per direction, outputs concatenated), run on packed
    sequences so that padding never enters the recurrence. Real positions are left-compacted first, so any mask
    (right or left padding, holes) gives the outputs of the sentence alone.

    Returns `(outputs (batch, seq, hidden), pooled (batch, hidden))`: pooled is the last layer's final forward state
    (after the last real word) concatenated with its final backward state (after the first real word).
    """

    def __init__(self, config: BaselineEncoderConfig):
        super().__init__()
        self.lstm = nn.LSTM(
            config.word_representation_dim,
            config.hidden_size // 2,
            num_layers=config.num_layers,
            batch_first=True,
            bidirectional=True,
            dropout=config.hidden_dropout if config.num_layers > 1 else 0.0,
        )

    def forward(self, embeds: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        seq = embeds.shape[1]
        lengths = mask.sum(1)  # (batch,)
        # Packing reads real positions first: a stable sort left-compacts any mask (for right padding it is the
        # identity, kept unconditional so that no branch depends on the data); `order` maps compact -> original.
        order = torch.sort((~mask).to(torch.int8), dim=1, stable=True).indices  # (batch, seq)
        embeds = embeds.gather(1, order.unsqueeze(-1).expand_as(embeds))  # (batch, seq, width), compacted
        packed = pack_padded_sequence(embeds, lengths.clamp(min=1).cpu(), batch_first=True, enforce_sorted=False)
        outputs, (final_states, _) = self.lstm(packed)
        outputs, _ = pad_packed_sequence(outputs, batch_first=True, total_length=seq)  # (batch, seq, hidden)
        outputs = torch.empty_like(outputs).scatter(1, order.unsqueeze(-1).expand_as(outputs), outputs)
        outputs = outputs * mask.unsqueeze(-1).to(outputs.dtype)
        pooled = torch.cat([final_states[-2], final_states[-1]], dim=-1)  # (batch, hidden)
        return outputs, pooled


class CNNEncoder(nn.Module):
    r"""
    Stacked 1-d convolutions (`kernel_size`, same padding, ReLU, dropout between layers). Padding positions are set
    to zero before every convolution, which is exactly the zero padding a sentence alone sees at its edges.

    Returns `(outputs (batch, seq, hidden), pooled (batch, hidden))`, pooled = masked mean of the outputs.
    """

    def __init__(self, config: BaselineEncoderConfig):
        super().__init__()
        widths = [config.word_representation_dim] + [config.hidden_size] * config.num_layers
        self.convolutions = nn.ModuleList(
            nn.Conv1d(widths[i], widths[i + 1], config.kernel_size, padding=config.kernel_size // 2)
            for i in range(config.num_layers)
        )
        self.dropout = nn.Dropout(config.hidden_dropout)

    def forward(self, embeds: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        keep = mask.unsqueeze(1).to(embeds.dtype)  # (batch, 1, seq)
        states = embeds.transpose(1, 2)  # (batch, channels, seq)
        for index, convolution in enumerate(self.convolutions):
            if index:
                states = self.dropout(states)
            states = torch.relu(convolution(states * keep))
        outputs = (states * keep).transpose(1, 2)  # (batch, seq, hidden)
        return outputs, masked_mean(outputs, mask)


class FeedForwardEncoder(nn.Module):
    r"""
    No sequence model: `num_layers` position-wise feed-forward layers (`nn.Linear` to `hidden_size`, ReLU, dropout
    between layers) over each word's representation alone, so a word sees no other word. Over a pretrained encoder's
    word features (`feature_encoder_config`) it is the "frozen encoder + MLP head" baseline: any context the model
    uses comes from the pretrained encoder. Padding outputs are zeroed.

    Returns `(outputs (batch, seq, hidden), pooled (batch, hidden))`, pooled = masked mean of the outputs.
    """

    def __init__(self, config: BaselineEncoderConfig):
        super().__init__()
        widths = [config.word_representation_dim] + [config.hidden_size] * config.num_layers
        self.layers = nn.ModuleList(nn.Linear(widths[i], widths[i + 1]) for i in range(config.num_layers))
        self.dropout = nn.Dropout(config.hidden_dropout)

    def forward(self, embeds: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        states = embeds
        for index, layer in enumerate(self.layers):
            if index:
                states = self.dropout(states)
            states = torch.relu(layer(states))  # (batch, seq, hidden)
        outputs = states * mask.unsqueeze(-1).to(states.dtype)
        return outputs, masked_mean(outputs, mask)


def sinusoidal_positions(positions: torch.Tensor, width: int) -> torch.Tensor:
    """Vaswani et al. (2017) position encodings for integer `positions` `(batch, seq)` -> `(batch, seq, width)`."""
    frequencies = torch.exp(
        torch.arange(0, width, 2, device=positions.device, dtype=torch.float32) * (-math.log(10000.0) / width)
    )
    angles = positions.unsqueeze(-1).float() * frequencies  # (batch, seq, ceil(width / 2))
    encoding = torch.stack([angles.sin(), angles.cos()], dim=-1).flatten(-2)  # interleaved sin/cos
    return encoding[..., :width]


class TransformerBaselineEncoder(nn.Module):
    r"""
    `nn.TransformerEncoder` (post-norm layers as in Vaswani et al., GELU-free ReLU feed-forward of width
    `intermediate_size`) over a linear projection of the embeddings plus positions. Positions count real tokens only
    (so left padding does not shift them) and padded keys are masked.

    Returns `(outputs (batch, seq, hidden), pooled (batch, hidden))`, pooled = masked mean of the outputs.
    """

    def __init__(self, config: BaselineEncoderConfig):
        super().__init__()
        self.hidden_size = config.hidden_size
        self.input_projection = nn.Linear(config.word_representation_dim, config.hidden_size)
        self.position_embeddings = None
        if config.position_embedding_type == "learned":
            self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        layer = nn.TransformerEncoderLayer(
            config.hidden_size,
            config.num_attention_heads,
            dim_feedforward=config.intermediate_size,
            dropout=config.hidden_dropout,
            batch_first=True,
        )
        self.encoder = nn.TransformerEncoder(layer, config.num_layers, enable_nested_tensor=False)

    def forward(self, embeds: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        positions = (mask.long().cumsum(1) - 1).clamp(min=0)  # (batch, seq)
        if self.position_embeddings is None:
            position_terms = sinusoidal_positions(positions, self.hidden_size).to(embeds.dtype)
        else:
            if embeds.shape[1] > self.position_embeddings.num_embeddings:
                raise ValueError(
                    f"Input of {embeds.shape[1]} tokens, but learned positions cover at most "
                    f"max_position_embeddings = {self.position_embeddings.num_embeddings} tokens: truncate the input "
                    "or use position_embedding_type='sinusoidal'"
                )
            position_terms = self.position_embeddings(positions)
        states = self.input_projection(embeds) + position_terms
        # A row without real tokens would give an all-masked softmax (NaN): let it attend to everything instead
        # (its outputs are zeroed below).
        padding = ~mask & mask.any(1, keepdim=True)
        outputs = self.encoder(states, src_key_padding_mask=padding)
        outputs = outputs * mask.unsqueeze(-1).to(outputs.dtype)
        return outputs, masked_mean(outputs, mask)


ENCODERS = {
    "bilstm": BiLSTMEncoder,
    "cnn": CNNEncoder,
    "transformer": TransformerBaselineEncoder,
    "feed_forward": FeedForwardEncoder,
}


class BaselinePreTrainedModel(PreTrainedModel):
    r"""
    Weight initialisation and loading for the baseline models. Embeddings: normal with `config.initializer_range`
    and a zero padding row, as for S-LSTM; `nn.LSTM`, `nn.Conv1d`, `nn.Linear` and the Transformer layers get
    PyTorch's own default initialisation (what a user of those modules gets); the CRF its own `reset_parameters`,
    as for S-LSTM.
    """

    config_class = BaselineEncoderConfig
    # The encoder attribute has the S-LSTM models' name, so that the copied `forward` reads the same and both kinds of
    # checkpoint share one layout.
    base_model_prefix = "encoder"
    supports_gradient_checkpointing = False
    # Benchmark models: `save_pretrained` copies no code (the package is imported to load them).
    _auto_class = None

    def _init_weights(self, module):
        # PyTorch's own initialisation of each module, written with the guarded `init` functions so that loading a
        # checkpoint never overwrites loaded weights.
        if isinstance(module, nn.Embedding):
            init.normal_(module.weight, mean=0.0, std=self.config.initializer_range)
            if module.padding_idx is not None:
                init.zeros_(module.weight[module.padding_idx])
        elif isinstance(module, (nn.Linear, nn.Conv1d)):
            bound = 1.0 / math.sqrt(module.weight[0].numel())  # 1 / sqrt(fan_in)
            init.uniform_(module.weight, -bound, bound)
            if isinstance(module, nn.modules.linear.NonDynamicallyQuantizableLinear):  # attention output
                init.zeros_(module.bias)
            elif module.bias is not None:
                init.uniform_(module.bias, -bound, bound)
        elif isinstance(module, nn.LSTM):
            bound = 1.0 / math.sqrt(module.hidden_size)
            for parameter in module.parameters():
                init.uniform_(parameter, -bound, bound)
        elif isinstance(module, nn.MultiheadAttention):
            init.xavier_uniform_(module.in_proj_weight)
            init.zeros_(module.in_proj_bias)
        elif isinstance(module, nn.LayerNorm):
            init.ones_(module.weight)
            init.zeros_(module.bias)
        elif isinstance(module, ConditionalRandomField):
            # As for S-LSTM: the CRF's own init, which also rewrites the constraint buffers checkpoints do not hold.
            module.reset_parameters()


class BaselineModel(BaselinePreTrainedModel):
    r"""
    A bare baseline encoder (`config.encoder_type`) over the S-LSTM word representations ([`SLSTMEmbeddings`]). Takes
    the same inputs and returns the same [`BaseModelOutputWithPooling`] as [`SLSTMModel`].

    Args:
        config ([`BaselineEncoderConfig`]): model configuration.
    """

    def __init__(self, config: BaselineEncoderConfig):
        super().__init__(config)
        self.embeddings = SLSTMEmbeddings(config)
        self.encoder = ENCODERS[config.encoder_type](config)
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
            input_ids (`torch.LongTensor` of shape `(batch, seq)`), attention_mask (`(batch, seq)`, *optional*),
            inputs_embeds (`(batch, seq, embedding_dim)`, *optional*), char_ids (`(batch, seq, max_word_length)`,
            *optional*), subword_ids, subword_attention_mask, subword_to_word (`(batch, subwords)`, *optional*),
            return_dict: as for [`SLSTMModel`].
            output_hidden_states (`bool`, *optional*): also return `(embeddings, outputs)` (the stock modules do
                not expose their inner layers).

        Returns:
            `last_hidden_state` `(batch, seq, hidden)` (zero at padding) and `pooler_output` `(batch, hidden)`.
        """
        output_hidden_states = (
            output_hidden_states if output_hidden_states is not None else self.config.output_hidden_states
        )
        return_dict = return_dict if return_dict is not None else self.config.return_dict
        embeds = self.embeddings(
            input_ids, inputs_embeds, char_ids, subword_ids, subword_attention_mask, subword_to_word
        )  # (batch, seq, word_representation_dim)
        batch, seq, _ = embeds.shape
        if attention_mask is not None and attention_mask.shape != (batch, seq):
            raise ValueError(
                f"attention_mask must have the shape of the input, (batch, seq) = {(batch, seq)}, "
                f"got {tuple(attention_mask.shape)}"
            )
        mask = real_token_mask(attention_mask, embeds)  # (batch, seq)
        embeds = embeds * mask.unsqueeze(-1).to(embeds.dtype)
        outputs, pooled = self.encoder(embeds, mask)
        hidden_states = (embeds, outputs) if output_hidden_states else None
        if not return_dict:
            return tuple(v for v in (outputs, pooled, hidden_states) if v is not None)
        return BaseModelOutputWithPooling(last_hidden_state=outputs, pooler_output=pooled, hidden_states=hidden_states)


class BaselineForSequenceClassification(BaselinePreTrainedModel):
    r"""
    A baseline encoder under the S-LSTM sentence classifier: [`SLSTMForSequenceClassification`]'s head (pooling,
    dropout, linear classifier, `transformers`' loss) and `forward`, with [`BaselineModel`] as the encoder.

    Args:
        config ([`BaselineEncoderConfig`]): model configuration; `num_labels`, `classifier_pooling`,
            `classifier_dropout`.
    """

    accepts_loss_kwargs = False

    def __init__(self, config: BaselineEncoderConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.encoder = BaselineModel(config)
        self.pooler = SLSTMPooler(config)
        self.dropout = nn.Dropout(config.classifier_dropout)
        self.classifier = SLSTMLinear(config.hidden_size, config.num_labels)
        self.post_init()

    # The S-LSTM classifier's `forward` (tests/model/test_baselines.py checks that the two stay identical)
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


class BaselineForTokenClassification(BaselinePreTrainedModel):
    r"""
    A baseline encoder under the S-LSTM tagger: [`SLSTMForTokenClassification`]'s head (dropout, linear emissions,
    softmax or linear-chain CRF, optional BIOES training of IOB2 labels) and `forward`, with [`BaselineModel`] as the
    encoder.

    Args:
        config ([`BaselineEncoderConfig`]): model configuration; `num_labels`/`id2label`, `use_crf`,
            `crf_constraints`, `head_tag_scheme`, `classifier_dropout`.
    """

    def __init__(self, config: BaselineEncoderConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.encoder = BaselineModel(config)
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

    # The S-LSTM tagger's `forward` (tests/model/test_baselines.py checks that the two stay identical)
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


__all__ = [
    "BaselineForSequenceClassification",
    "BaselineForTokenClassification",
    "BaselineModel",
    "BaselinePreTrainedModel",
]
