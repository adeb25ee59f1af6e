"""Whole-step CUDA graphs (`--cuda_graphs`, run_scripts/training/graph_step.py) on the CPU, where the step function
is called directly instead of captured: everything but the few lines of the capture runs.

The oracle is the Trainer's own eager step (its loop's clipping, optimizer step, scheduler and `zero_grad`) on the
same batches from the same seed: over 20 steps the whole step gives the same losses, gradient norms, learning rates
and parameters. Beside it: no host syncs on non-logging steps, the step's gradient part compiles into one graph, and
the eager fallbacks (every `--optim` without a capturable step among them) are chosen and logged once.

The capture's bookkeeping runs too, with CUDA's streams and graphs stood in for (`StandInGraph`: a replay runs the
step on the tensors and learning rates that its capture saw): replays train on each batch copied in, a failed capture
leaves no gradients behind, and runs resumed from a checkpoint of either kind read the scheduler's rates."""

import contextlib
import itertools
import logging
from functools import partial
from types import SimpleNamespace

import datasets
import pytest
import torch
from helpers import BIO_LABELS, build, random_ids, tagger_config
from test_training_step_syncs import (
    MODEL_RANGES,
    StepProfiler,
    assert_compiles_in_one_graph,
    device_syncs,
    profiled_run_arguments,
    profiling_trainer,
    traced_autograd,  # noqa: F401 (a fixture)
    write_classification_data,
    write_ner_data,
)
from transformers import TrainerCallback

from modeling_slstm import SLSTMForTokenClassification
from run_scripts import run_classification, run_ner
from run_scripts.training import graph_step
from run_scripts.training import trainer as trainer_module
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


