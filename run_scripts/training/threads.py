"""How many threads the training scripts give PyTorch (`--threads`, `THREADS` in `demo.sh`).

PyTorch starts one intra-op thread per physical core (or `OMP_NUM_THREADS`). When other jobs keep some of those cores
busy, the threads of every parallel operator wait for the slowest of them, which shares its core, and a training step
of a small model takes several times as long as with one thread fewer. `--threads auto` (the scripts' default) counts
the usable cores (`os.sched_getaffinity`, capped by a cgroup CPU quota) that are idle over a short window, from
`/proc/stat` (the 1-minute load average where there is none), and runs with that many threads, never more than
PyTorch's own default for the process, so that an idle machine keeps today's speed. Several processes of one run on a
machine (`accelerate launch`, `torchrun`: `LOCAL_WORLD_SIZE`) each take their share. `ThreadCountCallback` measures
again during training, so that jobs that start or end while it runs move the count too. An integer forces that many
threads and measures nothing.

OpenMP's wait policy is left as it is: `OMP_WAIT_POLICY=PASSIVE` also spares a busy core, but makes every step on an
idle machine slower (run_scripts/benchmarks/benchmark_busy_machine.py measures both). Only the intra-op pool is sized:
eager training and inference do not use the inter-op pool, which PyTorch lets a process size only once, before it is
first used.

The thread count changes the order of floating-point sums, so a run's figures move a little with it: give `--threads N`
where two runs must agree to the last digit.
"""

import logging
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import TrainerCallback

from run_scripts.training.usage_errors import UsageError

logger = logging.getLogger(__name__)

PROC_STAT = Path("/proc/stat")
CGROUP_CPU_MAX = Path("/sys/fs/cgroup/cpu.max")
# The default thread count of this process, before anything here changes it: OMP_NUM_THREADS when set (the launchers
# set it for each of their processes), else the physical cores this process may run on.
TORCH_DEFAULT_THREADS = torch.get_num_threads()
MEASUREMENT_WINDOW_S = 0.25
RECHECK_INTERVAL_S = 10.0
# Idle cores round up from three quarters (1.75 idle cores: 2 threads, 1.7: 1): a thread too many costs several times
# more than a thread too few.
FREE_CORE_SLACK = 0.25


@dataclass(frozen=True)
class CpuSnapshot:
    """Counters read at one moment.

    Args:
        core_ticks (`dict[int, tuple[int, int]]`): per core number, `(idle ticks, all ticks)` since boot, from
            `/proc/stat` (idle counts iowait too).
        own_cpu_s (`float`): CPU seconds used so far by this process, all its threads.
        wall_s (`float`): `time.monotonic()`.
    """

    core_ticks: dict[int, tuple[int, int]]
    own_cpu_s: float
    wall_s: float


def parse_proc_stat(text: str) -> dict[int, tuple[int, int]]:
    """`(idle ticks, all ticks)` per core from the `cpuN` lines of `/proc/stat` (user nice system idle iowait irq
    softirq steal ...; guest time is already inside user time, so only the first eight count)."""
    ticks = {}
    for line in text.splitlines():
        name, *fields = line.split() or [""]
        if name.startswith("cpu") and name[3:].isdigit():
            values = [int(value) for value in fields[:8]]
            ticks[int(name[3:])] = (values[3] + values[4], sum(values))
    return ticks


def take_snapshot() -> CpuSnapshot | None:
    """The counters now, or None where there is no `/proc/stat` (not Linux)."""
    try:
        text = PROC_STAT.read_text()
    except OSError:
        return None
    return CpuSnapshot(parse_proc_stat(text), time.process_time(), time.monotonic())


def usable_cores() -> set[int]:
    """The core numbers this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return os.sched_getaffinity(0)
    return set(range(os.cpu_count() or 1))


def cgroup_cpu_limit(path: Path = CGROUP_CPU_MAX) -> float | None:
    """The cores' worth of CPU time a cgroup v2 quota (`cpu.max`: `quota period`, or `max`) allows, None without one."""
    try:
        quota, period = path.read_text().split()[:2]
    except (OSError, ValueError):
        return None
    return None if quota == "max" else int(quota) / int(period)


def local_processes() -> int:
    """Processes of this run on this machine (`LOCAL_WORLD_SIZE` of torchrun and accelerate), 1 without a launcher."""
    return max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))


