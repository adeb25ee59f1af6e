"""The encoders a speed benchmark times, the variants they run in (precision, `torch.compile`, checkpointing, the
S-LSTM step, CUDA graphs), and `TimedModel`: one of them on a workload's batches, ready to call."""

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from baselines import BaselineEncoderConfig, BaselineModel
from modeling_slstm.configuration_slstm import SLSTMConfig
from modeling_slstm.kernel_dispatch import KERNELS_INTERPRETED
from modeling_slstm.modeling_slstm import SLSTMModel
from run_scripts.benchmarks.support.reference_slstm import ReferenceSLSTM
from run_scripts.benchmarks.support.workloads import Workload

VOCAB_SIZE = 10000
PAPER_SLSTM = "slstm"
REFERENCE_SLSTM = "slstm-reference"


def slstm_config(**overrides) -> SLSTMConfig:
    """Paper configuration (hidden 300, embedding 300, 9 steps, window 1, one sentence node), with overrides."""
    settings = {"vocab_size": VOCAB_SIZE, "embedding_dim": 300, "hidden_size": 300, "num_steps": 9, "window_size": 1}
    return SLSTMConfig(**{**settings, **overrides})


def baseline_config(encoder_type: str, num_layers: int, **overrides) -> BaselineEncoderConfig:
    settings = {"vocab_size": VOCAB_SIZE, "embedding_dim": 300, "hidden_size": 300}
    return BaselineEncoderConfig(encoder_type=encoder_type, num_layers=num_layers, **{**settings, **overrides})


# BiLSTMs have 300 units per direction (hidden_size 600), as the paper's BiLSTM baselines (its Table 3 parameter
# counts); the Transformer has 5 layers of width 300 (6 heads, feed-forward 600), the S-LSTM's encoder parameter count.
# `slstm-reference` is `reference_slstm.ReferenceSLSTM` in the paper configuration.
MODELS = {
    PAPER_SLSTM: slstm_config,
    REFERENCE_SLSTM: slstm_config,
    "slstm-steps5": lambda: slstm_config(num_steps=5),
    "slstm-window2": lambda: slstm_config(window_size=2),
    "slstm-hidden150": lambda: slstm_config(hidden_size=150),
    "bilstm1": lambda: baseline_config("bilstm", 1, hidden_size=600),
    "bilstm2": lambda: baseline_config("bilstm", 2, hidden_size=600),
    "bilstm3": lambda: baseline_config("bilstm", 3, hidden_size=600),
    "cnn3": lambda: baseline_config("cnn", 3, kernel_size=3),
    "transformer5": lambda: baseline_config("transformer", 5, num_attention_heads=6, intermediate_size=600),
}


def build_model(name: str) -> nn.Module:
    """The encoder `name` of `MODELS`, with weights drawn from seed 0."""
    config = MODELS[name]()
    torch.manual_seed(0)
    if name == REFERENCE_SLSTM:
        return ReferenceSLSTM(
            config.vocab_size, config.embedding_dim, config.hidden_size, config.num_steps, config.embedding_dropout
        )
    return SLSTMModel(config) if isinstance(config, SLSTMConfig) else BaselineModel(config)


def count_parameters(model: nn.Module) -> tuple[int, int]:
    """(all parameters, parameters outside the word embeddings)."""
    total = sum(p.numel() for p in model.parameters())
    embeddings = sum(p.numel() for m in model.modules() if isinstance(m, nn.Embedding) for p in m.parameters())
    return total, total - embeddings


@dataclass
class Variant:
    """How a model runs: float32, or `autocast_dtype` autocast; `torch.compile` (in `compile_mode`); checkpointing
    per S-LSTM step; the S-LSTM step `step_implementation` ("eager": the readable PyTorch step, "triton": the fused
    one; None: the package's choice, "auto"); `cuda_graphs`: forward and backward replayed from CUDA graphs
    (`GraphedModel`)."""

    name: str
    autocast_dtype: torch.dtype | None = None
    compile: bool = False
    checkpointing: bool = False
    modes: tuple = ("forward", "train")
    step_implementation: str | None = None
    compile_mode: str | None = None
    cuda_graphs: bool = False


