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

Static shapes (`--cuda_graphs` on a CUDA device, `training_data_collator`): a graph that replays a whole training step
holds one batch shape, so the training batches come in a few fixed shapes, `(per_device_train_batch_size, width)`:
- the width is the longest sentence's length rounded up to a rung of `BUCKET_WIDTHS` (`bucket_width`);
- a short batch (the last of an epoch) is filled up to the batch size with empty sentences (`empty_sentence`: the
  tokenizer's `<s> </s>`, every label -100), which the losses count for nothing (`StaticShapeBatches`).
An epoch of CoNLL-2003 NER or of movie review then takes at most 8 shapes
(`run_scripts/benchmarks/benchmark_batch_shapes.py` counts them). `is_bucket_shape` says whether a batch has one of
those shapes; a batch whose longest sentence is past the last rung is padded to a multiple of `GPU_PAD_MULTIPLE`
instead, a shape of its own. Evaluation batches are not filled (their predictions are the dataset's rows).
"""

import math
from collections.abc import Callable, Sequence

import numpy as np
import torch

from modeling_slstm.tokenization_slstm import CHAR_PAD_ID
from modeling_slstm.validation import IGNORE_INDEX
from run_scripts.training.usage_errors import UsageError

GPU_PAD_MULTIPLE = 8
# The widths of static-shape batches: multiples of `GPU_PAD_MULTIPLE`, each rung at most 1.5 times the one below from
# 16 on (alternately 1.5x and 4/3x; up to 32 the steps of 8 that the GPU collators take anyway, where most sentences
# are). 8 rungs, one graph each, cover sentences of up to 128 tokens (CoNLL-2003 NER's longest has 115, movie
# review's 61). A rung pads a batch by less than its ratio to the rung below, and length-grouped batches rarely come
# near it; a finer ladder would cost a graph per rung (its capture time and memory), a coarser one more padded
# positions in every step.
BUCKET_WIDTHS = (8, 16, 24, 32, 48, 64, 96, 128)


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


def bucket_width(length: int, buckets: Sequence[int] = BUCKET_WIDTHS) -> int:
    """The width of a static-shape batch whose longest sentence has `length` tokens: the smallest rung of `buckets`
    (ascending) that holds it, or past the last rung `length` rounded up to a multiple of `GPU_PAD_MULTIPLE`."""
    if length < 1:
        raise ValueError(f"A batch's longest sentence has at least one token, got length {length}")
    for width in buckets:
        if length <= width:
            return width
    return math.ceil(length / GPU_PAD_MULTIPLE) * GPU_PAD_MULTIPLE


def is_bucket_shape(shape: Sequence[int], batch_size: int, buckets: Sequence[int] = BUCKET_WIDTHS) -> bool:
    """Whether a batch of `shape` (the `(batch, seq)` of its `input_ids`, e.g. `input_ids.shape`) is one of the static
    shapes `(batch_size, rung of buckets)`: False for a batch past the last rung, or of another size."""
    return len(shape) == 2 and shape[0] == batch_size and shape[1] in buckets


def uses_static_shapes(training_args) -> bool:
    """Whether the training batches come in static shapes (`StaticShapeBatches`): with `--cuda_graphs` on a CUDA
    device (`training_args.cuda_graphs`, `training_args.device`)."""
    return bool(getattr(training_args, "cuda_graphs", False)) and training_args.device.type == "cuda"


def empty_sentence(tokenizer) -> dict:
    """The tokenizer's encoding of an empty text (`<s> </s>`, attention mask 1), as lists: the filler of
    static-shape batches."""
    return {name: list(values) for name, values in tokenizer("").items()}


class StaticShapeBatches:
    r"""
    A training data collator whose batches have static shapes: `batch_size` sentences (a short batch is filled with
    empty sentences) padded to `bucket_width` of the longest one.

    A filler is `empty_sentence(tokenizer)` with every label -100: token labels -100 at each of its tokens, a
    sentence label -100. The losses count it for nothing: the softmax and sequence-classification cross-entropies
    skip -100 labels in their sums and counts, the CRF loss averages over the sentences that have labelled
    positions. Its outputs are finite (a two-token sentence), so no NaN reaches a gradient.

    Args:
        collator_class (`type`): a `transformers` collator taking `(tokenizer, padding=..., max_length=...)`, e.g.
            `DataCollatorForTokenClassification` or `DataCollatorWithPadding`.
        tokenizer ([`PreTrainedTokenizerBase`]): the tokenizer of the examples (fillers, padding, padding side).
        batch_size (`int`): the sentences of every batch (`--per_device_train_batch_size`).
        buckets (`Sequence[int]`, *optional*, defaults to `BUCKET_WIDTHS`): the widths, ascending.
    """

    def __init__(self, collator_class, tokenizer, batch_size: int, buckets: Sequence[int] = BUCKET_WIDTHS):
        if batch_size < 1:
            raise ValueError(f"Static-shape batches need a batch size of at least 1, got {batch_size}")
        self.collator_class = collator_class
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.buckets = tuple(buckets)
        self.filler = empty_sentence(tokenizer)
        self.collators = {}  # width -> the collator padding to it

    def __call__(self, features: list[dict]) -> dict:
        if not 1 <= len(features) <= self.batch_size:
            raise ValueError(
                f"Static-shape batches hold 1 to {self.batch_size} sentences (the training batch size), got "
                f"{len(features)}"
            )
        width = bucket_width(max(len(feature["input_ids"]) for feature in features), self.buckets)
        fillers = [self.filler_like(features[0])] * (self.batch_size - len(features))
        return self.collator_for(width)([*features, *fillers])

    def collator_for(self, width: int) -> Callable[[list[dict]], dict]:
        """The collator padding to `width` tokens (`char_ids` by `CharIdsPadding`), made once per width."""
        if width not in self.collators:
            collator = self.collator_class(self.tokenizer, padding="max_length", max_length=width)
            self.collators[width] = CharIdsPadding(collator, self.tokenizer.padding_side)
        return self.collators[width]

    def filler_like(self, feature: dict) -> dict:
        """An empty sentence with the columns of `feature` and -100 labels of the same kind as its labels."""
        unknown = sorted(set(feature) - set(self.filler) - {"labels"})
        if unknown:
            raise ValueError(
                f"Static-shape batches fill short batches with the tokenizer's empty sentence, which has no "
                f"{unknown}: expected only the tokenizer's columns {sorted(self.filler)} and labels"
            )
        filler = {name: values for name, values in self.filler.items() if name in feature}
        if "labels" in feature:
            filler["labels"] = ignored_labels_like(feature["labels"], len(self.filler["input_ids"]))
        return filler


def ignored_labels_like(labels, length: int) -> int | list[int]:
    """-100 (ignored) labels of a `length`-token filler, of the kind of an example's `labels`: one per token for token
    labels (a sequence), one for a class label (an integer)."""
    if isinstance(labels, Sequence | np.ndarray | torch.Tensor) and np.ndim(labels) == 1:
        if all(isinstance(label, int | np.integer) for label in np.asarray(labels).tolist()):
            return [IGNORE_INDEX] * length
    elif isinstance(labels, int | np.integer):
        return IGNORE_INDEX
    raise UsageError(
        "Static-shape batches fill short batches with empty sentences whose labels are -100 (ignored by the loss), "
        f"which needs integer labels (a class id, or tag ids per token); got {labels!r}: regression and multi-label "
        "targets cannot be ignored, train them without --cuda_graphs"
    )


def training_data_collator(collator_class, tokenizer, training_args, static_shapes: bool | None = None):
    """The collator of the training batches: `StaticShapeBatches` of `--per_device_train_batch_size` sentences
    (`training_args.train_batch_size`) when `static_shapes` (by default `uses_static_shapes(training_args)`), else
    `data_collator`'s. Each process fills its own batches, so several processes work alike.

    Raises:
        `ValueError`: static shapes with token-budget batches (`--max_tokens_per_batch`), whose sizes vary.
    """
    if static_shapes is None:
        static_shapes = uses_static_shapes(training_args)
    if not static_shapes:
        return data_collator(collator_class, tokenizer, training_args)
    budget = getattr(training_args, "max_tokens_per_batch", None)
    if budget is not None:
        raise UsageError(
            f"--cuda_graphs trains on batches of a fixed number of sentences (--per_device_train_batch_size), and "
            f"--max_tokens_per_batch {budget} makes batches of varying sizes: give one of them"
        )
    # The sentences a training batch of one process holds: `--per_device_train_batch_size` (times the GPUs of one
    # process under `DataParallel`), as the Trainer's loader batches them.
    return StaticShapeBatches(collator_class, tokenizer, training_args.train_batch_size)
