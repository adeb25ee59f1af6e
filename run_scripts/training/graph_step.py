"""Whole-step CUDA graphs for training (`--cuda_graphs`): one graph per batch shape replays the whole optimizer step,
forward with the loss, backward, gradient clipping and the optimizer's update.

The S-LSTM's step has static shapes and reads nothing back on the host, so the host can launch a whole step as one
graph; the BiLSTM baselines cannot (packed sequences read their lengths on the host).

How: PyTorch's whole-network capture recipe (`torch.cuda.graph`), around `training_step`, a plain function:
- each batch is copied into static input buffers of its shape (`WholeStepGraphs`);
- a shape's first batch is trained eagerly on a side stream (the recipe's warm-up: the optimizer's state, Triton's
  compiled kernels and cuBLAS's workspaces are made outside the capture), then the step is captured with the
  gradients set to `None`, so that backward allocates them in the graph's own memory pool and every replay writes
  them afresh rather than adding to them;
- the optimizer is capturable (Adam, AdamW and RMSprop keep their step counts on the device; one without the
  option trains eagerly, logged: `optimizer_eager_reason`) and its learning rates are device tensors that the
  scheduler fills between replays (`trainer.capturable_options`, `trainer.HostComputedLambdaLR`): a replay reads the
  rate that eager training would, also after resuming from a checkpoint (`trainer.keep_the_runs_rates`);
- the loss and the gradient norm come back as copies of the graph's static outputs, read on the host only when the
  Trainer logs.

Why not `torch.compile`'s compiled optimizer (with `--torch_compile_mode reduce-overhead` for forward and backward):
there a step is several graphs, forward and backward (split at `backward()` unless compiled autograd traces it) and
the optimizer (torch.optim's `step` is compiled on its own), with clipping and the schedule run eagerly between them;
every batch shape costs a compilation; and which graphs it records, when, and what memory they keep is
torch.compile's choice. Capturing the eager step compiles nothing (one warm-up step and one capture per shape), holds
the whole step in one graph, and keeps the capture itself to a few lines (`WholeStepGraphs.first_step`): on the CPU
the same `training_step` is called directly (`capture=False`), so the tests run everything else whole. A shape whose
capture fails trains eagerly (logged once).
"""

import inspect
import logging
from collections.abc import Callable
from dataclasses import dataclass

import torch

logger = logging.getLogger(__name__)

WRAPPER_PACKAGES = ("peft", "bitsandbytes", "torchao", "hqq", "optimum", "awq", "gptqmodel", "auto_gptq")
"""Packages whose layers wrap or quantise the model's own: their adapters and kernels are not known to be capturable,
and PEFT switches adapters in Python between steps."""


