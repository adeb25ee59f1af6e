"""The measuring half of `benchmark_speed.py`: models, matmul FLOP and memory-traffic counts, the machine and its
peaks, the GEMM ceiling, workloads (random shapes and real training batches), timed runs.

Everything that is timed together is timed in turn (round-robin, `time_interleaved`): all models and variants of one
workload, and a ceiling GEMM with them, so that a ratio between two rows of one workload compares the same moments of
a machine whose load changes from minute to minute. Reporting lives in `speed_report.py`.
"""

import json
import math
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
from run_scripts.benchmarks.benchmark_inputs import length_grouped_batches
from run_scripts.benchmarks.reference_slstm import ReferenceSLSTM
from run_scripts.training import data, gpu_batching

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


def slstm_blocks(config: SLSTMConfig) -> tuple[int, int, int, int]:
    """`(window width 2w+1, output gate 0/1, context blocks C, input blocks I)` of an S-LSTM step: C and I count the
    gate/content blocks that the window states and the input each feed (`2w+1` window gates, `K` sentence gates and
    the content gate are normalized together; then the output gate and, unless context-independent, the content)."""
    width = 2 * config.window_size + 1
    output_gate = 0 if config.remove_output_gate else 1
    normalized = width + config.num_sentence_nodes + 1
    context_blocks = normalized + output_gate + (0 if config.context_independent_content else 1)
    return width, output_gate, context_blocks, normalized + output_gate + 1


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
    hidden, nodes = config.hidden_size, config.num_sentence_nodes
    width, output_gate, context_blocks, input_blocks = slstm_blocks(config)
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


def step_flops(config, batch: int, length: float, mode: str) -> float:
    """FLOPs of one timed call: forward, or forward+backward (`mode == "train"`, 3x forward). `length` may be a mean
    length (`Workload`): every count here is linear in the tokens except the Transformer's attention."""
    if isinstance(config, SLSTMConfig):
        forward = slstm_forward_flops(config, batch, length)
    else:
        forward = baseline_forward_flops(config, batch, length)
    return forward * (3.0 if mode == "train" else 1.0)


def slstm_forward_elements(config: SLSTMConfig, batch: int, length: float) -> float:
    r"""
    Elements that one S-LSTM forward pass must move between the GPU's memory and its cores at the least, when every
    matrix product is one cuBLAS call and everything between two products is one fused kernel (the fused step).

    Once: the word embeddings read (`E` per token) and the input term `U x_i` written (`I·H` per token, `I` input
    blocks). Per step: the step's weights read (`W`, `U_f`, the sentence node's matrices: the parameters the FLOP
    count multiplies by), the input term read again (`I·H` per token), the word states `h, c` read and written
    (`4H` per token), the window product written by its GEMM and read by the fused kernel (`2·C·H` per token with `C`
    context blocks), and the sentence node's state (`4·K·H` per sentence, small). Forward+backward is counted as 3x
    forward, as the FLOPs are.
    """
    hidden, nodes = config.hidden_size, config.num_sentence_nodes
    width, output_gate, context_blocks, input_blocks = slstm_blocks(config)
    tokens = batch * length
    step_weights = width * hidden * context_blocks * hidden + hidden * nodes * hidden
    if nodes:
        step_weights += nodes * hidden * context_blocks * hidden
        step_weights += (nodes + 1) * hidden * (1 + output_gate) * nodes * hidden + (nodes * hidden) ** 2
    once = tokens * (config.embedding_dim + input_blocks * hidden)
    per_step = step_weights + tokens * (input_blocks * hidden + 4 * hidden + 2 * context_blocks * hidden)
    per_step += batch * 4 * nodes * hidden
    return once + config.num_steps * per_step


def baseline_forward_elements(config: BaselineEncoderConfig, batch: int, length: float) -> float:
    """Elements a BiLSTM forward pass must move at the least (cuDNN keeps the recurrent weights and `c` on chip): per
    layer its weights once, its input read, the input term `W x` written and read (`2·4·H` per token, both directions
    together) and the output `h` written. NaN for the other baselines (no estimate)."""
    if config.encoder_type != "bilstm":
        return float("nan")
    tokens = batch * length
    hidden, embedding, layers = config.hidden_size, config.embedding_dim, config.num_layers
    units = hidden // 2
    elements = tokens * embedding  # the embedding lookup's reads
    for width in [embedding] + [hidden] * (layers - 1):
        weights = 2 * 4 * units * (width + units)
        elements += weights + tokens * (width + 2 * 4 * hidden + hidden)
    return elements


