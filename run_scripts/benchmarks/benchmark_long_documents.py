#!/usr/bin/env python
"""Time and peak memory of tagging one long document with `pipeline("token-classification")`, whole (the tokenizer
has no length limit and the S-LSTM's cost grows linearly with length).

Each length runs in a fresh process, which first tags a 10-word text (the baseline: model loaded, pipeline warm),
then the document; it reports the document's wall time (best of `--repeats`) and the process's peak resident memory
before and after (`ru_maxrss`). Without `--model_dir` the model is `hub_configs/slstm-ner-crf-small.json` (the README
demo's: hidden 100, 4 steps, character CNN, CRF) with random weights over the document's vocabulary: speed and memory
do not depend on what the weights learned. Documents are random words of 3 to 9 letters.

    python run_scripts/benchmarks/benchmark_long_documents.py --words 1000 5000 20000
"""

import json
import platform
import random
import resource
import string
import subprocess
import sys
import time
from dataclasses import dataclass, field

import torch

from run_scripts import REPOSITORY_ROOT
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
    measure_one: int | None = field(default=None, metadata={"help": "internal: measure this length in this process"})


def document(num_words: int, seed: int = 0) -> str:
    generator = random.Random(seed)
    words = []
    for _ in range(num_words):
        capitalized = generator.random() < 0.1  # drawn before the letters, as the documented runs drew them
        word = "".join(generator.choices(string.ascii_lowercase, k=generator.randint(3, 9)))
        words.append(word.capitalize() if capitalized else word)
    return " ".join(words)


def tagging_pipeline(args: LongDocumentArguments, text: str):
    from transformers import AutoModelForTokenClassification, AutoTokenizer, pipeline

    from modeling_slstm import SLSTMConfig, SLSTMForTokenClassification
    from modeling_slstm.tokenization_slstm import build_word_tokenizer, update_config_from_tokenizer

    if args.model_dir:
        tokenizer = AutoTokenizer.from_pretrained(args.model_dir)
        model = AutoModelForTokenClassification.from_pretrained(args.model_dir)
    else:
        settings = {key: value for key, value in json.loads(CONFIG.read_text()).items() if not key.startswith("_")}
        settings.pop("training_recipe", None)
        tokenizer = build_word_tokenizer([text.split()])
        config = SLSTMConfig(
            **settings, id2label=dict(enumerate(LABELS)), label2id={label: i for i, label in enumerate(LABELS)}
        )
        update_config_from_tokenizer(config, tokenizer)
        torch.manual_seed(0)
        model = SLSTMForTokenClassification(config)
    return pipeline("token-classification", model=model.eval(), tokenizer=tokenizer, aggregation_strategy="simple")


def peak_memory_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


def measure(args: LongDocumentArguments) -> dict:
    """Run in a fresh process: the baseline, then `--measure_one` words."""
    torch.set_num_threads(args.threads)
    text = document(args.measure_one)
    tag = tagging_pipeline(args, text)
    tag(" ".join(text.split()[:10]))
    baseline = peak_memory_mib()
    times = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        entities = tag(text)
        times.append(time.perf_counter() - start)
    last_word_end = len(text)
    return {
        "words": args.measure_one,
        "seconds": min(times),
        "words_per_second": args.measure_one / min(times),
        "peak_rss_mib": peak_memory_mib(),
        "baseline_rss_mib": baseline,
        "entities": len(entities),
        "tagged_to_the_end": any(entity["end"] > last_word_end - 200 for entity in entities),
    }


def main(argv=None) -> list[dict]:
    args = parse_arguments(LongDocumentArguments, argv, description=__doc__)
    if args.measure_one is not None:
        print(json.dumps(measure(args)))
        return []
    print(
        f"# CPU: {platform.processor() or platform.machine()}, capability {torch.backends.cpu.get_cpu_capability()}, "
        f"{args.threads} thread(s); model: {args.model_dir or CONFIG.name + ' (random weights)'}"
    )
    print(
        "| words | time (s) | words/s | peak RSS (MiB) | after a 10-word text (MiB) | entities | tagged to the end |"
    )
    print("|---|---|---|---|---|---|---|")
    rows = []
    for num_words in args.words:
        command = [sys.executable, __file__, "--measure_one", str(num_words), "--repeats", str(args.repeats),
                   "--threads", str(args.threads), *(["--model_dir", args.model_dir] if args.model_dir else [])]  # fmt: skip
        row = json.loads(subprocess.run(command, check=True, capture_output=True, text=True).stdout.splitlines()[-1])
        rows.append(row)
        print(
            f"| {row['words']:,} | {row['seconds']:.2f} | {row['words_per_second']:,.0f} | {row['peak_rss_mib']:,.0f} "
            f"| {row['baseline_rss_mib']:,.0f} | {row['entities']:,} | {row['tagged_to_the_end']} |",
            flush=True,
        )
    return rows


if __name__ == "__main__":
    main()
