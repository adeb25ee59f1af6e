"""The measuring half of `benchmark_speed.py`: models, matmul FLOP counts, the machine, the GEMM ceiling, timed runs.

Everything that is timed together is timed in turn (round-robin, `time_interleaved`): all models and variants of one
batch shape, and a ceiling GEMM with them, so that a ratio between two rows of one shape compares the same moments of
a machine whose load changes from minute to minute. Reporting lives in `speed_report.py`.
"""

import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile

from baselines import BaselineEncoderConfig, BaselineModel
from modeling_slstm import cpu_matmul
from modeling_slstm.configuration_slstm import SLSTMConfig
from modeling_slstm.modeling_slstm import SLSTMModel
from run_scripts.benchmarks.reference_slstm import ReferenceSLSTM

VOCAB_SIZE = 10000
PAPER_SLSTM = "slstm"
REFERENCE_SLSTM = "slstm-reference"


# --------------------------------------------------------------------------------------------------------------------
# Models and their matmul FLOPs (2 per multiply-add; elementwise work is not counted)
# --------------------------------------------------------------------------------------------------------------------


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


def slstm_forward_flops(config: SLSTMConfig, batch: int, length: int) -> float:
    r"""
    Matmul FLOPs of one S-LSTM forward pass over `batch` sentences of `length` tokens (2 FLOPs per multiply-add).

    Per token, once: the input term `U x_i`, `2·E·(G+1)·H` with `G` gate/content blocks. Per token and step: the window
    term `W ξ_i`, `2·(2w+1)·H·C·H` with `C` context blocks (`2w+1` window gates, `K` sentence gates, the content gate,
    the output gate and the content: 7 for w=1, K=1), and the sentence node's per-word forget gate `U_f h_i`,
    `2·H·K·H`. Per sentence and step (small): `V g` (`2·K·H·C·H`), the sentence gates (`2·(K+1)·H·(1+o)·K·H`) and
    `W_f g` (`2·(K·H)²`). Forward+backward is counted as 3x forward (two matmuls of the same size per forward matmul).
    The plain reference (`slstm-reference`) is credited with these FLOPs too, the work the equations need, although it
    does more (`U x_i` and `V g` per token and step), so that GFLOP/s compare like tokens/s.
    """
    hidden, nodes, width = config.hidden_size, config.num_sentence_nodes, 2 * config.window_size + 1
    output_gate = 0 if config.remove_output_gate else 1
    normalized = width + nodes + 1
    context_blocks = normalized + output_gate + (0 if config.context_independent_content else 1)
    input_blocks = normalized + output_gate + 1
    tokens = batch * length
    flops = 2.0 * tokens * config.embedding_dim * input_blocks * hidden
    per_token_step = 2.0 * width * hidden * context_blocks * hidden
    per_sentence_step = 0.0
    if nodes:
        per_token_step += 2.0 * hidden * nodes * hidden
        per_sentence_step = 2.0 * nodes * hidden * context_blocks * hidden
        per_sentence_step += 2.0 * (nodes + 1) * hidden * (1 + output_gate) * nodes * hidden
        per_sentence_step += 2.0 * (nodes * hidden) ** 2
    return flops + config.num_steps * (tokens * per_token_step + batch * per_sentence_step)


def baseline_forward_flops(config: BaselineEncoderConfig, batch: int, length: int) -> float:
    """Matmul FLOPs of one baseline forward pass (LSTM gate matmuls, convolutions, attention and feed-forward)."""
    tokens = batch * length
    hidden, embedding, layers = config.hidden_size, config.embedding_dim, config.num_layers
    widths = [embedding] + [hidden] * (layers - 1)  # input width of each layer
    if config.encoder_type == "bilstm":
        units = hidden // 2
        return sum(2 * 2.0 * tokens * 4 * units * (width + units) for width in widths)  # 2 directions, W x + U h
    if config.encoder_type == "cnn":
        return sum(2.0 * tokens * config.kernel_size * width * hidden for width in widths)
    # transformer: input projection, then per layer QKV + output projections, attention scores and mixing, FFN
    per_layer = 2.0 * tokens * 4 * hidden * hidden + 2 * 2.0 * batch * length * length * hidden
    per_layer += 2 * 2.0 * tokens * hidden * config.intermediate_size
    return 2.0 * tokens * embedding * hidden + layers * per_layer


