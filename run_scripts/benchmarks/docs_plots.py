#!/usr/bin/env python
"""The pictures of docs/benchmarks.md, drawn from the CSVs in docs/benchmarks/ by the benchmarks' report code:

- `tokens_per_length.png`: training tokens/s against sentence length, S-LSTM and baselines, one panel per machine
  and precision (`speed_report.write_length_plot`), from every `speed_*.csv` and `quick_*.csv`;
- `busy_machine*.png`: each busy-machine table as bars (`busy_machine_report.write_bar_plot`), one plot per
  `busy_machine*.csv`, named after it.

    python run_scripts/benchmarks/docs_plots.py
"""

from dataclasses import dataclass, field
from pathlib import Path

from run_scripts import REPOSITORY_ROOT
from run_scripts.benchmarks.support import busy_machine_report, speed_report
from run_scripts.training.arguments import parse_arguments


@dataclass
class DocsPlotsArguments:
    """Arguments of docs_plots.py."""

    benchmarks_dir: Path = field(
        default=REPOSITORY_ROOT / "docs" / "benchmarks", metadata={"help": "where the CSVs are"}
    )
    output_dir: Path | None = field(default=None, metadata={"help": "where the PNGs go (default: --benchmarks_dir)"})


def main(argv=None) -> list[Path]:
    args = parse_arguments(DocsPlotsArguments, argv, description=__doc__)
    source, output_dir = Path(args.benchmarks_dir), Path(args.output_dir or args.benchmarks_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    speed_files = sorted(source.glob("speed_*.csv")) + sorted(source.glob("quick_*.csv"))
    rows = [row for path in speed_files for row in speed_report.read_speed_csv(path)]
    written = [speed_report.write_length_plot(rows, output_dir / "tokens_per_length.png")]
    for path in sorted(source.glob("busy_machine*.csv")):
        results = busy_machine_report.read_results_csv(path)
        written.append(busy_machine_report.write_bar_plot(results, output_dir / f"{path.stem}.png"))
    for path in written:
        print(f"wrote {path} ({path.stat().st_size:,} bytes)")
    return written


if __name__ == "__main__":
    main()
