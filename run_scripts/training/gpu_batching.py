"""Batch shapes on a GPU: the training scripts' data collators pad every batch to a multiple of `GPU_PAD_MULTIPLE`
tokens on a CUDA device, so that a corpus's batches take a few widths rather than one per sentence length.

Why: the fused S-LSTM step and cuBLAS pick their kernels per shape, `torch.compile` recompiles and CUDA graphs are
captured per shape; with widths in steps of 8 the CoNLL-2003 NER training split has 11 of them (its longest sentence
has 115 tokens), the movie-review one 8. Outputs do not change (the model is exact under padding); on a CPU the
batches stay padded to their longest sentence, as before.

CUDA graphs and `torch.compile` stay options of the training scripts, off by default: `--cuda_graphs` replays each
training step's forward and backward from a CUDA graph captured once per batch shape (transformers' `--torch_compile`
with `--torch_compile_mode reduce-overhead`), and `run_scripts/benchmarks/gpu_checks.sh` measures whether they pay for
a whole epoch.
"""

import torch

GPU_PAD_MULTIPLE = 8


def pad_multiple_for(device: torch.device) -> int | None:
    """`GPU_PAD_MULTIPLE` on a CUDA device, None (pad to the longest sentence) elsewhere."""
    return GPU_PAD_MULTIPLE if device.type == "cuda" else None


def data_collator(collator_class, tokenizer, training_args):
    """`collator_class(tokenizer)` (e.g. `DataCollatorWithPadding`) padding to `pad_multiple_for` the device the
    Trainer trains on (`training_args.device`)."""
    return collator_class(tokenizer, pad_to_multiple_of=pad_multiple_for(training_args.device))