def step_flops(config, batch: int, length: int, mode: str) -> float:
    """FLOPs of one timed call: forward, or forward+backward (`mode == "train"`, 3x forward)."""
    if isinstance(config, SLSTMConfig):
        forward = slstm_forward_flops(config, batch, length)
    else:
        forward = baseline_forward_flops(config, batch, length)
    return forward * (3.0 if mode == "train" else 1.0)


# --------------------------------------------------------------------------------------------------------------------
# The machine
# --------------------------------------------------------------------------------------------------------------------


def machine_info(device: torch.device) -> dict:
    """What a reader needs to compare runs across machines. Calls `cpu_matmul.selected_backend()`, which decides the
    S-LSTM's float32 CPU matmul backend once per process, so that the decision is not part of a timed call."""
    info = cpu_matmul.cpu_info()
    cpu = info.get("model name", "")
    if "cpu family" in info:  # virtual machines may name every EPYC generation "AMD EPYC": the family tells them apart
        cpu += f" (family {info['cpu family']}, model {info.get('model', '?')})"
    return {
        "device": device.type,
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else cpu,
        "cpu": cpu,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "native_bf16": cpu_matmul.cpu_has_fast_bf16(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "matmul_backend": cpu_matmul.selected_backend(),
        "matmul_backend_requested": os.environ.get(cpu_matmul.MATMUL_BACKEND_ENV, "auto"),
    }


# --------------------------------------------------------------------------------------------------------------------
# Timing, memory, the GEMM ceiling
# --------------------------------------------------------------------------------------------------------------------


@dataclass
class Timing:
    """`warmup` untimed rounds, then at least `repeats` timed rounds, more while less than `min_time` seconds have
    passed, at most `max_repeats`; a call that took more than `time_once_above` seconds is not timed again (plain bf16
    autocast on a CPU without bf16 takes minutes per call)."""

    warmup: int
    repeats: int
    min_time: float
    max_repeats: int
    time_once_above: float = float("inf")


def synchronize(device: torch.device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_interleaved(calls: dict[str, Callable], device: torch.device, timing: Timing) -> dict[str, list[float]]:
    """Wall-clock seconds of every timed call of each of `calls`, which run in turn, one call each per round."""
    for _ in range(timing.warmup):
        for call in calls.values():
            call()
    synchronize(device)
    times = {name: [] for name in calls}
    started = time.perf_counter()
    rounds = 0
    while rounds < timing.repeats or (time.perf_counter() - started < timing.min_time and rounds < timing.max_repeats):
        for name, call in calls.items():
            if times[name] and times[name][-1] > timing.time_once_above:
                continue
            start = time.perf_counter()
            call()
            synchronize(device)
            times[name].append(time.perf_counter() - start)
        rounds += 1
    return times


def peak_memory_bytes(fn: Callable, device: torch.device) -> int:
    """Peak bytes held by PyTorch's allocator during `fn()` above those held before it.

    CUDA: `torch.cuda.max_memory_allocated`. CPU: the "Total Allocated" counter that the profiler records with every
    allocation and free (`profile_memory=True`), read from its Chrome trace.
    """
    if device.type == "cuda":
        synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        fn()
        synchronize(device)
        return torch.cuda.max_memory_allocated(device) - before
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as profiler:
        fn()
    with tempfile.TemporaryDirectory() as folder:
        trace = Path(folder) / "trace.json"
        profiler.export_chrome_trace(str(trace))
        events = json.loads(trace.read_text())["traceEvents"]
    cpu_memory = sorted(
        (e for e in events if e.get("name") == "[memory]" and e["args"].get("Device Type") == 0),
        key=lambda e: e["ts"],
    )
    if not cpu_memory:
        return 0
    first = cpu_memory[0]["args"]
    held_before = first["Total Allocated"] - first["Bytes"]
    return max(e["args"]["Total Allocated"] for e in cpu_memory) - held_before


# The operators that run matrix products, as `torch.profiler` names them: PyTorch's own and the oneDNN linear behind
# `SLSTMLinear`.
MATMUL_OPERATORS = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "mkldnn::_linear_pointwise"}


def matmul_time_share(fn: Callable) -> float:
    """Share of the operator time of one `fn()` (the self CPU time of every profiled operator, forward and backward)
    spent inside matrix products.

    A row reaching `p`% of the GEMM ceiling with a matmul share `s` would reach about `p / s`% if everything between
    the products were free: the bound that faster elementwise work (fusion, fewer copies) can approach, and beyond it
    only a faster GEMM on the model's own shapes helps. Meaningful on the CPU only (CUDA kernels run asynchronously,
    so `measure_shape` calls it for CPU rows); NaN for a call that runs no operator.
    """
    with profile(activities=[ProfilerActivity.CPU]) as profiler:
        fn()
    events = profiler.key_averages()
    total = sum(event.self_cpu_time_total for event in events)
    matmuls = sum(event.self_cpu_time_total for event in events if event.key in MATMUL_OPERATORS)
    return matmuls / total if total else float("nan")


def gemm_backends(device: torch.device, dtype: torch.dtype) -> list[str]:
    """The matmul backends worth timing: PyTorch's default (`torch.mm`: MKL on CPU, cuBLAS on GPU) and, for float32 on
    CPU, oneDNN: the two that `cpu_matmul.selected_backend()` chooses between."""
    onednn = device.type == "cpu" and dtype == torch.float32 and torch.backends.mkldnn.is_available()
    return ["default", "onednn"] if onednn else ["default"]


def ceiling_gemm_dtypes(device: torch.device, autocast_dtypes) -> list[torch.dtype]:
    """float32, and each autocast dtype where its GEMM can beat float32's: on a GPU, or bf16 on a CPU with native bf16
    (elsewhere a 2048³ bf16 GEMM takes tens of seconds and would not be the ceiling anyway)."""
    fast = [
        d for d in autocast_dtypes if device.type == "cuda" or (d == torch.bfloat16 and cpu_matmul.cpu_has_fast_bf16())
    ]
    return [torch.float32] + sorted(set(fast) - {torch.float32}, key=str)


def gemm(device: torch.device, dtype: torch.dtype, backend: str, size: int) -> Callable[[], None]:
    """A call of one `size`³ matmul by `backend` (see `gemm_backends`), without autograd."""
    generator = torch.Generator().manual_seed(0)
    a = torch.randn(size, size, generator=generator).to(device=device, dtype=dtype)
    if backend == "onednn":
        from torch.utils import mkldnn as mkldnn_utils

        product = mkldnn_utils.to_mkldnn(nn.Linear(size, size, bias=False).eval())
        operands = (a.to_mkldnn(),)
    else:
        product = torch.mm
        operands = (a, torch.randn(size, size, generator=generator).to(device=device, dtype=dtype))

    def call():
        with torch.no_grad():
            product(*operands)

    return call


def ceiling_calls(device: torch.device, dtypes, size: int) -> dict[str, Callable]:
    """`{"<dtype>/<backend>": call}`: one ceiling GEMM per dtype and backend."""
    return {
        f"{str(dtype).removeprefix('torch.')}/{backend}": gemm(device, dtype, backend, size)
        for dtype in dtypes
        for backend in gemm_backends(device, dtype)
    }


def ceilings_from_times(times: dict[str, list[float]], size: int) -> dict[str, dict]:
    """`{dtype: {"gflops": best, "backend": its name, "all": {backend: GFLOP/s}}}` from times of `ceiling_calls`."""
    ceilings = {}
    for key, seconds in times.items():
        dtype, backend = key.split("/")
        ceiling = ceilings.setdefault(dtype, {"all": {}})
        ceiling["all"][backend] = 2.0 * size**3 / statistics.median(seconds) / 1e9
    for ceiling in ceilings.values():
        ceiling["backend"] = max(ceiling["all"], key=ceiling["all"].get)
        ceiling["gflops"] = ceiling["all"][ceiling["backend"]]
    return ceilings


def measure_ceilings(device: torch.device, dtypes, size: int, repeats: int = 5) -> dict[str, dict]:
    """GFLOP/s of a `size`³ matmul per dtype: the faster backend is the ceiling (see `ceilings_from_times`)."""
    times = time_interleaved(ceiling_calls(device, dtypes, size), device, Timing(2, repeats, 0.0, repeats))
    return ceilings_from_times(times, size)


def row_ceiling_dtypes(variant_name: str) -> list[str]:
    """The ceilings a row is compared with: float32, and under bf16/fp16 autocast also that dtype (the faster counts,
    since autocast may keep matmuls in float32 where the low-precision path is slow)."""
    low_precision = {"bf16": "bfloat16", "fp16": "float16"}.get(variant_name.split("+")[0])
    return ["float32"] + ([low_precision] if low_precision else [])


def apply_ceilings(rows: list[dict], ceilings: dict[str, dict]):
    """Set `ceiling_gflops_per_s` and `pct_of_ceiling` of every row from the run's ceilings."""
    for row in rows:
        best = max((ceilings[d]["gflops"] for d in row_ceiling_dtypes(row["variant"]) if d in ceilings), default=None)
        row["ceiling_gflops_per_s"] = best if best else float("nan")
        row["pct_of_ceiling"] = 100 * row["gflops_per_s"] / best if best else float("nan")


# --------------------------------------------------------------------------------------------------------------------
# Models at one shape, timed together
# --------------------------------------------------------------------------------------------------------------------


@dataclass
class Variant:
    """How a model runs: float32, or `autocast_dtype` autocast; `torch.compile`; checkpointing per S-LSTM step."""

    name: str
    autocast_dtype: torch.dtype | None = None
    compile: bool = False
    checkpointing: bool = False
    modes: tuple = ("forward", "train")


VARIANTS = {
    "fp32": Variant("fp32"),
    "bf16": Variant("bf16", autocast_dtype=torch.bfloat16),
    "fp16": Variant("fp16", autocast_dtype=torch.float16),
    "compile": Variant("fp32+compile", compile=True),
    "bf16+compile": Variant("bf16+compile", autocast_dtype=torch.bfloat16, compile=True),
    "checkpoint": Variant("fp32+checkpoint", checkpointing=True, modes=("train",)),
}


def skip_reason(variant: Variant, device: torch.device) -> str | None:
    """Why `variant` cannot run on `device`, or None. bf16 autocast runs on every CPU: on one without native bf16
    that shows what a user who turns it on gets."""
    if variant.autocast_dtype == torch.float16 and device.type == "cpu":
        return "float16 autocast is for GPUs"
    if variant.autocast_dtype == torch.bfloat16 and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        return "this GPU has no bfloat16"
    return None


class TimedModel:
    """One model in one variant on a random full-length batch `(batch, length)`, ready to call forward only
    (`torch.no_grad`, eval mode) or forward+backward (training mode, the gradient of the sum of the outputs)."""

    def __init__(self, name: str, variant: Variant, batch: int, length: int, device: torch.device):
        self.name, self.variant, self.device = name, variant, device
        self.config = MODELS[name]()
        self.model = build_model(name).to(device)
        if variant.checkpointing:  # one checkpoint per S-LSTM step; the method's name before transformers 5.x
            enable = getattr(self.model, "activation_checkpointing_enable", None)
            (enable or self.model.gradient_checkpointing_enable)()
        self.params, self.encoder_params = count_parameters(self.model)
        self.runner = torch.compile(self.model) if variant.compile else self.model
        generator = torch.Generator().manual_seed(batch * 1000 + length)
        self.input_ids = torch.randint(4, VOCAB_SIZE, (batch, length), generator=generator).to(device)
        self.attention_mask = torch.ones(batch, length, dtype=torch.long, device=device)

    def autocast(self):
        dtype = self.variant.autocast_dtype
        return torch.autocast(self.device.type, dtype=dtype or torch.float32, enabled=dtype is not None)

    def outputs(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(word states, sentence representation): the first two outputs of every encoder here."""
        outputs = self.runner(input_ids=self.input_ids, attention_mask=self.attention_mask)
        return outputs[0], outputs[1]

    def forward(self):
        with torch.no_grad(), self.autocast():
            self.outputs()

    def forward_backward(self):
        with self.autocast():
            states, pooled = self.outputs()
            loss = states.float().sum() + pooled.float().sum()
        loss.backward()
        self.model.zero_grad(set_to_none=True)

    def call_for(self, mode: str) -> Callable[[], None]:
        self.model.train(mode == "train")
        return self.forward_backward if mode == "train" else self.forward

    def runs(self, mode: str) -> bool:
        """Call once; False (and say why) where this model cannot run in this variant here, e.g. oneDNN's bf16 LSTM
        on a CPU without bf16 support."""
        try:
            self.call_for(mode)()
        except RuntimeError as error:
            reason = str(error).splitlines()[0]
            print(f"skipping {self.name} {self.variant.name} {mode_label(mode)}: {reason}", flush=True)
            return False
        return True


def measure_shape(
    cases: list[tuple[str, Variant]],
    batch: int,
    length: int,
    modes: list[str],
    device: torch.device,
    timing: Timing,
    ceiling_size: int,
    measure_memory: bool = True,
    measure_matmul_share: bool = False,
) -> list[dict]:
    """Time every `(model, variant)` of `cases` at `batch` x `length` in turn with a ceiling GEMM per dtype, per mode;
    then, with `measure_memory`, each one's peak memory, and with `measure_matmul_share`, an S-LSTM's share of time in
    matrix products (`matmul_time_share`; both not for `torch.compile` on CPU, which the profiler does not follow).

    Returns one row per case and mode (the CSV columns of `speed_report.FIELDS` without the machine and ceiling)."""
    models = [TimedModel(name, variant, batch, length, device) for name, variant in cases]
    dtypes = ceiling_gemm_dtypes(device, {m.variant.autocast_dtype for m in models} - {None})
    ceilings = ceiling_calls(device, dtypes, ceiling_size)
    rows = []
    for mode in modes:
        timed = [m for m in models if mode in m.variant.modes and m.runs(mode)]
        if not timed:
            continue
        calls = {f"{m.name} {m.variant.name}": m.call_for(mode) for m in timed}
        # `runs` was the first warm-up call; torch.compile needs two more to compile the forward and the backward.
        warmup = max(timing.warmup - 1, 0) + (2 if any(m.variant.compile for m in timed) else 0)
        times = time_interleaved({**calls, **ceilings}, device, replace(timing, warmup=warmup))
        moment_ceilings = ceilings_from_times({key: times[key] for key in ceilings}, ceiling_size)
        for model, (key, call) in zip(timed, calls.items()):
            median = statistics.median(times[key])
            memory = matmul_share = float("nan")
            compiled_on_cpu = model.variant.compile and device.type == "cpu"
            if measure_memory and not compiled_on_cpu:
                memory = peak_memory_bytes(call, device)
            # The S-LSTMs only: the baselines' products also run inside LSTM and convolution kernels.
            is_slstm = isinstance(model.config, SLSTMConfig)
            if measure_matmul_share and is_slstm and device.type == "cpu" and not compiled_on_cpu:
                matmul_share = matmul_time_share(call)
            gflops = step_flops(model.config, batch, length, mode) / median / 1e9
            interleaved = max(
                moment_ceilings[d]["gflops"] for d in row_ceiling_dtypes(model.variant.name) if d in moment_ceilings
            )
            rows.append(
                {
                    "model": model.name,
                    "variant": model.variant.name,
                    "batch": batch,
                    "length": length,
                    "mode": mode,
                    "tokens_per_s": batch * length / median,
                    "median_ms": median * 1e3,
                    "runs": len(times[key]),
                    "peak_mem_mb": memory / 2**20,
                    "params": model.params,
                    "encoder_params": model.encoder_params,
                    "gflops_per_s": gflops,
                    "interleaved_ceiling_gflops_per_s": interleaved,
                    "pct_of_interleaved_ceiling": 100 * gflops / interleaved,
                    "matmul_time_share": matmul_share,
                }
            )
            print_row(rows[-1])
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return rows


def mode_label(mode: str) -> str:
    return "forward+backward" if mode == "train" else "forward only"


def print_row(row: dict):
    print(
        f"{row['model']:>16} {row['variant']:>16} {row['batch']:>3}x{row['length']:<4} {mode_label(row['mode']):>16}: "
        f"{row['tokens_per_s']:>10.0f} tok/s {row['median_ms']:>9.1f} ms {row['peak_mem_mb']:>8.1f} MiB "
        f"{row['gflops_per_s']:>7.1f} GFLOP/s ({row['pct_of_interleaved_ceiling']:.0f}% of the ceiling GEMM timed "
        "between the runs)" + matmul_share_text(row),
        flush=True,
    )


def matmul_share_text(row: dict) -> str:
    """The matmul share and the bound it implies, as a clause to print after a row; empty where not measured."""
    share = row.get("matmul_time_share", float("nan"))
    if not share > 0:  # NaN (not measured) or a profile without matmuls
        return ""
    bound = row["pct_of_interleaved_ceiling"] / share
    return f"; {100 * share:.0f}% of its time in matmuls: at most about {bound:.0f}% with all other work free"
