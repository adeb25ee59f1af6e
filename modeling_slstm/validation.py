"""What the models and the data code agree on about labels and input checks: the label of unlabelled positions, the
checks of shapes that forward methods make, and the checks of values that the data-entry code makes.

Forward methods check shapes and dtypes only, never values: reading a value of a tensor waits for the device to
finish its queued work (a host sync; `torch._assert_async` too reads the value on a CPU), and a traced graph
(`torch.compile`, `torch.export`, ONNX) cannot branch on values. The values of a batch (ids in their vocabularies,
labels in range, 0/1 masks) are checked where data enters, on the host, before the batch reaches the device:
`check_batch_values`, which the training scripts' data collator runs on every batch; `SLSTMTokenizer` writes ids of
its own vocabularies only. Left unchecked, an out-of-range id or label still fails inside the model (an index out of
bounds) rather than giving a wrong loss, and where that failure happens on the host (eager CPU tensors),
`named_on_failure` turns it into the clear error of the data-entry check, at no cost to valid input.
"""

from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from transformers import PreTrainedConfig

IGNORE_INDEX = -100
"""Label of positions without a label (boundary tokens, padding, continuation sub-words) and the tag
`ConditionalRandomField.decode` writes at masked positions: the ``ignore_index`` of ``nn.CrossEntropyLoss``. The
package's one definition (the models and the training scripts import it)."""


def real_token_mask(attention_mask: torch.Tensor | None, states: torch.Tensor) -> torch.Tensor:
    """Bool `(batch, seq)` real-token mask for encoder outputs `states` `(batch, seq, ...)`: all ones when no
    `attention_mask` is given (its shape is checked by the encoder)."""
    if attention_mask is None:
        return torch.ones(states.shape[:2], dtype=torch.bool, device=states.device)
    return attention_mask.to(device=states.device, dtype=torch.bool)


def check_input_not_empty(input_shape: tuple[int, int]) -> None:
    """Raise a clear error when the input `(batch, seq)` holds no sentence or no token: the encoder has nothing to
    read (a zero-row batch would otherwise fail deep inside, in a reshape; transformers' own encoders such as BERT
    fail there too, rather than returning empty outputs)."""
    batch, seq = input_shape
    if batch == 0:
        raise ValueError(
            f"The input batch is empty (batch = 0, input shape {tuple(input_shape)}); the model needs at least one "
            "sentence"
        )
    if seq == 0:
        raise ValueError("The input sequence is empty (seq = 0); the encoder needs at least one token")


def check_labels_shape(labels: torch.Tensor, input_shape: tuple[int, int]) -> None:
    """Raise a clear error when token labels do not have the shape `(batch, seq)` of the input."""
    if tuple(labels.shape) != input_shape:
        raise ValueError(
            f"labels must have the shape of the input, (batch, seq) = {input_shape}, got {tuple(labels.shape)}"
        )


def check_labels_batch_size(labels: torch.Tensor, batch: int) -> None:
    """Raise a clear error when sequence labels do not have the batch size of the input."""
    if labels.shape[0] != batch:
        raise ValueError(f"labels must have batch size {batch} like the input, got shape {tuple(labels.shape)}")


def check_values_in_range(
    values: torch.Tensor, limit: int, name: str, limit_name: str, ignore_index: int | None = None
) -> None:
    """Raise a clear error when `values` (other than `ignore_index`) fall outside `[0, limit)`.

    Reads the values: call it where data enters (a data collator, the dataset preparation), not in a forward method.
    """
    checked = values if ignore_index is None else values[values != ignore_index]
    if not checked.numel():
        return
    low, high = (bound.item() for bound in torch.aminmax(checked))
    if low < 0 or high >= limit:
        ignored = "" if ignore_index is None else f" or {ignore_index} (ignored)"
        raise ValueError(f"{name} must be in [0, {limit}) ({limit_name}){ignored}, got values in [{low}, {high}]")


