"""The tagging head of the token classifiers: S-LSTM's `SLSTMForTokenClassification` and the baselines'
`BaselineForTokenClassification` put the same head on their encoders, and both call these pieces.

A head scores its tags with a softmax or a linear-chain CRF (`crf.py`). With `config.head_tag_scheme="BIOES"` it
trains and decodes in the BIOES tags of its IOB2 labels (`BIOESTags`): gold IOB2 labels become BIOES tags
(`bioes_gold_tags`) and the BIOES scores become IOB2 logits (`iob2_label_scores`), so that users, metrics and
pipelines see IOB2. The head's labels are read from the config at every forward (`update_head_for_labels`).
"""

from collections.abc import Callable

import torch
from torch import nn
from transformers import PreTrainedConfig
from transformers.loss.loss_utils import fixed_cross_entropy

from .crf import ConditionalRandomField
from .tag_schemes import BIOESLabelMap, allowed_transitions
from .validation import IGNORE_INDEX, check_labels_shape, naming_bad_values, real_token_mask


def config_labels(config: PreTrainedConfig) -> tuple[str, ...]:
    """The label names of `config` by id."""
    return tuple(config.id2label[index] for index in range(config.num_labels))


def are_placeholders(labels: tuple[str, ...]) -> bool:
    """Whether `labels` are the names a config gives labels it was not told (`LABEL_0`, `LABEL_1`, ...)."""
    return labels == tuple(f"LABEL_{index}" for index in range(len(labels)))


def head_tag_count(config: PreTrainedConfig) -> int:
    """The outputs of a token classifier's head: `num_labels`, or with `head_tag_scheme="BIOES"` the number of BIOES
    tags, which IOB2 labels (`O`, then `B-X` and `I-X` per type, each type gaining `E-X` and `S-X`) fix before their
    names are known: `2 * num_labels - 1`."""
    labels = config_labels(config)
    if config.head_tag_scheme != "BIOES":
        return config.num_labels
    if not are_placeholders(labels):
        return len(BIOESLabelMap(labels).tags)  # checks the labels, naming what is missing
    if config.num_labels % 2 == 0:
        raise ValueError(
            "A BIOES head needs IOB2 labels: O plus B-X and I-X for every entity type X, an odd number of labels; "
            f"got num_labels={config.num_labels}"
        )
    return 2 * config.num_labels - 1


class BIOESTags:
    r"""
    The BIOES tags of a head over IOB2 labels ([`BIOESLabelMap`]) and its id tables as tensors, which the head reads
    on its own device.

    Args:
        labels (`Sequence[str]`): the IOB2 labels by id (`config.id2label`).

    Attributes:
        tags (`list[str]`): the BIOES tags by id (the head's outputs).
        label_map ([`BIOESLabelMap`]): the id lists behind the tables.
    """

    def __init__(self, labels: tuple[str, ...]):
        self.label_map = BIOESLabelMap(labels)
        self.tags = self.label_map.tags
        self.tables_by_device: dict[torch.device, tuple[torch.LongTensor, ...]] = {}

    def id_tables(self, device: torch.device) -> tuple[torch.LongTensor, torch.LongTensor, torch.LongTensor]:
        """`(inside, kept, closed)` of the label map, `(num_labels,)` each, on `device`.

        Made once per device and kept by this head: made at every call, their copy to a GPU would wait for the GPU's
        queued work. While `torch.compile` or `torch.export` traces, made afresh: a traced tensor kept here would be
        what every later eager call reads.
        """
        compiling = torch.compiler.is_compiling()
        if compiling or device not in self.tables_by_device:
            label_map = self.label_map
            tables = tuple(torch.tensor(ids, device=device) for ids in (label_map.inside, *label_map.sources))
            if compiling:
                return tables
            self.tables_by_device[device] = tables
        return self.tables_by_device[device]


def update_head_for_labels(head: nn.Module) -> None:
    """Builds a token classifier's BIOES tags (`head.bioes`) and its CRF's constraints from the labels its config holds
    now.

    Called at construction and at the start of every `forward` (a no-op unless `config.id2label` changed): a model
    built from `num_labels` alone, with the placeholder labels `LABEL_i`, whose labels are set afterwards (what
    transformers' `run_ner.py` does with `--ignore_mismatched_sizes`), then trains, evaluates and saves with the
    constraints of its real labels, i.e. as the model that reloads.

    Args:
        head (`nn.Module`): the token classifier; its `config`, `classifier`, `crf` (or `None`) are read, and
            `head_built_for` (the labels it was last built from) and `bioes` are set.
    """
    labels = config_labels(head.config)
    if labels == head.head_built_for:
        return
    head.head_built_for = labels
    uses_bioes = head.config.head_tag_scheme == "BIOES"
    head.bioes = BIOESTags(labels) if uses_bioes and not are_placeholders(labels) else None
    if head.bioes is not None and len(head.bioes.tags) != head.classifier.out_features:
        raise ValueError(
            f"A BIOES head built for {head.classifier.out_features} tags cannot take the labels {list(labels)} "
            f"({len(head.bioes.tags)} BIOES tags)"
        )
    head_tags = labels if head.bioes is None else head.bioes.tags
    if head.crf is not None:
        constrained = head.config.crf_constraints and (head.bioes is not None or not uses_bioes)
        head.crf.set_allowed_transitions(allowed_transitions(head_tags) if constrained else None)


