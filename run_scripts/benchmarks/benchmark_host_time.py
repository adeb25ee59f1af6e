#!/usr/bin/env python
"""Host time of one training step, phase by phase, with the kernels' work removed: what a GPU waits for when every
kernel is short (the paper's batches of 10 short sentences), measured on a CPU.

For the paper's NER, POS and movie-review classification configs (`hub_configs/`), the S-LSTM with its readable step
and its fused step, and the 1-layer BiLSTM baseline (`hub_configs/baselines/`) beside them, all at hidden size 8. The
NER BiLSTM-CRF has the S-LSTM NER config's character CNN (`bilstm1-ner-crf-chars.json`), so that the two compare like
for like; `bilstm-no-chars` is the BiLSTM-CRF without it (`bilstm1-ner-crf.json`), an extra row of NER only:
- the phases of a bare training step: forward with the loss, backward, gradient clipping (`clip_grad_norm_` at the
  recipe's 3.0), and the optimizer step with the scheduler (the Trainer's optimizer, the per-epoch decay's
  `LambdaLR`, `zero_grad`);
- a whole Trainer step of the training script (`run_ner.py`, `run_classification.py`): the time between the ends
  of consecutive optimizer steps of a real run on sentences of one length, data loading, collation, callbacks and
  bookkeeping included (the run's data preparation and its first steps are left out);
- the Trainer's own cost: each Trainer step less the time it spent in the bare step's phases, taken in the same
  steps, and as a share of that time.

The S-LSTM layers' matmuls go through PyTorch's own operators, as on a GPU (not the oneDNN backend that
`cpu_matmul.py` picks on some CPUs, whose custom operator costs host time that a GPU never pays).
The kernels' work is removed by making every Triton launch a no-op: the kernels run in Triton's interpreter
(`TRITON_INTERPRET=1`, set here), whose launch is patched to return at once, so the custom operators' dispatch and the
launchers' Python are timed, not the kernels. The outputs are then whatever memory held: nothing on the host reads a
value, but the CPU's own arithmetic on them (matmuls) slows down many times over on denormal numbers, which a GPU does
not pay, so denormals are flushed to zero while the benchmark runs (`torch.set_flush_denormal`). Each figure is also
printed in units of one small ATen operator (`torch.add` of two 8-element tensors, no autograd) timed in the same
rounds, so that CPUs compare. One intra-op thread; medians over the timed steps of all rounds (each round: bare steps,
then a Trainer run). On a busy machine, `--clock thread` times the CPU time of this thread instead of the elapsed time:
what the step costs the host, without the time slices that other processes take.

    python run_scripts/benchmarks/benchmark_host_time.py
    python run_scripts/benchmarks/benchmark_host_time.py --tasks ner --models slstm-fused bilstm --steps 20

Prints a Markdown table (docs/benchmarks.md, "Host time per training step").
"""

import logging
import os
import statistics
import sys
import tempfile
import time
from contextlib import contextmanager, redirect_stdout
from dataclasses import dataclass, field
from pathlib import Path
from unittest import mock

import datasets
import torch
import transformers

os.environ["TRITON_INTERPRET"] = "1"  # before modeling_slstm is imported: Triton reads it when it decorates kernels

from transformers import AutoModelForSequenceClassification, AutoModelForTokenClassification, TrainerCallback

from modeling_slstm import cpu_matmul
from modeling_slstm.tokenization_slstm import build_word_tokenizer, update_config_from_tokenizer
from run_scripts import REPOSITORY_ROOT, run_classification, run_ner
from run_scripts.benchmarks.support.fresh_model_and_optimizer import trainer_optimizer
from run_scripts.benchmarks.support.timing import machine_info
from run_scripts.benchmarks.support.workloads import parse_shape
from run_scripts.training.arguments import ModelArguments, check_choices, parse_arguments
from run_scripts.training.model_setup import load_fresh_config
from run_scripts.training.recipe import PAPER_TRAINING_RECIPE
from run_scripts.training.trainer import SLSTMTrainer