def step_bytes(config, batch: int, length: float, mode: str, element_bytes: int) -> float:
    """Bytes one timed call must move at the least (`slstm_forward_elements`, `baseline_forward_elements`), with
    `element_bytes` per element (4 float32, 2 bf16); forward+backward 3x forward."""
    if isinstance(config, SLSTMConfig):
        forward = slstm_forward_elements(config, batch, length)
    else:
        forward = baseline_forward_elements(config, batch, length)
    return forward * element_bytes * (3.0 if mode == "train" else 1.0)


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


# Peak dense matmul FLOP/s per dtype (float32 without TF32, as PyTorch runs float32 matmuls by default) and memory
# bandwidth, from NVIDIA's datasheets, keyed by a part of `torch.cuda.get_device_name()`; the longest matching key
# counts ("NVIDIA H100 PCIe" is not an SXM H100). Devices not listed use the run's own measurements (`run_peaks`).
DEVICE_PEAKS = {
    "H100": {"float32": 67e12, "bfloat16": 989e12, "float16": 989e12, "bandwidth": 3.35e12},
    "H100 PCIe": {"float32": 51e12, "bfloat16": 756e12, "float16": 756e12, "bandwidth": 2.0e12},
    "H100 NVL": {"float32": 60e12, "bfloat16": 835e12, "float16": 835e12, "bandwidth": 3.9e12},
    "H200": {"float32": 67e12, "bfloat16": 989e12, "float16": 989e12, "bandwidth": 4.8e12},
    "H200 NVL": {"float32": 60e12, "bfloat16": 835e12, "float16": 835e12, "bandwidth": 4.8e12},
}


def table_peaks(device_name: str) -> dict | None:
    """The `DEVICE_PEAKS` entry of the longest key contained in `device_name`, or None."""
    keys = [key for key in DEVICE_PEAKS if key in device_name]
    return DEVICE_PEAKS[max(keys, key=len)] if keys else None


def run_peaks(device_name: str, ceilings: dict[str, dict], bandwidth: float) -> dict:
    """`{"float32": FLOP/s, ..., "bandwidth": bytes/s, "source": "table" | "measured"}`: the datasheet figures of
    `DEVICE_PEAKS`, else the run's ceiling GEMMs and its copy bandwidth (`measure_bandwidth`)."""
    table = table_peaks(device_name)
    if table:
        return {**table, "source": "table"}
    measured = {dtype: ceiling["gflops"] * 1e9 for dtype, ceiling in ceilings.items()}
    return {**measured, "bandwidth": bandwidth, "source": "measured"}


# --------------------------------------------------------------------------------------------------------------------
# Timing, memory, the GEMM ceiling, the copy bandwidth
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


def measure_bandwidth(device: torch.device, megabytes: int, repeats: int = 5) -> float:
    """Bytes/s of copying a `megabytes` float32 buffer into another (bytes read plus bytes written), the best of
    `repeats` timed copies after one untimed one."""
    source = torch.ones(megabytes * 2**18, device=device)
    target = torch.empty_like(source)
    times = time_interleaved({"copy": lambda: target.copy_(source)}, device, Timing(1, repeats, 0.0, repeats))
    return 2 * source.numel() * source.element_size() / min(times["copy"])


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


