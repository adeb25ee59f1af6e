#!/usr/bin/env python
"""Speed and memory of S-LSTM against the baselines the paper compares with (issue 4; issue 2's efficiency figure).

For every model, batch size and length: forward-only (inference, `torch.no_grad`, eval mode) and forward+backward
(training mode, the gradient of a sum over the encoder's outputs) throughput in tokens/s (median of repeated timed runs
after warm-up), peak memory, parameter count, and the achieved matmul GFLOP/s against the machine's ceiling measured in
the same run: the faster of `torch.mm` (MKL on CPU) and a oneDNN linear (`torch.utils.mkldnn`) on 2048x2048x2048 float32
(bfloat16 `torch.mm` for bfloat16 rows; cuBLAS `torch.mm` on a GPU).

Absolute times depend on the machine and on whatever else runs on it: the headline is the ratio S-LSTM / baseline
measured in the same run (printed, and written to the Markdown report).

Peak memory: CPU, the peak of bytes held by PyTorch's allocator during one step, above what was held before it
(from `torch.profiler`'s memory events); CUDA, `torch.cuda.max_memory_allocated` minus the memory allocated before.

Examples:

    # issue 2: paper configuration, batch 32 x length 128, forward+backward tokens/s and GFLOP/s vs the ceiling
    python run_scripts/benchmark_speed.py --quick

    # the full CPU table, plots and CSV in docs/benchmarks/ (about an hour on 2 cores)
    OMP_NUM_THREADS=2 python run_scripts/benchmark_speed.py

    # the same on a GPU, written to docs/benchmarks/speed_cuda.*
    python run_scripts/benchmark_speed.py --device cuda
"""

import csv
import json
import math
import os
import platform
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from script_arguments import check_choices, parse_arguments

from modeling_slstm.configuration_baselines import BaselineEncoderConfig
from modeling_slstm.configuration_slstm import SLSTMConfig
from modeling_slstm.modeling_baselines import BaselineModel
from modeling_slstm.modeling_slstm import SLSTMModel

VOCAB_SIZE = 10000
DEFAULT_BATCH_SIZES = (8, 32)
DEFAULT_LENGTHS = (16, 32, 64, 128, 256, 512)
CEILING_SIZE = 2048


# --------------------------------------------------------------------------------------------------------------------
# Models
# --------------------------------------------------------------------------------------------------------------------


def slstm_config(**overrides) -> SLSTMConfig:
    """Paper configuration (hidden 300, embedding 300, 9 steps, window 1, one sentence node), with overrides."""
    settings = {"vocab_size": VOCAB_SIZE, "embedding_dim": 300, "hidden_size": 300, "num_steps": 9, "window_size": 1}
    settings.update(overrides)
    return SLSTMConfig(**settings)


def baseline_config(encoder_type: str, num_layers: int, **overrides) -> BaselineEncoderConfig:
    settings = {
        "encoder_type": encoder_type,
        "num_layers": num_layers,
        "vocab_size": VOCAB_SIZE,
        "embedding_dim": 300,
        "hidden_size": 300,
    }
    settings.update(overrides)
    return BaselineEncoderConfig(**settings)


# BiLSTMs have 300 units per direction (hidden_size 600), as the paper's BiLSTM baselines (its Table 3 parameter
# counts); the Transformer has 5 layers of width 300 (6 heads, feed-forward 600), the S-LSTM's encoder parameter count.
MODELS = {
    "slstm": lambda: slstm_config(),
    "slstm-steps5": lambda: slstm_config(num_steps=5),
    "slstm-window2": lambda: slstm_config(window_size=2),
    "slstm-hidden150": lambda: slstm_config(hidden_size=150),
    "bilstm1": lambda: baseline_config("bilstm", 1, hidden_size=600),
    "bilstm2": lambda: baseline_config("bilstm", 2, hidden_size=600),
    "bilstm3": lambda: baseline_config("bilstm", 3, hidden_size=600),
    "cnn3": lambda: baseline_config("cnn", 3, kernel_size=3),
    "transformer5": lambda: baseline_config("transformer", 5, num_attention_heads=6, intermediate_size=600),
}
DEFAULT_MODELS = tuple(MODELS)
QUICK_EXTRA_VARIANTS = ("compile", "bf16+compile")
PAPER_SLSTM = "slstm"
HEADLINE_BASELINES = ("bilstm1", "bilstm2", "bilstm3", "cnn3", "transformer5")


