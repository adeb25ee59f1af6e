"""The training scripts' data collators: batch shapes on a GPU, and character ids padded fast.

Batch shapes on a GPU: the collators pad every batch to a multiple of `GPU_PAD_MULTIPLE` tokens on a CUDA device, so
that a corpus's batches take a few widths rather than one per sentence length.

Why: the fused S-LSTM step and cuBLAS pick their kernels per shape, `torch.compile` recompiles and CUDA graphs are
captured per shape; with widths in steps of 8 the CoNLL-2003 NER training split has 11 of them (its longest sentence
has 115 tokens), the movie-review one 8. Outputs do not change (the model is exact under padding); on a CPU the
batches stay padded to their longest sentence, as before.

CUDA graphs and `torch.compile` stay options of the training scripts, off by default: `--cuda_graphs` replays each
whole training step from a CUDA graph captured once per batch shape (`graph_step.py`), and
`run_scripts/benchmarks/gpu_checks.sh` measures whether it pays for a whole epoch.
"""

from collections.abc import Callable

import numpy as np
import torch

from modeling_slstm.tokenization_slstm import CHAR_PAD_ID

GPU_PAD_MULTIPLE = 8


def pad_multiple_for(device: torch.device) -> int | None:
    """`GPU_PAD_MULTIPLE` on a CUDA device, None (pad to the longest sentence) elsewhere."""
    return GPU_PAD_MULTIPLE if device.type == "cuda" else None


def data_collator(collator_class, tokenizer, training_args):
    """`collator_class(tokenizer)` (e.g. `DataCollatorWithPadding`) padding to `pad_multiple_for` the device the
    Trainer trains on (`training_args.device`), its examples' `char_ids` padded by `CharIdsPadding`."""
    collator = collator_class(tokenizer, pad_to_multiple_of=pad_multiple_for(training_args.device))
    return CharIdsPadding(collator, tokenizer.padding_side)


class CharIdsPadding:
    """A data collator that pads the examples' `char_ids` itself, through one NumPy array, and leaves every other
    input to `collator`. The tokenizer pads them as `PreTrainedTokenizerBase.pad` pads every input, as nested Python
    lists that `torch.tensor` then reads one number at a time: for a batch of 10 CoNLL-2003 sentences that took most
    of the collation's host time, 6 times what the array takes. The batch is the same: each sentence's rows, then
    all-zero rows (`CHAR_PAD_ID`) on the tokenizer's padding side up to the width of the padded `input_ids`.

    Args:
        collator (`Callable`): the collator of the other inputs (and labels), which returns `input_ids` as a tensor.
        padding_side (`str`, *optional*, defaults to `"right"`): the tokenizer's padding side.
    """

    def __init__(self, collator: Callable[[list[dict]], dict], padding_side: str = "right"):
        self.collator = collator
        self.padding_side = padding_side

    def __call__(self, features: list[dict]) -> dict:
        if "char_ids" not in features[0]:
            return self.collator(features)
        rows = [feature["char_ids"] for feature in features]
        batch = self.collator([{name: value for name, value in f.items() if name != "char_ids"} for f in features])
        batch["char_ids"] = padded_char_ids(rows, batch["input_ids"].shape[1], self.padding_side)
        return batch


def padded_char_ids(rows: list, width: int, padding_side: str) -> torch.Tensor:
    """The `(batch, width, max_word_length)` tensor of each sentence's `char_ids` rows (a `(words, max_word_length)`
    list or array), padded with `CHAR_PAD_ID` rows on `padding_side`."""
    word_length = max((len(sentence[0]) for sentence in rows if len(sentence)), default=0)
    padded = np.full((len(rows), width, word_length), CHAR_PAD_ID, dtype=np.int64)  # (batch, width, word_length)
    for index, sentence in enumerate(rows):
        if len(sentence):
            positions = slice(0, len(sentence)) if padding_side == "right" else slice(width - len(sentence), width)
            padded[index, positions] = sentence
    return torch.from_numpy(padded)