def innermost(optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
    """The optimizer under accelerate's and `GraphSteppedOptimizer`'s wrappers."""
    while hasattr(optimizer, "optimizer"):
        optimizer = optimizer.optimizer
    return optimizer


class Recorder(TrainerCallback):
    """Of the last `train()`: each step's parameters, the learning rates the next step will use, the steps of the
    innermost optimizer and the learning rates each of its steps read."""

    def on_train_begin(self, args, state, control, optimizer=None, **kwargs):
        self.parameters, self.rates, self.optimizer_steps, self.read_rates = [], [], 0, []
        optimizer = innermost(optimizer)
        optimizer.register_step_pre_hook(lambda optimizer, *hook_args: self.read_rates.append(
            [float(group["lr"]) for group in optimizer.param_groups]))  # fmt: skip
        optimizer.register_step_post_hook(
            lambda *hook_args: setattr(self, "optimizer_steps", self.optimizer_steps + 1)
        )

    def on_step_end(self, args, state, control, model=None, optimizer=None, **kwargs):
        self.parameters.append([parameter.detach().clone() for parameter in model.parameters()])
        self.rates.append([float(group["lr"]) for group in optimizer.param_groups])


class LossRecordingTrainer(SLSTMTrainer):
    """Keeps every loss `training_step` returns, to read after training, and the learning rates of the optimizer as
    `create_optimizer` made it (`made_rates`)."""

    def training_step(self, *args, **kwargs):
        loss = super().training_step(*args, **kwargs)
        self.losses.append(loss)
        return loss

    def create_optimizer(self, model=None):
        made = self.optimizer is None
        optimizer = super().create_optimizer(model)
        if made:
            self.made_rates = [group["lr"] for group in optimizer.param_groups]
        return optimizer


def tagger(use_crf: bool = False, mode: str = "train") -> SLSTMForTokenClassification:
    """The small tagger the runs train (dropout on, seed 0), in training mode or, as `from_pretrained` returns a
    model, in eval mode."""
    config = tagger_config(use_crf=use_crf, hidden_dropout=0.1, embedding_dropout=0.1)
    return build(SLSTMForTokenClassification, config).train(mode == "train")


def make_trainer(tmp_path, graphs: bool, use_crf: bool = False, model_mode: str = "train", model_init: bool = False,
                 **options) -> "LossRecordingTrainer":  # fmt: skip
    """The trainer of `train`: the tagger given as `model` or made by `model_init` (then a fresh one at every
    `train()`, with a fresh optimizer); `options` are training arguments."""
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
    made = partial(tagger, use_crf, model_mode)
    models = {"model_init": made} if model_init else {"model": made()}
    trainer = LossRecordingTrainer(
        **models, args=args, train_dataset=dataset, data_collator=collate, callbacks=[Recorder()]
    )
    trainer.losses = []
    return trainer


def training_record(trainer: "LossRecordingTrainer", steps: int) -> SimpleNamespace:
    """What the `Recorder` of `trainer` saw in its last `train()`, the losses returned and the logs of its last
    `steps` steps."""
    recorder = next(callback for callback in trainer.callback_handler.callbacks if isinstance(callback, Recorder))
    logs = [entry for entry in trainer.state.log_history if "loss" in entry]
    return SimpleNamespace(trainer=trainer, recorder=recorder, logs=logs, losses=trainer.losses[-steps:])


def train(tmp_path, graphs: bool, use_crf: bool = False, **options) -> SimpleNamespace:
    """`max_steps` (default `STEPS`) steps of a small tagger (dropout on, clipping every step, a linear decay), eager
    or with the whole step; what `Recorder` saw, the losses returned and the logs (`training_record`)."""
    trainer = make_trainer(tmp_path, graphs, use_crf, **options)
    trainer.train()
    return training_record(trainer, trainer.args.max_steps)


def assert_same_training(graphed: SimpleNamespace, eager: SimpleNamespace, steps: int = STEPS):
    """Losses, norms and rates of every step, and the parameters after every step, as eager's (float32 tolerances:
    the graph path's rates are float32 tensors, eager's Python floats)."""
    assert len(graphed.logs) == len(eager.logs) == steps
    for name in ("loss", "grad_norm", "learning_rate"):
        torch.testing.assert_close(
            torch.tensor([entry[name] for entry in graphed.logs]), torch.tensor([entry[name] for entry in eager.logs]),
            msg=lambda message, name=name: f"{name}: {message}",
        )  # fmt: skip
    assert all(entry["grad_norm"] > MAX_GRAD_NORM for entry in eager.logs)  # the clipping (if any) would clip
    # The losses returned, read after training: copies, not the graph's static loss that the next step overwrites.
    torch.testing.assert_close(torch.stack(graphed.losses), torch.stack(eager.losses))
    assert graphed.recorder.optimizer_steps == eager.recorder.optimizer_steps == steps  # not stepped twice
    torch.testing.assert_close(torch.tensor(graphed.recorder.rates), torch.tensor(eager.recorder.rates))
    for step, (parameters, eager_parameters) in enumerate(zip(graphed.recorder.parameters, eager.recorder.parameters)):
        for parameter, eager_parameter in zip(parameters, eager_parameters, strict=True):
            torch.testing.assert_close(
                parameter, eager_parameter, msg=lambda message, step=step: f"step {step}: {message}"
            )


@pytest.mark.parametrize("use_crf", [False, True])  # the softmax loss takes the Trainer's num_items_in_batch
def test_the_whole_step_trains_as_the_trainers_eager_step(tmp_path, use_crf, caplog):
    # The model handed over in eval mode, as `from_pretrained` returns it: each step trains it with dropout on.
    eager = train(tmp_path, graphs=False, use_crf=use_crf, model_mode="eval")
    with caplog.at_level(logging.WARNING):
        graphed = train(tmp_path, graphs=True, use_crf=use_crf, model_mode="eval")
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


def test_a_second_train_with_a_fresh_optimizer_trains_as_eager(tmp_path):
    # With `model_init` every `train()` makes a fresh model and optimizer: the second one's graphs must step them,
    # not the first run's.
    eager = make_trainer(tmp_path, graphs=False, model_init=True, max_steps=3)
    eager.train()
    graphed = make_trainer(tmp_path, graphs=True, model_init=True, max_steps=3)
    graphed.train()
    graphed.train()
    assert_same_training(training_record(graphed, 3), training_record(eager, 3), steps=3)


OPTIMIZERS = {"adamw_torch": True, "adamw_torch_fused": True, "rmsprop": True, "sgd": False, "adagrad": False,
              "adafactor": False}  # fmt: skip
"""Every `--optim` the scripts accept without packages beyond their requirements (the others need torch_xla,
torch_npu, torchao, bitsandbytes, galore_torch...), and whether torch.optim can capture its step (`capturable`)."""


@pytest.mark.parametrize("optim", OPTIMIZERS)
def test_every_optimizer_trains_captured_or_eagerly_logged_once(tmp_path, optim, caplog):
    eager = train(tmp_path, graphs=False, optim=optim, max_steps=3)
    with caplog.at_level(logging.WARNING):
        graphed = train(tmp_path, graphs=True, optim=optim, max_steps=3)
    assert_same_training(graphed, eager, steps=3)
    if OPTIMIZERS[optim]:
        assert len(graphed.trainer.whole_step.captured) > 1 and "training eagerly" not in caplog.text
    else:
        assert graphed.trainer.whole_step is None and graphed.trainer.graph_optimizer is None
        assert caplog.text.count("--cuda_graphs: training eagerly: the optimizer ") == 1
        assert "has no `capturable` option" in caplog.text


def test_a_resumed_run_reads_the_schedulers_rates_from_a_checkpoint_of_either_kind(tmp_path, stand_in_cuda,
                                                                                   monkeypatch):  # fmt: skip
    # The steps captured in stand-in graphs (a replay reads the rates its capture saw: the optimizer's tensors by
    # their memory, floats as constants). Each run of 6 steps with a linear decay saves a checkpoint at step 3; runs
    # resumed there, with and without graphs, from either checkpoint, read the rates and reach the parameters of the
    # uninterrupted eager run.
    monkeypatch.setattr(trainer_module, "WholeStepGraphs", StandInCapturedGraphs)
    steps, half = 6, 3
    full = {kind: train(tmp_path / kind, graphs=kind == "graphs", max_steps=steps, save_strategy="steps",
                        save_steps=half) for kind in ("eager", "graphs")}  # fmt: skip
    assert_same_training(full["graphs"], full["eager"], steps)
    captured_steps = full["graphs"].trainer.whole_step.captured.values()
    assert captured_steps and all(isinstance(captured.graph, StandInGraph) for captured in captured_steps)
    oracle = full["eager"].recorder
    for checkpoint_kind, resumed_kind in itertools.product(full, full):
        trainer = make_trainer(tmp_path / f"{resumed_kind}-from-{checkpoint_kind}", graphs=resumed_kind == "graphs",
                               max_steps=steps)  # fmt: skip
        checkpoint = tmp_path / checkpoint_kind / checkpoint_kind / f"checkpoint-{half}"
        trainer.train(resume_from_checkpoint=str(checkpoint))
        resumed = training_record(trainer, steps - half).recorder
        case = f"{resumed_kind} from a checkpoint of {checkpoint_kind}"
        torch.testing.assert_close(torch.tensor(resumed.read_rates), torch.tensor(oracle.read_rates[half:]),
                                   msg=lambda message, case=case: f"{case}: {message}")  # fmt: skip
        for parameters, oracle_parameters in zip(resumed.parameters, oracle.parameters[half:], strict=True):
            torch.testing.assert_close(
                parameters, oracle_parameters, msg=lambda message, case=case: f"{case}: {message}"
            )
        rates = [group["lr"] for group in innermost(trainer.optimizer).param_groups]
        if resumed_kind == "graphs":  # the tensors the optimizer was made with, which the scheduler fills
            assert all(rate is made for rate, made in zip(rates, trainer.made_rates, strict=True)), case
        else:  # floats, as eager AdamW's foreach step on a GPU needs
            assert all(type(rate) is float for rate in rates), case


def test_loading_a_checkpoint_keeps_the_runs_rate_tensors_and_capturable():
    # `capturable` decides where the loaded step counts go (on a GPU, a capturable step needs them on the device).
    weight = torch.nn.Parameter(torch.ones(2))
    eager = torch.optim.Adam([weight], lr=0.1)
    weight.sum().backward()
    eager.step()
    rate = torch.tensor(0.5)
    graphed = torch.optim.Adam([weight], lr=rate, capturable=True)
    trainer_module.keep_the_runs_rates(graphed)
    graphed.load_state_dict(eager.state_dict())
    (group,) = graphed.param_groups
    assert group["capturable"] and group["lr"] is rate and rate.item() == pytest.approx(0.1)
    assert graphed.state[weight]["step"].dtype == torch.float32
    with pytest.raises(ValueError, match="different number of parameter groups"):
        graphed.load_state_dict({**eager.state_dict(), "param_groups": []})


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


def one_weight_sgd_step():
    """A weight `(2,)` of ones, its SGD optimizer (lr 0.1) and the whole training step of the loss `weight · x`."""
    weight = torch.nn.Parameter(torch.ones(2))
    optimizer = torch.optim.SGD([weight], lr=0.1)
    step = partial(
        graph_step.training_step, lambda batch: (weight * batch["x"]).sum(), parameters=[weight],
        optimizer=optimizer, max_grad_norm=0.0,
    )  # fmt: skip
    return weight, optimizer, step


class StandInGraph:
    """A CUDA graph stood in for on the CPU (`stand_in_cuda`). As a capture records the kernels without running them,
    a step called during its capture (`stand_in_capturable`) runs nothing: the graph keeps the step, the tensors it
    was given (by their memory: a later batch reaches a replay only if copied into them) and the learning rates of
    its optimizer (tensors by their memory, floats as constants), and hands out outputs that hold nothing until
    `replay()` runs the step on those tensors with those rates."""

    capturing = None  # the graph whose capture is under way

    def replay(self) -> None:
        groups = self.optimizer.param_groups
        rates = [group["lr"] for group in groups]
        for group, rate in zip(groups, self.rates, strict=True):
            group["lr"] = rate
        try:
            outputs = self.step(self.inputs)
        finally:
            for group, rate in zip(groups, rates, strict=True):
                group["lr"] = rate
        for static, output in zip(self.outputs, outputs, strict=True):
            static.copy_(output)


def stand_in_capturable(step, optimizer: torch.optim.Optimizer):
    """`step` (of `optimizer`), which a `StandInGraph` captures when it is called during the capture: then it runs
    nothing and returns NaN outputs shaped as its last ones, which the graph's replays fill."""
    last_outputs = []

    def call(inputs: dict) -> tuple:
        graph = StandInGraph.capturing
        if graph is None:
            last_outputs[:] = step(inputs)
            return tuple(last_outputs)
        graph.step, graph.inputs, graph.optimizer = step, dict(inputs), optimizer
        graph.rates = [group["lr"] for group in optimizer.param_groups]
        graph.outputs = tuple(torch.full_like(output, float("nan")) for output in last_outputs)
        return graph.outputs

    return call


class StandInCapturedGraphs(graph_step.WholeStepGraphs):
    """`WholeStepGraphs` that captures its step in `StandInGraph`s, as on a CUDA device (with `stand_in_cuda`)."""

    def __init__(self, step, optimizer, max_graphs: int = 16, capture: bool | None = None):
        super().__init__(stand_in_capturable(step, optimizer), optimizer, max_graphs, capture=True)


@pytest.fixture
def stand_in_cuda(monkeypatch) -> SimpleNamespace:
    """CUDA's streams and graphs stood in for (`StandInGraph`), so that `WholeStepGraphs(capture=True)` captures on
    the CPU. Returns the captures' `capture_error_mode`s and `failure`: when set, the exception each capture raises
    at its end, as `capture_end` reports an operation that cannot be captured."""
    stream = SimpleNamespace(wait_stream=lambda stream: None)
    monkeypatch.setattr(torch.cuda, "Stream", lambda: stream)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda: stream)
    monkeypatch.setattr(torch.cuda, "stream", lambda stream: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "CUDAGraph", StandInGraph)
    captures = SimpleNamespace(modes=[], failure=None)

    @contextlib.contextmanager
    def capture(graph: StandInGraph, capture_error_mode: str):
        captures.modes.append(capture_error_mode)
        StandInGraph.capturing = graph
        try:
            yield
        finally:
            StandInGraph.capturing = None
        if captures.failure is not None:
            raise captures.failure

    monkeypatch.setattr(torch.cuda, "graph", capture)
    return captures