def idle_cores(before: CpuSnapshot, after: CpuSnapshot, cores: set[int], processes: int) -> float:
    """Cores' worth of `cores` that other work left to this run between two snapshots: the idle share of each core,
    summed, plus what this process used, counted `processes` times (the run's other processes on the machine do the
    same work), at most `len(cores)`."""
    idle = 0.0
    for core in cores & before.core_ticks.keys() & after.core_ticks.keys():
        idle_ticks = after.core_ticks[core][0] - before.core_ticks[core][0]
        all_ticks = after.core_ticks[core][1] - before.core_ticks[core][1]
        idle += idle_ticks / all_ticks if all_ticks > 0 else 1.0
    wall_s = after.wall_s - before.wall_s
    own = (after.own_cpu_s - before.own_cpu_s) / wall_s if wall_s > 0 else 0.0
    return min(float(len(cores)), idle + processes * own)


def thread_count(idle: float, limit: int, processes: int) -> int:
    """Threads for one of `processes` processes that share `idle` free cores: at least 1, at most `limit`."""
    return max(1, min(limit, math.floor(idle / processes + FREE_CORE_SLACK)))


def measure_idle_cores(cores: set[int], processes: int, window_s: float = MEASUREMENT_WINDOW_S) -> tuple[float, str]:
    """Idle cores of `cores` now, with how they were measured: over `window_s` seconds of `/proc/stat`, else from the
    1-minute load average. Raises `OSError` where neither exists."""
    before = take_snapshot()
    if before is not None:
        time.sleep(window_s)
        after = take_snapshot()
        return idle_cores(before, after, cores, processes), f"idle over {window_s:g} s"
    load = os.getloadavg()[0]
    return max(0.0, len(cores) - load), f"idle by the 1-minute load average {load:.2f}"


def parse_thread_setting(setting: str) -> int | None:
    """`--threads`: None for `auto`, else the forced thread count."""
    if setting == "auto":
        return None
    if not setting.isdigit() or int(setting) < 1:
        raise UsageError(f"--threads must be 'auto' or a positive number of threads, got {setting!r}")
    return int(setting)


def choose_threads(setting: str, limit: int | None = None) -> tuple[int, str]:
    """The thread count for `--threads setting`, with the reason in words. `auto`: the idle usable cores (at most the
    cgroup quota), this process's share of them, at least 1 and at most `limit` (default: PyTorch's default thread
    count of the process)."""
    limit = TORCH_DEFAULT_THREADS if limit is None else limit
    forced = parse_thread_setting(setting)
    if forced is not None:
        return forced, f"--threads {forced}"
    if limit == 1:
        return 1, "--threads auto, PyTorch's default here is 1 (OMP_NUM_THREADS or one usable core)"
    cores, processes = usable_cores(), local_processes()
    try:
        idle, how = measure_idle_cores(cores, processes)
    except OSError:
        return limit, "--threads auto, PyTorch's default: no /proc/stat or load average to measure idle cores"
    quota = cgroup_cpu_limit()
    if quota is not None and quota < idle:
        idle, how = quota, f"{how}, capped by the cgroup CPU quota"
    threads = thread_count(idle, limit, processes)
    share = f", shared by {processes} processes of this run" if processes > 1 else ""
    return threads, f"--threads auto: {idle:.1f} of {len(cores)} usable cores {how}{share}; at most {limit}"


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
        self.limit = TORCH_DEFAULT_THREADS if limit is None else limit
        self.interval_s = RECHECK_INTERVAL_S if interval_s is None else interval_s
        self.cores = usable_cores()
        self.processes = local_processes()
        self.last = None
        self.next_check_s = 0.0

    def on_train_begin(self, args, state, control, **kwargs):
        self.last = take_snapshot() if self.limit > 1 else None
        self.next_check_s = time.monotonic() + self.interval_s

    def on_step_end(self, args, state, control, **kwargs):
        if self.last is None or time.monotonic() < self.next_check_s:
            return
        now = take_snapshot()
        idle = idle_cores(self.last, now, self.cores, self.processes)
        seconds = now.wall_s - self.last.wall_s
        self.last, self.next_check_s = now, time.monotonic() + self.interval_s
        threads = thread_count(idle, self.limit, self.processes)
        if threads != torch.get_num_threads():
            logger.info(
                f"Threads: {torch.get_num_threads()} -> {threads} at step {state.global_step} ({idle:.1f} of "
                f"{len(self.cores)} usable cores idle over the last {seconds:.0f} s)"
            )
            torch.set_num_threads(threads)
