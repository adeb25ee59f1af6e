"""The reporting half of `benchmark_speed.py`: rows printed as they are measured, CSV, Markdown tables, JSON metadata
and PNG plots.

A row is one model, variant, workload (`data`: random, or a corpus's real batches; batch, length) and mode
(`FIELDS`); the machine it ran on is in every row, so that CSVs of different machines can be merged (`--from_csv`)
without losing which CPU kind a figure belongs to. Columns are only ever appended, so that older CSVs still read.
"""

import json
import math
from pathlib import Path

from run_scripts.benchmarks.support.csv_tables import read_csv, write_csv
from run_scripts.benchmarks.support.timed_models import PAPER_SLSTM, REFERENCE_SLSTM
from run_scripts.benchmarks.support.workloads import RANDOM

MACHINE_FIELDS = ["device", "device_name", "cpu_capability", "native_bf16", "threads", "torch", "matmul_backend"]
FIELDS = MACHINE_FIELDS + [
    "model", "variant", "batch", "length", "mode", "tokens_per_s", "median_ms", "runs", "peak_mem_mb", "params",
    "encoder_params", "gflops_per_s", "ceiling_gflops_per_s", "pct_of_ceiling", "interleaved_ceiling_gflops_per_s",
    "pct_of_interleaved_ceiling", "matmul_time_share",
    # the workload, the S-LSTM step that ran, and the floor (machine_peaks.apply_peaks)
    "data", "batches", "step_implementation", "gflop", "gbytes", "peak_gflops_per_s", "peak_gb_per_s", "peak_source",
    "pct_of_peak_flops", "pct_of_peak_bandwidth", "floor_ms", "pct_of_floor",
]  # fmt: skip
TEXT_FIELDS = {"device", "device_name", "cpu_capability", "native_bf16", "torch", "matmul_backend"}
TEXT_FIELDS |= {"model", "variant", "mode", "data", "step_implementation", "peak_source"}
INTEGER_FIELDS = {"threads", "batch", "length", "runs", "params", "encoder_params", "batches"}
BASELINES = ("bilstm1", "bilstm2")  # the cuDNN BiLSTMs the S-LSTM variants are compared with


# --------------------------------------------------------------------------------------------------------------------
# Printing while measuring
# --------------------------------------------------------------------------------------------------------------------


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


# --------------------------------------------------------------------------------------------------------------------
# CSV
# --------------------------------------------------------------------------------------------------------------------


def read_speed_csv(path: Path) -> list[dict]:
    """Rows of a speed CSV (`write_csv` with `FIELDS`); columns that older runs did not write are empty (text) or NaN,
    and their workloads random ones."""
    rows = read_csv(path, FIELDS, TEXT_FIELDS, INTEGER_FIELDS)
    return [{**row, "data": row["data"] or RANDOM} for row in rows]


# --------------------------------------------------------------------------------------------------------------------
# Same-run comparisons
# --------------------------------------------------------------------------------------------------------------------


def lookup(rows: list[dict], **keys) -> dict | None:
    """The first row whose fields equal `keys`."""
    return next((row for row in rows if all(row[k] == v for k, v in keys.items())), None)


def reference_comparison(rows: list[dict]) -> list[dict]:
    """The package's paper S-LSTM against the plain reference, same variant, mode and shape (timed in turn)."""
    comparisons = []
    for ours in (row for row in rows if row["model"] == PAPER_SLSTM):
        shape = {k: ours[k] for k in ("variant", "mode", "data", "batch", "length")}
        reference = lookup(rows, model=REFERENCE_SLSTM, **shape)
        if reference:
            comparisons.append(
                {
                    **shape,
                    "package_tokens_per_s": ours["tokens_per_s"],
                    "reference_tokens_per_s": reference["tokens_per_s"],
                    "package_over_reference": ours["tokens_per_s"] / reference["tokens_per_s"],
                }
            )
    return comparisons


def autocast_comparison(rows: list[dict]) -> list[dict]:
    """bf16 autocast against float32 for the package and the reference, same mode and shape."""
    comparisons = []
    for fp32 in (row for row in rows if row["model"] in (PAPER_SLSTM, REFERENCE_SLSTM) and row["variant"] == "fp32"):
        shape = {k: fp32[k] for k in ("model", "mode", "data", "batch", "length")}
        bf16 = lookup(rows, variant="bf16", **shape)
        if bf16:
            comparisons.append(
                {
                    **shape,
                    "fp32_tokens_per_s": fp32["tokens_per_s"],
                    "bf16_tokens_per_s": bf16["tokens_per_s"],
                    "bf16_time_over_fp32": fp32["tokens_per_s"] / bf16["tokens_per_s"],
                }
            )
    return comparisons