def apply_peaks(rows: list[dict], peaks: dict):
    """Set every row's peaks (`peak_gflops_per_s` of its dtype, `peak_gb_per_s`, `peak_source`), the share of each
    reached (`pct_of_peak_flops`, `pct_of_peak_bandwidth`), and its floor: `floor_ms`, the time that its FLOPs at
    the peak FLOP/s or its bytes at the peak bandwidth take, whichever is longer, and `pct_of_floor`, that time as a
    share of the measured one (100%: the row runs at the machine's limit)."""
    for row in rows:
        flops = max(peaks.get(dtype, 0.0) for dtype in row_ceiling_dtypes(row["variant"]))
        seconds = row["median_ms"] / 1e3
        floor = max(row["gflop"] * 1e9 / flops, row["gbytes"] * 1e9 / peaks["bandwidth"])
        row.update(
            peak_gflops_per_s=flops / 1e9,
            peak_gb_per_s=peaks["bandwidth"] / 1e9,
            peak_source=peaks["source"],
            pct_of_peak_flops=100 * row["gflop"] * 1e9 / seconds / flops,
            pct_of_peak_bandwidth=100 * row["gbytes"] * 1e9 / seconds / peaks["bandwidth"],
            floor_ms=floor * 1e3,
            pct_of_floor=100 * floor / seconds,
        )


# --------------------------------------------------------------------------------------------------------------------
# Workloads: random full-length batches, and real training batches as the training scripts make them
# --------------------------------------------------------------------------------------------------------------------

RANDOM = "random"
CORPORA = {"conll2003-ner": "conll2003/ner/train.txt", "movie-review": "movie_review"}


@dataclass(frozen=True)
class Workload:
    """What one timed call runs over: `batches`, each a tuple of sentence lengths in tokens, padded to its `widths`
    entry. Random workloads are one full batch (`batch` x `length`); real ones (`data` a key of `CORPORA`) are
    batches of a training epoch (`real_workload`), with `length` their mean padded width (rounded)."""

    data: str
    batch: int
    length: int
    batches: tuple[tuple[int, ...], ...]
    widths: tuple[int, ...]

    @property
    def tokens(self) -> int:
        """The sentences' tokens (padding not counted): tokens/s of real workloads count the work a user asked for."""
        return sum(sum(lengths) for lengths in self.batches)

    def sort_key(self) -> tuple:
        return (self.data != RANDOM, self.data, self.batch, self.length)

    def label(self) -> str:
        shape = f"{self.batch}x{self.length}"
        return shape if self.data == RANDOM else f"{self.data} {shape} ({len(self.batches)} batches)"


def random_workload(batch: int, length: int) -> Workload:
    return Workload(RANDOM, batch, length, ((length,) * batch,), (length,))


def corpus_lengths(data_dir: Path, corpus: str) -> list[int]:
    """Tokens per training sentence of `corpus` as the training scripts frame them (`<s> words </s>`): CoNLL-2003's
    train split (`run_ner.py`), the movie-review train split of `--split_seed 42` (`run_classification.py`)."""
    path = Path(data_dir) / CORPORA[corpus]
    if corpus == "movie-review":
        sentences = [example["text"].split() for example in data.read_rt_polarity(path, seed=42)["train"]]
    else:
        sentences = [example["tokens"] for example in data.read_conll(path)]
    return [len(words) + 2 for words in sentences]


