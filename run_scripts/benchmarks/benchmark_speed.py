#!/usr/bin/env python
"""Speed and memory of S-LSTM against a plain reference implementation and the baselines the paper compares with.

For every model and workload (a random batch of a batch size and length, or batches spread over a CoNLL-2003 NER or
movie-review training epoch as the training scripts draw and pad them, `--real_data`): forward-only
(`torch.no_grad`, eval mode) and forward+backward (training mode, the gradient of a sum over the encoder's outputs)
throughput in tokens/s (real workloads: the sentences' tokens, padding not counted), the median of timed runs after
warm-up; peak memory; parameter count; matmul GFLOP/s against the best 2048³ GEMM of the machine (PyTorch's default
backend and, for float32 on CPU, oneDNN), measured at the start and end of the run and also timed between the model
runs. All models and variants of one workload are timed in turn, so that their ratios compare the same moments of a
shared machine. On real CoNLL-2003 NER batches every encoder but the plain reference reads random characters through
the S-LSTM NER config's character CNN, the BiLSTM as the S-LSTM (`hub_configs/baselines/bilstm1-ner-crf-chars.json`).
Every row also states its floor: the time its matmul FLOPs take at the device's peak FLOP/s or the bytes it must move
at the peak bandwidth, whichever is longer (datasheet peaks for the GPUs of `machine_peaks.DEVICE_PEAKS`, else
the run's ceiling GEMM and copy bandwidth), and the share of it reached.

S-LSTM variants (`--slstm_variants`): `eager` (the readable PyTorch step), `fused` (the fused Triton step, CUDA),
`fused+graphs` (the fused step replayed from CUDA graphs, `torch.cuda.make_graphed_callables`), `fused+reduce-overhead`
(the same through `torch.compile(mode="reduce-overhead")`), `compile` (`torch.compile` of the package's choice), each
also as `bf16+<variant>`; `gpu` stands for all of these. The plain `slstm` rows are the package as a user gets it
(`step_implementation="auto"`: the fused step on a GPU).

Models (`timed_models.MODELS`): `slstm` (the paper configuration: hidden 300, embedding 300, 9 steps, window 1,
one sentence node), `slstm-reference` (the same equations and parameters written plainly, `reference_slstm.py`),
S-LSTM settings, BiLSTMs, a CNN and a Transformer. Every output records the machine: CPU model, CPU capability, native
bf16, threads, torch, and the S-LSTM's float32 CPU matmul backend (`SLSTM_MATMUL_BACKEND=auto|onednn|default` to
override it).

Examples:

    # paper S-LSTM vs the plain reference at 32x128, forward+backward, float32 and bf16 autocast, with the ceiling
    python run_scripts/benchmarks/benchmark_speed.py --quick --threads 2

    # the full CPU tables, plots and CSV in docs/benchmarks/ (about an hour)
    OMP_NUM_THREADS=1 python run_scripts/benchmarks/benchmark_speed.py --threads 1

    # the same on a GPU, written to docs/benchmarks/speed_cuda.*
    python run_scripts/benchmarks/benchmark_speed.py --device cuda

    # the fused-step variants on a GPU, also on real CoNLL-2003 and movie-review batches of 10 and 32 sentences
    python run_scripts/benchmarks/benchmark_speed.py --device cuda --models slstm bilstm1 bilstm2 --batch_sizes 32 \
        --lengths 16 32 64 128 512 --slstm_variants gpu --slstm_variant_lengths 32 512 \
        --real_data conll2003-ner movie-review --data_dir ../shared/data

    # merge earlier runs into one report, measuring nothing
    python run_scripts/benchmarks/benchmark_speed.py --from_csv docs/benchmarks/speed_cuda*.csv --name speed_cuda
"""

import os
import statistics
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

from modeling_slstm.configuration_slstm import SLSTMConfig
from run_scripts import REPOSITORY_ROOT
from run_scripts.benchmarks.support.flop_and_byte_counts import step_bytes, step_flops
from run_scripts.benchmarks.support.machine_peaks import (
    apply_ceilings,
    apply_peaks,
    ceiling_calls,
    ceiling_gemm_dtypes,
    ceilings_from_times,
    measure_bandwidth,
    measure_ceilings,
    row_ceiling_dtypes,
    run_peaks,
)
from run_scripts.benchmarks.support.speed_report import (
    MACHINE_FIELDS,
    comparison_tables,
    machine_line,
    matmul_share_text,
    mode_label,
    print_row,
    read_runs,
    write_report,
)
from run_scripts.benchmarks.support.timed_models import (
    GPU_SLSTM_VARIANTS,
    MODELS,
    PAPER_SLSTM,
    REFERENCE_SLSTM,
    VARIANTS,
    TimedModel,
    Variant,
    skip_reason,
)
from run_scripts.benchmarks.support.timing import (
    Timing,
    machine_info,
    matmul_time_share,
    peak_memory_bytes,
    time_interleaved,
)
from run_scripts.benchmarks.support.workloads import (
    CORPORA,
    NER_CORPUS,
    RANDOM,
    Workload,
    random_workload,
    real_workloads,
)
from run_scripts.training.arguments import check_choices, parse_arguments

