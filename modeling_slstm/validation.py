"""What the models and the data code agree on about labels and input checks: the label of unlabelled positions, the
checks of shapes and values, and where forward methods read the values of their inputs."""

import torch

IGNORE_INDEX = -100
"""Label of positions without a label (boundary tokens, padding, continuation sub-words) and the tag
`ConditionalRandomField.decode` writes at masked positions: the ``ignore_index`` of ``nn.CrossEntropyLoss``. The
package's one definition (the models and the training scripts import it)."""


def values_are_cheap_to_check(tensor: torch.Tensor) -> bool:
    """Whether forward methods check the values of their inputs (ids, labels, tags, masks): only for eager CPU
    tensors.

    Reading a value of a GPU tensor waits for the device to finish its queued work, and a traced graph
    (`torch.compile`, `torch.export`, ONNX) cannot branch on values; there the data-entry code (the tokenizer, the
    training scripts' data preparation) is what guarantees valid values. Without the check, an out-of-range tag at an
    unmasked position still fails (in the gather of its emission score) instead of giving a wrong loss, and a
    non-0/1 integer mask counts as `True` wherever it is nonzero.
    """
    return tensor.device.type == "cpu" and not torch.compiler.is_compiling() and not torch.jit.is_tracing()


def real_token_mask(attention_mask: torch.Tensor | None, states: torch.Tensor) -> torch.Tensor:
    """Bool `(batch, seq)` real-token mask for encoder outputs `states` `(batch, seq, ...)`: all ones when no
    `attention_mask` is given (its shape is checked by the encoder)."""
    if attention_mask is None:
        return torch.ones(states.shape[:2], dtype=torch.bool, device=states.device)
    return attention_mask.to(device=states.device, dtype=torch.bool)


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
    """Raise a clear error when `values` (other than `ignore_index`) fall outside `[0, limit)`, where checkable."""
    if not values_are_cheap_to_check(values):
        return
    checked = values if ignore_index is None else values[values != ignore_index]
    if checked.numel() and (checked.min() < 0 or checked.max() >= limit):
        ignored = "" if ignore_index is None else f" or {ignore_index} (ignored)"
        raise ValueError(
            f"{name} must be in [0, {limit}) ({limit_name}){ignored}, got values in "
            f"[{checked.min().item()}, {checked.max().item()}]"
        )