@pytest.mark.parametrize("captured", [False, True], ids=["called", "stand_in_graph"])
def test_static_outputs_change_at_every_step_and_the_returned_copies_do_not(captured, request, caplog):
    # The step's outputs are static buffers (a graph's outputs): what a step returned must survive the next step.
    # Captured, the second and third batches are replays, which train on them only if copied into the captured inputs.
    weight, optimizer, step = one_weight_sgd_step()
    if captured:
        request.getfixturevalue("stand_in_cuda")
        step = stand_in_capturable(step, optimizer)
    graphs = graph_step.WholeStepGraphs(step, optimizer, capture=captured)
    losses = [graphs({"x": torch.tensor([float(x), 1.0])})[0] for x in (1, 2, 3)]  # SGD: weight[0] 1, 0.9, 0.7
    assert [loss.item() for loss in losses] == pytest.approx([1 * 1 + 1, 2 * 0.9 + 0.9, 3 * 0.7 + 0.8])
    torch.testing.assert_close(weight.detach(), torch.tensor([0.4, 0.7]))
    assert weight.grad is None  # ready for the next step: written, not added to
    assert [type(captured_step.graph) for captured_step in graphs.captured.values()] == [
        StandInGraph if captured else type(None)
    ]
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
    argv = [*profiled_run_arguments(write_data, tmp_path), "--cuda_graphs"]
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

    assert_compiles_in_one_graph(step, model, parameters, MAX_GRAD_NORM)