MODES = ("forward", "train")
QUICK_SLSTM_VARIANTS = ("compile", "bf16+compile")


@dataclass
class SpeedArguments:
    """Arguments of benchmark_speed.py (each also accepted with dashes: `--batch-sizes`, `--no-plots`, ...)."""

    quick: bool = field(
        default=False,
        metadata={
            "help": "paper S-LSTM and the plain reference at 32x128, fp32 and bf16 (overrides the shape options)"
        },
    )
    models: list[str] = field(default_factory=lambda: list(MODELS), metadata={"help": f"among {', '.join(MODELS)}"})
    batch_sizes: list[int] = field(default_factory=lambda: [8, 32])
    lengths: list[int] = field(default_factory=lambda: [16, 32, 64, 128, 256, 512])
    modes: list[str] | None = field(
        default=None, metadata={"help": f"among {', '.join(MODES)} (default: both; with --quick: train)"}
    )
    variants: list[str] = field(
        default_factory=lambda: ["fp32", "bf16"],
        metadata={"help": f"every model in these variants, among {', '.join(VARIANTS)} (the flag alone: none)"},
    )
    slstm_variants: list[str] | None = field(
        default=None,
        metadata={
            "help": "extra variants for the paper S-LSTM only (default: compile checkpoint; with --quick: none, and "
            "only compile / bf16+compile are accepted; the flag alone: none)"
        },
    )
    slstm_variant_lengths: list[int] = field(
        default_factory=lambda: [128, 512],
        metadata={"help": "random lengths of the --slstm_variants (they also run on every real workload)"},
    )
    real_data: list[str] = field(
        default_factory=list,
        metadata={"help": f"real training batches of these corpora, among {', '.join(CORPORA)} (needs --data_dir)"},
    )
    data_dir: Path | None = field(
        default=None,
        metadata={"help": "the shared data folder (conll2003/, movie_review/); missing: real data skipped"},
    )
    real_batch_sizes: list[int] = field(
        default_factory=lambda: [10, 32], metadata={"help": "batch sizes of the real batches (the paper's is 10)"}
    )
    real_batches: int = field(default=16, metadata={"help": "batches of an epoch per real workload (one timed call)"})
    device: str = field(default="cpu", metadata={"help": "torch device, e.g. cpu or cuda"})
    threads: int | None = field(default=None, metadata={"help": "torch.set_num_threads (default: torch's choice)"})
    warmup: int = field(default=1, metadata={"help": "untimed rounds first"})
    repeats: int = field(default=3, metadata={"help": "timed rounds at least"})
    min_time: float = field(default=1.0, metadata={"help": "keep timing until this many seconds are spent per shape"})
    max_repeats: int = field(default=20, metadata={"help": "timed rounds at most"})
    time_once_above: float = field(
        default=60.0, metadata={"help": "a model whose call takes longer than this many seconds is timed once"}
    )
    memory: bool = field(default=True, metadata={"help": "measure peak memory (one more call per row; --quick: no)"})
    fused_in_interpreter: bool = field(
        default=False,
        metadata={
            "help": "on a CPU with TRITON_INTERPRET=1, run the fused step's variants in Triton's interpreter: for "
            "their peak memory (their times are the interpreter's)"
        },
    )
    matmul_share: bool = field(
        default=False,
        metadata={
            "help": "profile one more call per S-LSTM row (CPU) for the share of its time in matrix products, and "
            "print the share of the ceiling it could reach with everything else free (--quick: yes)"
        },
    )
    max_tokens: int | None = field(default=None, metadata={"help": "skip shapes with more tokens than this"})
    ceiling_size: int = field(default=2048, metadata={"help": "matrix size of the ceiling GEMM"})
    output_dir: Path = field(default=REPOSITORY_ROOT / "docs" / "benchmarks")
    name: str | None = field(default=None, metadata={"help": "file name stem (default: speed_<device>[_quick])"})
    no_plots: bool = field(default=False, metadata={"help": "write no PNG plots"})
    from_csv: list[Path] | None = field(
        default=None,
        metadata={"help": "measure nothing: merge these CSVs (and their .json metadata) into one report named --name"},
    )

    def __post_init__(self):
        if self.quick:
            self.models, self.batch_sizes, self.lengths = [PAPER_SLSTM, REFERENCE_SLSTM], [32], [128]
            self.variants, self.slstm_variant_lengths = ["fp32", "bf16"], [128]
            self.slstm_variants = [v for v in self.slstm_variants or [] if v in QUICK_SLSTM_VARIANTS]
            self.modes = self.modes or ["train"]
            self.memory = False
            self.matmul_share = True
        self.modes = self.modes or list(MODES)
        if self.slstm_variants is None:
            self.slstm_variants = ["compile", "checkpoint"]
        if "gpu" in self.slstm_variants:
            at = self.slstm_variants.index("gpu")
            self.slstm_variants[at : at + 1] = GPU_SLSTM_VARIANTS
        check_choices("models", self.models, MODELS)
        check_choices("real_data", self.real_data, CORPORA)
        check_choices("modes", self.modes, MODES)
        check_choices("variants", self.variants, VARIANTS)
        check_choices("slstm_variants", self.slstm_variants, VARIANTS)
        self.output_dir = Path(self.output_dir)
        self.from_csv = [Path(path) for path in self.from_csv] if self.from_csv else None


