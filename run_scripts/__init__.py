"""The scripts around the `modeling_slstm` package, importable as `run_scripts` once the repository is installed
(`pip install -e .`): that installed package is how every script and test imports its support code (no `sys.path`
edits).

- `run_ner.py`, `run_classification.py`: the training entry points (`python`, `accelerate launch`, `torchrun`);
  `demo.sh` (the README demo) and `paper_runs.py` (the paper runs, their seeds and the classification dev study of
  docs/results.md: one recipe, resumable, with their results tables) drive them.
- `training/`: what the entry points share: command-line arguments (`arguments.py`) and a fresh model's training
  recipe (`recipe.py`), data files and splits (`data.py`), logging (`logging_setup.py`), the model and tokenizer
  (`model_setup.py`, with `feature_encoder.py`), resuming (`checkpoints.py`), the `Trainer` subclass (`trainer.py`)
  with its samplers (`samplers.py`) and model card (`model_card.py`).
- `utilities/`: tag raw text, export to ONNX, prepare data, rescore predictions, summarise a run, plot weighted sums,
  the most-frequent-tag baseline.
- `benchmarks/`: measurements: speed, training throughput, feature-encoder cost, long documents, and the plain
  reference S-LSTM that the speed figures compare against.
"""

from pathlib import Path

REPOSITORY_ROOT = Path(__file__).resolve().parent.parent
"""The checkout's root: `hub_configs/`, `docs/` and the `shared/` data beside it are found from here."""
