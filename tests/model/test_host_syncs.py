"""No host syncs in a training step: a forward and backward of every head, through the readable step and the fused
step (Triton's interpreter on a CPU), and of the BiLSTM baseline's heads, calls none of the operators that read a
tensor's value on the host (on a GPU each one makes the host wait for the device).

The operators are counted with `torch.profiler` on the CPU, where they are recorded as on a GPU: a value check
written as a Python `if` on a tensor records `aten::is_nonzero` and `aten::item`, boolean-mask indexing
`aten::nonzero`, and `torch._assert_async` records `aten::item` on a CPU tensor. Value checks belong where data
enters (`validation.check_batch_values`, run by the training scripts' data collator; see
tests/scripts/test_data.py).
"""

import pytest
import torch
from helpers import (
    BIO_LABELS,
    VOCAB_SIZE,
    char_settings,
    pad,
    pad_spellings,
    random_ids,
    random_spellings,
    tagger_config,
    tiny_config,
)
from torch.profiler import ProfilerActivity, profile

from baselines import BaselineEncoderConfig, BaselineForSequenceClassification, BaselineForTokenClassification
from modeling_slstm import SLSTMForSequenceClassification, SLSTMForTokenClassification
from modeling_slstm.validation import IGNORE_INDEX

HOST_SYNC_OPERATORS = {"aten::item", "aten::_local_scalar_dense", "aten::is_nonzero", "aten::nonzero"}

HEADS = {
    "sentence_state": (SLSTMForSequenceClassification, {"classifier_pooling": "sentence"}),
    "attention_pooling": (SLSTMForSequenceClassification, {"classifier_pooling": "attention"}),
    "softmax": (SLSTMForTokenClassification, {}),
    "crf": (SLSTMForTokenClassification, {"use_crf": True}),
    "bioes_softmax": (SLSTMForTokenClassification, {"head_tag_scheme": "BIOES"}),
    "bioes_crf_chars": (SLSTMForTokenClassification, {"use_crf": True, "head_tag_scheme": "BIOES", **char_settings()}),
}


def training_batch(token_labels: bool) -> dict[str, torch.Tensor]:
    """Two right-padded sentences with `<s>`/`</s>`-like unlabelled ends, their characters, and labels."""
    ids, mask = pad(random_ids([5, 3]))
    labels = torch.tensor([[IGNORE_INDEX, 1, 2, 0, IGNORE_INDEX], [IGNORE_INDEX, 3, IGNORE_INDEX, IGNORE_INDEX, 0]])
    batch = {"input_ids": ids, "attention_mask": mask.long(), "char_ids": pad_spellings(random_spellings([5, 3]))}
    batch["labels"] = labels if token_labels else torch.tensor([2, 0])
    return batch


def host_syncs(model: torch.nn.Module, batch: dict[str, torch.Tensor], loss_of=lambda outputs: outputs.loss) -> dict:
    """The host-sync operators (and how often each) that one training forward of `model` and the backward of
    `loss_of(outputs)` call; a first, unrecorded step builds what a model builds once (the BIOES tables, the CRF
    constraints)."""
    model.train()
    loss_of(model(**batch)).backward()
    with profile(activities=[ProfilerActivity.CPU]) as profiler:
        loss_of(model(**batch)).backward()
    counts: dict[str, int] = {}
    for event in profiler.events():
        if event.name in HOST_SYNC_OPERATORS:
            counts[event.name] = counts.get(event.name, 0) + 1
    return counts


@pytest.mark.parametrize("implementation", ["eager", "triton"], ids=["readable", "fused"])
@pytest.mark.parametrize("head", list(HEADS))
def test_a_training_step_of_every_head_makes_no_host_sync(head, implementation):
    model_class, settings = HEADS[head]
    is_tagger = model_class is SLSTMForTokenClassification
    make_config = tagger_config if is_tagger else tiny_config
    config = make_config(**settings, step_implementation=implementation, **({} if is_tagger else {"num_labels": 3}))
    torch.manual_seed(0)
    assert host_syncs(model_class(config), training_batch(is_tagger)) == {}


@pytest.mark.parametrize(
    "model_class, settings",
    [
        (BaselineForSequenceClassification, {"classifier_pooling": "attention", "num_labels": 3}),
        (BaselineForTokenClassification, {"use_crf": True, "head_tag_scheme": "BIOES"}),
        (BaselineForTokenClassification, {}),
    ],
    ids=["attention_pooling", "bioes_crf", "softmax"],
)
def test_the_bilstm_baselines_heads_make_no_host_sync(model_class, settings):
    """The same heads on the BiLSTM add no sync to the encoder's: its packed sequences read their lengths on the
    host (`pack_padded_sequence`), what a CUDA graph of the S-LSTM's step does not have to."""
    if model_class is BaselineForTokenClassification:
        settings = {"id2label": dict(enumerate(BIO_LABELS)), "label2id": {x: i for i, x in enumerate(BIO_LABELS)},
                    **settings}  # fmt: skip
    config = BaselineEncoderConfig(
        encoder_type="bilstm", vocab_size=VOCAB_SIZE, embedding_dim=5, hidden_size=6, embedding_dropout=0.0,
        **settings,
    )  # fmt: skip
    torch.manual_seed(0)
    model = model_class(config)
    batch = training_batch(model_class is BaselineForTokenClassification)
    inputs = {name: value for name, value in batch.items() if name != "labels"}
    encoder_syncs = host_syncs(model.encoder, inputs, lambda outputs: outputs.last_hidden_state.sum())
    assert sum(encoder_syncs.values()) > 0  # the packing's, so that the comparison below counts something
    assert host_syncs(model, batch) == encoder_syncs