def parse_args(argv=None) -> SpeedArguments:
    return parse_arguments(
        SpeedArguments, argv, description=__doc__, allow_empty=["variants", "slstm_variants", "real_data"]
    )


def plan(args: SpeedArguments, device: torch.device) -> dict[Workload, list]:
    """`{workload: [(model, variant), ...]}`: what is timed together on each workload, random ones first."""
    shapes = {}

    def add(model, variant_key, workload):
        variant = VARIANTS[variant_key]
        cases = shapes.setdefault(workload, [])
        fits = (
            not args.max_tokens
            or max(len(b) * w for b, w in zip(workload.batches, workload.widths)) <= args.max_tokens
        )
        if fits and all((model, variant.name) != (m, v.name) for m, v in cases):
            cases.append((model, variant))

    runnable = set()
    for key in dict.fromkeys(args.variants + args.slstm_variants):
        reason = skip_reason(VARIANTS[key], device, args.fused_in_interpreter)
        if reason:
            print(f"skipping {key}: {reason}", flush=True)
        else:
            runnable.add(key)
    random = [random_workload(batch, length) for batch in args.batch_sizes for length in args.lengths]
    real = real_workloads(args.data_dir, args.real_data, args.real_batch_sizes, args.real_batches, device)
    for key in (v for v in args.variants if v in runnable):
        for workload in random + real:
            for model in args.models:
                add(model, key, workload)
    if PAPER_SLSTM in args.models:
        variant_workloads = [w for w in random if w.length in args.slstm_variant_lengths] + real
        for key in (v for v in args.slstm_variants if v in runnable):
            for workload in variant_workloads:
                add(PAPER_SLSTM, key, workload)
    return {w: cases for w, cases in sorted(shapes.items(), key=lambda item: item[0].sort_key()) if cases}


def reads_characters(name: str, workload: Workload) -> bool:
    """Whether model `name` reads characters on `workload`: on real CoNLL-2003 NER batches every encoder but the
    plain reference has the S-LSTM NER config's character CNN, the BiLSTM as the S-LSTM, so that the NER rows compare
    like for like (the reference has none)."""
    return workload.data == NER_CORPUS and name != REFERENCE_SLSTM


def first_call_runs(model: TimedModel, mode: str) -> bool:
    """Calls `model` once in `mode` (the first warm-up call); False, saying why, where it cannot run here."""
    reason = model.failure(mode)
    if reason:
        print(f"skipping {model.name} {model.variant.name} {mode_label(mode)}: {reason}", flush=True)
    return reason is None


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
    models = [
        TimedModel(name, variant, workload, device, reads_characters(name, workload)) for name, variant in cases
    ]
    dtypes = ceiling_gemm_dtypes(device, {m.variant.autocast_dtype for m in models} - {None})
    ceilings = ceiling_calls(device, dtypes, ceiling_size)
    rows = []
    for mode in modes:
        timed = [m for m in models if mode in m.variant.modes and first_call_runs(m, mode)]
        if not timed:
            continue
        calls = {f"{m.name} {m.variant.name}": m.call_for(mode) for m in timed}
        # `first_call_runs` was the first warm-up call; torch.compile needs two more to compile the forward and the backward.
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


