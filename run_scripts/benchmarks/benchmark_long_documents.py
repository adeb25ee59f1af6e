#!/usr/bin/env python
"""Time and peak memory of tagging one long document with `pipeline("token-classification")`, whole (the tokenizer
has no length limit and the S-LSTM's cost grows linearly with length).

For each length, after tagging a 10-word text (model loaded, pipeline warm), it reports the document's wall time (best
of `--repeats`, `timing.time_interleaved`) and the peak memory that PyTorch's allocator holds while tagging
it, above what it held before (`timing.peak_memory_bytes`: the model's activations and outputs, not the
Python objects of the pipeline). Without `--model_dir` the model is `hub_configs/slstm-ner-crf-small.json` (the README
demo's: hidden 100, 4 steps, character CNN, CRF) with random weights over the document's vocabulary: speed and memory
do not depend on what the weights learned. Documents are random words of 3 to 9 letters.

    python run_scripts/benchmarks/benchmark_long_documents.py --words 1000 5000 20000
"""

import random
import string
from dataclasses import dataclass, field

import torch
from transformers import AutoModelForTokenClassification, AutoTokenizer, pipeline

from modeling_slstm import SLSTMForTokenClassification
from modeling_slstm.tokenization_slstm import build_word_tokenizer
from run_scripts import REPOSITORY_ROOT
from run_scripts.benchmarks.support.fresh_model_and_optimizer import fresh_model
from run_scripts.benchmarks.support.timing import Timing, machine_info, peak_memory_bytes, time_interleaved
from run_scripts.training.arguments import parse_arguments

CONFIG = REPOSITORY_ROOT / "hub_configs" / "slstm-ner-crf-small.json"
LABELS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]


@dataclass
class LongDocumentArguments:
    """Arguments of benchmark_long_documents.py."""

    words: list[int] = field(default_factory=lambda: [1000, 5000, 20000], metadata={"help": "document lengths"})
    model_dir: str | None = field(default=None, metadata={"help": "a saved tagger (default: a fresh small one)"})
    repeats: int = field(default=3, metadata={"help": "taggings of each document; the best time is reported"})
    threads: int = field(default=1, metadata={"help": "torch threads"})


def document(num_words: int, seed: int = 0) -> str:
    generator = random.Random(seed)
    words = []
    for _ in range(num_words):
        capitalized = generator.random() < 0.1  # drawn before the letters, as the documented runs drew them
        word = "".join(generator.choices(string.ascii_lowercase, k=generator.randint(3, 9)))
        words.append(word.capitalize() if capitalized else word)
    return " ".join(words)


def tagging_pipeline(args: LongDocumentArguments, text: str):
    if args.model_dir:
        tokenizer = AutoTokenizer.from_pretrained(args.model_dir)
        model = AutoModelForTokenClassification.from_pretrained(args.model_dir)
    else:
        tokenizer = build_word_tokenizer([text.split()])
        model = fresh_model(SLSTMForTokenClassification, str(CONFIG), tokenizer, seed=0,
                            id2label=dict(enumerate(LABELS)), label2id={label: i for i, label in enumerate(LABELS)})  # fmt: skip
    model.config.inference_threads = "torch"  # the --threads set here, not the model's choice from the idle cores
    return pipeline("token-classification", model=model.eval(), tokenizer=tokenizer, aggregation_strategy="simple")


def measure(args: LongDocumentArguments, num_words: int) -> dict:
    text = document(num_words)
    tag = tagging_pipeline(args, text)
    tag(" ".join(text.split()[:10]))
    cpu = torch.device("cpu")
    timing = Timing(warmup=0, repeats=args.repeats, min_time=0.0, max_repeats=args.repeats)
    seconds = min(time_interleaved({"document": lambda: tag(text)}, cpu, timing)["document"])
    entities = []
    memory = peak_memory_bytes(lambda: entities.extend(tag(text)), cpu)
    return {
        "words": num_words,
        "seconds": seconds,
        "words_per_second": num_words / seconds,
        "peak_memory_mib": memory / 2**20,
        "entities": len(entities),
        "tagged_to_the_end": any(entity["end"] > len(text) - 200 for entity in entities),
    }


def main(argv=None) -> list[dict]:
    args = parse_arguments(LongDocumentArguments, argv, description=__doc__)
    torch.set_num_threads(args.threads)
    info = machine_info(torch.device("cpu"))
    print(
        f"# CPU: {info['cpu']}, capability {info['cpu_capability']}, {args.threads} thread(s); "
        f"model: {args.model_dir or CONFIG.name + ' (random weights)'}"
    )
    print("| words | time (s) | words/s | peak memory (MiB) | entities | tagged to the end |")
    print("|---|---|---|---|---|---|")
    rows = []
    for num_words in args.words:
        row = measure(args, num_words)
        rows.append(row)
        print(
            f"| {row['words']:,} | {row['seconds']:.2f} | {row['words_per_second']:,.0f} | "
            f"{row['peak_memory_mib']:,.0f} | {row['entities']:,} | {row['tagged_to_the_end']} |",
            flush=True,
        )
    return rows


if __name__ == "__main__":
    main()
