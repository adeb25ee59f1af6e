#!/usr/bin/env python
"""One training step (or one `pipeline("token-classification")` call) of the README demo's model on an idle and on a
busy machine, for several thread settings.

    python run_scripts/benchmarks/benchmark_busy_machine.py
    python run_scripts/benchmarks/benchmark_busy_machine.py --workload pipeline --busy_cores 0 1 --settings default 1

The demo's model (hub_configs/slstm-ner-crf-small.json: character CNN, CRF, hidden 100, 4 steps, random 50-d word
vectors over a `--vocabulary_size`-word vocabulary, the 21 IOB2 labels of WNUT-16). `--workload training` (the
default): it trains on one batch of `--sentences` random sentences of `--words` words (the demo's batch size, about a
WNUT-16 tweet) with the Trainer's optimizer (fused AdamW) and the demo's gradient clipping (3.0). `--workload
pipeline`: `pipeline("token-classification")` tags one text of `--document_words` random words (a long document, read
whole), the model in evaluation mode, on the threads of the setting (its own choice for CPU inference set aside:
`config.inference_threads="torch"`; benchmark_tagging_threads.py times that choice). A busy core is another process
spinning in a Python loop, pinned to a core of its own (the last usable cores first). Each pair of machine state and thread setting runs
in a fresh Python process (thread pools belong to a process) started while the spinners run, without
OMP_NUM_THREADS or OMP_WAIT_POLICY in its environment. Thread settings (`--settings`):

- `default`: PyTorch's default thread count (one per physical core);
- `passive`: the default count with `OMP_WAIT_POLICY=PASSIVE` (a waiting thread sleeps at once instead of spinning);
- a number N: `torch.set_num_threads(N)`;
- `auto`: `--threads auto` of the training scripts (run_scripts/training/threads.py), measured in that process while
  the spinners run; the table names the count it chose.

Printed: the CPU and its capability, then a markdown table of the median milliseconds per step (or call) over
`--repeats` steps (after `--warmup` untimed ones; fewer, but at least 3, where a setting has taken `--max_seconds`), each with its
ratio to `default` on the idle machine of the same run. With `--output_dir`, also `<name>.csv` (one row per machine
state and setting) and `<name>.png` (the table as bars, `support/busy_machine_report.py`).
"""

import contextlib
import json
import os
import random
import statistics
import string
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from transformers import DataCollatorForTokenClassification, pipeline

from modeling_slstm import SLSTMConfig, SLSTMForTokenClassification
from modeling_slstm.tokenization_slstm import build_word_tokenizer, update_config_from_tokenizer
from run_scripts import REPOSITORY_ROOT
from run_scripts.benchmarks.support.busy_machine_report import (
    setting_name,
    state_name,
    write_bar_plot,
    write_results_csv,
)
from run_scripts.benchmarks.support.fresh_model_and_optimizer import trainer_optimizer
from run_scripts.benchmarks.support.timing import machine_info
from run_scripts.training import data
from run_scripts.training.arguments import check_choices, parse_arguments
from run_scripts.training.tag_scheme_decisions import complete_span_labels
from run_scripts.training.threads import apply_thread_setting

WNUT_TYPES = [
    "company",
    "facility",
    "loc",
    "movie",
    "musicartist",
    "other",
    "person",
    "product",
    "sportsteam",
    "tvshow",
]
NAMED_SETTINGS = ["default", "passive", "auto"]
WORKLOADS = ["training", "pipeline"]


@dataclass
class BusyMachineArguments:
    busy_cores: list[int] = field(
        default_factory=lambda: [0, 1, 2],
        metadata={"help": "machine states: how many cores other processes keep busy"},
    )
    settings: list[str] = field(
        default_factory=lambda: ["default", "passive", "1", "2", "auto"],
        metadata={"help": "thread settings: default, passive, auto or a number of threads"},
    )
    config_name: str = field(
        default=str(REPOSITORY_ROOT / "hub_configs" / "slstm-ner-crf-small.json"), metadata={"help": "the model"}
    )
    workload: str = field(
        default="training",
        metadata={"help": "what is timed: a training step (training) or a pipeline('token-classification') call"},
    )
    document_words: int = field(default=2000, metadata={"help": "words of the text the pipeline workload tags"})
    sentences: int = field(default=10, metadata={"help": "sentences per batch (the demo's batch size)"})
    words: int = field(default=22, metadata={"help": "words per sentence"})
    vocabulary_size: int = field(default=10000, metadata={"help": "words of the random vocabulary"})
    warmup: int = field(default=5, metadata={"help": "untimed steps first"})
    repeats: int = field(default=30, metadata={"help": "timed steps"})
    max_seconds: float = field(
        default=10.0, metadata={"help": "stop a setting's timing after this many seconds (but not before 3 steps)"}
    )
    seed: int = field(default=42, metadata={"help": "seed of the model and the data"})
    output_dir: str | None = field(default=None, metadata={"help": "where <name>.csv and <name>.png go (none: print)"})
    name: str = field(default="busy_machine", metadata={"help": "file name stem of the CSV and the plot"})

    def __post_init__(self):
        check_choices("workload", self.workload, WORKLOADS)
        for setting in self.settings:
            if not setting.isdigit():
                check_choices("settings", setting, NAMED_SETTINGS)
        cores = len(os.sched_getaffinity(0))
        if not all(0 <= busy <= cores for busy in self.busy_cores):
            raise ValueError(f"--busy_cores must be between 0 and the {cores} usable core(s), got {self.busy_cores}")


