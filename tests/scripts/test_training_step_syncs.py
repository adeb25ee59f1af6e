"""A training step that the host never waits for: the training scripts' own code on non-logging steps (data loading,
collation, the Trainer's bookkeeping, callbacks, clipping, optimizer, scheduler) makes no host syncs, with float and
with tensor learning rates, and the model's step compiles into one graph; the FLOP estimate counts the parameters
once.

A host sync is a call that needs a value the device computes (`aten::item`, `aten::_local_scalar_dense`,
`aten::is_nonzero`: a tensor in a Python `if`, `aten::nonzero`: a shape that depends on values); on a GPU each one
stops the host until the device has caught up. They are counted with the profiler on the CPU, where the same calls
run. The model's forward and backward are left out here (their own test counts them)."""

from unittest import mock

import pytest
import torch
from transformers import Trainer, TrainerCallback

from run_scripts import REPOSITORY_ROOT, run_classification, run_ner
from run_scripts.training.arguments import SLSTMTrainingArguments
from run_scripts.training.trainer import HostComputedLambdaLR, SLSTMTrainer, capturable_options

SYNCS = {"aten::item", "aten::_local_scalar_dense", "aten::is_nonzero", "aten::nonzero"}
MODEL_RANGES = ("model forward and loss", "model backward")
DATA_LOADING = "data loading"
"""Fetching a batch: the sampler's and the collator's tensors are host tensors on every device (the batch moves to the
device after), so what they read is no sync."""
CPU_KERNEL_READS = {"aten::_fused_adam_", "aten::_fused_adamw_"}
"""Operators whose CPU kernels read their scalar tensors (step counts, learning rates) with `item`, where the CUDA
kernels read them on the device."""
NOT_DEVICE_SYNCS = {*MODEL_RANGES, DATA_LOADING, *CPU_KERNEL_READS}
PROFILED_STEPS = range(3, 6)  # after the first steps (which set things up); logging only at the end of the run


def device_syncs(profile) -> list[str]:
    """The sync calls of `profile` that no range or operator of `NOT_DEVICE_SYNCS` encloses, each with the names of
    its callers."""
    found = []
    for event in profile.events():
        if event.name not in SYNCS:
            continue
        callers, caller = [], event.cpu_parent
        while caller is not None:
            callers.append(caller.name)
            caller = caller.cpu_parent
        if not NOT_DEVICE_SYNCS.intersection(callers):
            found.append(" <- ".join([event.name, *callers]))
    return found


class StepProfiler(TrainerCallback):
    """Profiles the Trainer from the end of the step before `PROFILED_STEPS` to the end of their last: whole steps,
    from fetching the batch on."""

    def __init__(self):
        self.profile = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == PROFILED_STEPS.start - 1:
            self.profile.__enter__()
        elif state.global_step == PROFILED_STEPS.stop - 1:
            self.profile.__exit__(None, None, None)


def profiling_trainer(profiler: StepProfiler):
    class ProfilingTrainer(SLSTMTrainer):
        """`SLSTMTrainer` with `StepProfiler`, the model's forward (with the loss), its backward and the data loading
        marked."""

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.add_callback(profiler)
            backward = self.accelerator.backward

            def marked_backward(*backward_args, **backward_kwargs):
                with torch.profiler.record_function(MODEL_RANGES[1]):
                    return backward(*backward_args, **backward_kwargs)

            self.accelerator.backward = marked_backward

        def compute_loss(self, *args, **kwargs):
            with torch.profiler.record_function(MODEL_RANGES[0]):
                return super().compute_loss(*args, **kwargs)

        def get_batch_samples(self, *args, **kwargs):
            with torch.profiler.record_function(DATA_LOADING):
                return super().get_batch_samples(*args, **kwargs)

    return ProfilingTrainer


def write_ner_data(folder) -> list[str]:
    lines = []
    for sentence in range(40):
        words = [f"word{(sentence * 7 + position) % 23}" for position in range(3 + sentence % 5)]
        tags = ["B-PER" if (sentence + position) % 4 == 0 else "O" for position in range(len(words))]
        lines += [f"{word} {tag}" for word, tag in zip(words, tags)] + [""]
    (folder / "train.txt").write_text("\n".join(lines), encoding="utf-8")
    return ["--config_name", str(REPOSITORY_ROOT / "hub_configs" / "slstm-ner-crf.json"), "--train_file",
            str(folder / "train.txt")]  # fmt: skip


def write_classification_data(folder) -> list[str]:
    lines = [
        f"{' '.join(f'word{(index * 5 + position) % 17}' for position in range(2 + index % 6))} ||| {index % 2}"
        for index in range(40)
    ]
    (folder / "train.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return ["--config_name", str(REPOSITORY_ROOT / "hub_configs" / "slstm-classification-paper.json"), "--train_file",
            str(folder / "train.txt")]  # fmt: skip


@pytest.mark.parametrize(
    ("script", "write_data"), [(run_ner, write_ner_data), (run_classification, write_classification_data)]
)
def test_training_scripts_make_no_host_syncs_on_non_logging_steps(script, write_data, tmp_path, monkeypatch):
    # The scripts' defaults and the config's recipe (length-grouped batches, per-epoch decay, clipping, fused AdamW),
    # a small model; several epochs, so that the profiled steps cross an epoch's end.
    profiler = StepProfiler()
    argv = [
        *write_data(tmp_path), "--config_overrides", "hidden_size=8,embedding_dim=8,num_steps=1",
        "--output_dir", str(tmp_path / "output"), "--do_train", "--max_steps", str(PROFILED_STEPS.stop + 1),
        "--per_device_train_batch_size", "16", "--save_strategy", "no", "--report_to", "none", "--threads", "1",
        "--logging_steps", "1000", "--disable_tqdm", "true",
    ]  # fmt: skip
    monkeypatch.setattr(script, "SLSTMTrainer", profiling_trainer(profiler))
    monkeypatch.setattr("sys.argv", ["", *argv])
    script.main()
    names = {event.name for event in profiler.profile.events()}
    assert {"aten::_fused_adamw_", *MODEL_RANGES} <= names  # the profile holds whole steps
    assert device_syncs(profiler.profile) == []