@contextmanager
def named_on_failure(check: Callable[[], None]) -> Iterator[None]:
    """Where the operations inside fail on the host (an index out of bounds, raised for eager CPU tensors; or the
    error of an inner `named_on_failure`, e.g. the CRF's, which names what the caller calls otherwise), run the value
    check `check` and raise its clear `ValueError` in place of the failure; re-raise the failure when the check
    passes. Reads no value while nothing fails, so valid input pays nothing (no host sync)."""
    try:
        yield
    except (IndexError, RuntimeError, ValueError) as error:
        try:
            check()
        except ValueError as named:
            raise named from error
        raise


def naming_bad_values(
    values: torch.Tensor | None, limit: int, name: str, limit_name: str, ignore_index: int | None = None
) -> AbstractContextManager[None]:
    """`named_on_failure` with `check_values_in_range` of integer `values` (`None` or floating-point values, e.g.
    regression targets: nothing to name)."""

    def check() -> None:
        if values is not None and not values.is_floating_point():
            check_values_in_range(values, limit, name, limit_name, ignore_index)

    return named_on_failure(check)


def check_mask_values(mask: torch.Tensor, name: str) -> None:
    """Raise a clear error when an integer `mask` holds values other than 0 and 1 (bool masks always pass), which a
    model would read as 1 wherever they are nonzero. Reads the values: call it where data enters."""
    if mask.dtype != torch.bool and not ((mask == 0) | (mask == 1)).all():
        raise ValueError(f"{name} must hold only 0 and 1, got values {torch.unique(mask).tolist()}")


def check_batch_values(batch: Mapping[str, torch.Tensor], config: "PreTrainedConfig") -> None:
    """Raise a clear error that names the input when a batch for a model of `config` holds values the model cannot
    read: ids outside their vocabularies, labels outside `[0, num_labels)` (or -100, ignored by the loss), masks
    other than 0/1, or subwords assigned to words beyond the sentence.

    The data-entry check of every value the forward methods do not read (see the module docstring): run it on the
    host, on a collated batch, before the batch moves to the device. Inputs the batch lacks are skipped.

    Args:
        batch (`Mapping[str, torch.Tensor]`): model inputs by name, e.g. a data collator's output.
        config ([`PreTrainedConfig`]): the model's config; `vocab_size`, `num_labels`, and where set
            `use_char_features`/`char_vocab_size` and `feature_encoder_config` are read.
    """
    if "input_ids" in batch:
        check_values_in_range(batch["input_ids"], config.vocab_size, "input_ids", "vocab_size")
    if "char_ids" in batch and getattr(config, "use_char_features", False):
        check_values_in_range(batch["char_ids"], config.char_vocab_size, "char_ids", "char_vocab_size")
    for mask_name in ("attention_mask", "subword_attention_mask"):
        if mask_name in batch:
            check_mask_values(batch[mask_name], mask_name)
    encoder_config = getattr(config, "feature_encoder_config", None)
    if "subword_ids" in batch and encoder_config is not None:
        limit_name = "the feature encoder's vocab_size"
        check_values_in_range(batch["subword_ids"], encoder_config.vocab_size, "subword_ids", limit_name)
    if "subword_to_word" in batch and "subword_attention_mask" in batch and "input_ids" in batch:
        attended = batch["subword_to_word"][batch["subword_attention_mask"].bool()]
        seq = batch["input_ids"].shape[1]
        check_values_in_range(attended, seq, "subword_to_word (where subword_attention_mask is 1)", "seq")
    labels = batch.get("labels")
    if labels is None or labels.is_floating_point() or config.num_labels < 2:
        return  # regression and multi-label targets: any value
    # -100: a token without a label, or a sentence whose label the loss ignores (a filler of a static-shape batch).
    check_values_in_range(labels, config.num_labels, "labels", "num_labels", ignore_index=IGNORE_INDEX)
