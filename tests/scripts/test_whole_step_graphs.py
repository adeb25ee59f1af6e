"""Whole-step CUDA graphs (`--cuda_graphs`, run_scripts/training/graph_step.py) on the CPU, where the step function
is called directly instead of captured: everything but the few lines of the capture runs.

The oracle is the Trainer's own eager step (its loop's clipping, optimizer step, scheduler and `zero_grad`) on the
same batches from the same seed: over 20 steps the whole step gives the same losses, gradient norms, learning rates
and parameters. Beside it: no host syncs on non-logging steps, the step's gradient part compiles into one graph, and
the eager fallbacks are chosen and logged once."""

import contextlib
import logging
from functools import partial
from types import SimpleNamespace

import datasets
import pytest
import torch
from helpers import BIO_LABELS, build, random_ids, tagger_config
from test_training_step_syncs import (
    MODEL_RANGES,
    PROFILED_STEPS,
    StepProfiler,
    device_syncs,
    profiling_trainer,
    traced_autograd,  # noqa: F401 (a fixture)
    write_classification_data,
    write_ner_data,
)
from transformers import TrainerCallback

from modeling_slstm import SLSTMForTokenClassification
from run_scripts import run_classification, run_ner
from run_scripts.training import graph_step
from run_scripts.training.arguments import SLSTMTrainingArguments
from run_scripts.training.trainer import HostComputedLambdaLR, SLSTMTrainer

STEPS = 20
LENGTHS = [3, 7, 4, 4, 6, 2, 5, 3, 7, 6, 2, 5, 8, 3, 4, 6, 5, 7]  # batches of 4: several widths, a short last batch
MAX_GRAD_NORM = 0.05  # small enough to clip every step


def collate(rows: list[dict]) -> dict:
    width = max(len(row["input_ids"]) for row in rows)
    ids = torch.tensor([row["input_ids"] + [0] * (width - len(row["input_ids"])) for row in rows])
    mask = torch.tensor([[1] * len(row["input_ids"]) + [0] * (width - len(row["input_ids"])) for row in rows])
    labels = torch.tensor([row["labels"] + [-100] * (width - len(row["labels"])) for row in rows])
    labels[:, 0] = -100  # as the tokenizer's <s>
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


class Recorder(TrainerCallback):
    """Each step's parameters, the learning rates the next step will use, and the steps of the innermost optimizer
    (under accelerate's and `GraphSteppedOptimizer`'s wrappers)."""

    def __init__(self):
        self.parameters, self.rates, self.optimizer_steps = [], [], 0

    def on_train_begin(self, args, state, control, optimizer=None, **kwargs):
        while hasattr(optimizer, "optimizer"):
            optimizer = optimizer.optimizer
        optimizer.register_step_post_hook(
            lambda *hook_args: setattr(self, "optimizer_steps", self.optimizer_steps + 1)
        )

    def on_step_end(self, args, state, control, model=None, optimizer=None, **kwargs):
        self.parameters.append([parameter.detach().clone() for parameter in model.parameters()])
        self.rates.append([float(group["lr"]) for group in optimizer.param_groups])


class LossRecordingTrainer(SLSTMTrainer):
    """Keeps every loss `training_step` returns, to read after training."""

    def training_step(self, *args, **kwargs):
        loss = super().training_step(*args, **kwargs)
        self.losses.append(loss)
        return loss


def train(tmp_path, graphs: bool, use_crf: bool = False, **options) -> SimpleNamespace:
    """`STEPS` steps of a small tagger (dropout on, clipping every step, a linear decay), eager or with the whole
    step; what `Recorder` saw, the losses returned and the logs."""
    rows = random_ids(LENGTHS, seed=3)
    labels = [[(index + position) % len(BIO_LABELS) for position in range(len(row))] for index, row in enumerate(rows)]
    dataset = datasets.Dataset.from_dict({"input_ids": rows, "labels": labels})
    args = SLSTMTrainingArguments(**{
        "output_dir": str(tmp_path / ("graphs" if graphs else "eager")), "per_device_train_batch_size": 4,
        "max_steps": STEPS, "learning_rate": 0.05, "lr_scheduler_type": "linear", "max_grad_norm": MAX_GRAD_NORM,
        "logging_steps": 1, "report_to": "none", "use_cpu": True, "save_strategy": "no", "seed": 7,
        "dataloader_pin_memory": False, "disable_tqdm": True, **options,
    })  # fmt: skip
    args.cuda_graphs = graphs  # parsing refuses it without a CUDA GPU: set after, as the tests' way in
    config = tagger_config(use_crf=use_crf, hidden_dropout=0.1, embedding_dropout=0.1)
    model = build(SLSTMForTokenClassification, config).train()
    recorder = Recorder()
    trainer = LossRecordingTrainer(
        model=model, args=args, train_dataset=dataset, data_collator=collate, callbacks=[recorder]
    )
    trainer.losses = []
    trainer.train()
    logs = [entry for entry in trainer.state.log_history if "loss" in entry]
    return SimpleNamespace(trainer=trainer, recorder=recorder, logs=logs)