def build_model(name: str):
    config = MODELS[name]()
    torch.manual_seed(0)
    return SLSTMModel(config) if isinstance(config, SLSTMConfig) else BaselineModel(config)


def count_parameters(model) -> tuple[int, int]:
    """(all parameters, parameters outside the word embeddings)."""
    total = sum(p.numel() for p in model.parameters())
    return total, total - model.get_input_embeddings().weight.numel()


# --------------------------------------------------------------------------------------------------------------------
# FLOP counts (matmul FLOPs, 2 per multiply-add; elementwise work is not counted)
# --------------------------------------------------------------------------------------------------------------------


def slstm_forward_flops(config: SLSTMConfig, batch: int, length: int) -> float:
    r"""
    Matmul FLOPs of one S-LSTM forward pass over `batch` sentences of `length` tokens (2 FLOPs per multiply-add).

    Per token, once: the input term `U x_i`, `2·E·(G+1)·H` with `G` gate/content blocks. Per token and step: the window
    term `W ξ_i`, `2·(2w+1)·H·C·H` with `C` context blocks (`2w+1` window gates, `K` sentence gates, the content gate,
    the output gate and the content: 7 for w=1, K=1), and the sentence node's per-word forget gate `U_f h_i`,
    `2·H·K·H`. Per sentence and step (small): `V g` (`2·K·H·C·H`), the sentence gates (`2·(K+1)·H·(1+o)·K·H`) and
    `W_f g` (`2·(K·H)²`). Forward+backward is counted as 3x forward (two matmuls of the same size per forward matmul).
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
    if config.encoder_type == "bilstm":
        units = hidden // 2
        flops = 0.0
        for layer in range(layers):
            width = embedding if layer == 0 else hidden
            flops += 2 * 2.0 * tokens * 4 * units * (width + units)  # two directions, 4 gates, W x + U h
        return flops
    if config.encoder_type == "cnn":
        return sum(
            2.0 * tokens * config.kernel_size * (embedding if layer == 0 else hidden) * hidden
            for layer in range(layers)
        )
    # transformer: input projection, then per layer QKV + output projections, attention scores and mixing, FFN
    per_layer = 2.0 * tokens * 4 * hidden * hidden + 2 * 2.0 * batch * length * length * hidden
    per_layer += 2 * 2.0 * tokens * hidden * config.intermediate_size
    return 2.0 * tokens * embedding * hidden + layers * per_layer


def forward_flops(config, batch: int, length: int) -> float:
    if isinstance(config, SLSTMConfig):
        return slstm_forward_flops(config, batch, length)
    return baseline_forward_flops(config, batch, length)


def step_flops(config, batch: int, length: int, mode: str) -> float:
    """FLOPs of one timed step: forward, or forward+backward (3x forward)."""
    return forward_flops(config, batch, length) * (3.0 if mode == "train" else 1.0)


# --------------------------------------------------------------------------------------------------------------------
# Timing and memory
# --------------------------------------------------------------------------------------------------------------------


def synchronize(device: torch.device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_call(fn, device, warmup: int, repeats: int, min_time: float, max_repeats: int, between=None) -> list[float]:
    """Wall-clock seconds of `repeats` (or more, until `min_time` is spent, at most `max_repeats`) calls after
    `warmup` untimed calls. `between`, if given, is called (untimed) before every timed call."""
    for _ in range(warmup):
        fn()
    synchronize(device)
    times = []
    started = time.perf_counter()
    while len(times) < repeats or (time.perf_counter() - started < min_time and len(times) < max_repeats):
        if between is not None:
            between()
        start = time.perf_counter()
        fn()
        synchronize(device)
        times.append(time.perf_counter() - start)
    return times


class InterleavedCeiling:
    """The ceiling matmul (the backend that won at start-up), timed once before every timed model call: on a shared
    machine the load changes from minute to minute, and this makes `% of ceiling` a same-moment ratio."""

    def __init__(self, device: torch.device, dtype: torch.dtype, backend: str, size: int = CEILING_SIZE):
        generator = torch.Generator().manual_seed(0)
        self.device = device
        a = torch.randn(size, size, generator=generator).to(device=device, dtype=dtype)
        b = torch.randn(size, size, generator=generator).to(device=device, dtype=dtype)
        if backend == "onednn.linear":
            from torch.utils import mkldnn as mkldnn_utils

            linear = mkldnn_utils.to_mkldnn(torch.nn.Linear(size, size, bias=False).eval())
            a_mkldnn = a.to_mkldnn()
            self.call = lambda: linear(a_mkldnn)
        else:
            self.call = lambda: torch.mm(a, b)
        self.flops = 2.0 * size**3
        self.samples = []

    def __call__(self):
        with torch.no_grad():
            synchronize(self.device)
            start = time.perf_counter()
            self.call()
            synchronize(self.device)
            self.samples.append(self.flops / (time.perf_counter() - start) / 1e9)

    def gflops(self) -> float:
        return statistics.median(self.samples) if self.samples else float("nan")


def peak_memory_bytes(fn, device: torch.device) -> int:
    """Peak allocator bytes during `fn()` above those held before it."""
    if device.type == "cuda":
        synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        fn()
        synchronize(device)
        return torch.cuda.max_memory_allocated(device) - before
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as profiler:
        fn()
    events = [e for e in profiler.profiler.kineto_results.events() if e.name() == "[memory]"]
    events.sort(key=lambda e: e.start_ns())
    current = peak = 0
    for event in events:
        if str(event.device_type()).endswith("CPU"):  # CPU allocations only
            current += event.nbytes()
            peak = max(peak, current)
    return peak


def matmul_ceiling(device: torch.device, dtype: torch.dtype, size: int = CEILING_SIZE, repeats: int = 5) -> dict:
    """GFLOP/s of a `size`³ matmul: `torch.mm` and, on CPU in float32, a oneDNN linear; the faster is the ceiling."""
    generator = torch.Generator().manual_seed(0)
    a = torch.randn(size, size, generator=generator).to(device=device, dtype=dtype)
    b = torch.randn(size, size, generator=generator).to(device=device, dtype=dtype)
    flops = 2.0 * size**3
    results = {}
    with torch.no_grad():
        times = time_call(lambda: torch.mm(a, b), device, 2, repeats, 0.0, repeats)
        results["torch.mm"] = flops / statistics.median(times) / 1e9
        if device.type == "cpu" and dtype == torch.float32 and torch.backends.mkldnn.is_available():
            from torch.utils import mkldnn as mkldnn_utils

            linear = mkldnn_utils.to_mkldnn(torch.nn.Linear(size, size, bias=False).eval())
            a_mkldnn = a.to_mkldnn()
            times = time_call(lambda: linear(a_mkldnn), device, 2, repeats, 0.0, repeats)
            results["onednn.linear"] = flops / statistics.median(times) / 1e9
    best = max(results, key=results.get)
    return {"dtype": str(dtype).replace("torch.", ""), "gflops": results[best], "backend": best, "all": results}


# --------------------------------------------------------------------------------------------------------------------
# One measurement
# --------------------------------------------------------------------------------------------------------------------


@dataclass
class Variant:
    """How the model runs: dtype (`float32`, or `bfloat16`/`float16` autocast), `torch.compile`, checkpointing."""

    name: str = "fp32"
    autocast_dtype: torch.dtype | None = None
    compile: bool = False
    checkpointing: bool = False
    modes: tuple = ("forward", "train")
    extra: dict = field(default_factory=dict)


VARIANTS = {
    "fp32": Variant("fp32"),
    "bf16": Variant("bf16", autocast_dtype=torch.bfloat16),
    "fp16": Variant("fp16", autocast_dtype=torch.float16),
    "compile": Variant("fp32+compile", compile=True),
    "bf16+compile": Variant("bf16+compile", autocast_dtype=torch.bfloat16, compile=True),
    "checkpoint": Variant("fp32+checkpoint", checkpointing=True, modes=("train",)),
}


def bf16_supported(device: torch.device) -> bool:
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return torch.backends.mkldnn.is_available() and ("avx512_bf16" in flags or "amx_bf16" in flags)


def measure(
    name: str,
    variant: Variant,
    batch: int,
    length: int,
    device: torch.device,
    args,
    ceilings: dict,
) -> list[dict]:
    config = MODELS[name]()
    model = build_model(name).to(device)
    if variant.checkpointing:  # one checkpoint per S-LSTM step (`SLSTMStateTransition` is the checkpointed layer)
        enable = getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable
        enable()
    params_total, params_encoder = count_parameters(model)
    runner = torch.compile(model) if variant.compile else model
    generator = torch.Generator().manual_seed(batch * 1000 + length)
    input_ids = torch.randint(4, VOCAB_SIZE, (batch, length), generator=generator).to(device)
    attention_mask = torch.ones(batch, length, dtype=torch.long, device=device)

    def autocast():
        return torch.autocast(
            device.type, dtype=variant.autocast_dtype or torch.float32, enabled=variant.autocast_dtype is not None
        )

    def forward_only():
        with torch.no_grad(), autocast():
            runner(input_ids=input_ids, attention_mask=attention_mask)

    def forward_backward():
        with autocast():
            outputs = runner(input_ids=input_ids, attention_mask=attention_mask)
            loss = outputs.last_hidden_state.float().sum() + outputs.pooler_output.float().sum()
        loss.backward()
        model.zero_grad(set_to_none=True)

    rows = []
    ceiling = ceilings.get("bfloat16" if variant.autocast_dtype is not None else "float32")
    for mode in variant.modes:
        if mode not in args.modes:
            continue
        model.train(mode == "train")
        fn = forward_backward if mode == "train" else forward_only
        warmup = args.warmup + (2 if variant.compile else 0)
        interleaved = None
        if ceiling and name.startswith("slstm") and not args.no_interleave:
            dtype = variant.autocast_dtype or torch.float32
            interleaved = InterleavedCeiling(device, dtype, ceiling["backend"], args.ceiling_size)
        times = time_call(fn, device, warmup, args.repeats, args.min_time, args.max_repeats, between=interleaved)
        median = statistics.median(times)
        memory = peak_memory_bytes(fn, device) if not variant.compile or device.type == "cuda" else float("nan")
        flops = step_flops(config, batch, length, mode)
        gflops = flops / median / 1e9
        rows.append(
            {
                "device": device.type,
                "model": name,
                "variant": variant.name,
                "batch": batch,
                "length": length,
                "mode": mode,
                "tokens_per_s": batch * length / median,
                "median_ms": median * 1e3,
                "min_ms": min(times) * 1e3,
                "max_ms": max(times) * 1e3,
                "runs": len(times),
                "peak_mem_mb": memory / 2**20,
                "params": params_total,
                "encoder_params": params_encoder,
                "gflop": flops / 1e9,
                "gflops_per_s": gflops,
                "ceiling_gflops_per_s": ceiling["gflops"] if ceiling else float("nan"),
                "pct_of_ceiling": 100 * gflops / ceiling["gflops"] if ceiling else float("nan"),
                "interleaved_ceiling_gflops_per_s": interleaved.gflops() if interleaved else float("nan"),
                "pct_of_interleaved_ceiling": 100 * gflops / interleaved.gflops() if interleaved else float("nan"),
            }
        )
        row = rows[-1]
        print(
            f"{name:>16} {variant.name:>16} B={batch:<3} n={length:<4} {mode:>7}: {row['tokens_per_s']:>10.0f} tok/s"
            f"  {row['median_ms']:>9.1f} ms  {row['peak_mem_mb']:>8.1f} MiB  {gflops:>7.1f} GFLOP/s"
            f" ({row['pct_of_ceiling']:.0f}% of ceiling, {row['pct_of_interleaved_ceiling']:.0f}% of interleaved)",
            flush=True,
        )
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return rows


# --------------------------------------------------------------------------------------------------------------------
# Reports
# --------------------------------------------------------------------------------------------------------------------

FIELDS = [
    "device", "model", "variant", "batch", "length", "mode", "tokens_per_s", "median_ms", "min_ms", "max_ms", "runs",
    "peak_mem_mb", "params", "encoder_params", "gflop", "gflops_per_s", "ceiling_gflops_per_s", "pct_of_ceiling",
    "interleaved_ceiling_gflops_per_s", "pct_of_interleaved_ceiling",
]  # fmt: skip


def write_csv(rows: list[dict], path: Path):
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=FIELDS)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in row.items()})


def lookup(rows, **keys):
    for row in rows:
        if all(row[k] == v for k, v in keys.items()):
            return row
    return None


def ratio_tables(rows: list[dict], reference: str = PAPER_SLSTM) -> list[str]:
    """Markdown: S-LSTM tokens/s divided by each baseline's, same variant, batch, length and mode."""
    lines = []
    for variant in sorted({r["variant"] for r in rows}):
        for mode in ("train", "forward"):
            shapes = sorted({(r["batch"], r["length"]) for r in rows if r["mode"] == mode and r["variant"] == variant})
            baselines = [
                m
                for m in dict.fromkeys(r["model"] for r in rows)
                if m != reference and lookup(rows, model=m, variant=variant, mode=mode)
            ]
            if not shapes or not baselines or not lookup(rows, model=reference, variant=variant, mode=mode):
                continue
            lines.append(
                f"\n**Speed ratio `{reference}` / model ({variant}, {mode_label(mode)}; > 1: S-LSTM faster)**\n"
            )
            lines.append("| model | " + " | ".join(f"{b}×{n}" for b, n in shapes) + " |")
            lines.append("|---" * (len(shapes) + 1) + "|")
            for model in baselines:
                cells = []
                for batch, length in shapes:
                    ours = lookup(rows, model=reference, variant=variant, mode=mode, batch=batch, length=length)
                    theirs = lookup(rows, model=model, variant=variant, mode=mode, batch=batch, length=length)
                    cells.append(f"{ours['tokens_per_s'] / theirs['tokens_per_s']:.2f}" if ours and theirs else "–")
                lines.append(f"| {model} | " + " | ".join(cells) + " |")
    return lines


