"""What the benchmark scripts of `run_scripts/benchmarks/` share; none of these modules is run on its own.

- `timing.py`: timing in turn, peak memory, the machine;
- `workloads.py`: random and real batches;
- `timed_models.py`: the encoders and variants timed, with `reference_slstm.py` (the plain S-LSTM the speed figures
  compare against) and `fresh_model_and_optimizer.py`;
- `flop_and_byte_counts.py`, `machine_peaks.py` (datasheet peaks, GEMM ceiling, copy bandwidth);
- `launch_counts.py`: the operators one training step launches;
- `speed_report.py`, `busy_machine_report.py`, `csv_tables.py`: printed tables, CSVs and plots.
"""