def assert_same_training(graphed: SimpleNamespace, eager: SimpleNamespace):
    """Losses, norms and rates of every step, and the parameters after every step, as eager's (float32 tolerances:
    the graph path's rates are float32 tensors, eager's Python floats)."""
    assert len(graphed.logs) == len(eager.logs) == STEPS
    for name in ("loss", "grad_norm", "learning_rate"):
        torch.testing.assert_close(
            torch.tensor([entry[name] for entry in graphed.logs]), torch.tensor([entry[name] for entry in eager.logs]),
            msg=lambda message, name=name: f"{name}: {message}",
        )  # fmt: skip
    assert all(entry["grad_norm"] > MAX_GRAD_NORM for entry in eager.logs)  # the clipping (if any) would clip
    # The losses returned, read after training: copies, not the graph's static loss that the next step overwrites.
    torch.testing.assert_close(torch.stack(graphed.trainer.losses), torch.stack(eager.trainer.losses))
    assert graphed.recorder.optimizer_steps == eager.recorder.optimizer_steps == STEPS  # not stepped twice
    torch.testing.assert_close(torch.tensor(graphed.recorder.rates), torch.tensor(eager.recorder.rates))
    for step, (parameters, eager_parameters) in enumerate(zip(graphed.recorder.parameters, eager.recorder.parameters)):
        for parameter, eager_parameter in zip(parameters, eager_parameters, strict=True):
            torch.testing.assert_close(
                parameter, eager_parameter, msg=lambda message, step=step: f"step {step}: {message}"
            )


@pytest.mark.parametrize("use_crf", [False, True])  # the softmax loss takes the Trainer's num_items_in_batch
def test_the_whole_step_trains_as_the_trainers_eager_step(tmp_path, use_crf, caplog):
    eager = train(tmp_path, graphs=False, use_crf=use_crf)
    with caplog.at_level(logging.WARNING):
        graphed = train(tmp_path, graphs=True, use_crf=use_crf)
    whole_step = graphed.trainer.whole_step
    assert len(whole_step.captured) > 2  # several batch shapes, each with its static buffers
    assert caplog.text.count("no CUDA device, the whole step runs uncaptured") == 1
    # The linear schedule writes its rates into the rate tensors, and the Trainer reads them without a sync.
    assert type(graphed.trainer.lr_scheduler) is HostComputedLambdaLR
    decays = [entry["learning_rate"] for entry in eager.logs]
    assert decays == sorted(decays, reverse=True) and decays[-1] < decays[0] / 5  # a decaying schedule
    assert_same_training(graphed, eager)


def test_a_shape_past_the_limit_trains_eagerly_logged_once(tmp_path, caplog):
    eager = train(tmp_path, graphs=False)
    with caplog.at_level(logging.WARNING):
        graphed = train(tmp_path, graphs=True, cuda_graphs_max_shapes=2)
    assert len(graphed.trainer.whole_step.captured) == 2
    assert caplog.text.count("past the 2 captured graphs (--cuda_graphs_max_shapes) trains eagerly") == 1
    assert_same_training(graphed, eager)


def test_gradient_accumulation_trains_eagerly_logged_once(tmp_path, caplog):
    eager = train(tmp_path, graphs=False, gradient_accumulation_steps=2)
    with caplog.at_level(logging.WARNING):
        graphed = train(tmp_path, graphs=True, gradient_accumulation_steps=2)
    assert graphed.trainer.whole_step is None
    assert caplog.text.count("training eagerly: --gradient_accumulation_steps 2") == 1
    assert_same_training(graphed, eager)