def next_labelled_positions(labels: torch.LongTensor) -> torch.LongTensor:
    """For each position of `labels` `(batch, seq)`, the index of the next position whose label is not -100 (`seq`
    where none follows): a suffix minimum, so no Python loop over positions."""
    seq = labels.size(1)
    positions = torch.arange(seq, device=labels.device).expand_as(labels)  # (batch, seq)
    labelled = torch.where(labels != IGNORE_INDEX, positions, seq)  # (batch, seq)
    after = nn.functional.pad(labelled[:, 1:], (0, 1), value=seq)  # (batch, seq): labelled index of position + 1
    return after.flip(1).cummin(dim=1).values.flip(1)


def bioes_gold_tags(labels: torch.LongTensor, bioes: BIOESTags) -> torch.LongTensor:
    """IOB2 label ids `(batch, seq)` (-100 where unlabelled) -> the ids of their BIOES form in `bioes.tags`.

    `B-X`/`I-X` keep their id when the next labelled position is `I-X`, else become `S-X`/`E-X` (the chain of a
    sentence is its labelled positions, as for the CRF); `O` and -100 stay.
    """
    seq = labels.size(1)
    inside, kept, closed = bioes.id_tables(labels.device)  # (num_labels,) each
    known = labels.clamp(min=0)  # (batch, seq): -100 read as label 0, put back at the end
    following = next_labelled_positions(labels)  # (batch, seq)
    next_labels = known.gather(1, following.clamp(max=seq - 1))  # (batch, seq)
    continues = (following < seq) & (next_labels == inside[known])  # (batch, seq)
    return torch.where(continues, kept[known], closed[known]).masked_fill(labels == IGNORE_INDEX, IGNORE_INDEX)


def head_gold_tags(labels: torch.LongTensor, bioes: BIOESTags | None) -> torch.LongTensor:
    """The gold tags `(batch, seq)` in the head's scheme: the IOB2 `labels` themselves, or their BIOES form
    (`bioes_gold_tags`) for a BIOES head."""
    return labels if bioes is None else bioes_gold_tags(labels, bioes)


def iob2_label_scores(tag_scores: torch.Tensor, bioes: BIOESTags, combine: Callable) -> torch.Tensor:
    """Scores `(batch, seq, len(tags))` of the BIOES tags -> `(batch, seq, num_labels)` of the IOB2 labels: each
    label's two BIOES tags (`B-X`, `S-X` for `B-X`; `I-X`, `E-X` for `I-X`) joined by `combine` (`torch.maximum` for
    max-marginals, `torch.logaddexp` for log-probabilities); `O` has one tag and keeps its score."""
    _, kept, closed = bioes.id_tables(tag_scores.device)
    kept_scores, closed_scores = tag_scores[..., kept], tag_scores[..., closed]  # (batch, seq, num_labels)
    return torch.where(kept == closed, kept_scores, combine(kept_scores, closed_scores))


def crf_inference_chain(
    input_ids: torch.LongTensor | None, attention_mask: torch.Tensor, config: PreTrainedConfig
) -> torch.Tensor:
    """The CRF chain at inference, bool `(batch, seq)`: real tokens that are not padding or sentence boundaries
    (`config.pad_token_id`/`bos_token_id`/`eos_token_id`); the whole `attention_mask` without `input_ids`."""
    if input_ids is None:
        return attention_mask
    # One comparison per id: no tensor of ids to copy to a GPU (a copy that waits for it), and no `torch.isin`,
    # which has no ONNX translation.
    is_special = torch.zeros_like(attention_mask)  # (batch, seq)
    for token_id in (config.pad_token_id, config.bos_token_id, config.eos_token_id):
        if token_id is not None:
            is_special = is_special | (input_ids == token_id)
    return attention_mask & ~is_special


def softmax_loss_and_logits(
    emissions: torch.Tensor, labels: torch.LongTensor | None, bioes: BIOESTags | None, **loss_kwargs
) -> tuple[torch.Tensor | None, torch.Tensor]:
    """A softmax head: transformers' token-classification cross-entropy over positions whose label is not -100
    (honouring the Trainer's `num_items_in_batch`), and logits: the emissions, or for a BIOES head each IOB2 label's
    log-probability (its BIOES tags' probabilities summed). Arguments as for `tagging_loss_and_logits`."""
    loss = None
    if labels is not None:
        # transformers' `ForTokenClassification` loss assumes num_labels columns: its cross-entropy, called directly.
        flat_emissions = emissions.flatten(0, 1).float()  # (batch * seq, head tags)
        loss = fixed_cross_entropy(flat_emissions, head_gold_tags(labels, bioes).flatten(), **loss_kwargs)
    if bioes is None:
        return loss, emissions
    log_probabilities = nn.functional.log_softmax(emissions.float(), dim=-1)  # (batch, seq, head tags)
    return loss, iob2_label_scores(log_probabilities, bioes, torch.logaddexp)