def gradient_step(
    loss_function: Callable[[dict], torch.Tensor], inputs: dict, parameters: list[torch.Tensor], max_grad_norm: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Forward with the loss, backward and gradient clipping, as the Trainer does them: `(loss, norm)`, the norm of
    the gradients before clipping (with `max_grad_norm` 0: not clipped, as the Trainer then only measures it)."""
    loss = loss_function(inputs)  # () float32
    loss.backward()
    if max_grad_norm > 0:
        norm = torch.nn.utils.clip_grad_norm_(parameters, max_grad_norm)
    else:
        norm = torch.nn.utils.get_total_norm([p.grad for p in parameters if p.grad is not None])
    return loss.detach(), norm


def training_step(
    loss_function: Callable[[dict], torch.Tensor],
    inputs: dict,
    parameters: list[torch.Tensor],
    optimizer: torch.optim.Optimizer,
    max_grad_norm: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One optimizer step on `inputs`, nothing read on the host: `gradient_step`, the optimizer's step, then the
    gradients set to `None`, so that the next step's backward writes them rather than adding to them (and the
    capture of a new shape allocates them in its own graph's pool).

    Args:
        loss_function (`Callable[[dict], torch.Tensor]`): the batch's loss (with the Trainer: `compute_loss` in its
            autocast context).
        inputs (`dict[str, torch.Tensor]`): the batch, e.g. `input_ids` `(batch, seq)`.
        parameters (`list[torch.Tensor]`): the trainable parameters, clipped together.
        optimizer (`torch.optim.Optimizer`): their optimizer (capturable, for a CUDA graph).
        max_grad_norm (`float`): the clipping threshold (0: no clipping).

    Returns:
        `(loss, norm)`: 0-dimensional tensors on the device, the norm taken before clipping.
    """
    loss, norm = gradient_step(loss_function, inputs, parameters, max_grad_norm)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss, norm


def batch_shape(inputs: dict) -> tuple:
    """The graph key of a batch: each input's name, shape, dtype and device."""
    return tuple((name, tuple(value.shape), value.dtype, value.device) for name, value in sorted(inputs.items()))


def shape_text(key: tuple) -> str:
    """`batch_shape`'s key for a log: each input's name and shape."""
    return ", ".join(f"{name} {shape}" for name, shape, _, _ in key)


@dataclass
class CapturedStep:
    """The static buffers of one batch shape and, on a CUDA device, its graph."""

    inputs: dict[str, torch.Tensor]
    outputs: tuple[torch.Tensor, ...]
    graph: "torch.cuda.CUDAGraph | None"


class WholeStepGraphs:
    """Replays `step` from one CUDA graph per batch shape, at most `max_graphs` of them.

    Args:
        step (`Callable[[dict], tuple[torch.Tensor, ...]]`): one whole training step on a batch of static buffers
            (e.g. `training_step` with its other arguments bound); it returns tensors only, and reads nothing on the
            host.
        optimizer (`torch.optim.Optimizer`): the optimizer `step` steps; its gradients are set to `None` before each
            capture.
        max_graphs (`int`, *optional*, defaults to 16): the most shapes captured; `__call__` returns `None` for a
            new shape past them or a batch with inputs other than tensors (logged once), and the caller trains that
            batch eagerly.
        capture (`bool`, *optional*): capture CUDA graphs (default: when CUDA is available). Without, `step` is
            called directly on the same static buffers, its outputs copied into the static outputs: everything but
            the capture runs, as on a CPU.
    """

    def __init__(self, step: Callable, optimizer: torch.optim.Optimizer, max_graphs: int = 16,
                 capture: bool | None = None):  # fmt: skip
        self.step = step
        self.optimizer = optimizer
        self.max_graphs = max_graphs
        self.capture = torch.cuda.is_available() if capture is None else capture
        self.captured: dict[tuple, CapturedStep] = {}
        self.uncapturable: set[tuple] = set()  # shapes whose capture failed (logged), trained eagerly
        self.logged: set[str] = set()  # the eager cases already logged (`log_once`)

    def __call__(self, inputs: dict[str, torch.Tensor]) -> tuple[torch.Tensor, ...] | None:
        """Trains one step on `inputs`; returns copies of the step's outputs (the static ones change at the next
        replay), or `None` when the shape is past `max_graphs` or its capture failed (nothing was done)."""
        if not all(isinstance(value, torch.Tensor) for value in inputs.values()):
            self.log_once(f"a batch with inputs other than tensors ({', '.join(map(str, inputs))})")
            return None
        key = batch_shape(inputs)
        captured = self.captured.get(key)
        if key in self.uncapturable:
            return None
        if captured is None:
            if len(self.captured) >= self.max_graphs:
                self.log_once(
                    f"a batch of a new shape ({shape_text(key)}) past the {self.max_graphs} captured graphs "
                    "(--cuda_graphs_max_shapes)"
                )
                return None
            return self.first_step(key, inputs)
        for name, buffer in captured.inputs.items():
            buffer.copy_(inputs[name], non_blocking=True)
        if captured.graph is None:
            for static, output in zip(captured.outputs, self.step(captured.inputs), strict=True):
                static.copy_(output)
        else:
            captured.graph.replay()
        return tuple(output.clone() for output in captured.outputs)

    def first_step(self, key: tuple, inputs: dict[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
        """The first batch of a shape: its static buffers, its real step, and the capture."""
        static = {name: value.clone() for name, value in inputs.items()}
        if not self.capture:
            outputs = self.step(static)
            self.captured[key] = CapturedStep(static, outputs, None)
            return tuple(output.clone() for output in outputs)
        side = torch.cuda.Stream()  # the recipe's warm-up: this batch's real step, outside the capture
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            outputs = tuple(output.clone() for output in self.step(static))
        torch.cuda.current_stream().wait_stream(side)
        self.optimizer.zero_grad(set_to_none=True)  # backward allocates the gradients in the graph's pool
        graph = torch.cuda.CUDAGraph()
        try:  # thread_local: the DataLoader's pin-memory thread may allocate pinned memory meanwhile
            with torch.cuda.graph(graph, capture_error_mode="thread_local"):
                static_outputs = self.step(static)
        except RuntimeError as error:
            if not self.uncapturable:
                logger.warning(f"Whole-step CUDA graphs: capturing a batch of shape {shape_text(key)} failed, its "
                               f"batches (and those of any shape whose capture fails, logged once) train eagerly: "
                               f"{error}")  # fmt: skip
            self.uncapturable.add(key)
            self.optimizer.zero_grad(set_to_none=True)
            return outputs
        self.captured[key] = CapturedStep(static, static_outputs, graph)
        return outputs

    def log_once(self, case: str) -> None:
        """Says, once per `case`'s first words, that a batch trains eagerly and why."""
        kind = case.split(" (")[0]
        if kind not in self.logged:
            logger.warning(f"Whole-step CUDA graphs: {case} trains eagerly, as will all such batches (logged once)")
            self.logged.add(kind)


class GraphSteppedOptimizer(torch.optim.Optimizer):
    """An optimizer whose `step` does nothing right after a whole-step graph stepped its `optimizer` (`stepped`
    set), so that the Trainer's loop, which calls `step` after every training step, does not step twice; otherwise
    it is `optimizer`. Like accelerate's `AcceleratedOptimizer`, it shares the wrapped optimizer's state and groups
    (so schedulers and checkpoints see the wrapped one's).

    Args:
        optimizer (`torch.optim.Optimizer`): the optimizer that the graphs step.
    """

    def __init__(self, optimizer: torch.optim.Optimizer):
        self.optimizer = optimizer
        self.stepped = False

    @property
    def state(self):
        return self.optimizer.state

    @property
    def param_groups(self):
        return self.optimizer.param_groups

    @property
    def defaults(self):
        return self.optimizer.defaults

    def add_param_group(self, param_group: dict) -> None:
        self.optimizer.add_param_group(param_group)

    def state_dict(self) -> dict:
        return self.optimizer.state_dict()

    def load_state_dict(self, state_dict: dict) -> None:
        self.optimizer.load_state_dict(state_dict)

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.optimizer.zero_grad(set_to_none=set_to_none)

    def step(self, closure=None):
        if self.stepped:
            self.stepped = False
            return None
        return self.optimizer.step(closure)


def eager_reason(args, model: torch.nn.Module) -> str | None:
    """Why a whole-step graph cannot train `model` with the Trainer's `args`, or `None` when one can."""
    if args.gradient_accumulation_steps > 1:
        return (
            f"--gradient_accumulation_steps {args.gradient_accumulation_steps}: a graph replays one batch per "
            "optimizer step"
        )
    if args.world_size > 1 or args.n_gpu > 1:
        return (
            f"{max(args.world_size, args.n_gpu)} processes or GPUs: their gradients are reduced between backward and "
            "the optimizer step, outside any one device's graph"
        )
    if args.fp16:
        return "--fp16: its loss scaler checks the gradients for infinities on the host (use --bf16)"
    wrapped = wrapping_package(model)
    if wrapped is not None:
        return f"a {wrapped} layer wraps the model's own: not known to be capturable"
    return None


def optimizer_eager_reason(optimizer_class: type) -> str | None:
    """Why a whole-step graph cannot hold the step of `optimizer_class`, or `None` when it can: where its constructor
    takes `capturable` (torch.optim's Adam, AdamW, RMSprop...), its step keeps its counts on the device and reads its
    learning rate from a device tensor; the others (SGD, Adagrad, transformers' Adafactor) read them on the host, or
    a graph would hold the rate as a constant."""
    if "capturable" in inspect.signature(optimizer_class).parameters:
        return None
    return (
        f"the optimizer {optimizer_class.__module__}.{optimizer_class.__qualname__} has no `capturable` option "
        "(torch.optim's Adam, AdamW and RMSprop have): its step is not known to be capturable"
    )


def wrapping_package(model: torch.nn.Module) -> str | None:
    """The PEFT or quantisation package (`WRAPPER_PACKAGES`) of the first of `model`'s modules that comes from one,
    or that marks `model` as adapted or quantised (`peft_config`, `hf_quantizer`)."""
    if getattr(model, "peft_config", None) is not None:
        return "peft"
    if getattr(model, "hf_quantizer", None) is not None or getattr(model, "is_quantized", False):
        return "quantisation"
    for module in model.modules():
        package = type(module).__module__.split(".")[0]
        if package in WRAPPER_PACKAGES:
            return package
    return None