def test_a_failed_capture_trains_that_shape_eagerly_logged(stand_in_cuda, caplog):
    # The capture's bookkeeping, with a capture that fails (as an operation that is not capturable would): the
    # warm-up's real step is the batch's step, and the shape's later batches go eager.
    stand_in_cuda.failure = RuntimeError("operation not permitted when stream is capturing")
    weight, optimizer, step = one_weight_sgd_step()
    graphs = graph_step.WholeStepGraphs(stand_in_capturable(step, optimizer), optimizer, capture=True)
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
    assert stand_in_cuda.modes == ["thread_local"] * 2  # the DataLoader's pin-memory thread may allocate meanwhile


def test_a_capture_that_fails_past_backward_leaves_no_gradients(stand_in_cuda):
    # A capture that fails after backward (here at the optimizer's step) has made gradients: the eager step that
    # follows must write its own, not add to them, and step as a plain eager step does.
    weight, optimizer, step = one_weight_sgd_step()

    def step_failing_past_backward(inputs: dict) -> tuple:
        if StandInGraph.capturing is None:
            return step(inputs)
        (weight * inputs["x"]).sum().backward()
        raise RuntimeError("operation not permitted when stream is capturing")

    graphs = graph_step.WholeStepGraphs(step_failing_past_backward, optimizer, capture=True)
    graphs({"x": torch.tensor([1.0, 2.0])})  # the warm-up's step, then the capture that fails
    assert weight.grad is None
    assert graphs({"x": torch.tensor([3.0, 4.0])}) is None  # the caller trains it eagerly:
    (weight * torch.tensor([3.0, 4.0])).sum().backward()
    optimizer.step()
    plain_weight, plain_optimizer, _ = one_weight_sgd_step()
    for x in ([1.0, 2.0], [3.0, 4.0]):
        (plain_weight * torch.tensor(x)).sum().backward()
        plain_optimizer.step()
        plain_optimizer.zero_grad()
    torch.testing.assert_close(weight.detach(), plain_weight.detach())
