"""The encoders a speed benchmark times, the variants they run in (precision, `torch.compile`, checkpointing, the
S-LSTM step, CUDA graphs), and `TimedModel`: one of them on a workload's batches, ready to call."""

import json
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from baselines import BaselineEncoderConfig, BaselineModel
from modeling_slstm.configuration_slstm import CHAR_PAD_ID, SLSTMConfig
from modeling_slstm.kernel_dispatch import KERNELS_INTERPRETED
from modeling_slstm.modeling_slstm import SLSTMModel
from run_scripts import REPOSITORY_ROOT
from run_scripts.benchmarks.support.reference_slstm import ReferenceSLSTM
from run_scripts.benchmarks.support.workloads import Workload

VOCAB_SIZE = 10000
CHAR_VOCAB_SIZE = 100
WORD_CHARACTERS = 20  # characters per word of a batch's char_ids (the tokenizer's longest word by default)
PAPER_SLSTM = "slstm"
REFERENCE_SLSTM = "slstm-reference"
# Forward-only timings run at the thread count the benchmark sets and reports, as the plain reference does, rather
# than at the count the models would choose for CPU inference from the idle cores.
TIMED_THREADS = {"inference_threads": "torch"}


def slstm_config(**overrides) -> SLSTMConfig:
    """Paper configuration (hidden 300, embedding 300, 9 steps, window 1, one sentence node), with overrides."""
    settings = {"vocab_size": VOCAB_SIZE, "embedding_dim": 300, "hidden_size": 300, "num_steps": 9, "window_size": 1}
    return SLSTMConfig(**{**settings, **TIMED_THREADS, **overrides})


def baseline_config(encoder_type: str, num_layers: int, **overrides) -> BaselineEncoderConfig:
    settings = {"vocab_size": VOCAB_SIZE, "embedding_dim": 300, "hidden_size": 300}
    return BaselineEncoderConfig(
        encoder_type=encoder_type, num_layers=num_layers, **{**settings, **TIMED_THREADS, **overrides}
    )


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


def ner_character_settings() -> dict:
    """The character CNN of the S-LSTM's NER config (`hub_configs/slstm-ner-crf.json`: character embedding size,
    filters, width, dropout), over `CHAR_VOCAB_SIZE` characters: what every encoder of the real CoNLL-2003 NER rows
    reads, the BiLSTM as the S-LSTM (`hub_configs/baselines/bilstm1-ner-crf-chars.json` has the same)."""
    settings = json.loads((REPOSITORY_ROOT / "hub_configs" / "slstm-ner-crf.json").read_text())
    characters = {key: value for key, value in settings.items() if key.startswith(("char_", "use_char_features"))}
    return characters | {"char_vocab_size": CHAR_VOCAB_SIZE}


def build_model(name: str, char_features: bool = False) -> nn.Module:
    """The encoder `name` of `MODELS`, with weights drawn from seed 0; with `char_features`, the NER config's
    character CNN (`ner_character_settings`) appended to its word embeddings (not for the plain reference, which has
    none: a `ValueError`)."""
    config = MODELS[name]()
    if char_features:
        if name == REFERENCE_SLSTM:
            raise ValueError(f"{REFERENCE_SLSTM} has no character CNN: time it without char_features")
        config.update(ner_character_settings())
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

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, char_ids: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        outputs = self.model(input_ids=input_ids, attention_mask=attention_mask, char_ids=char_ids)
        return outputs[0], outputs[1]  # (batch, seq, hidden), (batch, hidden)