def variant_pair(name: str, **settings) -> dict[str, Variant]:
    """`{name: float32 variant, "bf16+" + name: the same under bf16 autocast}`."""
    return {
        name: Variant(f"fp32+{name}", **settings),
        f"bf16+{name}": Variant(f"bf16+{name}", autocast_dtype=torch.bfloat16, **settings),
    }


VARIANTS = {
    "fp32": Variant("fp32"),
    "bf16": Variant("bf16", autocast_dtype=torch.bfloat16),
    "fp16": Variant("fp16", autocast_dtype=torch.float16),
    **variant_pair("compile", compile=True),
    "checkpoint": Variant("fp32+checkpoint", checkpointing=True, modes=("train",)),
    **variant_pair("eager", step_implementation="eager"),
    **variant_pair("fused", step_implementation="triton"),
    **variant_pair("fused+graphs", step_implementation="triton", cuda_graphs=True),
    **variant_pair(
        "fused+reduce-overhead", step_implementation="triton", compile=True, compile_mode="reduce-overhead"
    ),
}
# The GPU variants of the fused-step measurement (benchmark_speed.py --slstm_variants gpu).
GPU_SLSTM_VARIANTS = [
    f"{precision}{name}"
    for name in ("eager", "fused", "fused+graphs", "fused+reduce-overhead", "compile")
    for precision in ("", "bf16+")
]


def has_step_implementation() -> bool:
    """Whether this package's `SLSTMConfig` has the `step_implementation` option (the fused step's switch)."""
    return hasattr(SLSTMConfig(), "step_implementation")


def set_step_implementation(model: nn.Module, implementation: str | None) -> str:
    """Sets `model.config.step_implementation` to `implementation` where the package has the option and one is asked
    for; returns the step the model is set to ("eager" where the package has only the readable step)."""
    if not has_step_implementation():
        return "eager"
    if implementation:
        model.config.step_implementation = implementation
    return model.config.step_implementation


def skip_reason(variant: Variant, device: torch.device, fused_in_interpreter: bool = False) -> str | None:
    """Why `variant` cannot run on `device`, or None. bf16 autocast runs on every CPU: on one without native bf16
    that shows what a user who turns it on gets. With `fused_in_interpreter`, the fused step runs on a CPU where the
    kernels are interpreted (`TRITON_INTERPRET=1`): its times are then the interpreter's, its peak memory that of the
    fused recurrence."""
    if variant.autocast_dtype == torch.float16 and device.type == "cpu":
        return "float16 autocast is for GPUs"
    if variant.autocast_dtype == torch.bfloat16 and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        return "this GPU has no bfloat16"
    if variant.step_implementation == "triton" and not has_step_implementation():
        return "this package's SLSTMConfig has no step_implementation (no fused step)"
    if (
        variant.step_implementation == "triton"
        and device.type != "cuda"
        and not (fused_in_interpreter and KERNELS_INTERPRETED)
    ):
        return "the fused Triton step runs on CUDA tensors (on a CPU: --fused_in_interpreter with TRITON_INTERPRET=1)"
    if (variant.cuda_graphs or variant.compile_mode == "reduce-overhead") and device.type != "cuda":
        return "CUDA graphs need a CUDA device"
    return None


class EncoderOutputs(nn.Module):
    """`model`'s (word states, sentence representation) from positional tensors: a module, so that
    `torch.cuda.make_graphed_callables` captures the gradients of its parameters.

    Args:
        model (`nn.Module`): an encoder of `MODELS`.
    """

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        outputs = self.model(input_ids=input_ids, attention_mask=attention_mask)
        return outputs[0], outputs[1]  # (batch, seq, hidden), (batch, hidden)