def mode_label(mode: str) -> str:
    return "forward+backward" if mode == "train" else "forward only"


def value_table(rows, mode, variant, key, fmt) -> list[str]:
    shapes = sorted({(r["batch"], r["length"]) for r in rows if r["mode"] == mode and r["variant"] == variant})
    models = list(dict.fromkeys(r["model"] for r in rows if r["mode"] == mode and r["variant"] == variant))
    if not shapes:
        return []
    lines = ["| model | params (encoder) | " + " | ".join(f"{b}×{n}" for b, n in shapes) + " |"]
    lines.append("|---" * (len(shapes) + 2) + "|")
    for model in models:
        any_row = lookup(rows, model=model, mode=mode, variant=variant)
        cells = []
        for batch, length in shapes:
            row = lookup(rows, model=model, mode=mode, variant=variant, batch=batch, length=length)
            cells.append(fmt(row[key]) if row and not math.isnan(row[key]) else "–")
        lines.append(f"| {model} | {any_row['encoder_params'] / 1e6:.2f}M | " + " | ".join(cells) + " |")
    return lines


def write_markdown(rows: list[dict], meta: dict, path: Path):
    lines = [f"# Speed benchmark ({meta['device_name']})", ""]
    lines.append(f"Command: `{meta['command']}`  ")
    lines.append(
        f"Machine: {meta['device_name']}, {meta['threads']} threads, torch {meta['torch']}; "
        f"load average before / after: {meta['load_before']} / {meta.get('load_after', '?')}  "
    )
    for dtype, ceiling in meta["ceilings"].items():
        backends = ", ".join(f"{k} {v:.0f}" for k, v in ceiling["all"].items())
        lines.append(
            f"Ceiling {dtype} ({meta.get('ceiling_size', CEILING_SIZE)}³ matmul, GFLOP/s): **{ceiling['gflops']:.0f}** ({backends})  "
        )
    lines.append("")
    lines.extend(ratio_tables(rows))
    for variant in dict.fromkeys(r["variant"] for r in rows):
        for mode in ("train", "forward"):
            table = value_table(rows, mode, variant, "tokens_per_s", lambda v: f"{v:,.0f}")
            if table:
                lines += ["", f"**Tokens/s, {variant}, {mode_label(mode)}** (batch×length)", ""] + table
            table = value_table(rows, mode, variant, "peak_mem_mb", lambda v: f"{v:,.0f}")
            if table:
                lines += ["", f"**Peak memory (MiB), {variant}, {mode_label(mode)}**", ""] + table
            table = value_table(rows, mode, variant, "pct_of_ceiling", lambda v: f"{v:.0f}%")
            if table:
                lines += ["", f"**Matmul GFLOP/s as % of the ceiling, {variant}, {mode_label(mode)}**", ""] + table
            table = value_table(rows, mode, variant, "pct_of_interleaved_ceiling", lambda v: f"{v:.0f}%")
            if table and any(not math.isnan(r["pct_of_interleaved_ceiling"]) for r in rows if r["variant"] == variant):
                lines += [
                    "",
                    (
                        f"**S-LSTM GFLOP/s as % of the ceiling matmul timed between its runs, {variant}, "
                        f"{mode_label(mode)}**"
                    ),
                    "",
                ] + table
    path.write_text("\n".join(lines) + "\n")


