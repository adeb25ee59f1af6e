#!/usr/bin/env python
"""Operators launched by one training step of the paper configurations, readable step against fused step.

For the NER tagger (`hub_configs/slstm-ner-crf.json`: character CNN, CRF over CoNLL-2003's labels), the POS tagger
(`slstm-pos.json`: character CNN, softmax over 45 tags) and the movie-review classifier
(`slstm-classification-paper.json`), a fresh model in training mode on a random batch (every sentence of full length,
every position labelled): one forward that computes the loss, and its backward; and the optimizer step that
follows (clipping at norm 3, AdamW fused or foreach, the scheduler, `zero_grad`; on a CPU foreach AdamW reads each
parameter's step count on the host, 2 `item` calls per parameter tensor, as CUDA's capturable one does not). Counted
with
`launch_counts.count_launched_operators` (top-level ATen and custom operators; views and allocations left out), with
`step_implementation="eager"` (the readable PyTorch step and the CRF's plain loops) and `"triton"` (the fused step and
the CRF's kernels; on a CPU they run in Triton's interpreter, which this script switches on, so the counts are those
of a GPU). Counts depend on the config and the sequence length, not on the batch size (from 2 sentences on) or
the hidden size (`--hidden_size 8` gives the same table, faster).

Prints a Markdown table (docs/benchmarks.md, "Operators per training step"):

    python run_scripts/benchmarks/benchmark_launch_counts.py
    python run_scripts/benchmarks/benchmark_launch_counts.py --tasks ner --shapes 8x8 32x32 --top 15
"""

import os
from collections import Counter
from dataclasses import dataclass, field

import torch

if not torch.cuda.is_available():  # before modeling_slstm is imported: Triton reads it when it decorates the kernels
    os.environ.setdefault("TRITON_INTERPRET", "1")

from modeling_slstm import cpu_matmul
from modeling_slstm.modeling_slstm import SLSTMForSequenceClassification, SLSTMForTokenClassification
from run_scripts import REPOSITORY_ROOT
from run_scripts.benchmarks.support import workloads
from run_scripts.benchmarks.support.fresh_model_and_optimizer import random_vocabulary_model
from run_scripts.benchmarks.support.launch_counts import count_launched_operators, short_name
from run_scripts.benchmarks.support.workloads import parse_shape
from run_scripts.training.arguments import check_choices, parse_arguments

CONLL_LABELS = ["O", "B-LOC", "I-LOC", "B-MISC", "I-MISC", "B-ORG", "I-ORG", "B-PER", "I-PER"]
POS_TAG_COUNT = 45  # the Penn Treebank tags of WSJ POS tagging
TASKS = {
    # task: (config, model class, labels)
    "ner": ("slstm-ner-crf.json", SLSTMForTokenClassification, CONLL_LABELS),
    "pos": ("slstm-pos.json", SLSTMForTokenClassification, [f"TAG{index}" for index in range(POS_TAG_COUNT)]),
    "classification": ("slstm-classification-paper.json", SLSTMForSequenceClassification, ["negative", "positive"]),
}
IMPLEMENTATIONS = {"readable": "eager", "fused": "triton"}
OPTIMIZERS = {"fused AdamW": {"fused": True}, "foreach AdamW": {"foreach": True}}
"""The Trainer's AdamW (`--optim adamw_torch_fused`, its default, or `adamw_torch`: foreach), by its options."""
VOCAB_SIZE, CHAR_VOCAB_SIZE, WORD_LENGTH = 1000, 100, 8


@dataclass
class LaunchCountArguments:
    """Arguments of benchmark_launch_counts.py."""

    tasks: list[str] = field(default_factory=lambda: list(TASKS), metadata={"help": f"of {', '.join(TASKS)}"})
    shapes: list[str] = field(
        default_factory=lambda: ["8x8", "8x64", "32x32"],
        metadata={"help": "batch x length of the token-classification tasks"},
    )
    classification_shapes: list[str] = field(default_factory=lambda: ["32x21"], metadata={"help": "batch x length"})
    hidden_size: int | None = field(
        default=None, metadata={"help": "override the configs' hidden and embedding sizes (counts do not change)"}
    )
    device: str = field(default="cpu", metadata={"help": "cpu (kernels interpreted) or cuda"})
    top: int = field(default=0, metadata={"help": "also list the most frequent operators of each fused count"})

    def __post_init__(self):
        check_choices("tasks", self.tasks, TASKS)
        for shape in self.shapes + self.classification_shapes:
            parse_shape(shape)


