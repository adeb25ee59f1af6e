"""The scripts around the `modeling_slstm` package, importable as `run_scripts` once the repository is installed
(`pip install -e .`): that installed package is how every script and test imports its support code (no `sys.path`
edits).

- `run_ner.py`, `run_classification.py`: the training entry points (`python`, `accelerate launch`, `torchrun`);
  `demo.sh` (the README demo) and `paper_runs.sh` (the paper's runs of docs/results.md) drive them.
- `training/`: what the entry points share: command-line arguments, data files and splits, model and tokenizer
  set-up, the `Trainer` subclass.
- `utilities/`: tag raw text, export to ONNX, prepare data, rescore predictions, summarise a run, plot weighted sums,
  the most-frequent-tag baseline.
- `benchmarks/`: speed, training throughput, accuracy suites, the classification dev study, and the plain reference
  S-LSTM that the speed figures compare against.
"""

from pathlib import Path

REPOSITORY_ROOT = Path(__file__).resolve().parent.parent
"""The checkout's root: `hub_configs/`, `docs/` and the `shared/` data beside it are found from here."""
