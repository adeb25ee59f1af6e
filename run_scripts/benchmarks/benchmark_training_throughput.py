#!/usr/bin/env python
"""Tokens per second of actual training on CoNLL-2003 NER, against the synthetic figure of `benchmark_speed.py`.

    OMP_NUM_THREADS=1 python run_scripts/benchmarks/benchmark_training_throughput.py --threads 1 \\
        --train_file ../shared/data/conll2003/ner/train.txt

Each setup trains its own copy of the same fresh model (the NER config: S-LSTM-CRF trained in BIOES, character
features, word embeddings of `--embedding_dim`) with the Trainer's optimizer (fused AdamW) and gradient clipping, the
way `run_ner.py` does. The setups train in turn, `--rounds` timed rounds after `--warmup_rounds`, so that their
ratios compare the same moments of a shared machine; in each round every setup trains on at least as many real tokens
as one synthetic batch holds (4,096 at 32x128), so that the paper batches are timed on a sample of hundreds of
sentences of every length, not on a dozen batches whose lengths decide the result. Setups:

- `paper batches`: the paper's batches of 10 sentences, grouped by length as the Trainer's `group_by_length` does;
- `token budget N`: `--max_tokens_per_batch N` batches (`TokenBudgetBatchSampler`): bigger batches, a change of
  recipe;
- `synthetic, paper-batch shape BxL`: random sentences without padding, B = the paper's batch size, L = the mean
  training sentence length: what the paper batches would run at if real data cost nothing beyond its shape (padding,
  the collator, varying lengths);
- `synthetic BxL`: full-length random sentences of B x L tokens, no padding (the shape `benchmark_speed.py` times).

Printed per setup: real tokens/s (`<s>`/`</s>` included, padding excluded), padded tokens/s, the share of padding,
the share of time spent in the data collator, and the ratio to the synthetic setup.
"""

import itertools
import math
import os
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from transformers import DataCollatorForTokenClassification, Trainer, TrainingArguments
from transformers.trainer_pt_utils import LengthGroupedSampler

from modeling_slstm import SLSTMConfig, SLSTMForTokenClassification, cpu_matmul
from modeling_slstm.tag_schemes import split_tag
from modeling_slstm.tokenization_slstm import build_word_tokenizer, update_config_from_tokenizer
from run_scripts.benchmarks.speed_measurement import machine_info
from run_scripts.training import data
from run_scripts.training.arguments import DataArguments, parse_arguments
from run_scripts.training.samplers import TokenBudgetBatchSampler


@dataclass
class ThroughputArguments:
    train_file: str = field(
        default="../shared/data/conll2003/ner/train.txt", metadata={"help": "CoNLL-2003 NER training file"}
    )
    config_name: str = field(default="hub_configs/slstm-ner-crf.json", metadata={"help": "the model's config"})
    embedding_dim: int = field(default=50, metadata={"help": "word embedding width (GloVe 6B 50d in the runs)"})
    batch_size: int = field(default=10, metadata={"help": "sentences per paper batch"})
    max_tokens_per_batch: list[int] = field(default_factory=lambda: [400, 1600], metadata={"help": "token budgets"})
    synthetic_shape: list[int] = field(default_factory=lambda: [32, 128], metadata={"help": "batch and length"})
    compare_input_gradient: bool = field(
        default=False,
        metadata={
            "help": "also train paper batches with the input gradient by PyTorch's matmul (`grad @ weight`, MKL), the "
            "step's path for small batches until oneDNN read the transposed weight as a view: an A/B of "
            "`cpu_matmul._input_gradient`"
        },
    )
    rounds: int = field(default=8, metadata={"help": "timed rounds (each: one synthetic batch's tokens per setup)"})
    warmup_rounds: int = field(default=1, metadata={"help": "untimed rounds first"})
    threads: int = field(default=1, metadata={"help": "torch threads"})
    seed: int = field(default=42, metadata={"help": "seed of the model, the sampler and the synthetic data"})


