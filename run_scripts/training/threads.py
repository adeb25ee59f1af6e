"""How many threads the training scripts give PyTorch (`--threads`, `THREADS` in `demo.sh`).

PyTorch starts one intra-op thread per physical core (or `OMP_NUM_THREADS`). When other jobs keep some of those cores
busy, the threads of every parallel operator wait for the slowest of them, which shares its core, and a training step
of a small model takes several times as long as with one thread fewer. `--threads auto` (the scripts' default) counts
the usable cores that are idle over a short window and runs with that many threads, never more than PyTorch's own
default for the process, so that an idle machine keeps today's speed: the measurement of `modeling_slstm/cpu_threads.py`,
which the models' CPU inference uses too. `ThreadCountCallback` measures again during training, so that jobs that start
or end while it runs move the count too. An integer forces that many threads and measures nothing. The run's count
holds for its evaluation too: `SLSTMTrainer` sets the model's own choice (`config.inference_threads`) aside meanwhile.

OpenMP's wait policy is left as it is: `OMP_WAIT_POLICY=PASSIVE` also spares a busy core, but makes every step on an
idle machine slower (run_scripts/benchmarks/benchmark_busy_machine.py measures both). Only the intra-op pool is sized:
eager training and inference do not use the inter-op pool, which PyTorch lets a process size only once, before it is
first used.

The thread count changes the order of floating-point sums, so a run's figures move a little with it: give `--threads N`
where two runs must agree to the last digit.
"""

import logging

import torch
from transformers import TrainerCallback

from modeling_slstm.cpu_threads import TORCH_DEFAULT_THREADS, IdleCoreMonitor, measure_idle_cores
from run_scripts.training.usage_errors import UsageError

logger = logging.getLogger(__name__)

MEASUREMENT_WINDOW_S = 0.25
RECHECK_INTERVAL_S = 10.0


def parse_thread_setting(setting: str) -> int | None:
    """`--threads`: None for `auto`, else the forced thread count."""
    if setting == "auto":
        return None
    if not setting.isdigit() or int(setting) < 1:
        raise UsageError(f"--threads must be 'auto' or a positive number of threads, got {setting!r}")
    return int(setting)


def choose_threads(setting: str, limit: int | None = None) -> tuple[int, str]:
    """The thread count for `--threads setting`, with the reason in words. `auto`: the idle usable cores over
    `MEASUREMENT_WINDOW_S` (at most the cgroup quota), this process's share of them, at least 1 and at most `limit`
    (default: PyTorch's default thread count of the process)."""
    limit = TORCH_DEFAULT_THREADS if limit is None else limit
    forced = parse_thread_setting(setting)
    if forced is not None:
        return forced, f"--threads {forced}"
    if limit == 1:
        return 1, "--threads auto, PyTorch's default here is 1 (OMP_NUM_THREADS or one usable core)"
    try:
        reading = measure_idle_cores(limit, MEASUREMENT_WINDOW_S)
    except OSError:
        return limit, "--threads auto, PyTorch's default: no /proc/stat or load average to measure idle cores"
    share = f", shared by {reading.processes} processes of this run" if reading.processes > 1 else ""
    return reading.threads, (
        f"--threads auto: {reading.idle:.1f} of {reading.cores} usable cores idle {reading.how}{share}; at most {limit}"
    )


def apply_thread_setting(setting: str) -> int:
    """Sets PyTorch's intra-op thread count for `--threads setting` (see `choose_threads`) and logs the choice in one
    line. Call it before the heavy work: the pool is resized by `torch.set_num_threads`, not by environment variables
    set after torch is imported."""
    threads, reason = choose_threads(setting)
    torch.set_num_threads(threads)
    logger.info(f"Threads: {threads} ({reason})")
    return threads


class ThreadCountCallback(TrainerCallback):
    """Re-measures the idle cores during training (`--threads auto`) and moves the thread count to match: after the
    first step that ends `interval_s` seconds or more after the last measurement, over all of that time (nothing is
    slept). Logs each change. Does nothing where there is no `/proc/stat` or the limit is one thread.

    Args:
        limit (`int`, *optional*, defaults to PyTorch's default thread count of the process): the most threads.
        interval_s (`float`, *optional*, defaults to 10): seconds between measurements.
    """

    def __init__(self, limit: int | None = None, interval_s: float | None = None):
        self.monitor = IdleCoreMonitor(
            TORCH_DEFAULT_THREADS if limit is None else limit, RECHECK_INTERVAL_S if interval_s is None else interval_s
        )

    def on_train_begin(self, args, state, control, **kwargs):
        if self.monitor.limit > 1:
            self.monitor.start()

    def on_step_end(self, args, state, control, **kwargs):
        if self.monitor.last is None or not self.monitor.due():
            return
        reading = self.monitor.read()
        if reading.threads != torch.get_num_threads():
            logger.info(
                f"Threads: {torch.get_num_threads()} -> {reading.threads} at step {state.global_step} "
                f"({reading.idle:.1f} of {reading.cores} usable cores idle over the last "
                f"{reading.seconds:.0f} s)"
            )
            torch.set_num_threads(reading.threads)
