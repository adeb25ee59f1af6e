"""The input side shared by every encoder in this package: word embeddings and input validation.

S-LSTM and the baselines take the same inputs (`input_ids` or `inputs_embeds`, an optional `attention_mask`), so they
embed and validate them with this one mixin.
"""

import torch
from torch import nn


class WordEmbeddingsMixin:
    r"""
    Word embeddings (`self.embeddings`, padding row `config.pad_token_id`) and embedding dropout for a
    `PreTrainedModel` encoder, with the checks that give a clear error instead of an index error deep inside.
    """

    def init_word_embeddings(self, config):
        self.embeddings = nn.Embedding(config.vocab_size, config.embedding_dim, padding_idx=config.pad_token_id)
        self.embedding_dropout = nn.Dropout(config.embedding_dropout)

    def get_input_embeddings(self) -> nn.Embedding:
        return self.embeddings

    def set_input_embeddings(self, value: nn.Embedding):
        self.embeddings = value

    def embed(self, input_ids: torch.LongTensor | None, inputs_embeds: torch.Tensor | None) -> torch.Tensor:
        """Word representations `x_i` `(batch, seq, embedding_dim)` from exactly one of the two inputs, before dropout."""
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("Pass exactly one of input_ids or inputs_embeds")
        if inputs_embeds is not None:
            expected = self.config.embedding_dim
            if inputs_embeds.dim() != 3 or inputs_embeds.shape[-1] != expected:
                raise ValueError(
                    f"inputs_embeds must have shape (batch, seq, {expected}), got {tuple(inputs_embeds.shape)}"
                )
            embeds = inputs_embeds
        else:
            if input_ids.dim() != 2:
                raise ValueError(f"input_ids must have shape (batch, seq), got {tuple(input_ids.shape)}")
            if input_ids.numel() and (input_ids.min() < 0 or input_ids.max() >= self.config.vocab_size):
                raise ValueError(
                    f"input_ids must be in [0, {self.config.vocab_size}) (vocab_size), got values in "
                    f"[{input_ids.min().item()}, {input_ids.max().item()}]"
                )
            embeds = self.embeddings(input_ids)
        if embeds.shape[1] == 0:
            raise ValueError("The input sequence is empty (seq = 0); the encoder needs at least one token")
        return embeds


def validated_attention_mask(attention_mask, batch: int, seq: int, device) -> torch.Tensor:
    """A bool mask `(batch, seq)`, all ones when none is given."""
    if attention_mask is None:
        return torch.ones(batch, seq, dtype=torch.bool, device=device)
    if attention_mask.shape != (batch, seq):
        raise ValueError(
            f"attention_mask must have the shape of the input, (batch, seq) = {(batch, seq)}, "
            f"got {tuple(attention_mask.shape)}"
        )
    return attention_mask.to(device=device, dtype=torch.bool)