def wnut_labels() -> list[str]:
    """The 21 IOB2 labels of WNUT-16, the demo's."""
    return complete_span_labels([f"B-{entity_type}" for entity_type in WNUT_TYPES], "IOB2")


def demo_batch(args: BusyMachineArguments) -> tuple[dict, list[str], object]:
    """A padded batch of random sentences with the demo's labels, its label list and tokenizer."""
    rng = random.Random(args.seed)
    vocabulary = [
        "".join(rng.choices(string.ascii_lowercase, k=rng.randint(2, 10))) for _ in range(args.vocabulary_size)
    ]
    labels = wnut_labels()
    sentences = [rng.choices(vocabulary, k=args.words) for _ in range(args.sentences)]
    tags = [[rng.choice(labels[1::2]) if rng.random() < 0.1 else "O" for _ in sentence] for sentence in sentences]
    tokenizer = build_word_tokenizer([vocabulary])
    label2id = {label: index for index, label in enumerate(labels)}
    encoded = data.tokenize_and_align_labels({"tokens": sentences, "tags": tags}, tokenizer, label2id, max_length=512)
    examples = [dict(zip(encoded.keys(), values)) for values in zip(*encoded.values())]
    return DataCollatorForTokenClassification(tokenizer)(examples), labels, tokenizer


def demo_model(args, labels: list[str], tokenizer) -> SLSTMForTokenClassification:
    """The demo's model over `labels` and `tokenizer`'s vocabulary, drawn with `args.seed` from `args.config_name`."""
    config = SLSTMConfig.from_json_file(args.config_name)
    config.num_labels = len(labels)
    config.id2label = dict(enumerate(labels))
    config.label2id = {label: index for index, label in enumerate(labels)}
    update_config_from_tokenizer(config, tokenizer)
    torch.manual_seed(args.seed)
    return SLSTMForTokenClassification(config)


def median_seconds(call, args: BusyMachineArguments) -> dict:
    """Median seconds of `call()` over `--repeats` timed calls after `--warmup` untimed ones (fewer, but at least 3,
    once `--max_seconds` have passed), with the calls timed and this process's thread count."""
    seconds = []
    started = time.perf_counter()
    for step in range(args.warmup + args.repeats):
        if len(seconds) >= min(3, args.repeats) and time.perf_counter() - started > args.max_seconds:
            break
        start = time.perf_counter()
        call()
        if step >= args.warmup:
            seconds.append(time.perf_counter() - start)
    return {"median_s": statistics.median(seconds), "steps": len(seconds), "threads": torch.get_num_threads()}


def time_training_steps(args: BusyMachineArguments) -> dict:
    """`median_seconds` of one training step of the demo's model on `demo_batch`."""
    batch, labels, tokenizer = demo_batch(args)
    model = demo_model(args, labels, tokenizer).train()
    optimizer = trainer_optimizer(model)

    def training_step():
        model(**batch).loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 3.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return median_seconds(training_step, args)


def time_pipeline_calls(args: BusyMachineArguments) -> dict:
    """`median_seconds` of `pipeline("token-classification")` with the demo's model on one text of
    `--document_words` words of `demo_batch`'s vocabulary."""
    _, labels, tokenizer = demo_batch(args)
    model = demo_model(args, labels, tokenizer).eval()
    model.config.inference_threads = "torch"
    words = [word for word in tokenizer.get_vocab() if word.isalpha() and word.islower()]
    text = " ".join(random.Random(args.seed).choices(sorted(words), k=args.document_words))
    tagger = pipeline("token-classification", model=model, tokenizer=tokenizer)
    return median_seconds(lambda: tagger(text), args)


def time_workload(arguments: dict, setting: str) -> dict:
    """`--workload`'s median seconds under thread `setting` in this process (see `median_seconds`)."""
    args = BusyMachineArguments(**arguments)
    if setting not in ("default", "passive"):
        apply_thread_setting(setting)
    return time_pipeline_calls(args) if args.workload == "pipeline" else time_training_steps(args)


