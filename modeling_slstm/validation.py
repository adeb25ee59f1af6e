"""What the models and the data code agree on about labels and input checks: the label of unlabelled positions, and
where forward methods read the values of their inputs."""

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
