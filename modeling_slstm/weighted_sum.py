"""Exact element-wise weighted-sum maps of an S-LSTM (Levy, Lee, FitzGerald & Zettlemoyer, ACL 2018, Sec. 4).

With `context_independent_content=True` the content `u_j = U_u x_j + b_u` of every word is the same at every step.
All cells start at zero and every update (Eqs. 2-3 in `docs/equations.md`) is a gated sum of step `t-1` cells plus
`i_j ⊙ u_j`, so by induction every cell is an element-wise weighted sum of the per-word contents:

    c_i^T = Σ_j w_ij ⊙ u_j        c_{g,k}^T = Σ_j w_{g_k j} ⊙ u_j

The weights are computed alongside the recurrence. For fixed step `t-1` states `h`, `g` (which fix every gate) the
step's new cells are linear in (word cells, sentence cells, contents). So the model's own step, given the recorded
states, with the weights of content word `j` in place of the cells and the indicator "1 at position `j`, 0 elsewhere"
in place of the contents, returns the step-`t` weights of word `j`: the gates are the model's own, not a copy of
its equations. Every content word `j` is one extra batch row.

What the maps reconstruct:

- `remove_output_gate=True`: the word states are `h_i^T = tanh(Σ_j w_ij ⊙ u_j)` (`last_hidden_state`) and the first
  sentence node's state `tanh(Σ_j w_{g_1 j} ⊙ u_j)` is the `pooler_output` (with no sentence node, the pooler is
  the masked mean of the word states).
- `remove_output_gate=False`: the cells are still exactly these sums, but the states read them through the
  context-dependent output gate, `h_i^T = o_i^T ⊙ tanh(c_i^T)`; the maps show what each cell holds, not how much of
  it the output gate lets through.
- `context_independent_content=False` (the default S-LSTM): the content `u_j^t` depends on the step, so the exact
  statement is a sum over (step, word) pairs rather than a map over words; not supported (a `ValueError` says so).
"""

import inspect
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import nn
from transformers.utils import ModelOutput

from .modeling_slstm import SLSTMModel


@dataclass
class SLSTMWeightedSumOutput(ModelOutput):
    r"""
    The element-wise weights that make every final cell a sum over the words' contents (see the module docstring).

    Args:
        word_weights (`torch.Tensor` of shape `(batch, seq, seq, hidden)`):
            `word_weights[b, i, j]` is `w_ij`, the weight of word `j`'s content in word `i`'s final cell:
            `c_i^T = Σ_j w_ij ⊙ u_j`. Exactly zero in the rows and columns of padding positions.
        sentence_weights (`torch.Tensor` of shape `(batch, num_sentence_nodes, seq, hidden)`):
            `sentence_weights[b, k, j]`: the weight of word `j`'s content in sentence node `k`'s final cell.
            Exactly zero in the columns of padding positions.
        contents (`torch.Tensor` of shape `(batch, seq, hidden)`):
            The contents `u_j = U_u x_j + b_u`; zero at padding.
    """

    word_weights: torch.Tensor | None = None
    sentence_weights: torch.Tensor | None = None
    contents: torch.Tensor | None = None


def weighted_sum_decomposition(
    model: nn.Module,
    input_ids: torch.LongTensor | None = None,
    attention_mask: torch.Tensor | None = None,
    inputs_embeds: torch.Tensor | None = None,
    **model_inputs,
) -> SLSTMWeightedSumOutput:
    r"""
    Decompose every final cell of an S-LSTM trained with `context_independent_content=True` into an element-wise
    weighted sum of the words' contents, `c_i^T = Σ_j w_ij ⊙ u_j` (see the module docstring for what the weights
    reconstruct with and without the output gate).

    Runs without gradients. The model must be deterministic: in training mode with an active dropout layer the
    weights would not belong to the run they describe, so that is an error (call `model.eval()` first).

    Memory and time grow as `batch · seq² · hidden` (one extra batch row per content word); decompose a few sentences
    at a time.

    Args:
        model ([`SLSTMModel`] or a task model with its encoder at `.slstm`): with
            `config.context_independent_content=True`.
        input_ids, attention_mask, inputs_embeds: as for [`SLSTMModel`]; padding may be on either side.
        model_inputs: any further encoder inputs, passed on unchanged (e.g. `char_ids` for a model with character
            features; a tokenizer's whole output can be given as `**encoding`).

    Returns:
        [`SLSTMWeightedSumOutput`] with `word_weights` `(batch, seq, seq, hidden)`, `sentence_weights`
        `(batch, num_sentence_nodes, seq, hidden)` and `contents` `(batch, seq, hidden)`, in the model's dtype.

    Example:

    ```python
    >>> encoding = tokenizer("a gripping , funny film", return_tensors="pt")
    >>> maps = weighted_sum_decomposition(model, **encoding)
    >>> cells = (maps.word_weights * maps.contents.unsqueeze(1)).sum(2)  # (batch, seq, hidden)
    >>> states = torch.tanh(cells)  # == model(**encoding).last_hidden_state with remove_output_gate=True
    ```
    """
    encoder = supported_encoder(model)
    with torch.no_grad():
        with recorded_steps(encoder.transition) as steps:
            encoder(
                input_ids=input_ids,
                attention_mask=attention_mask,
                inputs_embeds=inputs_embeds,
                return_dict=True,
                **model_inputs,
            )
        # The recording has stopped: replaying the steps below must not record them again.
        contents = steps[0]["input_content"] * steps[0]["mask"]  # (batch, seq, hidden)
        batch, seq, hidden = contents.shape
        # One batch row per (sentence, content word j): row b·seq + j holds the weights of word j of sentence b.
        word_weights = contents.new_zeros(batch * seq, seq, hidden)  # cells start at zero
        sentence_weights = contents.new_zeros(batch * seq, encoder.config.num_sentence_nodes, hidden)
        indicators = torch.eye(seq, dtype=contents.dtype, device=contents.device)  # (seq_j, seq_i)
        indicators = indicators.view(1, seq, seq, 1).expand(batch, seq, seq, hidden).reshape(batch * seq, seq, hidden)
        for step in steps:
            word_weights, sentence_weights = propagate_weights(
                encoder.transition, step, word_weights, sentence_weights, indicators
            )
    word_weights = word_weights.view(batch, seq, seq, hidden).transpose(1, 2)  # (batch, seq_i, seq_j, hidden)
    sentence_weights = sentence_weights.view(batch, seq, -1, hidden).transpose(1, 2)  # (batch, nodes, seq_j, hidden)
    return SLSTMWeightedSumOutput(
        word_weights=word_weights.contiguous(), sentence_weights=sentence_weights.contiguous(), contents=contents
    )