def training_examples(path: str, tokenizer, label2id: dict) -> list[dict]:
    """Tokenised training sentences with BIOES-head labels (IOB2 ids), as `run_ner.py` prepares them."""
    sentences = data.read_conll(path)
    encoded = data.tokenize_and_align_labels(
        {"tokens": [s["tokens"] for s in sentences], "tags": [s["tags"] for s in sentences]},
        tokenizer=tokenizer,
        label2id=label2id,
        max_length=DataArguments.max_seq_length,  # the training scripts' default
    )
    return [dict(zip(encoded.keys(), values)) for values in zip(*encoded.values())]


def fresh_model(args: ThroughputArguments, tokenizer, labels: list[str]) -> SLSTMForTokenClassification:
    config = SLSTMConfig.from_json_file(args.config_name)
    config.embedding_dim = args.embedding_dim
    config.head_tag_scheme = "BIOES"
    config.num_labels = len(labels)
    config.id2label = dict(enumerate(labels))
    config.label2id = {label: index for index, label in enumerate(labels)}
    update_config_from_tokenizer(config, tokenizer)
    torch.manual_seed(args.seed)
    return SLSTMForTokenClassification(config).train()


def batch_orders(args, examples: list[dict]) -> dict[str, list[list[int]]]:
    """Example indices of each batch, per setup (one epoch's order)."""
    lengths = [len(example["input_ids"]) for example in examples]
    generator = torch.Generator().manual_seed(args.seed)
    grouped = list(LengthGroupedSampler(args.batch_size, lengths=lengths, generator=generator))
    orders = {"paper batches": [grouped[i : i + args.batch_size] for i in range(0, len(grouped), args.batch_size)]}
    for budget in args.max_tokens_per_batch:
        orders[f"token budget {budget}"] = list(TokenBudgetBatchSampler(lengths, budget, seed=args.seed))
    return orders


def synthetic_batch(args, config, shape: list[int]) -> dict[str, torch.Tensor]:
    batch, length = shape
    generator = torch.Generator().manual_seed(args.seed)
    input_ids = torch.randint(4, config.vocab_size, (batch, length), generator=generator)  # no special ids
    char_ids = torch.randint(1, config.char_vocab_size, (batch, length, 8), generator=generator)
    return {
        "input_ids": input_ids,
        "attention_mask": torch.ones_like(input_ids),
        "char_ids": char_ids,
        "labels": torch.zeros_like(input_ids),  # all O: a valid tag sequence
    }


def trainer_optimizer(model) -> torch.optim.Optimizer:
    """The optimizer the `Trainer` of `run_ner.py` builds, with the recipe's lr 1e-3 and no weight decay: its
    default `optim`, fused AdamW, whose step took 3.5 ms where the unfused one took 21 on a 10-sentence NER batch
    (one thread, AVX-512 EPYC), about 4% of the training step."""
    args = TrainingArguments(learning_rate=1e-3, use_cpu=True, report_to="none")
    optimizer_cls, optimizer_kwargs = Trainer.get_optimizer_cls_and_kwargs(args, model)
    return optimizer_cls(model.parameters(), weight_decay=args.weight_decay, **optimizer_kwargs)