CONLL_LABELS = ["O", "B-LOC", "I-LOC", "B-MISC", "I-MISC", "B-ORG", "I-ORG", "B-PER", "I-PER"]
POS_TAGS = [f"TAG{index}" for index in range(45)]  # the Penn Treebank's 45 tags
CLASSES = ["negative", "positive"]
TASKS = {
    # task: (S-LSTM config, {baseline model: its config}, labels, training script)
    "ner": (
        "slstm-ner-crf.json",
        {"bilstm": "bilstm1-ner-crf-chars.json", "bilstm-no-chars": "bilstm1-ner-crf.json"},
        CONLL_LABELS,
        run_ner,
    ),
    "pos": ("slstm-pos.json", {"bilstm": "bilstm1-pos.json"}, POS_TAGS, run_ner),
    "classification": (
        "slstm-classification-paper.json",
        {"bilstm": "bilstm1-classification.json"},
        CLASSES,
        run_classification,
    ),
}
MODELS = {
    # model: (S-LSTM or BiLSTM, step_implementation: the S-LSTM's step and the CRF's plain loops or their kernels)
    "slstm-readable": ("slstm", "eager"),
    "slstm-fused": ("slstm", "triton"),
    "bilstm": ("bilstm", "triton"),
    "bilstm-no-chars": ("bilstm", "triton"),  # NER only: the BiLSTM-CRF without the character CNN
}
PHASES = ("forward+loss", "backward", "clipping", "optimizer+scheduler")
CLOCKS = {"wall": time.perf_counter, "thread": time.thread_time}
clock = CLOCKS["wall"]  # the clock of every figure, `--clock` (set by `main`)
VOCABULARY = [f"w{index}ord" for index in range(500)]


@dataclass
class HostTimeArguments:
    """Arguments of benchmark_host_time.py."""

    tasks: list[str] = field(default_factory=lambda: list(TASKS), metadata={"help": f"of {', '.join(TASKS)}"})
    models: list[str] = field(default_factory=lambda: list(MODELS), metadata={"help": f"of {', '.join(MODELS)}"})
    shapes: list[str] = field(
        default_factory=lambda: ["10x14", "32x32"],
        metadata={"help": "batch x tokens of the NER and POS steps (CoNLL-2003's mean sentence: 14 tokens)"},
    )
    classification_shapes: list[str] = field(
        default_factory=lambda: ["10x21", "32x32"],
        metadata={"help": "batch x tokens of the classification steps (movie review's mean sentence: 21 tokens)"},
    )
    hidden_size: int = field(default=8, metadata={"help": "hidden and embedding size of every model"})
    steps: int = field(default=20, metadata={"help": "timed steps of the bare step and of the Trainer run per round"})
    rounds: int = field(default=3, metadata={"help": "rounds of bare steps then a Trainer run"})
    warmup: int = field(default=5, metadata={"help": "untimed steps before them"})
    trainer_steps: bool = field(default=True, metadata={"help": "also time whole Trainer steps (--no_trainer_steps)"})
    clock: str = field(
        default="wall",
        metadata={
            "help": "wall: elapsed time; thread: the CPU time of this thread (time.thread_time), which leaves out the "
            "time other processes of a busy machine take from it (the Trainer runs its data loading in this thread)"
        },
    )

    def __post_init__(self):
        check_choices("tasks", self.tasks, TASKS)
        check_choices("models", self.models, MODELS)
        check_choices("clock", [self.clock], CLOCKS)
        for shape in self.shapes + self.classification_shapes:
            parse_shape(shape)


@contextmanager
def triton_launches_as_no_ops():
    """Every Triton launch returns at once, doing nothing (the interpreter's grid executor patched)."""
    from triton.runtime.interpreter import GridExecutor

    with mock.patch.object(GridExecutor, "__call__", lambda self, *args, **kwargs: None):
        yield


def small_operator_seconds(calls: int = 20_000, rounds: int = 7) -> float:
    """Host seconds of one small ATen operator: `torch.add` of two 8-element tensors, no autograd (median of
    `rounds` means over `calls` calls)."""
    a, b = torch.randn(8), torch.randn(8)
    means = []
    with torch.inference_mode():
        for _ in range(rounds):
            start = clock()
            for _ in range(calls):
                torch.add(a, b)
            means.append((clock() - start) / calls)
    return statistics.median(means)