def supported_encoder(model: nn.Module) -> SLSTMModel:
    """The [`SLSTMModel`] of `model` (itself, or its `.slstm`), checked to support the decomposition."""
    encoder = model if isinstance(model, SLSTMModel) else getattr(model, "slstm", None)
    if not isinstance(encoder, SLSTMModel):
        found = type(model).__name__
        if encoder is not None:
            found += f" whose .slstm is a {type(encoder).__name__}"
        raise TypeError(
            "weighted_sum_decomposition needs an SLSTMModel or an S-LSTM task model with an SLSTMModel at .slstm, "
            f"got a {found}"
        )
    config = encoder.config
    if not config.context_independent_content:
        raise ValueError(
            "weighted_sum_decomposition needs a model with context_independent_content=True, so that each word's "
            "content u_j is the same at every step and every cell is a weighted sum of the words' contents; with "
            "remove_output_gate=True as well, tanh of that sum is the word state. This model has "
            f"context_independent_content={config.context_independent_content}, "
            f"remove_output_gate={config.remove_output_gate}."
        )
    active_dropout = [
        name
        for name, module in encoder.named_modules()
        if isinstance(module, nn.Dropout) and module.training and module.p > 0
    ]
    if active_dropout:
        raise ValueError(
            "weighted_sum_decomposition needs a deterministic model, but these dropout layers are active (training "
            f"mode): {', '.join(active_dropout)}. Call model.eval() first."
        )
    return encoder


@contextmanager
def recorded_steps(transition: nn.Module) -> Iterator[list[dict]]:
    """Within the block, every call of `transition` appends its arguments, by parameter name, to the yielded list."""
    signature = inspect.signature(transition.forward)
    steps = []

    def record(module, args, kwargs):
        steps.append(signature.bind(*args, **kwargs).arguments)

    handle = transition.register_forward_pre_hook(record, with_kwargs=True)
    try:
        yield steps
    finally:
        handle.remove()


def propagate_weights(
    transition: nn.Module,
    step: dict,
    word_weights: torch.Tensor,
    sentence_weights: torch.Tensor,
    indicators: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One step of the weights: the model's step on the recorded states, with the weights in place of the cells.

    Args:
        transition (`SLSTMStateTransition`): the model's step.
        step (`dict`): the step's recorded arguments (states, cells, input terms, mask), batch size `batch`.
        word_weights (`torch.Tensor` of shape `(batch * seq, seq, hidden)`): row `b·seq + j` holds the weights of
            content word `j` of sentence `b` in every word cell after the previous step.
        sentence_weights (`torch.Tensor` of shape `(batch * seq, num_sentence_nodes, hidden)`): likewise in every
            sentence cell.
        indicators (`torch.Tensor` of shape `(batch * seq, seq, hidden)`): row `b·seq + j` is 1 at position `j`.

    Returns:
        `(word_weights, sentence_weights)` after the step, shaped like the inputs.
    """
    seq = word_weights.shape[1]
    # For fixed states the new cells are linear in (cells, sentence cells, contents): weights in, weights out.
    replaced = {"word_cells": word_weights, "sentence_cells": sentence_weights, "input_content": indicators}
    arguments = {
        name: replaced[name] if name in replaced else value.repeat_interleave(seq, dim=0)  # one copy per column j
        for name, value in step.items()
    }
    _, word_weights, _, sentence_weights = transition(**arguments)
    return word_weights, sentence_weights


__all__ = ["SLSTMWeightedSumOutput", "weighted_sum_decomposition"]