def load_average() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "?"


def print_summary(rows: list[dict]):
    print("\n".join(comparison_tables(rows)))
    for row in rows:
        if row["model"] == PAPER_SLSTM and (row["data"], row["batch"], row["length"]) == (RANDOM, 32, 128):
            print(
                f"S-LSTM paper config, 32x128, {row['variant']}, {mode_label(row['mode'])}: "
                f"{row['tokens_per_s']:,.0f} tokens/s, {row['gflops_per_s']:.0f} GFLOP/s = "
                f"{row['pct_of_ceiling']:.0f}% of the {row['ceiling_gflops_per_s']:.0f} GFLOP/s ceiling "
                f"({row['pct_of_interleaved_ceiling']:.0f}% "
                f"of {row['interleaved_ceiling_gflops_per_s']:.0f} GFLOP/s timed between the runs)"
                + matmul_share_text(row)
            )


def complete_rows(measured: list[dict], machine: dict, meta: dict) -> list[dict]:
    """`measured` rows with the machine's fields, the ceilings of `meta` and the peaks (its `peaks`, set here: the
    datasheet's or the measured ceilings and copy bandwidth), ready for the report."""
    apply_ceilings(measured, meta["ceilings"])
    meta["peaks"] = run_peaks(machine["device_name"], meta["ceilings"], meta["bandwidth_gb_per_s"] * 1e9)
    apply_peaks(measured, meta["peaks"])
    return [{**{k: machine[k] for k in MACHINE_FIELDS}, **row} for row in measured]


def main(argv=None) -> list[dict]:
    args = parse_args(argv)
    if args.from_csv:
        rows, meta = read_runs(args.from_csv)
        apply_ceilings(rows, meta["ceilings"])
        stem = args.name or "speed_merged"
        write_report(rows, meta, args.output_dir, stem, plots=not args.no_plots)
        print(f"merged {len(rows)} rows into {args.output_dir / stem}.{{csv,md,json}}")
        return rows

    device = torch.device(args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    machine = machine_info(device)
    command = ["python", "run_scripts/benchmarks/benchmark_speed.py", *(argv if argv is not None else sys.argv[1:])]
    meta = {"command": " ".join(command), "machines": [machine], "load_before": load_average(), "load_after": "?"}
    print(f"{machine_line(machine)}; load average {meta['load_before']}", flush=True)

    shapes = plan(args, device)
    for workload, cases in shapes.items():
        print(f"plan {workload.label()}: {', '.join(f'{model} {variant.name}' for model, variant in cases)}")
    autocast_dtypes = {v.autocast_dtype for cases in shapes.values() for _, v in cases} - {None}
    dtypes = ceiling_gemm_dtypes(device, autocast_dtypes)
    ceilings = measure_ceilings(device, dtypes, args.ceiling_size)
    for dtype, ceiling in ceilings.items():
        print(f"ceiling {dtype}: {ceiling['gflops']:.0f} GFLOP/s ({ceiling['all']})", flush=True)
    bandwidth = measure_bandwidth(device, 256 if device.type == "cuda" else 64)  # both far beyond the caches
    print(f"copy bandwidth: {bandwidth / 1e9:,.0f} GB/s", flush=True)
    meta.update(ceiling_size=args.ceiling_size, ceilings=ceilings, bandwidth_gb_per_s=bandwidth / 1e9)
    stem = args.name or f"speed_{device.type}" + ("_quick" if args.quick else "")
    timing = Timing(args.warmup, args.repeats, args.min_time, args.max_repeats, args.time_once_above)
    measured = []
    for workload, cases in shapes.items():
        measured += measure_shape(
            cases, workload, args.modes, device, timing, args.ceiling_size, args.memory, args.matmul_share
        )
        # The report so far after every workload: a run stopped by a time limit keeps what it measured.
        write_report(complete_rows(measured, machine, meta), meta, args.output_dir, stem, plots=False)
    # The ceiling again at the end: the better of the two is the machine's capability, not a noisy moment.
    for dtype, after in measure_ceilings(device, dtypes, args.ceiling_size).items():
        ceilings[dtype] = max(ceilings[dtype], after, key=lambda ceiling: ceiling["gflops"])
    meta["load_after"] = load_average()
    rows = complete_rows(measured, machine, meta)
    write_report(rows, meta, args.output_dir, stem, plots=not args.no_plots)
    print_summary(rows)
    print(f"wrote {args.output_dir / stem}.{{csv,md,json}} (load average after: {meta['load_after']})")
    return rows


if __name__ == "__main__":
    main()