def real_workload(
    lengths: list[int], corpus: str, batch: int, num_batches: int, pad_multiple: int | None, seed: int = 42
) -> Workload:
    """`num_batches` batches spread evenly over an epoch as the training scripts draw them (`group_by_length`:
    transformers' `LengthGroupedSampler`, seeded; it puts the longest batch first, so the first batches alone would be
    the longest: every `step`-th batch from `step // 2` on), each padded to its longest sentence, rounded up to a
    multiple of `pad_multiple` where given (`gpu_batching.pad_multiple_for`)."""
    batches = [tuple(lengths[i] for i in indices) for indices in length_grouped_batches(lengths, batch, seed)]
    step = max(len(batches) // num_batches, 1)
    batches = batches[step // 2 :: step][:num_batches]
    multiple = pad_multiple or 1
    widths = tuple(math.ceil(max(b) / multiple) * multiple for b in batches)
    mean_width = round(sum(widths) / len(widths))
    return Workload(corpus, batch, mean_width, tuple(batches), widths)


def real_workloads(
    data_dir: Path | None, corpora: list[str], batch_sizes: list[int], num_batches: int, device: torch.device
) -> list[Workload]:
    """`real_workload` of each corpus and batch size; none (with the reason printed) where the data is missing."""
    workloads = []
    for corpus in corpora:
        path = Path(data_dir or "") / CORPORA[corpus]
        if data_dir is None or not path.exists():
            print(f"skipping the real {corpus} batches: {path} not found (--data_dir)", flush=True)
            continue
        lengths = corpus_lengths(data_dir, corpus)
        pad_multiple = gpu_batching.pad_multiple_for(device)
        workloads += [real_workload(lengths, corpus, batch, num_batches, pad_multiple) for batch in batch_sizes]
    return workloads


# --------------------------------------------------------------------------------------------------------------------
# Models on one workload, timed together
# --------------------------------------------------------------------------------------------------------------------


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


def skip_reason(variant: Variant, device: torch.device) -> str | None:
    """Why `variant` cannot run on `device`, or None. bf16 autocast runs on every CPU: on one without native bf16
    that shows what a user who turns it on gets."""
    if variant.autocast_dtype == torch.float16 and device.type == "cpu":
        return "float16 autocast is for GPUs"
    if variant.autocast_dtype == torch.bfloat16 and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        return "this GPU has no bfloat16"
    if variant.step_implementation == "triton" and not has_step_implementation():
        return "this package's SLSTMConfig has no step_implementation (no fused step)"
    if variant.step_implementation == "triton" and device.type != "cuda":
        return "the fused Triton step runs on CUDA tensors"
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

    def runs(self, mode: str) -> bool:
        """Call once; False (and say why) where this model cannot run in this variant here, e.g. oneDNN's bf16 LSTM
        on a CPU without bf16 support, or a CUDA-graph capture that meets a host synchronisation. Any error: one
        failing variant must not end a timed GPU run."""
        try:
            self.call_for(mode)()
        except Exception as error:  # noqa: BLE001 (Triton, Dynamo and CUDA-graph errors alike)
            reason = (str(error).strip().splitlines() or [type(error).__name__])[0]
            print(f"skipping {self.name} {self.variant.name} {mode_label(mode)}: {reason}", flush=True)
            return False
        return True


def measure_shape(
    cases: list[tuple[str, Variant]],
    workload: Workload,
    modes: list[str],
    device: torch.device,
    timing: Timing,
    ceiling_size: int,
    measure_memory: bool = True,
    measure_matmul_share: bool = False,
) -> list[dict]:
    """Time every `(model, variant)` of `cases` on `workload` in turn with a ceiling GEMM per dtype, per mode;
    then, with `measure_memory`, each one's peak memory, and with `measure_matmul_share`, an S-LSTM's share of time in
    matrix products (`matmul_time_share`; both not for `torch.compile` on CPU, which the profiler does not follow).

    Returns one row per case and mode (the CSV columns of `speed_report.FIELDS` without the machine, the ceiling and
    the peaks)."""
    models = [TimedModel(name, variant, workload, device) for name, variant in cases]
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
            element_bytes = 2 if model.variant.autocast_dtype else 4
            flops = sum(step_flops(model.config, len(b), sum(b) / len(b), mode) for b in workload.batches)
            moved = sum(
                step_bytes(model.config, len(b), sum(b) / len(b), mode, element_bytes) for b in workload.batches
            )
            interleaved = max(
                moment_ceilings[d]["gflops"] for d in row_ceiling_dtypes(model.variant.name) if d in moment_ceilings
            )
            gflops = flops / median / 1e9
            rows.append(
                {
                    "model": model.name,
                    "variant": model.variant.name,
                    "batch": workload.batch,
                    "length": workload.length,
                    "mode": mode,
                    "tokens_per_s": workload.tokens / median,
                    "median_ms": median * 1e3,
                    "runs": len(times[key]),
                    "peak_mem_mb": memory / 2**20,
                    "params": model.params,
                    "encoder_params": model.encoder_params,
                    "gflops_per_s": gflops,
                    "interleaved_ceiling_gflops_per_s": interleaved,
                    "pct_of_interleaved_ceiling": 100 * gflops / interleaved,
                    "matmul_time_share": matmul_share,
                    "data": workload.data,
                    "batches": len(workload.batches),
                    "step_implementation": model.step_implementation,
                    "gflop": flops / 1e9,
                    "gbytes": moved / 1e9,
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
        f"{row['model']:>16} {row['variant']:>26} {row['data']:>13} {row['batch']:>3}x{row['length']:<4} "
        f"{mode_label(row['mode']):>16}: "
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
