"""Counts the batch shapes of a training epoch, as the training scripts batch CoNLL-2003 NER and movie review: the
length-grouped sampler of `SLSTMTrainer` over the training split (movie review: the seeded split of
`run_classification.py`), batches of `--batch_size`. Each corpus gets a row for the GPU collators of today (widths in
multiples of 8, a short last batch) and one for static shapes (`gpu_batching.StaticShapeBatches`, used with
`--cuda_graphs`: width buckets, the last batch filled): distinct shapes per epoch (each a CUDA graph to capture),
and the padded positions per real token.

A token is a word (`<s>` and `</s>` added, cut at `--max_seq_length`), as the training scripts' word tokenizer encodes
them.

    python run_scripts/benchmarks/benchmark_batch_shapes.py --data_dir ../shared/data
"""

import math
from dataclasses import dataclass, field
from pathlib import Path

from transformers import HfArgumentParser

from run_scripts.training import data
from run_scripts.training.gpu_batching import GPU_PAD_MULTIPLE, bucket_width
from run_scripts.training.samplers import EpochSeededLengthGroupedSampler

CORPUS_PATHS = {"conll2003_ner": Path("conll2003", "ner", "train.txt"), "movie_review": Path("movie_review")}


@dataclass
class ShapeArguments:
    data_dir: str = field(default="../shared/data", metadata={"help": "The shared data folder."})
    batch_size: int = field(default=10, metadata={"help": "--per_device_train_batch_size (the paper's recipe: 10)."})
    seed: int = field(default=42, metadata={"help": "The sampler's seed (the Trainer's --seed / --data_seed)."})
    split_seed: int = field(default=42, metadata={"help": "The movie-review split's seed (--split_seed)."})
    max_seq_length: int = field(default=512, metadata={"help": "Tokens per example, <s> and </s> included."})
    epochs: int = field(default=3, metadata={"help": "Epochs to count (the sampler's order changes per epoch)."})


def training_lengths(corpus: str, path: Path, max_seq_length: int = 512, split_seed: int = 42) -> list[int]:
    """The token lengths (`<s>` and `</s>` included) of the training examples of `corpus` (a key of
    `CORPUS_PATHS`) at `path`."""
    if corpus == "conll2003_ner":
        word_counts = [len(sentence["tokens"]) for sentence in data.read_conll(path)]
    elif corpus == "movie_review":
        word_counts = [len(example["text"].split()) for example in data.read_rt_polarity(path, split_seed)["train"]]
    else:
        raise ValueError(f"Unknown corpus {corpus!r}: expected one of {list(CORPUS_PATHS)}")
    return [min(count + 2, max_seq_length) for count in word_counts]


def epoch_shapes(lengths: list[int], batch_size: int, seed: int, epoch: int, static: bool) -> list[tuple[int, int]]:
    """The `(batch, width)` of every training batch of one epoch, in order: static shapes (`bucket_width`, the batch
    size fixed) or the multiples of `GPU_PAD_MULTIPLE` of today's GPU collators (a short last batch)."""
    sampler = EpochSeededLengthGroupedSampler(batch_size, lengths=lengths, seed=seed)
    sampler.set_epoch(epoch)
    order = list(sampler)
    shapes = []
    for start in range(0, len(order), batch_size):
        longest = max(lengths[index] for index in order[start : start + batch_size])
        if static:
            shapes.append((batch_size, bucket_width(longest)))
        else:
            rows = len(order[start : start + batch_size])
            shapes.append((rows, math.ceil(longest / GPU_PAD_MULTIPLE) * GPU_PAD_MULTIPLE))
    return shapes


def shape_rows(lengths: list[int], args: ShapeArguments) -> list[dict]:
    """One row per collator (multiples of 8, static shapes) of a corpus of token `lengths`."""
    rows = []
    for static, collator in ((False, "multiples of 8"), (True, "static shapes")):
        epochs = [epoch_shapes(lengths, args.batch_size, args.seed, epoch, static) for epoch in range(args.epochs)]
        padded = sum(rows * width for rows, width in epochs[0]) - sum(lengths)
        rows.append({
            "collator": collator,
            "shapes_per_epoch": [len(set(shapes)) for shapes in epochs],
            "all_shapes": sorted(set().union(*epochs)),
            "padding_per_token": padded / sum(lengths),
        })  # fmt: skip
    return rows


def main(argv: list[str] | None = None) -> list[dict]:
    """Prints the table; returns its rows (`corpus`, `examples` and `shape_rows`' fields, or `absent`: the path)."""
    (args,) = HfArgumentParser(ShapeArguments).parse_args_into_dataclasses(argv)
    print(f"Batches of {args.batch_size}, length-grouped, seed {args.seed}; epochs 0-{args.epochs - 1}")
    print("| corpus | examples | collator | distinct shapes per epoch | all epochs | padded positions per token |")
    print("|---|---|---|---|---|---|")
    table = []
    for corpus, relative in CORPUS_PATHS.items():
        path = Path(args.data_dir) / relative
        if not path.exists():
            table.append({"corpus": corpus, "absent": str(path)})
            print(f"| {corpus} | absent: {path} | | | | |", flush=True)
            continue
        lengths = training_lengths(corpus, path, args.max_seq_length, args.split_seed)
        for row in shape_rows(lengths, args):
            table.append({"corpus": corpus, "examples": len(lengths), **row})
            shapes = ", ".join(f"{rows}x{width}" for rows, width in row["all_shapes"])
            print(
                f"| {corpus} | {len(lengths):,} | {row['collator']} | "
                f"{'/'.join(map(str, row['shapes_per_epoch']))} | {len(row['all_shapes'])}: {shapes} | "
                f"{row['padding_per_token']:.3f} |",
                flush=True,
            )
    return table


if __name__ == "__main__":
    main()
