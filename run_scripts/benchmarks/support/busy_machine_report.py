"""The reporting half of `benchmark_busy_machine.py`: the names of machine states and thread settings, its CSV and its
bar plot (also drawn by `docs_plots.py` from the CSVs in docs/benchmarks/).

`results` maps `(busy cores, setting)` to `{"median_s", "steps", "threads"}`: the median seconds per training step,
the steps timed and the thread count the setting ran with.
"""

from pathlib import Path

from run_scripts.benchmarks.support.csv_tables import read_csv, write_csv
from run_scripts.benchmarks.support.speed_report import SERIES_COLORS, save_small_png

CSV_FIELDS = ["busy_cores", "setting", "median_ms", "steps", "threads"]


def state_name(busy: int) -> str:
    return "idle" if busy == 0 else f"{busy} core{'s' if busy > 1 else ''} busy"


def setting_name(setting: str) -> str:
    names = {"default": "PyTorch default", "passive": "default, OMP_WAIT_POLICY=PASSIVE", "auto": "--threads auto"}
    return names.get(setting, f"{setting} thread{'s' if setting != '1' else ''}")


def write_results_csv(results: dict, path: Path) -> None:
    """One row per `(busy cores, setting)` of `results`, in milliseconds."""
    rows = [
        {"busy_cores": busy, "setting": setting, "median_ms": result["median_s"] * 1000, **result}
        for (busy, setting), result in results.items()
    ]
    write_csv(rows, path, CSV_FIELDS)


def read_results_csv(path: Path) -> dict:
    """The `results` of `write_results_csv`'s file."""
    rows = read_csv(path, CSV_FIELDS, text_fields={"setting"}, integer_fields={"busy_cores", "steps", "threads"})
    return {
        (row["busy_cores"], row["setting"]): {
            "median_s": row["median_ms"] / 1000, "steps": row["steps"], "threads": row["threads"]
        }
        for row in rows
    }  # fmt: skip


def write_bar_plot(results: dict, path: Path) -> Path:
    """Milliseconds per training step as grouped bars: one group per machine state, one bar (and colour) per thread
    setting, `auto` labelled with the count it chose."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    states = sorted({busy for busy, _ in results})
    settings = list(dict.fromkeys(setting for _, setting in results))
    width = 0.8 / len(settings)
    figure, axis = plt.subplots(figsize=(7, 3.2))
    for index, (setting, color) in enumerate(zip(settings, SERIES_COLORS, strict=False)):
        present = [busy for busy in states if (busy, setting) in results]
        heights = [results[busy, setting]["median_s"] * 1000 for busy in present]
        offsets = [states.index(busy) + (index - (len(settings) - 1) / 2) * width for busy in present]
        bars = axis.bar(offsets, heights, width, color=color, label=setting_name(setting))
        if setting == "auto":
            axis.bar_label(bars, [f"{results[busy, setting]['threads']}" for busy in present], fontsize=7)
    axis.set_xticks(range(len(states)), [state_name(busy) for busy in states])
    axis.set_ylabel("ms per training step")
    axis.set_title("README demo model, one training step (lower is better; numbers: threads auto chose)", fontsize=8)
    axis.legend(fontsize=7, ncols=2)
    axis.grid(True, axis="y", alpha=0.3)
    figure.tight_layout()
    save_small_png(figure, path)
    plt.close(figure)
    return path