def test_the_optimizer_step_with_tensor_learning_rates_makes_no_host_syncs_and_follows_the_decay():
    # A capturable optimizer's learning rates are tensors (run_scripts/training/trainer.py, capturable_options); on
    # the CPU fused AdamW takes them too. Oracle of the rates: LambdaLR with float rates.
    torch.manual_seed(0)
    weights = [torch.nn.Parameter(torch.randn(3, 2)), torch.nn.Parameter(torch.randn(2))]
    rates = (1e-2, 5e-3)
    groups = [{"params": [weight], "lr": rate} for weight, rate in zip(weights, rates)]
    groups, options = capturable_options(groups, {"lr": 1e-3, "fused": True}, torch.device("cpu"))
    assert options == {"lr": 1e-3, "fused": True, "capturable": False}  # capturable on a CUDA device only
    optimizer = torch.optim.AdamW(groups, fused=True)  # capturable needs a CUDA device; the rates are tensors
    reference = torch.optim.SGD([{"params": [weight], "lr": rate} for weight, rate in zip(weights, rates)])
    decay = lambda step: 0.5 ** (step // 3)
    scheduler = HostComputedLambdaLR(optimizer, decay)
    reference_scheduler = torch.optim.lr_scheduler.LambdaLR(reference, decay)

    def step():
        for weight in weights:
            weight.grad = torch.ones_like(weight)
        torch.nn.utils.clip_grad_norm_(weights, 3.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()

    step()  # AdamW creates its state on the first step
    reference_scheduler.step()
    for _ in range(7):
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
            step()
        reference_scheduler.step()
        assert device_syncs(profile) == []
        assert scheduler.get_last_lr() == pytest.approx(reference_scheduler.get_last_lr(), rel=1e-12)
        assert all(isinstance(rate, float) for rate in scheduler.get_last_lr())
        written = [group["lr"].item() for group in optimizer.param_groups]
        assert written == pytest.approx(reference_scheduler.get_last_lr(), rel=1e-6)
    assert scheduler.get_last_lr()[0] == pytest.approx(rates[0] * 0.5**2)  # 8 steps: two decays


@pytest.fixture
def traced_autograd():
    """Dynamo traces `Tensor.backward()` into the graph; every test compiles from scratch."""
    torch._dynamo.reset()
    with mock.patch.object(torch._dynamo.config, "trace_autograd_ops", True):
        yield
    torch._dynamo.reset()


def test_the_training_step_compiles_into_one_graph(traced_autograd):
    # Forward, loss, backward and clipping in one graph (`fullgraph=True` fails on any graph break, host sync or
    # value-dependent shape), with gradients equal to eager's. The optimizer's step is not in it: torch.optim breaks
    # the graph around every `step` on purpose (torch/optim/optimizer.py, `_use_grad_for_differentiable`); the test
    # above checks that it reads nothing back.
    from run_scripts.benchmarks import benchmark_launch_counts

    model = benchmark_launch_counts.paper_model("classification", "eager", hidden_size=8)
    model.config.num_steps = 2
    inputs = benchmark_launch_counts.random_batch(model, 3, 5)
    inputs["attention_mask"][0, 3:] = 0  # one padded sentence
    parameters = [parameter for parameter in model.parameters() if parameter.requires_grad]

    def training_step():
        loss = model(**inputs).loss
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(parameters, 0.1)  # small enough to clip
        return loss.detach(), norm

    model.eval()  # no dropout: eager and compiled steps see the same values
    eager_loss, eager_norm = training_step()
    eager_gradients = [parameter.grad.clone() for parameter in parameters]
    model.zero_grad()
    loss, norm = torch.compile(training_step, backend="eager", fullgraph=True)()
    torch.testing.assert_close(loss, eager_loss)
    torch.testing.assert_close(norm, eager_norm)
    assert norm > 0.1
    for gradient, eager_gradient in zip((parameter.grad for parameter in parameters), eager_gradients, strict=True):
        torch.testing.assert_close(gradient, eager_gradient)


def test_the_flop_estimate_counts_the_parameters_once_and_equals_the_trainers(tmp_path):
    # The Trainer's own estimate (6 x tokens x parameters without the embeddings) is the oracle, for two batch shapes.
    from run_scripts.benchmarks import benchmark_launch_counts

    model = benchmark_launch_counts.paper_model("pos", "eager", hidden_size=8)
    trainer = SLSTMTrainer(model=model, args=SLSTMTrainingArguments(output_dir=str(tmp_path), report_to="none"))
    for batch, length in ((2, 5), (3, 7)):
        inputs = benchmark_launch_counts.random_batch(model, batch, length)
        assert trainer.floating_point_ops(inputs) == Trainer.floating_point_ops(trainer, inputs) > 0
    with mock.patch.object(model, "num_parameters", side_effect=AssertionError("counted again")):
        trainer.floating_point_ops(inputs)