def test_the_loop_reads_the_graphs_gradient_norm_without_clipping(tmp_path):
    # With --max_grad_norm 0 the Trainer only measures the norm (`_get_grad_norm`): the graph's norm, not clipped.
    eager = train(tmp_path, graphs=False, max_grad_norm=0.0)
    graphed = train(tmp_path, graphs=True, max_grad_norm=0.0)
    assert_same_training(graphed, eager)  # unclipped: a step that clipped would differ


@pytest.mark.parametrize(
    ("options", "reason"),
    [
        ({"gradient_accumulation_steps": 4}, "--gradient_accumulation_steps 4"),
        ({"world_size": 2}, "2 processes or GPUs"),
        ({"n_gpu": 2}, "2 processes or GPUs"),
        ({"fp16": True}, "--fp16"),
    ],
)
def test_eager_reasons_of_the_arguments(options, reason):
    args = SimpleNamespace(**{"gradient_accumulation_steps": 1, "world_size": 1, "n_gpu": 1, "fp16": False, **options})
    model = torch.nn.Linear(2, 2)
    assert reason in graph_step.eager_reason(args, model)
    assert graph_step.eager_reason(SimpleNamespace(gradient_accumulation_steps=1, world_size=1, n_gpu=1, fp16=False),
                                   model) is None  # fmt: skip


def test_eager_reason_of_a_peft_or_quantised_layer():
    args = SimpleNamespace(gradient_accumulation_steps=1, world_size=1, n_gpu=1, fp16=False)
    lora = type("LoraLinear", (torch.nn.Linear,), {"__module__": "peft.tuners.lora.layer"})
    assert "a peft layer" in graph_step.eager_reason(args, torch.nn.Sequential(torch.nn.ReLU(), lora(2, 2)))
    quantised = torch.nn.Sequential(torch.nn.Linear(2, 2))
    quantised.hf_quantizer = object()
    assert "quantisation" in graph_step.eager_reason(args, quantised)


def test_static_outputs_change_at_every_step_and_the_returned_copies_do_not(caplog):
    # The step's outputs are static buffers (a graph's outputs): what a step returned must survive the next step.
    weight = torch.nn.Parameter(torch.ones(2))
    optimizer = torch.optim.SGD([weight], lr=0.1)
    step = partial(
        graph_step.training_step, lambda batch: (weight * batch["x"]).sum(), parameters=[weight],
        optimizer=optimizer, max_grad_norm=0.0,
    )  # fmt: skip
    graphs = graph_step.WholeStepGraphs(step, optimizer, capture=False)
    losses = [graphs({"x": torch.tensor([float(x), 1.0])})[0] for x in (1, 2, 3)]  # SGD: weight[0] 1, 0.9, 0.7
    assert [loss.item() for loss in losses] == pytest.approx([1 * 1 + 1, 2 * 0.9 + 0.9, 3 * 0.7 + 0.8])
    assert weight.grad is None  # ready for the next step: written, not added to
    with caplog.at_level(logging.WARNING):
        for _ in range(2):
            assert graphs({"x": torch.tensor([1.0, 1.0]), "note": "text"}) is None
    assert caplog.text.count("a batch with inputs other than tensors (x, note) trains eagerly") == 1


@pytest.mark.parametrize(
    ("script", "write_data"), [(run_ner, write_ner_data), (run_classification, write_classification_data)]
)
def test_the_whole_step_makes_no_host_syncs_on_non_logging_steps(script, write_data, tmp_path, monkeypatch):
    # The training scripts with the recipe (length-grouped batches, per-epoch decay, clipping, fused AdamW) and
    # --cuda_graphs (its refusal on a CPU lifted): the whole step, uncaptured, reads nothing back.
    profiler = StepProfiler()
    argv = [
        *write_data(tmp_path), "--config_overrides", "hidden_size=8,embedding_dim=8,num_steps=1",
        "--output_dir", str(tmp_path / "output"), "--do_train", "--max_steps", str(PROFILED_STEPS.stop + 1),
        "--per_device_train_batch_size", "16", "--save_strategy", "no", "--report_to", "none", "--threads", "1",
        "--logging_steps", "1000", "--disable_tqdm", "true", "--cuda_graphs",
    ]  # fmt: skip
    monkeypatch.setattr(SLSTMTrainingArguments, "use_cuda_graphs", lambda self: None)
    trainer_class = profiling_trainer(profiler)
    monkeypatch.setattr(script, "SLSTMTrainer", trainer_class)
    monkeypatch.setattr("sys.argv", ["", *argv])
    built = []
    monkeypatch.setattr(trainer_class, "whole_step_for", lambda self, model: built.append(1) or
                        SLSTMTrainer.whole_step_for(self, model))  # fmt: skip
    script.main()
    names = {event.name for event in profiler.profile.events()}
    assert {"aten::_fused_adamw_", MODEL_RANGES[0]} <= names  # the profile holds whole steps
    assert MODEL_RANGES[1] not in names  # the Trainer's backward was not called: the whole step ran
    assert device_syncs(profiler.profile) == []