def write_plots(rows: list[dict], prefix: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    for key, label, suffix in (
        ("tokens_per_s", "tokens/s", "throughput"),
        ("peak_mem_mb", "peak memory (MiB)", "memory"),
    ):
        # Panels compare models: a variant measured for one model only (e.g. S-LSTM + compile) is in the tables.
        combos = sorted(
            combo
            for combo in {(r["variant"], r["mode"]) for r in rows}
            if len({r["model"] for r in rows if (r["variant"], r["mode"]) == combo}) > 1
        )
        batches = sorted({r["batch"] for r in rows})
        if not combos:
            continue
        figure, axes = plt.subplots(
            len(combos), len(batches), figsize=(5 * len(batches), 3.6 * len(combos)), squeeze=False
        )
        for i, (variant, mode) in enumerate(combos):
            for j, batch in enumerate(batches):
                axis = axes[i][j]
                for model in dict.fromkeys(r["model"] for r in rows):
                    points = {}  # the first measurement of each length (merged runs can repeat a shape)
                    for r in rows:
                        same = (r["model"], r["variant"], r["mode"], r["batch"]) == (model, variant, mode, batch)
                        if same and not math.isnan(r[key]):
                            points.setdefault(r["length"], r[key])
                    if points:
                        style = "-o" if model.startswith("slstm") else "--s"
                        axis.plot(*zip(*sorted(points.items())), style, label=model, markersize=3)
                axis.set_xscale("log", base=2)
                axis.set_yscale("log")
                axis.set_xlabel("length (tokens)")
                axis.set_ylabel(label)
                axis.set_title(f"{variant}, {mode_label(mode)}, batch {batch}", fontsize=9)
                axis.grid(True, which="both", alpha=0.3)
                axis.legend(fontsize=6, loc="best")
        figure.tight_layout()
        path = prefix.parent / f"{prefix.name}_{suffix}.png"
        figure.savefig(path, dpi=90)
        plt.close(figure)
        written.append(path)
    return written


def load_average() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "?"


# --------------------------------------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------------------------------------


MODES = ("forward", "train")


@dataclass
class SpeedArguments:
    """Arguments of benchmark_speed.py (each also accepted with dashes: `--batch-sizes`, `--no-plots`, ...)."""

    quick: bool = field(default=False, metadata={"help": "issue 2: paper S-LSTM at 32x128 (fp32 and bf16) + ceiling"})
    models: list[str] = field(
        default_factory=lambda: list(DEFAULT_MODELS), metadata={"help": f"among {', '.join(MODELS)}"}
    )
    batch_sizes: list[int] = field(default_factory=lambda: list(DEFAULT_BATCH_SIZES))
    lengths: list[int] = field(default_factory=lambda: list(DEFAULT_LENGTHS))
    modes: list[str] = field(default_factory=lambda: list(MODES), metadata={"help": f"among {', '.join(MODES)}"})
    variants: list[str] = field(
        default_factory=lambda: ["fp32", "bf16"],
        metadata={
            "help": f"run every model in these variants, among {', '.join(VARIANTS)} (bf16/fp16 are skipped where "
            "unsupported; the flag alone: none)"
        },
    )
    slstm_variants: list[str] | None = field(
        default=None,
        metadata={
            "help": "extra variants for the paper S-LSTM only (default: compile checkpoint; with --quick: none, and "
            "only compile / bf16+compile are accepted; the flag alone: none)"
        },
    )
    slstm_variant_lengths: list[int] = field(default_factory=lambda: [128, 512])
    device: str = field(default="cpu", metadata={"help": "torch device, e.g. cpu or cuda"})
    threads: int | None = field(default=None, metadata={"help": "torch.set_num_threads (default: torch's choice)"})
    warmup: int = field(default=1, metadata={"help": "untimed runs first"})
    repeats: int = field(default=3, metadata={"help": "timed runs at least"})
    min_time: float = field(default=1.0, metadata={"help": "keep timing until this many seconds are spent"})
    max_repeats: int = field(default=20, metadata={"help": "timed runs at most"})
    max_tokens: int | None = field(default=None, metadata={"help": "skip shapes with more tokens than this"})
    output_dir: Path = field(default=Path(__file__).resolve().parents[1] / "docs" / "benchmarks")
    name: str | None = field(default=None, metadata={"help": "file name stem (default: speed_<device>[_quick])"})
    no_plots: bool = field(default=False, metadata={"help": "write no PNG plots"})
    ceiling_size: int = field(default=CEILING_SIZE, metadata={"help": "matrix size of the ceiling matmul"})
    no_interleave: bool = field(default=False, metadata={"help": "no ceiling matmul between S-LSTM timed runs"})
    from_csv: list[Path] | None = field(
        default=None,
        metadata={"help": "measure nothing: merge these CSVs (and their .json metadata) into one report named --name"},
    )

    def __post_init__(self):
        check_choices("models", self.models, MODELS)
        check_choices("modes", self.modes, MODES)
        check_choices("variants", self.variants, VARIANTS)
        if self.slstm_variants is not None:
            check_choices("slstm_variants", self.slstm_variants, VARIANTS)
        self.output_dir = Path(self.output_dir)
        if self.from_csv is not None:
            self.from_csv = [Path(path) for path in self.from_csv]
        if self.slstm_variants is None and not self.quick:
            self.slstm_variants = ["compile", "checkpoint"]
        if self.quick:
            self.models, self.batch_sizes, self.lengths = [PAPER_SLSTM], [32], [128]
            self.variants = ["fp32", "bf16"]
            self.slstm_variants = [v for v in self.slstm_variants or [] if v in QUICK_EXTRA_VARIANTS]
            self.slstm_variant_lengths = [128]
            self.repeats = max(self.repeats, 5)


def parse_args(argv=None) -> SpeedArguments:
    return parse_arguments(SpeedArguments, argv, description=__doc__, allow_empty=["variants", "slstm_variants"])


def read_csv(path: Path) -> list[dict]:
    integers = {"batch", "length", "runs", "params", "encoder_params"}
    text = {"device", "model", "variant", "mode"}
    with path.open() as handle:
        return [
            {k: (v if k in text else int(v) if k in integers else float(v)) for k, v in row.items()}
            for row in csv.DictReader(handle)
        ]


def merge_reports(args) -> list[dict]:
    """Merge earlier runs (e.g. fp32 and bf16 runs made separately) into one report; nothing is re-measured."""
    rows, meta = [], None
    for path in args.from_csv:
        rows += read_csv(path)
        part = json.loads(path.with_suffix(".json").read_text())
        if meta is None:
            meta = dict(part, command=[], ceilings={})
        meta["command"].append(part["command"])
        meta["load_after"] = part.get("load_after", "?")
        for dtype, ceiling in part["ceilings"].items():
            if dtype not in meta["ceilings"] or ceiling["gflops"] > meta["ceilings"][dtype]["gflops"]:
                meta["ceilings"][dtype] = ceiling
    for row in rows:  # one ceiling per dtype across the merged runs
        ceiling = meta["ceilings"].get("bfloat16" if row["variant"].startswith("bf16") else "float32")
        if ceiling:
            row["ceiling_gflops_per_s"] = ceiling["gflops"]
            row["pct_of_ceiling"] = 100 * row["gflops_per_s"] / ceiling["gflops"]
    meta["command"] = "`; `".join(meta["command"])
    stem = args.name or "speed_merged"
    args.output_dir.mkdir(parents=True, exist_ok=True)
    write_csv(rows, args.output_dir / f"{stem}.csv")
    write_markdown(rows, meta, args.output_dir / f"{stem}.md")
    (args.output_dir / f"{stem}.json").write_text(json.dumps(meta, indent=2) + "\n")
    if not args.no_plots and rows:
        write_plots(rows, args.output_dir / stem)
    print(f"merged {len(rows)} rows into {args.output_dir / stem}.{{csv,md,json}}")
    return rows


def main(argv=None) -> list[dict]:
    args = parse_args(argv)
    if args.from_csv:
        return merge_reports(args)
    device = torch.device(args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    if device.type == "cuda":
        device_name = torch.cuda.get_device_name(device)
    else:
        device_name = platform.processor() or platform.machine()
        try:
            for line in Path("/proc/cpuinfo").read_text().splitlines():
                if line.startswith("model name"):
                    device_name = line.split(":", 1)[1].strip()
                    break
        except OSError:
            pass
    meta = {
        "command": " ".join(
            ["python", "run_scripts/benchmark_speed.py", *(argv if argv is not None else sys.argv[1:])]
        ),
        "device_name": f"{device_name} ({device.type})",
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "load_before": load_average(),
        "ceiling_size": args.ceiling_size,
        "ceilings": {},
    }
    print(f"{meta['device_name']}, {meta['threads']} threads, load average {meta['load_before']}", flush=True)
    variants = [VARIANTS[v] for v in args.variants]
    extra_variants = [VARIANTS[v] for v in args.slstm_variants]
    dtypes = {torch.float32}
    for variant in variants + extra_variants:
        if variant.autocast_dtype is not None:
            dtypes.add(variant.autocast_dtype)
    for dtype in sorted(dtypes, key=str):
        if dtype == torch.bfloat16 and not bf16_supported(device):
            continue
        ceiling = matmul_ceiling(device, dtype, args.ceiling_size)
        meta["ceilings"][ceiling["dtype"]] = ceiling
        print(f"ceiling {ceiling['dtype']}: {ceiling['gflops']:.0f} GFLOP/s ({ceiling['all']})", flush=True)

    def runnable(variant):
        if variant.autocast_dtype == torch.bfloat16 and not bf16_supported(device):
            print(f"skipping {variant.name}: no bfloat16 support on this {device.type}", flush=True)
            return False
        if variant.autocast_dtype == torch.float16 and device.type == "cpu":
            print(f"skipping {variant.name}: float16 autocast is for GPUs", flush=True)
            return False
        return True

    rows = []
    for variant in filter(runnable, variants):
        for batch in args.batch_sizes:
            for length in args.lengths:
                if args.max_tokens and batch * length > args.max_tokens:
                    continue
                for name in args.models:
                    rows += measure(name, variant, batch, length, device, args, meta["ceilings"])
    if PAPER_SLSTM in args.models:
        for variant in filter(runnable, extra_variants):
            for batch in args.batch_sizes:
                for length in args.slstm_variant_lengths:
                    if not args.max_tokens or batch * length <= args.max_tokens:
                        rows += measure(PAPER_SLSTM, variant, batch, length, device, args, meta["ceilings"])
    # The ceiling again at the end: report the better of the two (the machine's capability, not a noisy moment).
    for dtype_name, before in list(meta["ceilings"].items()):
        after = matmul_ceiling(device, getattr(torch, dtype_name), args.ceiling_size)
        if after["gflops"] > before["gflops"]:
            meta["ceilings"][dtype_name] = after
    for row in rows:
        ceiling = meta["ceilings"].get("bfloat16" if row["variant"].startswith("bf16") else "float32")
        if ceiling:
            row["ceiling_gflops_per_s"] = ceiling["gflops"]
            row["pct_of_ceiling"] = 100 * row["gflops_per_s"] / ceiling["gflops"]
    meta["load_after"] = load_average()

    args.output_dir.mkdir(parents=True, exist_ok=True)
    stem = args.name or f"speed_{device.type}" + ("_quick" if args.quick else "")
    write_csv(rows, args.output_dir / f"{stem}.csv")
    write_markdown(rows, meta, args.output_dir / f"{stem}.md")
    (args.output_dir / f"{stem}.json").write_text(json.dumps(meta, indent=2) + "\n")
    if not args.no_plots and rows:
        write_plots(rows, args.output_dir / stem)
    print("\n".join(ratio_tables(rows)))
    for row in rows:
        if row["model"] == PAPER_SLSTM and row["batch"] == 32 and row["length"] == 128:
            print(
                f"S-LSTM paper config, 32x128, {row['variant']}, {mode_label(row['mode'])}: "
                f"{row['tokens_per_s']:,.0f} tokens/s, {row['gflops_per_s']:.0f} GFLOP/s = "
                f"{row['pct_of_ceiling']:.0f}% of the {row['ceiling_gflops_per_s']:.0f} GFLOP/s ceiling "
                f"({row['pct_of_interleaved_ceiling']:.0f}% of {row['interleaved_ceiling_gflops_per_s']:.0f} GFLOP/s "
                "measured between the timed runs)"
            )
    print(f"wrote {args.output_dir / stem}.{{csv,md,json}} (load average after: {meta['load_after']})")
    return rows


if __name__ == "__main__":
    main()
