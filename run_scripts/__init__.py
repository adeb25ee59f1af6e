"""The scripts around the `modeling_slstm` package, importable as `run_scripts` once the repository is installed
(`pip install -e .`): that installed package is how every script and test imports its support code (no `sys.path`
edits).

- `run_ner.py`, `run_classification.py`: the training entry points (`python`, `accelerate launch`, `torchrun`);
  `demo.sh` (the README demo) and `paper_runs.py` (the paper runs, their seeds and the classification dev study of
  docs/results.md: one recipe, resumable, with their results tables) drive them.
- `training/`: what the entry points share: command-line arguments (`arguments.py`) and a fresh model's training
  recipe (`recipe.py`), data files and splits (`data.py`), logging (`logging_setup.py`), the thread count
  (`threads.py`), the model and tokenizer (`model_setup.py`, with `feature_encoder.py`), `run_ner.py`'s tag schemes
  (`tag_scheme_decisions.py`), the predicted ids kept for evaluation (`evaluation.py`), GPU batching
  (`gpu_batching.py`), resuming (`checkpoints.py`), the `Trainer` subclass (`trainer.py`) with its samplers
  (`samplers.py`) and model card (`model_card.py`).
- `utilities/`: tag raw text, export to ONNX, prepare data, rescore predictions, summarise a run, plot weighted sums,
  the most-frequent-tag baseline.
- `benchmarks/`: measurements, one entry script each: speed (`benchmark_speed.py`), training throughput, epochs, the
  CRF's share, kernel tiles, busy machines, feature-encoder cost, long documents, launch counts, and the docs' plots
  (`docs_plots.py`). `benchmarks/support/` holds what they share: timing and memory (`timing.py`), FLOP and byte
  counts (`flop_and_byte_counts.py`), device peaks and GEMM ceilings (`machine_peaks.py`), workloads
  (`workloads.py`), the timed encoders and their variants (`timed_models.py`) with the plain reference S-LSTM that
  the speed figures compare against (`reference_slstm.py`), a fresh model and its optimizer
  (`fresh_model_and_optimizer.py`), operator counts (`launch_counts.py`), and the reports (`speed_report.py`,
  `busy_machine_report.py`, `csv_tables.py`).
"""

from pathlib import Path

REPOSITORY_ROOT = Path(__file__).resolve().parent.parent
"""The checkout's root: `hub_configs/`, `docs/` and the `shared/` data beside it are found from here."""
