"""The benchmarks' CSV files: one row per measurement, floats to six significant digits, read back typed."""

import csv
from pathlib import Path


def write_csv(rows: list[dict], path: Path, fields: list[str]) -> None:
    """`rows` under the header `fields` (keys outside `fields` are left out; floats as `%.6g`)."""
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in row.items() if k in fields})


def read_csv(path: Path, fields: list[str], text_fields: set[str], integer_fields: set[str]) -> list[dict]:
    """The rows of a file `write_csv` wrote, each with every one of `fields`: text as written, integers and floats
    parsed; a column the file lacks (written before it was added) or a value written as `nan` (not measured) reads as
    "" for text and NaN for numbers."""

    def parse(key: str, value: str | None):
        if key in text_fields:
            return value or ""
        if not value or value == "nan":
            return float("nan")
        return int(value) if key in integer_fields else float(value)

    with path.open(newline="") as handle:
        return [{key: parse(key, row.get(key)) for key in fields} for row in csv.DictReader(handle)]