class GraphedModel:
    """`model(input_ids, attention_mask)` as (word states, sentence representation), replayed from CUDA graphs: one
    per input shape and mode, captured at the first call with them. Training: forward and backward graphs
    (`torch.cuda.make_graphed_callables`); forward only (`torch.no_grad`): one forward graph (`torch.cuda.graph`).
    Autocast must run with `cache_enabled=False` (make_graphed_callables requires it)."""

    def __init__(self, model: nn.Module):
        self.model = model
        self.graphs = {}

    def __call__(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        key = (tuple(input_ids.shape), self.model.training, torch.is_grad_enabled())
        if key not in self.graphs:
            capture = self.capture_training if torch.is_grad_enabled() else self.capture_forward
            self.graphs[key] = capture(input_ids, attention_mask)
        return self.graphs[key](input_ids, attention_mask)

    def capture_training(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> Callable:
        # A new wrapper per shape: make_graphed_callables replaces the forward of the module it is given. Unused
        # inputs allowed: some encoders hold parameters that a configuration leaves out of the forward pass.
        module = EncoderOutputs(self.model)
        return torch.cuda.make_graphed_callables(module, (input_ids, attention_mask), allow_unused_input=True)

    def capture_forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> Callable:
        static_ids, static_mask = input_ids.clone(), attention_mask.clone()
        outputs = EncoderOutputs(self.model)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up outside the graph (cuBLAS workspaces, Triton's compilation)
            for _ in range(2):
                outputs(static_ids, static_mask)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_outputs = outputs(static_ids, static_mask)

        def replay(ids: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            static_ids.copy_(ids)
            static_mask.copy_(mask)
            graph.replay()
            return static_outputs

        return replay


class TimedModel:
    """One model in one variant on a workload's batches (random token ids; each sentence's real tokens unmasked,
    right padding), ready to call forward only (`torch.no_grad`, eval mode) or forward+backward (training mode, the
    gradient of the sum of the outputs) over all of them."""

    def __init__(self, name: str, variant: Variant, workload: Workload, device: torch.device):
        self.name, self.variant, self.device = name, variant, device
        self.config = MODELS[name]()
        self.model = build_model(name).to(device)
        self.step_implementation = ""
        if isinstance(self.model, SLSTMModel):
            self.step_implementation = set_step_implementation(self.model, variant.step_implementation)
        if variant.checkpointing:  # one checkpoint per S-LSTM step; the method's name before transformers 5.x
            enable = getattr(self.model, "activation_checkpointing_enable", None)
            (enable or self.model.gradient_checkpointing_enable)()
        self.params, self.encoder_params = count_parameters(self.model)
        if variant.cuda_graphs:
            self.runner = GraphedModel(self.model)
        elif variant.compile:
            self.runner = torch.compile(self.model, mode=variant.compile_mode)
        else:
            self.runner = self.model
        generator = torch.Generator().manual_seed(workload.batch * 1000 + workload.length)
        self.batches = []
        for lengths, width in zip(workload.batches, workload.widths):
            input_ids = torch.randint(4, VOCAB_SIZE, (len(lengths), width), generator=generator)
            attention_mask = (torch.arange(width) < torch.tensor(lengths)[:, None]).long()  # (batch, width)
            self.batches.append((input_ids.to(device), attention_mask.to(device)))

    def autocast(self):
        dtype = self.variant.autocast_dtype
        return torch.autocast(
            self.device.type,
            dtype=dtype or torch.float32,
            enabled=dtype is not None,
            cache_enabled=not self.variant.cuda_graphs,
        )

    def outputs(self, input_ids, attention_mask) -> tuple[torch.Tensor, torch.Tensor]:
        """(word states, sentence representation): the first two outputs of every encoder here."""
        outputs = self.runner(input_ids=input_ids, attention_mask=attention_mask)
        return outputs[0], outputs[1]

    def forward(self):
        with torch.no_grad(), self.autocast():
            for input_ids, attention_mask in self.batches:
                self.outputs(input_ids, attention_mask)

    def forward_backward(self):
        for input_ids, attention_mask in self.batches:
            with self.autocast():
                states, pooled = self.outputs(input_ids, attention_mask)
                loss = states.float().sum() + pooled.float().sum()
            loss.backward()
            self.model.zero_grad(set_to_none=True)

    def call_for(self, mode: str) -> Callable[[], None]:
        self.model.train(mode == "train")
        return self.forward_backward if mode == "train" else self.forward

    def failure(self, mode: str) -> str | None:
        """Call once; why this model cannot run in this variant here (the error's first line), or None. E.g. oneDNN's
        bf16 LSTM on a CPU without bf16 support, or a CUDA-graph capture that meets a host synchronisation. Any error:
        one failing variant must not end a timed GPU run."""
        try:
            self.call_for(mode)()
        except Exception as error:  # noqa: BLE001 (Triton, Dynamo and CUDA-graph errors alike)
            return (str(error).strip().splitlines() or [type(error).__name__])[0]
        return None