def labelled_sentence_mean(losses: torch.Tensor, chain: torch.Tensor) -> torch.Tensor:
    """The mean of the sentences' `losses` `(batch,)` over the sentences with a non-empty `chain` `(batch, seq)`: a
    sentence without labelled positions (an empty filler of a static-shape batch) counts for nothing, neither in the
    sum (its loss is 0) nor in the count; 0 for a batch without any. Reads no value (no host sync)."""
    labelled = chain.any(dim=1).sum().clamp(min=1)  # a 0-dimensional tensor, kept on the device
    return losses.sum() / labelled


def crf_loss_and_logits(
    emissions: torch.Tensor,
    labels: torch.LongTensor | None,
    input_ids: torch.LongTensor | None,
    attention_mask: torch.Tensor | None,
    crf: ConditionalRandomField,
    bioes: BIOESTags | None,
    config: PreTrainedConfig,
) -> tuple[torch.Tensor | None, torch.Tensor]:
    """A CRF head: the negative log-likelihood averaged over the sentences with labelled positions
    (`labelled_sentence_mean`), on the chain of labelled real positions, and logits: the CRF's max-marginals on that
    chain (on `crf_inference_chain` without labels; 0 off the chain), each IOB2 label of a BIOES head taking the
    larger of its BIOES tags', so that the argmax is the (IOB2 form of the) Viterbi path. Arguments as for
    `tagging_loss_and_logits`."""
    implementation = config.step_implementation  # the CRF's plain loops or its kernels
    real_tokens = real_token_mask(attention_mask, emissions)  # (batch, seq)
    loss = None
    if labels is None:
        chain = crf_inference_chain(input_ids, real_tokens, config)  # (batch, seq)
    else:
        head_tag_ids = head_gold_tags(labels, bioes)  # (batch, seq)
        chain = (head_tag_ids != IGNORE_INDEX) & real_tokens  # (batch, seq)
        losses = crf(emissions, head_tag_ids, chain, reduction="none", implementation=implementation)  # (batch,)
        loss = labelled_sentence_mean(losses, chain)
    max_marginals = crf.max_marginals(emissions, chain, implementation=implementation)  # (batch, seq, head tags)
    return loss, max_marginals if bioes is None else iob2_label_scores(max_marginals, bioes, torch.maximum)


def tagging_loss_and_logits(
    emissions: torch.Tensor,
    labels: torch.LongTensor | None,
    input_ids: torch.LongTensor | None,
    attention_mask: torch.Tensor | None,
    crf: ConditionalRandomField | None,
    bioes: BIOESTags | None,
    config: PreTrainedConfig,
    **loss_kwargs,
) -> tuple[torch.Tensor | None, torch.Tensor]:
    r"""
    The head on a token classifier's emissions: the loss when `labels` are given, and the logits of the IOB2 labels
    (`softmax_loss_and_logits`, or `crf_loss_and_logits` with a CRF).

    Reads no value of its inputs (no host sync): a label out of range fails in an indexing, named there on the host
    (`validation.naming_bad_values`); the data-entry code checks the values (`validation.check_batch_values`).

    Args:
        emissions (`torch.Tensor` of shape `(batch, seq, head tags)`): the classifier's scores of the head's tags.
        labels (`torch.LongTensor` of shape `(batch, seq)`, *optional*): IOB2 label ids, -100 where there is none.
        input_ids (`torch.LongTensor` of shape `(batch, seq)`, *optional*): what the boundary tokens are read from.
        attention_mask (`torch.Tensor` of shape `(batch, seq)`, *optional*): 1 at real tokens; defaults to all ones.
        crf ([`ConditionalRandomField`], *optional*): the CRF over the head's tags, or `None` for a softmax head.
        bioes ([`BIOESTags`], *optional*): the BIOES tags of a BIOES head (`update_head_for_labels`), else `None`.
        config ([`PreTrainedConfig`]): `num_labels`, `head_tag_scheme`, `step_implementation` and the special token
            ids are read.
        loss_kwargs: `num_items_in_batch` from the Trainer (softmax head only).

    Returns:
        `(loss, logits)`: the loss (`None` without `labels`) and logits `(batch, seq, num_labels)`.
    """
    if config.head_tag_scheme == "BIOES" and bioes is None:
        raise ValueError(
            "A BIOES head needs IOB2 labels (O, B-X, I-X for every type X) in config.id2label, got the "
            f"placeholders {list(config_labels(config))}: set config.id2label and config.label2id first"
        )
    if labels is not None:
        check_labels_shape(labels, tuple(emissions.shape[:2]))
    with naming_bad_values(labels, config.num_labels, "labels", "num_labels", ignore_index=IGNORE_INDEX):
        if crf is None:
            return softmax_loss_and_logits(emissions, labels, bioes, **loss_kwargs)
        return crf_loss_and_logits(emissions, labels, input_ids, attention_mask, crf, bioes, config)