def paper_model(
    task: str, implementation: str, hidden_size: int | None = None, device: str = "cpu", config_overrides: str = ""
):
    """A fresh model of the task's shipped config in training mode, seed 0, with `step_implementation`
    ``implementation``; ``hidden_size`` (optional) replaces the hidden and embedding sizes, ``config_overrides`` (as
    `--config_overrides`, e.g. `"window_size=2,num_sentence_nodes=2"`) other fields."""
    config_name, model_class, labels = TASKS[task]
    sizes = {} if hidden_size is None else {"hidden_size": hidden_size, "embedding_dim": hidden_size}
    config_path = str(REPOSITORY_ROOT / "hub_configs" / config_name)
    model = random_vocabulary_model(model_class, config_path, labels, VOCAB_SIZE, CHAR_VOCAB_SIZE, config_overrides,
                                    step_implementation=implementation, **sizes)  # fmt: skip
    return model.to(device)


def random_batch(model, batch: int, length: int, device: str = "cpu") -> dict[str, torch.Tensor]:
    """`workloads.random_batch` of full-length sentences (no padding), every position labelled, seed 0."""
    return workloads.random_batch(model, batch, length, WORD_LENGTH, device=device)


def training_step_counts(model, inputs) -> Counter:
    """Operators of one forward (with the loss) and its backward, the matmuls through PyTorch's own operators as on a
    GPU: the oneDNN backend, which the CPU rule picks on some CPUs only, launches others, and the counts must not
    depend on the CPU that takes them."""
    with cpu_matmul.matmul_backend("default"):
        return count_launched_operators(lambda: model(**inputs).loss.backward())


def optimizer_step_counts(model, inputs, optimizer_options: dict) -> Counter:
    """Operators of one optimizer step as the Trainer takes it after the forward and backward: clipping at the
    recipe's norm 3 (`clip_grad_norm_`), AdamW's step with `optimizer_options` (one of `OPTIMIZERS`), the
    per-epoch decay's scheduler step and `zero_grad`. The second step is counted: the first creates AdamW's state."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, **optimizer_options)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 0.97 ** (step // 1000))

    def step():
        torch.nn.utils.clip_grad_norm_(model.parameters(), 3.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()

    for _ in range(2):
        model(**inputs).loss.backward()
        counts = count_launched_operators(step)
    return counts


def count_row(task: str, shape: str, hidden_size: int | None = None, device: str = "cpu") -> dict:
    """The counts of one task and shape, readable and fused, and of an optimizer step with each of `OPTIMIZERS`:
    ``{"task", "shape", "readable", "fused", "fused_operators", "fused AdamW", "foreach AdamW"}`` (`fused_operators`
    a `Counter` by operator name). The optimizer step's count depends on the number of parameter tensors only, the
    same for both implementations."""
    batch, length = parse_shape(shape)
    row = {"task": task, "shape": f"{batch}x{length}"}
    for name, implementation in IMPLEMENTATIONS.items():
        model = paper_model(task, implementation, hidden_size, device)
        inputs = random_batch(model, batch, length, device)
        counts = training_step_counts(model, inputs)
        row[name] = sum(counts.values())
        row[f"{name}_operators"] = counts
    for name, options in OPTIMIZERS.items():
        row[name] = sum(optimizer_step_counts(model, inputs, options).values())
    return row


def markdown(rows: list[dict], top: int = 0) -> str:
    lines = [
        "| configuration | batch × length | readable step | fused step | optimizer step: fused AdamW | foreach AdamW |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows:
        shape = row["shape"].replace("x", " × ")
        counts = " | ".join(f"{row[name]:,}" for name in ("readable", "fused", *OPTIMIZERS))
        lines.append(f"| {row['task']} | {shape} | {counts} |")
    for row in rows if top else []:
        frequent = ", ".join(f"{short_name(name)} {count}" for name, count in row["fused_operators"].most_common(top))
        lines.append(f"\n{row['task']} {row['shape']}, fused: {frequent}")
    return "\n".join(lines)


def main(argv=None) -> list[dict]:
    args = parse_arguments(LaunchCountArguments, argv, description=__doc__)
    rows = []
    for task in args.tasks:
        shapes = args.classification_shapes if task == "classification" else args.shapes
        rows += [count_row(task, shape, args.hidden_size, args.device) for shape in shapes]
    print(markdown(rows, args.top))
    return rows


if __name__ == "__main__":
    main()
