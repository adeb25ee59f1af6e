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
the share of time spent in the data collator, the mean time of an optimizer step (collation included), and the ratio to
the synthetic setup.
"""

import functools
import itertools
import math
import os
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from transformers import DataCollatorForTokenClassification

from modeling_slstm import SLSTMForTokenClassification
from modeling_slstm.tokenization_slstm import build_word_tokenizer
from run_scripts.benchmarks.support.fresh_model_and_optimizer import fresh_model, trainer_optimizer
from run_scripts.benchmarks.support.timing import Timing, machine_info, time_interleaved
from run_scripts.benchmarks.support.workloads import length_grouped_batches
from run_scripts.training import data
from run_scripts.training.arguments import DataArguments, parse_arguments
from run_scripts.training.samplers import TokenBudgetBatchSampler
from run_scripts.training.tag_scheme_decisions import complete_span_labels


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


def token_classifier(args: ThroughputArguments, tokenizer, labels: list[str]) -> SLSTMForTokenClassification:
    return fresh_model(SLSTMForTokenClassification, args.config_name, tokenizer, args.seed,
                       embedding_dim=args.embedding_dim, head_tag_scheme="BIOES", id2label=dict(enumerate(labels)),
                       label2id={label: index for index, label in enumerate(labels)})  # fmt: skip


def batch_orders(args, examples: list[dict]) -> dict[str, list[list[int]]]:
    """Example indices of each batch, per setup (one epoch's order)."""
    lengths = [len(example["input_ids"]) for example in examples]
    orders = {"paper batches": length_grouped_batches(lengths, args.batch_size, args.seed)}
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


class Setup:
    """One way of batching, with its own model and optimizer; `train_round(min_tokens)` trains on its next batches
    and keeps the round's bookkeeping in `rounds` (the timing is `time_interleaved`'s)."""

    def __init__(self, name: str, model, batches):
        self.name = name
        self.model = model
        self.optimizer = trainer_optimizer(model)
        self.batches = batches  # an iterator of (batch tensors, seconds spent collating)
        self.rounds = []  # per round: steps, real tokens, padded tokens, seconds spent collating

    def train_round(self, min_tokens: int) -> None:
        """Optimizer steps until this round has trained on `min_tokens` real tokens or more."""
        steps, real_tokens, padded_tokens, collate_seconds = 0, 0, 0, 0.0
        while real_tokens < min_tokens:
            batch, seconds = next(self.batches)
            loss = self.model(**batch).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), 3.0)
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
            steps += 1
            real_tokens += int(batch["attention_mask"].sum())
            padded_tokens += batch["input_ids"].numel()
            collate_seconds += seconds
        self.rounds.append((steps, real_tokens, padded_tokens, collate_seconds))


def collated(collator, examples: list[dict], order: list[list[int]]):
    for indices in itertools.cycle(order):  # a tiny training file may hold fewer tokens than the rounds need
        start = time.perf_counter()
        batch = collator([examples[i] for i in indices])
        yield batch, time.perf_counter() - start


def repeated(batch: dict):
    while True:
        yield batch, 0.0


def throughput_row(setup: Setup, seconds: list[float], rounds: int) -> dict:
    """Rates and shares of one setup over its timed rounds (the last `rounds`: the others warmed up)."""
    steps, real_tokens, padded_tokens, collate_seconds = (sum(values) for values in zip(*setup.rounds[-rounds:]))
    total = sum(seconds)
    return {
        "setup": setup.name,
        "steps": steps,
        "real_tokens": real_tokens,
        "real_tokens_per_second": real_tokens / total,
        "padded_tokens_per_second": padded_tokens / total,
        "padding_share": 1 - real_tokens / padded_tokens,
        "collator_share": collate_seconds / total,
        "mean_step_seconds": total / steps,
    }


def main(argv=None) -> list[dict]:
    args = parse_arguments(ThroughputArguments, argv, description=__doc__)
    if not Path(args.train_file).is_file():
        raise FileNotFoundError(f"--train_file {args.train_file} does not exist")
    torch.set_num_threads(args.threads)
    sentences = data.read_conll(args.train_file)
    tokenizer = build_word_tokenizer([s["tokens"] for s in sentences])
    labels = complete_span_labels({tag for s in sentences for tag in s["tags"]}, "IOB2")
    examples = training_examples(args.train_file, tokenizer, {label: i for i, label in enumerate(labels)})
    collator = DataCollatorForTokenClassification(tokenizer, return_tensors="pt")

    orders = batch_orders(args, examples)
    setups = [
        Setup(name, token_classifier(args, tokenizer, labels), collated(collator, examples, order))
        for name, order in orders.items()
    ]
    paper_shape = [args.batch_size, round(statistics.mean(len(example["input_ids"]) for example in examples))]
    for name, shape in [("synthetic, paper-batch shape", paper_shape), ("synthetic", args.synthetic_shape)]:
        model = token_classifier(args, tokenizer, labels)
        setups.append(
            Setup(f"{name} {shape[0]}x{shape[1]}", model, repeated(synthetic_batch(args, model.config, shape)))
        )
    tokens_per_round = math.prod(args.synthetic_shape)
    calls = {setup.name: functools.partial(setup.train_round, tokens_per_round) for setup in setups}
    timing = Timing(warmup=args.warmup_rounds, repeats=args.rounds, min_time=0.0, max_repeats=args.rounds)
    times = time_interleaved(calls, torch.device("cpu"), timing)

    info = machine_info(torch.device("cpu"))
    print(
        f"{info['cpu']}, CPU capability {info['cpu_capability']}, {args.threads} thread(s), "
        f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}; {args.rounds} timed rounds of "
        f"{tokens_per_round:,} real tokens or more per setup"
    )
    rows = [throughput_row(setup, times[setup.name], args.rounds) for setup in setups]
    synthetic_rate = rows[-1]["real_tokens_per_second"]
    print("| setup | real tokens/s | padded tokens/s | padding | collator time | mean step | vs synthetic |")
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        print(
            f"| {row['setup']} | {row['real_tokens_per_second']:,.0f} | {row['padded_tokens_per_second']:,.0f} | "
            f"{row['padding_share']:.1%} | {row['collator_share']:.1%} | {row['mean_step_seconds'] * 1e3:.0f} ms | "
            f"{row['real_tokens_per_second'] / synthetic_rate:.2f} |"
        )
    return rows


if __name__ == "__main__":
    main()