# --------------------------------------------------------------------------------------------------------------------
# Markdown
# --------------------------------------------------------------------------------------------------------------------


def workload_label(data: str, batch: int, length: int) -> str:
    """`32×128` for a random workload, `conll2003-ner 10×24` for a corpus's real batches (mean padded width)."""
    return f"{batch}×{length}" if data == RANDOM else f"{data} {batch}×{length}"


def workloads(rows: list[dict]) -> list[tuple[str, int, int]]:
    """The `(data, batch, length)` of `rows`, random ones first."""
    return sorted({(r["data"], r["batch"], r["length"]) for r in rows}, key=lambda w: (w[0] != RANDOM, *w))


def markdown_table(header: list[str], body: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|---" * len(header) + "|"]
    return lines + ["| " + " | ".join(cells) + " |" for cells in body]


def comparison_tables(rows: list[dict]) -> list[str]:
    """Markdown: the package against the plain reference, and bf16 autocast against float32."""
    lines = []
    versus_reference = reference_comparison(rows)
    if versus_reference:
        lines += [
            "",
            f"**`{PAPER_SLSTM}` vs the plain `{REFERENCE_SLSTM}` (`run_scripts/benchmarks/support/reference_slstm.py`)**",
            "",
        ]
        header = ["variant", "mode", "batch×length", "package tokens/s", "reference tokens/s", "package / reference"]
        body = [
            [c["variant"], mode_label(c["mode"]), workload_label(c["data"], c["batch"], c["length"]),
             f"{c['package_tokens_per_s']:,.0f}",
             f"{c['reference_tokens_per_s']:,.0f}", f"{c['package_over_reference']:.2f}"]
            for c in versus_reference
        ]  # fmt: skip
        lines += markdown_table(header, body)
    bf16_vs_fp32 = autocast_comparison(rows)
    if bf16_vs_fp32:
        lines += ["", "**bf16 autocast vs float32**", ""]
        header = ["model", "mode", "batch×length", "fp32 tokens/s", "bf16 tokens/s", "bf16 time / fp32 time"]
        body = [
            [c["model"], mode_label(c["mode"]), workload_label(c["data"], c["batch"], c["length"]),
             f"{c['fp32_tokens_per_s']:,.0f}",
             f"{c['bf16_tokens_per_s']:,.0f}", f"{c['bf16_time_over_fp32']:.2f}"]
            for c in bf16_vs_fp32
        ]  # fmt: skip
        lines += markdown_table(header, body)
    return lines


def ratio_tables(rows: list[dict]) -> list[str]:
    """Markdown: the paper S-LSTM's tokens/s divided by each other model's, same variant, batch, length and mode."""
    lines = []
    for variant in sorted({r["variant"] for r in rows}):
        for mode in ("train", "forward"):
            shapes = workloads([r for r in rows if r["mode"] == mode and r["variant"] == variant])
            others = [
                m
                for m in dict.fromkeys(r["model"] for r in rows)
                if m != PAPER_SLSTM and lookup(rows, model=m, variant=variant, mode=mode)
            ]
            if not others or not lookup(rows, model=PAPER_SLSTM, variant=variant, mode=mode):
                continue
            body = []
            for model in others:
                cells = [model]
                for data, batch, length in shapes:
                    same = {"variant": variant, "mode": mode, "data": data, "batch": batch, "length": length}
                    ours, theirs = lookup(rows, model=PAPER_SLSTM, **same), lookup(rows, model=model, **same)
                    cells.append(f"{ours['tokens_per_s'] / theirs['tokens_per_s']:.2f}" if ours and theirs else "–")
                body.append(cells)
            title = f"**Speed ratio `{PAPER_SLSTM}` / model ({variant}, {mode_label(mode)}; > 1: S-LSTM faster)**"
            lines += ["", title, ""] + markdown_table(["model"] + [workload_label(*w) for w in shapes], body)
    return lines


def baseline_variant(variant: str) -> str:
    """The baselines' variant an S-LSTM variant is compared with: the same precision (`bf16+fused` -> `bf16`)."""
    return variant.split("+")[0]


def variant_tables(rows: list[dict]) -> list[str]:
    """Markdown: every variant of the paper S-LSTM (rows) against each cuDNN BiLSTM of `BASELINES` in the same
    precision, per workload (columns): S-LSTM tokens/s ÷ BiLSTM tokens/s, same run and mode."""
    lines = []
    for baseline in BASELINES:
        for mode in ("train", "forward"):
            ours = [r for r in rows if r["model"] == PAPER_SLSTM and r["mode"] == mode]
            shapes = workloads(ours)
            body = []
            for variant in dict.fromkeys(r["variant"] for r in ours):
                cells = [variant]
                for data, batch, length in shapes:
                    same = {"mode": mode, "data": data, "batch": batch, "length": length}
                    row = lookup(ours, variant=variant, **same)
                    theirs = lookup(rows, model=baseline, variant=baseline_variant(variant), **same)
                    cells.append(f"{row['tokens_per_s'] / theirs['tokens_per_s']:.2f}" if row and theirs else "–")
                body.append(cells)
            if any(cell != "–" for cells in body for cell in cells[1:]):
                title = (
                    f"**`{PAPER_SLSTM}` variants / `{baseline}` in the same precision ({mode_label(mode)}; > 1: "
                    "S-LSTM faster)**"
                )
                lines += ["", title, ""] + markdown_table(
                    ["S-LSTM variant"] + [workload_label(*w) for w in shapes], body
                )
    return lines


def value_table(rows: list[dict], mode: str, variant: str, key: str, fmt) -> list[str]:
    """Markdown: `key` of every model (rows) at every shape (columns); empty when nothing was measured."""
    selected = [r for r in rows if r["mode"] == mode and r["variant"] == variant]
    shapes = workloads(selected)
    if not shapes or all(math.isnan(r[key]) for r in selected):
        return []
    body = []
    for model in dict.fromkeys(r["model"] for r in selected):
        cells = [model, f"{lookup(selected, model=model)['encoder_params'] / 1e6:.2f}M"]
        for data, batch, length in shapes:
            row = lookup(selected, model=model, data=data, batch=batch, length=length)
            cells.append(fmt(row[key]) if row and not math.isnan(row[key]) else "–")
        body.append(cells)
    return markdown_table(["model", "params (encoder)"] + [workload_label(*w) for w in shapes], body)


def machine_line(machine: dict) -> str:
    native = {True: "yes", False: "no"}.get(machine.get("native_bf16"), "?")
    return (
        f"{machine.get('device_name', '?')} ({machine.get('device', '?')}), CPU capability "
        f"{machine.get('cpu_capability', '?')}, native bf16: {native}, {machine.get('threads', '?')} threads, "
        f"torch {machine.get('torch', '?')}, S-LSTM float32 CPU matmul backend: {machine.get('matmul_backend', '?')} "
        f"(requested: {machine.get('matmul_backend_requested', '?')})"
    )


VALUE_TABLES = (
    ("tokens_per_s", "Tokens/s", lambda v: f"{v:,.0f}"),
    ("peak_mem_mb", "Peak memory (MiB)", lambda v: f"{v:,.0f}"),
    ("pct_of_ceiling", "Matmul GFLOP/s as % of the run's ceiling", lambda v: f"{v:.0f}%"),
    ("pct_of_interleaved_ceiling", "Matmul GFLOP/s as % of the ceiling GEMM timed between the runs",
     lambda v: f"{v:.0f}%"),
    ("matmul_time_share", "Share of the time in matrix products (torch.profiler, one call)",
     lambda v: f"{100 * v:.0f}%"),
    ("floor_ms", "Floor: ms per call that its FLOPs at the peak FLOP/s or its bytes at the peak bandwidth take",
     lambda v: f"{v:.3g}"),
    ("pct_of_floor", "Share of the floor reached (floor time / measured time)", lambda v: f"{v:.1f}%"),
    ("pct_of_peak_flops", "Matmul FLOP/s as % of the peak", lambda v: f"{v:.1f}%"),
    ("pct_of_peak_bandwidth", "Minimum bytes moved per second as % of the peak bandwidth", lambda v: f"{v:.1f}%"),
)  # fmt: skip


def write_markdown(rows: list[dict], meta: dict, path: Path):
    lines = ["# Speed benchmark", "", f"Command: `{meta['command']}`  "]
    lines += [f"Machine: {machine_line(machine)}  " for machine in meta["machines"]]
    lines.append(f"Load average before / after: {meta['load_before']} / {meta['load_after']}  ")
    for dtype, ceiling in meta["ceilings"].items():
        backends = ", ".join(f"{k} {v:.0f}" for k, v in ceiling["all"].items())
        lines.append(
            f"Ceiling {dtype} ({meta['ceiling_size']}³ GEMM, GFLOP/s): **{ceiling['gflops']:.0f}** ({backends})  "
        )
    if "peaks" in meta:
        peaks = meta["peaks"]
        flops = ", ".join(f"{k} {v / 1e12:.0f}" for k, v in peaks.items() if k not in ("bandwidth", "source"))
        lines.append(
            f"Peaks ({peaks['source']}): TFLOP/s {flops}; bandwidth {peaks['bandwidth'] / 1e9:,.0f} GB/s; "
            f"copy measured in this run: {meta['bandwidth_gb_per_s']:,.0f} GB/s  "
        )
    lines += comparison_tables(rows) + variant_tables(rows) + ratio_tables(rows)
    for variant in dict.fromkeys(r["variant"] for r in rows):
        for mode in ("train", "forward"):
            for key, title, fmt in VALUE_TABLES:
                table = value_table(rows, mode, variant, key, fmt)
                if table:
                    lines += ["", f"**{title}, {variant}, {mode_label(mode)}** (batch×length)", ""] + table
    path.write_text("\n".join(lines) + "\n")


# --------------------------------------------------------------------------------------------------------------------
# Plots and the whole report
# --------------------------------------------------------------------------------------------------------------------


def points_by_length(rows: list[dict], key: str, **same) -> dict[int, float]:
    """`{length: row[key]}` of the rows whose fields equal `same`: the first row of each length (merged runs can
    repeat a shape), rows where `key` was not measured (NaN) left out."""
    points = {}
    for row in rows:
        if all(row[field] == value for field, value in same.items()) and not math.isnan(row[key]):
            points.setdefault(row["length"], row[key])
    return points


def write_plots(rows: list[dict], prefix: Path) -> list[Path]:
    """Tokens/s and peak memory against length, one panel per variant, mode and batch size, for variants measured for
    more than one model (the others are in the tables)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in rows if r["data"] == RANDOM]  # lengths on the x axis: the real batches are in the tables
    combos = sorted(
        combo
        for combo in {(r["variant"], r["mode"]) for r in rows}
        if len({r["model"] for r in rows if (r["variant"], r["mode"]) == combo}) > 1
    )
    batches = sorted({r["batch"] for r in rows})
    if not combos:
        return []
    written = []
    for key, label, suffix in (
        ("tokens_per_s", "tokens/s", "throughput"),
        ("peak_mem_mb", "peak memory (MiB)", "memory"),
    ):
        if all(math.isnan(r[key]) for r in rows):  # e.g. memory not measured
            continue
        figure, axes = plt.subplots(
            len(combos), len(batches), figsize=(5 * len(batches), 3.6 * len(combos)), squeeze=False
        )
        for (variant, mode), panel_row in zip(combos, axes):
            for batch, axis in zip(batches, panel_row):
                for model in dict.fromkeys(r["model"] for r in rows):
                    points = points_by_length(rows, key, model=model, variant=variant, mode=mode, batch=batch)
                    if points:
                        style = "-o" if model.startswith("slstm") else "--s"
                        axis.plot(*zip(*sorted(points.items())), style, label=model, markersize=3)
                axis.set_xscale("log", base=2)
                axis.set_yscale("log")
                axis.set_xlabel("length (tokens)")
                axis.set_ylabel(label)
                axis.set_title(f"{variant}, {mode_label(mode)}, batch {batch}", fontsize=9)
                axis.grid(True, which="both", alpha=0.3)
                if axis.lines:
                    axis.legend(fontsize=6, loc="best")
        figure.tight_layout()
        path = prefix.parent / f"{prefix.name}_{suffix}.png"
        figure.savefig(path, dpi=90)
        plt.close(figure)
        written.append(path)
    return written


SERIES_COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#bcbd22", "#17becf"]
"""One colour per series of the docs' plots (matplotlib's tab10 without its grey, which the grid and axes use), the same
model in the same colour in every panel."""


def save_small_png(figure, path: Path, dpi: int = 72) -> Path:
    """`figure` as a PNG of at most 128 colours (Pillow's median cut): a third of the bytes of matplotlib's own PNG,
    the same picture to the eye."""
    from io import BytesIO

    from PIL import Image

    buffer = BytesIO()
    figure.savefig(buffer, format="png", dpi=dpi)
    Image.open(buffer).convert("RGB").quantize(colors=128, method=Image.Quantize.MEDIANCUT).save(path, optimize=True)
    return path


LENGTH_PLOT_STEPS = {"eager": "readable step", "fused+graphs": "fused step + CUDA graphs"}
"""The S-LSTM step variants drawn beside the package's default (`slstm`) in the length plot, with their labels."""


def length_plot_series(row: dict) -> tuple[str, str] | None:
    """`(precision, series label)` of a row in the length plot: every model in `fp32`/`bf16`, and the S-LSTM's step
    variants of `LENGTH_PLOT_STEPS` (`bf16+fused+graphs` -> `slstm, fused step + CUDA graphs`); None for the rest."""
    precision, _, step = row["variant"].partition("+")
    if precision not in ("fp32", "bf16"):
        return None
    if not step:
        return precision, row["model"]
    return (precision, f"{row['model']}, {LENGTH_PLOT_STEPS[step]}") if step in LENGTH_PLOT_STEPS else None


def write_length_plot(rows: list[dict], path: Path, batch: int = 32) -> Path:
    """Training tokens/s against sentence length (random batches of `batch` sentences): one panel per machine and
    precision (fp32, bf16), one line per model and S-LSTM step variant (`length_plot_series`; S-LSTMs solid,
    baselines dashed), log scales; a PNG small enough for the docs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in rows if (r["data"], r["mode"], r["batch"]) == (RANDOM, "train", batch)]
    series_of = {id(r): length_plot_series(r) for r in rows}
    rows = [r for r in rows if series_of[id(r)] is not None]
    panels = sorted({(r["device_name"], series_of[id(r)][0]) for r in rows}, key=lambda p: (p[0], p[1] != "fp32"))
    colors = dict(zip(sorted({series_of[id(r)][1] for r in rows}), SERIES_COLORS, strict=False))
    columns = 2
    figure, axes = plt.subplots(
        math.ceil(len(panels) / columns), columns, figsize=(9, 3 * math.ceil(len(panels) / columns)), squeeze=False
    )
    for (device_name, precision), axis in zip(panels, axes.flat):
        for label, color in colors.items():
            points = {}
            for row in rows:
                if row["device_name"] == device_name and series_of[id(row)] == (precision, label):
                    points.setdefault(row["length"], row["tokens_per_s"])
            if points:
                style = "-o" if label.startswith("slstm") else "--s"
                axis.plot(*zip(*sorted(points.items())), style, color=color, label=label, markersize=5, linewidth=2)
        axis.set_xscale("log", base=2)
        axis.set_yscale("log")
        axis.set_xlabel("sentence length (tokens)")
        axis.set_ylabel("training tokens/s")
        axis.set_title(f"{device_name}, {precision}, batch {batch}", fontsize=8)
        axis.grid(True, which="both", alpha=0.3)
        axis.legend(fontsize=6, loc="best")
    for axis in list(axes.flat)[len(panels) :]:
        axis.set_visible(False)
    figure.tight_layout()
    save_small_png(figure, path)
    plt.close(figure)
    return path


def write_report(rows: list[dict], meta: dict, output_dir: Path, stem: str, plots: bool = True):
    """`<stem>.csv`, `.md`, `.json` (the metadata and both comparisons) and, with `plots`, `<stem>_*.png`."""
    output_dir.mkdir(parents=True, exist_ok=True)
    meta = {
        **meta,
        "reference_comparison": reference_comparison(rows),
        "autocast_comparison": autocast_comparison(rows),
    }
    write_csv(rows, output_dir / f"{stem}.csv", FIELDS)
    write_markdown(rows, meta, output_dir / f"{stem}.md")
    (output_dir / f"{stem}.json").write_text(json.dumps(meta, indent=2) + "\n")
    if plots and rows:
        write_plots(rows, output_dir / stem)


def read_runs(paths: list[Path]) -> tuple[list[dict], dict]:
    """Rows and merged metadata of earlier runs (`<name>.csv` with its `<name>.json`); per dtype the best ceiling."""
    rows, meta = [], {"command": [], "machines": [], "ceilings": {}}
    for path in paths:
        rows += read_speed_csv(path)
        part = json.loads(path.with_suffix(".json").read_text())
        meta["command"].append(part["command"])
        for machine in part.get("machines", [{k: part[k] for k in ("device_name", "threads", "torch") if k in part}]):
            if machine not in meta["machines"]:
                meta["machines"].append(machine)
        meta.setdefault("load_before", part.get("load_before", "?"))
        meta["load_after"] = part.get("load_after", "?")
        meta["ceiling_size"] = part.get("ceiling_size", "?")
        for dtype, ceiling in part["ceilings"].items():
            if dtype not in meta["ceilings"] or ceiling["gflops"] > meta["ceilings"][dtype]["gflops"]:
                meta["ceilings"][dtype] = ceiling
    meta["command"] = "`; `".join(meta["command"])
    return rows, meta