def input_gradient_by_pytorch_matmul(grad: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """The input gradient by PyTorch's own matmul, as the step computed it for small batches before
    `cpu_matmul._input_gradient` read the weight's transpose by oneDNN."""
    return grad @ weight


class Setup:
    """One way of batching, with its own model and optimizer; `step()` trains on its next batch and times it, with
    `input_gradient` (default: the package's) as `cpu_matmul._input_gradient`."""

    def __init__(self, name: str, model, batches, input_gradient=cpu_matmul._input_gradient):
        self.name = name
        self.model = model
        self.input_gradient = input_gradient
        self.optimizer = trainer_optimizer(model)
        self.batches = batches  # an iterator of (batch tensors, seconds spent collating)
        self.seconds, self.collate_seconds, self.real_tokens, self.padded_tokens = [], 0.0, 0, 0

    def train_round(self, min_tokens: int, timed: bool) -> None:
        """Optimizer steps until this round has trained on `min_tokens` real tokens or more."""
        tokens = 0
        while tokens < min_tokens:
            tokens += self.step(timed)

    def step(self, timed: bool) -> int:
        """One optimizer step on the next batch; returns its real tokens."""
        cpu_matmul._input_gradient = self.input_gradient
        start = time.perf_counter()
        batch, collate_seconds = next(self.batches)
        loss = self.model(**batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 3.0)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        real_tokens = int(batch["attention_mask"].sum())
        if timed:
            self.seconds.append(time.perf_counter() - start + collate_seconds)
            self.collate_seconds += collate_seconds
            self.real_tokens += real_tokens
            self.padded_tokens += batch["input_ids"].numel()
        return real_tokens


def collated(collator, examples: list[dict], order: list[list[int]]):
    for indices in itertools.cycle(order):  # a tiny training file may hold fewer tokens than the rounds need
        start = time.perf_counter()
        batch = collator([examples[i] for i in indices])
        yield batch, time.perf_counter() - start


def repeated(batch: dict):
    while True:
        yield batch, 0.0


def main(argv=None) -> list[dict]:
    args = parse_arguments(ThroughputArguments, argv, description=__doc__)
    if not Path(args.train_file).is_file():
        raise FileNotFoundError(f"--train_file {args.train_file} does not exist")
    torch.set_num_threads(args.threads)
    sentences = data.read_conll(args.train_file)
    tokenizer = build_word_tokenizer([s["tokens"] for s in sentences])
    types = sorted({split_tag(tag)[1] for s in sentences for tag in s["tags"] if tag != "O"})
    labels = ["O"] + [f"{prefix}-{entity_type}" for entity_type in types for prefix in "BI"]
    examples = training_examples(args.train_file, tokenizer, {label: i for i, label in enumerate(labels)})
    collator = DataCollatorForTokenClassification(tokenizer, return_tensors="pt")

    orders = batch_orders(args, examples)
    setups = [
        Setup(name, fresh_model(args, tokenizer, labels), collated(collator, examples, order))
        for name, order in orders.items()
    ]
    if args.compare_input_gradient:
        batches = collated(collator, examples, orders["paper batches"])
        model = fresh_model(args, tokenizer, labels)
        setups.append(Setup("paper batches, PyTorch matmul", model, batches, input_gradient_by_pytorch_matmul))
    paper_shape = [args.batch_size, round(statistics.mean(len(example["input_ids"]) for example in examples))]
    for name, shape in [("synthetic, paper-batch shape", paper_shape), ("synthetic", args.synthetic_shape)]:
        model = fresh_model(args, tokenizer, labels)
        setups.append(
            Setup(f"{name} {shape[0]}x{shape[1]}", model, repeated(synthetic_batch(args, model.config, shape)))
        )
    tokens_per_round = math.prod(args.synthetic_shape)
    package_input_gradient = cpu_matmul._input_gradient
    try:
        for round_index in range(args.warmup_rounds + args.rounds):
            for setup in setups:
                setup.train_round(tokens_per_round, timed=round_index >= args.warmup_rounds)
    finally:
        cpu_matmul._input_gradient = package_input_gradient

    info = machine_info(torch.device("cpu"))
    print(
        f"{info['cpu']}, CPU capability {info['cpu_capability']}, {args.threads} thread(s), "
        f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}; {args.rounds} timed rounds of "
        f"{tokens_per_round:,} real tokens or more per setup"
    )
    rows = []
    synthetic_rate = setups[-1].real_tokens / sum(setups[-1].seconds)
    print("| setup | real tokens/s | padded tokens/s | padding | collator time | median step | vs synthetic |")
    print("|---|---|---|---|---|---|---|")
    for setup in setups:
        seconds = sum(setup.seconds)
        row = {
            "setup": setup.name,
            "real_tokens": setup.real_tokens,
            "real_tokens_per_second": setup.real_tokens / seconds,
            "padded_tokens_per_second": setup.padded_tokens / seconds,
            "padding_share": 1 - setup.real_tokens / setup.padded_tokens,
            "collator_share": setup.collate_seconds / seconds,
            "median_step_seconds": statistics.median(setup.seconds),
        }
        rows.append(row)
        print(
            f"| {setup.name} | {row['real_tokens_per_second']:,.0f} | {row['padded_tokens_per_second']:,.0f} | "
            f"{row['padding_share']:.1%} | {row['collator_share']:.1%} | {row['median_step_seconds'] * 1e3:.0f} ms | "
            f"{row['real_tokens_per_second'] / synthetic_rate:.2f} |"
        )
    return rows


if __name__ == "__main__":
    main()