class GraphedModel:
    """`model(input_ids, attention_mask)` as (word states, sentence representation), replayed from CUDA graphs: one
    per input shape and mode, captured at the first call with them. Training: forward and backward graphs
    (`torch.cuda.make_graphed_callables`); forward only (`torch.no_grad`): one forward graph (`torch.cuda.graph`).
    Autocast must run with `cache_enabled=False` (make_graphed_callables requires it)."""

    def __init__(self, model: nn.Module):
        self.model = model
        self.graphs = {}

    def __call__(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, char_ids: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        inputs = (input_ids, attention_mask) if char_ids is None else (input_ids, attention_mask, char_ids)
        key = (tuple(tuple(tensor.shape) for tensor in inputs), self.model.training, torch.is_grad_enabled())
        if key not in self.graphs:
            capture = self.capture_training if torch.is_grad_enabled() else self.capture_forward
            self.graphs[key] = capture(inputs)
        return self.graphs[key](*inputs)

    def capture_training(self, inputs: tuple[torch.Tensor, ...]) -> Callable:
        # A new wrapper per shape: make_graphed_callables replaces the forward of the module it is given. Unused
        # inputs allowed: some encoders hold parameters that a configuration leaves out of the forward pass.
        module = EncoderOutputs(self.model)
        return torch.cuda.make_graphed_callables(module, inputs, allow_unused_input=True)

    def capture_forward(self, inputs: tuple[torch.Tensor, ...]) -> Callable:
        static_inputs = tuple(tensor.clone() for tensor in inputs)
        outputs = EncoderOutputs(self.model)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up outside the graph (cuBLAS workspaces, Triton's compilation)
            for _ in range(2):
                outputs(*static_inputs)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_outputs = outputs(*static_inputs)

        def replay(*tensors: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            for static, tensor in zip(static_inputs, tensors, strict=True):
                static.copy_(tensor)
            graph.replay()
            return static_outputs

        return replay


def random_char_ids(attention_mask: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Random `char_ids` `(batch, seq, WORD_CHARACTERS)` for the real positions of `attention_mask`: words of 1 to 12
    characters, padded with `CHAR_PAD_ID`; padding positions all padding."""
    batch, seq = attention_mask.shape
    ids = torch.randint(1, CHAR_VOCAB_SIZE, (batch, seq, WORD_CHARACTERS), generator=generator)
    word_lengths = torch.randint(1, 13, (batch, seq, 1), generator=generator) * attention_mask.unsqueeze(-1)
    return ids.masked_fill(torch.arange(WORD_CHARACTERS) >= word_lengths, CHAR_PAD_ID)


class TimedModel:
    """One model in one variant on a workload's batches (random token ids; each sentence's real tokens unmasked,
    right padding), ready to call forward only (`torch.no_grad`, eval mode) or forward+backward (training mode, the
    gradient of the sum of the outputs) over all of them. With `char_features`, the model has the NER config's
    character CNN (`ner_character_settings`) and each batch random `char_ids` (`random_char_ids`)."""

    def __init__(
        self, name: str, variant: Variant, workload: Workload, device: torch.device, char_features: bool = False
    ):
        self.name, self.variant, self.device = name, variant, device
        self.config = MODELS[name]()
        self.config.update(ner_character_settings() if char_features else {})
        self.model = build_model(name, char_features).to(device)
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
        self.batches, self.char_ids = [], []
        for lengths, width in zip(workload.batches, workload.widths):
            input_ids = torch.randint(4, VOCAB_SIZE, (len(lengths), width), generator=generator)
            attention_mask = (torch.arange(width) < torch.tensor(lengths)[:, None]).long()  # (batch, width)
            self.batches.append((input_ids.to(device), attention_mask.to(device)))
            chars = random_char_ids(attention_mask, generator) if char_features else None
            self.char_ids.append(None if chars is None else chars.to(device))

    def autocast(self):
        dtype = self.variant.autocast_dtype
        return torch.autocast(
            self.device.type,
            dtype=dtype or torch.float32,
            enabled=dtype is not None,
            cache_enabled=not self.variant.cuda_graphs,
        )

    def outputs(self, input_ids, attention_mask, char_ids=None) -> tuple[torch.Tensor, torch.Tensor]:
        """(word states, sentence representation): the first two outputs of every encoder here."""
        words = {"input_ids": input_ids, "attention_mask": attention_mask}
        outputs = self.runner(**words) if char_ids is None else self.runner(**words, char_ids=char_ids)
        return outputs[0], outputs[1]

    def forward(self):
        with torch.no_grad(), self.autocast():
            for (input_ids, attention_mask), char_ids in zip(self.batches, self.char_ids):
                self.outputs(input_ids, attention_mask, char_ids)

    def forward_backward(self):
        for (input_ids, attention_mask), char_ids in zip(self.batches, self.char_ids):
            with self.autocast():
                states, pooled = self.outputs(input_ids, attention_mask, char_ids)
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