def test_the_gradient_step_compiles_into_one_graph(traced_autograd):  # noqa: F811
    # Forward, loss, backward and clipping of the whole step in one graph (`fullgraph=True`), gradients as eager's.
    model = build(SLSTMForTokenClassification, tagger_config(use_crf=True))
    rows = random_ids([3, 5, 4], seed=1)
    batch = collate([{"input_ids": row, "labels": [1] * len(row)} for row in rows])
    parameters = [parameter for parameter in model.parameters() if parameter.requires_grad]

    def step():
        return graph_step.gradient_step(lambda inputs: model(**inputs).loss, batch, parameters, MAX_GRAD_NORM)

    eager_loss, eager_norm = step()
    eager_gradients = [parameter.grad.clone() for parameter in parameters]
    model.zero_grad()
    loss, norm = torch.compile(step, backend="eager", fullgraph=True)()
    torch.testing.assert_close(loss, eager_loss)
    torch.testing.assert_close(norm, eager_norm)
    assert norm > MAX_GRAD_NORM
    for parameter, eager_gradient in zip(parameters, eager_gradients, strict=True):
        torch.testing.assert_close(parameter.grad, eager_gradient)


def test_a_failed_capture_trains_that_shape_eagerly_logged(monkeypatch, caplog):
    # The capture's bookkeeping, with CUDA's streams stood in for and a capture that fails (as an operation that is
    # not capturable would): the warm-up's real step is the batch's step, and the shape's later batches go eager.
    monkeypatch.setattr(torch.cuda, "Stream", lambda: SimpleNamespace(wait_stream=lambda stream: None))
    monkeypatch.setattr(torch.cuda, "current_stream", lambda: SimpleNamespace(wait_stream=lambda stream: None))
    monkeypatch.setattr(torch.cuda, "stream", lambda stream: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "CUDAGraph", lambda: None)

    def failing_capture(graph, capture_error_mode):
        assert capture_error_mode == "thread_local"  # the DataLoader's pin-memory thread may allocate meanwhile
        raise RuntimeError("operation not permitted when stream is capturing")

    monkeypatch.setattr(torch.cuda, "graph", failing_capture)
    weight = torch.nn.Parameter(torch.ones(2))
    optimizer = torch.optim.SGD([weight], lr=0.1)
    step = partial(
        graph_step.training_step, lambda batch: (weight * batch["x"]).sum(), parameters=[weight],
        optimizer=optimizer, max_grad_norm=0.0,
    )  # fmt: skip
    graphs = graph_step.WholeStepGraphs(step, optimizer, capture=True)
    with caplog.at_level(logging.WARNING):
        (loss, norm) = graphs({"x": torch.tensor([1.0, 2.0])})
        assert graphs({"x": torch.tensor([3.0, 4.0])}) is None
        assert graphs({"x": torch.tensor([3.0, 4.0])}) is None
        assert loss.item() == 3.0 and norm.item() == pytest.approx(5**0.5)
        torch.testing.assert_close(weight.detach(), torch.tensor([0.9, 0.8]))  # one step, the warm-up's
        assert weight.grad is None and not graphs.captured
        graphs({"x": torch.tensor([[3.0, 4.0]])})  # another shape, whose capture fails too: not logged again
    assert caplog.text.count("capturing a batch of shape x (2,) failed, its batches (and those") == 1
    assert "shape x (1, 2)" not in caplog.text and len(graphs.uncapturable) == 2