def task_has(task: str, model: str) -> bool:
    """Whether `task` has a config for `model` (`bilstm-no-chars` is NER's only)."""
    return MODELS[model][0] == "slstm" or model in TASKS[task][1]


def config_path(task: str, model: str) -> Path:
    slstm_config, baseline_configs, _, _ = TASKS[task]
    if MODELS[model][0] == "slstm":
        return REPOSITORY_ROOT / "hub_configs" / slstm_config
    return REPOSITORY_ROOT / "hub_configs" / "baselines" / baseline_configs[model]


def config_overrides(model: str, hidden_size: int) -> str:
    """`--config_overrides` of the model: its step implementation and sizes (a BiLSTM's hidden size counts both
    directions; the character CNN, where the config has one, gets `hidden_size` filters over characters embedded in
    `hidden_size` dimensions too, so that its convolution and dropout, work of the kernels on a GPU, are as small on
    the CPU as the rest, and the same in the S-LSTM and the BiLSTM)."""
    overrides = f"step_implementation={MODELS[model][1]},hidden_size={hidden_size},embedding_dim={hidden_size}"
    return overrides + f",char_embedding_dim={hidden_size},char_hidden_size={hidden_size}"


def sentences(count: int, words: int, seed: int) -> list[list[str]]:
    generator = torch.Generator().manual_seed(seed)
    picks = torch.randint(len(VOCABULARY), (count, words), generator=generator).tolist()
    return [[VOCABULARY[index] for index in row] for row in picks]


def bare_model_and_batch(task: str, model: str, hidden_size: int, batch: int, length: int):
    """A fresh model as the training script builds it (tokenizer over `VOCABULARY`, seed 0) and a batch of `batch`
    sentences of `length` tokens (`<s>` and `</s>` included), every word labelled."""
    _, _, labels, script = TASKS[task]
    tokenizer = build_word_tokenizer([VOCABULARY])
    config = load_fresh_config(
        ModelArguments(
            config_name=str(config_path(task, model)), config_overrides=config_overrides(model, hidden_size)
        )
    )
    config.update({"id2label": dict(enumerate(labels)), "label2id": {label: i for i, label in enumerate(labels)}})
    update_config_from_tokenizer(config, tokenizer)
    torch.manual_seed(0)
    auto_class = (
        AutoModelForSequenceClassification if script is run_classification else AutoModelForTokenClassification
    )
    network = auto_class.from_config(config).train()
    encoded = tokenizer([" ".join(words) for words in sentences(batch, length - 2, seed=0)], return_tensors="pt")
    inputs = {name: encoded[name] for name in ("input_ids", "attention_mask", "char_ids") if name in encoded}
    if not config.use_char_features:
        inputs.pop("char_ids", None)
    generator = torch.Generator().manual_seed(0)
    label_shape = (batch,) if script is run_classification else (batch, length)
    inputs["labels"] = torch.randint(len(labels), label_shape, generator=generator)
    return network, inputs


