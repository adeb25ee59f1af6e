"""Task heads shared by every encoder in this package (S-LSTM and the baselines).

A head model subclasses one of the mixins below and a `PreTrainedModel` whose `base_model` (the attribute named by
`base_model_prefix`) returns a `BaseModelOutputWithPooling`: `last_hidden_state` `(batch, seq, hidden)` and
`pooler_output` `(batch, hidden)`. The encoder is the only thing that differs between S-LSTM and a baseline, so the
heads are written once.
"""

import torch
from torch import nn
from transformers.modeling_outputs import SequenceClassifierOutput, TokenClassifierOutput

from .crf import ConditionalRandomField
from .word_embeddings import validated_attention_mask

IGNORE_INDEX = -100


def masked_mean(states: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Mean over real positions: `(batch, seq, hidden)`, `(batch, seq)` -> `(batch, hidden)`."""
    mask = attention_mask.unsqueeze(-1).to(states.dtype)  # (batch, seq, 1)
    return (states * mask).sum(1) / mask.sum(1).clamp(min=1)


class AdditiveAttentionPooling(nn.Module):
    r"""
    The paper's attention over word states (Sec. 3.3): `g = Σ_t α_t h_t`, `α_t ∝ exp(uᵀ tanh(W_α h_t + b_α))`, with
    padding given weight exactly zero.

    Args:
        hidden_size (`int`): width of the word states.
    """

    def __init__(self, hidden_size: int):
        super().__init__()
        self.projection = nn.Linear(hidden_size, hidden_size)  # W_α, b_α
        self.query = nn.Linear(hidden_size, 1, bias=False)  # u

    def forward(self, states: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """`(batch, seq, hidden)`, bool `(batch, seq)` -> `(batch, hidden)`."""
        scores = self.query(torch.tanh(self.projection(states))).squeeze(-1)  # (batch, seq)
        scores = scores.masked_fill(~attention_mask, float("-inf"))
        dtype = torch.promote_types(scores.dtype, torch.float32)  # float64 stays float64
        weights = torch.softmax(scores, dim=-1, dtype=dtype).to(states.dtype)  # (batch, seq)
        return torch.einsum("bs,bsh->bh", weights, states)


def encode(model, input_ids, attention_mask, inputs_embeds, output_hidden_states):
    """Run `model.base_model` and return its output and the bool attention mask `(batch, seq)` it used."""
    outputs = model.base_model(
        input_ids=input_ids,
        attention_mask=attention_mask,
        inputs_embeds=inputs_embeds,
        output_hidden_states=output_hidden_states,
        return_dict=True,
    )
    batch, seq = outputs.last_hidden_state.shape[:2]
    return outputs, validated_attention_mask(attention_mask, batch, seq, outputs.last_hidden_state.device)


class SequenceClassificationHeadMixin:
    r"""
    Sentence classification on `config.classifier_pooling` (`"sentence"`: the encoder's `pooler_output`;
    `"attention"`: [`AdditiveAttentionPooling`]; `"mean"`: masked mean), then dropout and a linear layer.
    The loss is `transformers`' own `ForSequenceClassification` loss, which follows `config.problem_type`
    (regression, single-label or multi-label).

    The loss is a batch mean and the Trainer must not rescale it by `num_items_in_batch`
    (`accepts_loss_kwargs = False`): regression and multi-label losses cannot honour it.
    """

    accepts_loss_kwargs = False

    def init_sequence_classification_head(self, config):
        self.num_labels = config.num_labels
        self.pooling = config.classifier_pooling
        self.attention_pooling = AdditiveAttentionPooling(config.hidden_size) if self.pooling == "attention" else None
        self.dropout = nn.Dropout(config.classifier_dropout)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        **kwargs,
    ) -> SequenceClassifierOutput | tuple:
        r"""
        Args:
            input_ids, attention_mask, inputs_embeds, output_hidden_states: as for the encoder.
            labels (`torch.Tensor` of shape `(batch,)`, or `(batch, num_labels)` for multi-label / regression).

        Returns:
            `logits` `(batch, num_labels)`, `loss` when `labels` are given, `hidden_states` when asked.
        """
        return_dict = return_dict if return_dict is not None else self.config.return_dict
        outputs, mask = encode(self, input_ids, attention_mask, inputs_embeds, output_hidden_states)
        if self.pooling == "attention":
            features = self.attention_pooling(outputs.last_hidden_state, mask)
        elif self.pooling == "mean":
            features = masked_mean(outputs.last_hidden_state, mask)
        else:
            features = outputs.pooler_output
        logits = self.classifier(self.dropout(features))  # (batch, num_labels)

        loss = None
        if labels is not None:
            validate_sequence_labels(labels, logits, self.config)
            loss = self.loss_function(labels, logits, self.config)
        if not return_dict:
            return tuple(v for v in (loss, logits, outputs.hidden_states) if v is not None)
        return SequenceClassifierOutput(loss=loss, logits=logits, hidden_states=outputs.hidden_states)


def validate_sequence_labels(labels: torch.Tensor, logits: torch.Tensor, config):
    batch, num_labels = logits.shape
    if labels.shape[0] != batch:
        raise ValueError(f"labels must have batch size {batch} like the input, got shape {tuple(labels.shape)}")
    if not labels.is_floating_point() and num_labels > 1 and labels.dim() == 1:
        if labels.numel() and (labels.min() < 0 or labels.max() >= num_labels):
            raise ValueError(
                f"labels must be in [0, {num_labels}) (num_labels), got values in "
                f"[{labels.min().item()}, {labels.max().item()}]"
            )


class TokenClassificationHeadMixin:
    r"""
    Per-token tagging: dropout and a linear layer give emissions `(batch, seq, num_labels)`; then either a softmax
    (cross-entropy over positions whose label is not -100) or, with `config.use_crf`, a linear-chain CRF
    (`self.crf`, a [`ConditionalRandomField`]).

    CRF chain: at training (when `labels` are given) the chain is the positions whose label is not -100, so the
    boundary tokens `<s>`/`</s>`, padding and non-first sub-words (labelled -100 by the usual alignment) are left
    out. At inference it is the positions where `attention_mask` is 1 and the token is not `pad`/`bos`/`eos`.
    The CRF loss is the negative log-likelihood averaged over the sentences of the batch.

    With the CRF, `logits` are the CRF's max-marginals (for each position and tag, the score of the best tag path
    through that tag, minus the best path's score), so `logits.argmax(-1)` is the Viterbi path at every chain
    position and the `Trainer`'s metrics and `pipeline("token-classification")` decode with the CRF unchanged;
    positions off the chain have logits 0.

    Without the CRF the loss honours the Trainer's `num_items_in_batch` (a token-level mean over the whole
    accumulated, all-process batch); the CRF loss is per sentence, so the Trainer must not rescale it.
    """

    @property
    def accepts_loss_kwargs(self) -> bool:
        return not self.config.use_crf

    def init_token_classification_head(self, config):
        self.num_labels = config.num_labels
        self.dropout = nn.Dropout(config.classifier_dropout)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.crf = None
        if config.use_crf:
            labels = [config.id2label[index] for index in range(config.num_labels)]
            self.crf = ConditionalRandomField.from_labels(labels, use_constraints=config.crf_constraints)

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        **kwargs,
    ) -> TokenClassifierOutput | tuple:
        r"""
        Args:
            input_ids, attention_mask, inputs_embeds, output_hidden_states: as for the encoder.
            labels (`torch.LongTensor` of shape `(batch, seq)`, *optional*): tag ids, -100 where there is no label.
            kwargs: `num_items_in_batch` from the Trainer (softmax head only).

        Returns:
            `logits` `(batch, seq, num_labels)` (see the class docstring), `loss` when `labels` are given.
        """
        return_dict = return_dict if return_dict is not None else self.config.return_dict
        outputs, mask = encode(self, input_ids, attention_mask, inputs_embeds, output_hidden_states)
        emissions = self.classifier(self.dropout(outputs.last_hidden_state))  # (batch, seq, num_labels)
        if labels is not None:
            validate_token_labels(labels, emissions)

        loss = None
        if self.crf is None:
            logits = emissions
            if labels is not None:
                loss = self.loss_function(logits, labels, self.config, **kwargs)
        else:
            chain = labels != IGNORE_INDEX if labels is not None else self.inference_chain(input_ids, mask)
            logits = self.crf.max_marginals(emissions, chain)
            if labels is not None:
                loss = self.crf(emissions, labels, chain, reduction="mean")
        if not return_dict:
            return tuple(v for v in (loss, logits, outputs.hidden_states) if v is not None)
        return TokenClassifierOutput(loss=loss, logits=logits, hidden_states=outputs.hidden_states)

    def inference_chain(self, input_ids: torch.LongTensor | None, attention_mask: torch.Tensor) -> torch.Tensor:
        """Bool `(batch, seq)`: real tokens that are not padding or sentence boundaries."""
        if input_ids is None:
            return attention_mask
        special = [self.config.pad_token_id, self.config.bos_token_id, self.config.eos_token_id]
        special = torch.tensor([t for t in special if t is not None], device=input_ids.device)
        return attention_mask & ~torch.isin(input_ids, special)


def validate_token_labels(labels: torch.Tensor, emissions: torch.Tensor):
    batch, seq, num_labels = emissions.shape
    if labels.shape != (batch, seq):
        raise ValueError(
            f"labels must have the shape of the input, (batch, seq) = {(batch, seq)}, got {tuple(labels.shape)}"
        )
    labelled = labels[labels != IGNORE_INDEX]
    if labelled.numel() and (labelled.min() < 0 or labelled.max() >= num_labels):
        raise ValueError(
            f"labels must be in [0, {num_labels}) (num_labels) or {IGNORE_INDEX} (ignored), got values in "
            f"[{labelled.min().item()}, {labelled.max().item()}]"
        )