def run_in_fresh_process(args, setting: str, function: str = "benchmark_busy_machine.time_workload") -> dict:
    """`function(asdict(args), setting)` (a function of run_scripts/benchmarks, `time_workload` by default) in a new
    Python process, whose environment sets no thread count or wait policy (`OMP_WAIT_POLICY=PASSIVE` for `passive`);
    its JSON result."""
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY", "MKL_NUM_THREADS")}
    env["TOKENIZERS_PARALLELISM"] = "false"
    if setting == "passive":
        env["OMP_WAIT_POLICY"] = "PASSIVE"
    module, name = function.rsplit(".", 1)
    code = (
        f"import json, sys; from run_scripts.benchmarks.{module} import {name}; "
        f"print(json.dumps({name}(json.loads(sys.argv[1]), sys.argv[2])))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, json.dumps(asdict(args)), setting],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(f"setting {setting} failed:\n{result.stderr[-4000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


@contextlib.contextmanager
def spinning(cores: list[int]):
    """Processes that keep `cores` busy (one each, pinned) while the block runs."""
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in cores]
    try:
        for spinner, core in zip(spinners, cores):
            os.sched_setaffinity(spinner.pid, {core})
        time.sleep(0.5)  # started and spinning before anything is timed
        yield
    finally:
        for spinner in spinners:
            spinner.terminate()
            spinner.wait()


def over_machine_states(
    args, function: str = "benchmark_busy_machine.time_workload", rounds: int = 1, settings_together: bool = False
) -> dict:
    """`run_in_fresh_process(args, setting, function)` for each of `args.settings`, `rounds` times over, with each of
    `args.busy_cores` cores kept busy in turn: `{(busy cores, setting): [result, ...]}`. Each round starts with the
    next setting (the order rotates), so that no setting always runs first after the spinners change. With
    `settings_together`, a round is one process that times every setting in turn: `function` gets them comma-joined,
    in the round's order, and returns `{setting: result}`; the i-th results of all settings then come from one
    process."""
    cores = sorted(os.sched_getaffinity(0))
    results = {}
    for busy in args.busy_cores:
        with spinning(cores[len(cores) - busy :]):
            for round_ in range(rounds):
                shift = round_ % len(args.settings)
                order = [*args.settings[shift:], *args.settings[:shift]]
                if settings_together:
                    per_setting = run_in_fresh_process(args, ",".join(order), function)
                else:
                    per_setting = {setting: run_in_fresh_process(args, setting, function) for setting in order}
                for setting in order:
                    results.setdefault((busy, setting), []).append(per_setting[setting])
    return results


def main(argv=None) -> dict:
    args = parse_arguments(BusyMachineArguments, argv, description=__doc__)
    cores = sorted(os.sched_getaffinity(0))
    load_before = os.getloadavg()[0]  # other jobs of a shared machine, beside the spinners
    started = time.perf_counter()
    results = {state: runs[0] for state, runs in over_machine_states(args).items()}
    info = machine_info(torch.device("cpu"))
    default_threads = [result["threads"] for (_, setting), result in results.items() if setting == "default"]
    print(
        f"{info['cpu']}, CPU capability {info['cpu_capability']}, torch {info['torch']}, {len(cores)} usable cores"
        + (f", PyTorch's default {default_threads[0]} threads" if default_threads else "")
        + f"; {args.workload}: median of {min(r['steps'] for r in results.values())} to {args.repeats} "
        + (f"calls on a {args.document_words}-word text, " if args.workload == "pipeline" else "steps, ")
        + f"1-minute load average {load_before:.1f} before the run, "
        f"{time.perf_counter() - started:.0f} s in all"
    )
    baseline = results.get((0, "default"))
    print("| threads | " + " | ".join(state_name(busy) for busy in args.busy_cores) + " |")
    print("|---" * (len(args.busy_cores) + 1) + "|")
    for setting in args.settings:
        cells = []
        for busy in args.busy_cores:
            result = results[busy, setting]
            cell = f"{result['median_s'] * 1000:.1f} ms"
            if baseline:
                cell += f" ({result['median_s'] / baseline['median_s']:.2f}x)"
            if setting == "auto":
                cell += f", {result['threads']} thread{'s' if result['threads'] > 1 else ''}"
            cells.append(cell)
        print(f"| {setting_name(setting)} | " + " | ".join(cells) + " |")
    if baseline:
        print("(x: ratio to the PyTorch default on the idle machine, same run)")
    if args.output_dir:
        output_dir = Path(args.output_dir)
        output_dir.mkdir(parents=True, exist_ok=True)
        write_results_csv(results, output_dir / f"{args.name}.csv")
        if args.workload == "training":  # the plot's axis and title name the training step
            write_bar_plot(results, output_dir / f"{args.name}.png")
    return results


if __name__ == "__main__":
    main()