def bare_step_phases(network, inputs, steps: int, warmup: int) -> dict[str, list[float]]:
    """Host seconds of each of `PHASES` in each of `steps` training steps, after `warmup` untimed ones."""
    optimizer = trainer_optimizer(network)
    steps_per_epoch = 1400  # CoNLL-2003 NER's: the decay never changes the rate within the timed steps
    decay = PAPER_TRAINING_RECIPE["lr_decay_per_epoch"]
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: decay ** (step // steps_per_epoch))
    parameters = [parameter for parameter in network.parameters() if parameter.requires_grad]
    times = {phase: [] for phase in PHASES}
    for step in range(warmup + steps):
        start = clock()
        loss = network(**inputs).loss
        forward_end = clock()
        loss.backward()
        backward_end = clock()
        torch.nn.utils.clip_grad_norm_(parameters, PAPER_TRAINING_RECIPE["max_grad_norm"])
        clipping_end = clock()
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
        end = clock()
        if step >= warmup:
            for phase, seconds in zip(
                PHASES,
                (forward_end - start, backward_end - forward_end, clipping_end - backward_end, end - clipping_end),
            ):
                times[phase].append(seconds)
    return times


class TrainerStepClock(TrainerCallback):
    """Times each step of a Trainer run: `step_ends`, the end of every optimizer step, and `step_work`, the time each
    step spent in the bare step's phases (forward with the loss, backward, clipping, the optimizer's and the
    scheduler's steps: `timed` wraps them), so that the Trainer's own cost is taken from the same steps."""

    def __init__(self):
        self.step_ends, self.step_work = [], []
        self.work = 0.0
        self.optimizer_step_start = None

    def timed(self, function):
        def timed_function(*args, **kwargs):
            start = clock()
            try:
                return function(*args, **kwargs)
            finally:
                self.work += clock() - start

        return timed_function

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        self.optimizer_step_start = clock()

    def on_optimizer_step(self, args, state, control, **kwargs):
        self.work += clock() - self.optimizer_step_start

    def on_step_end(self, args, state, control, **kwargs):
        self.step_ends.append(clock())
        self.step_work.append(self.work)
        self.work = 0.0


def write_training_file(folder: Path, task: str, count: int, length: int) -> Path:
    """`count` training sentences of `length` tokens (`<s>` and `</s>` included) in the script's file format."""
    _, _, labels, script = TASKS[task]
    rows = sentences(count, length - 2, seed=1)
    path = folder / f"{task}-{length}.txt"
    if script is run_classification:
        lines = [f"{' '.join(words)} ||| {labels[index % len(labels)]}" for index, words in enumerate(rows)]
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    else:
        blocks = [
            "\n".join(f"{word} {labels[(index + position) % len(labels)]}" for position, word in enumerate(words))
            for index, words in enumerate(rows)
        ]
        path.write_text("\n\n".join(blocks) + "\n", encoding="utf-8")
    return path


def trainer_step_seconds(
    task: str, model: str, args: HostTimeArguments, batch: int, length: int
) -> tuple[list[float], list[float]]:
    """`(steps, own)`: host seconds of each whole Trainer step of the task's training script, on one epoch of
    sentences of `length` tokens in batches of `batch` (the run's first `args.warmup` steps left out), and of the
    Trainer's own part of each (the step less its forward, backward, clipping, optimizer and scheduler steps)."""
    _, _, _, script = TASKS[task]
    clock = TrainerStepClock()

    class TimedTrainer(SLSTMTrainer):
        def __init__(self, *trainer_args, **kwargs):
            super().__init__(*trainer_args, **kwargs)
            self.add_callback(clock)
            self.accelerator.backward = clock.timed(self.accelerator.backward)
            self.accelerator.clip_grad_norm_ = clock.timed(self.accelerator.clip_grad_norm_)

        def compute_loss(self, *loss_args, **kwargs):
            return clock.timed(super().compute_loss)(*loss_args, **kwargs)

        def create_scheduler(self, *scheduler_args, **kwargs):
            scheduler = super().create_scheduler(*scheduler_args, **kwargs)
            scheduler.step = clock.timed(scheduler.step)
            return scheduler

    steps = args.warmup + args.steps + 1
    with tempfile.TemporaryDirectory() as folder:
        train_file = write_training_file(Path(folder), task, steps * batch, length)
        argv = [
            "--config_name", str(config_path(task, model)),
            "--config_overrides", config_overrides(model, args.hidden_size),
            "--train_file", str(train_file),
            "--output_dir", str(Path(folder) / "output"),
            "--do_train", "--per_device_train_batch_size", str(batch), "--max_steps", str(steps),
            "--save_strategy", "no", "--logging_strategy", "no", "--report_to", "none", "--disable_tqdm", "true",
            "--threads", "1", "--use_cpu", "--log_level", "error",
        ]  # fmt: skip
        with (
            mock.patch.object(script, "SLSTMTrainer", TimedTrainer),
            mock.patch.object(sys, "argv", ["", *argv]),
            redirect_stdout(sys.stderr),  # the run's metrics: stdout keeps the table
            library_log_levels_kept(),
        ):
            script.main()
    steps = [later - earlier for earlier, later in zip(clock.step_ends, clock.step_ends[1:])][args.warmup :]
    work = clock.step_work[1:][args.warmup :]
    return steps, [step - step_work for step, step_work in zip(steps, work, strict=True)]


@contextmanager
def library_log_levels_kept():
    """The log levels of `transformers`, `datasets` and the training scripts' modules (`run_scripts`) as they were
    before, after a training script run in this process has set them for its own (`--log_level error`): the caller's
    warnings are not silenced."""
    scripts = logging.getLogger("run_scripts")
    levels = transformers.utils.logging.get_verbosity(), datasets.utils.logging.get_verbosity(), scripts.level
    try:
        yield
    finally:
        transformers.utils.logging.set_verbosity(levels[0])
        datasets.utils.logging.set_verbosity(levels[1])
        scripts.setLevel(levels[2])


def measure(task: str, model: str, shape: str, args: HostTimeArguments) -> dict:
    """Median seconds of each phase, of the bare step (their sum) and of the whole Trainer step, over `args.rounds`
    rounds of bare steps then a Trainer run, so that both see the same moments of a machine whose load changes."""
    batch, length = parse_shape(shape)
    network, inputs = bare_model_and_batch(task, model, args.hidden_size, batch, length)
    times = {phase: [] for phase in PHASES} | {"Trainer step": [], "Trainer's own": [], "share": []}
    times["small operator"] = []
    for _ in range(args.rounds):
        times["small operator"].append(small_operator_seconds())
        for phase, seconds in bare_step_phases(network, inputs, args.steps, args.warmup).items():
            times[phase] += seconds
        if args.trainer_steps:
            steps, own = trainer_step_seconds(task, model, args, batch, length)
            times["Trainer step"] += steps
            times["Trainer's own"] += own
            times["share"] += [own_part / (step - own_part) for step, own_part in zip(steps, own, strict=True)]
    row = {"task": task, "model": model, "shape": shape}
    row |= {name: statistics.median(seconds) for name, seconds in times.items() if seconds}
    row["bare step"] = sum(row[phase] for phase in PHASES)
    return row


def markdown(rows: list[dict]) -> str:
    columns = [*PHASES, "bare step", "Trainer step", "Trainer's own"]
    columns = [column for column in columns if column in rows[0]]
    lines = [
        "| config | model | batch × tokens | small operator | " + " | ".join(columns) + " |",
        "|---|---|---|---|" + "---|" * len(columns),
    ]
    for row in rows:
        unit = row["small operator"]
        cells = [f"{unit * 1e6:.2f} us"] + [f"{row[c] * 1e3:.2f} ms ({row[c] / unit:,.0f})" for c in columns]
        if "Trainer's own" in row:
            cells[-1] += f", {row['share']:.0%}"
        shape = row["shape"].replace("x", " × ")
        lines.append(f"| {row['task']} | {row['model']} | {shape} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None) -> list[dict]:
    global clock
    args = parse_arguments(HostTimeArguments, argv, description=__doc__)
    clock = CLOCKS[args.clock]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    info = machine_info(torch.device("cpu"))
    rows = []
    torch.set_flush_denormal(True)  # the no-op launches' outputs are uninitialised memory
    try:
        with triton_launches_as_no_ops(), cpu_matmul.matmul_backend("default"):  # as on a GPU
            for task in args.tasks:
                shapes = args.classification_shapes if task == "classification" else args.shapes
                for shape in shapes:
                    for model in filter(lambda model: task_has(task, model), args.models):
                        rows.append(measure(task, model, shape, args))
                        print(rows[-1], file=sys.stderr, flush=True)
    finally:
        torch.set_num_threads(threads)  # the training runs set one thread too
        torch.set_flush_denormal(False)
        clock = CLOCKS["wall"]
    print(
        f"CPU: {info['cpu']} ({info['cpu_capability']}), torch {info['torch']}, 1 thread, {args.clock} clock. In "
        "brackets: each figure in "
        "units of one small ATen operator (torch.add of 8 elements) timed in the same rounds; the Trainer's own cost "
        "also as a share of the bare step's phases in the same Trainer steps (medians over steps)."
    )
    print(markdown(rows))
    return rows


if __name__ == "__main__":
    main()
