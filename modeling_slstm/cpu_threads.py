"""How many intra-op threads CPU work gets on a machine that other jobs share.

PyTorch starts one intra-op thread per physical core (or `OMP_NUM_THREADS`). When other jobs keep some of those cores
busy, the threads of every parallel operator wait for the slowest of them, which shares its core, and a small model's
forward or training step takes several times as long as with one thread fewer (docs/benchmarks.md, "Inference on a
busy machine"). The count here is that of the usable cores (`os.sched_getaffinity`, capped by a cgroup CPU quota) that
are idle between two readings of `/proc/stat` (the 1-minute load average where there is none), never more than
PyTorch's default for the process, so that an idle machine keeps its speed. Several processes of one run on a machine
(`LOCAL_WORLD_SIZE` of torchrun and accelerate) each take their share.

Two users: CPU inference of the models ([`with_cpu_inference_threads`] around every model's `forward`, following
`config.inference_threads`), and the training scripts' `--threads auto` (`run_scripts/training/threads.py`).

The thread count changes the order of floating-point sums, so outputs can move in their last digits with it: set
`config.inference_threads` to a number where two runs must agree to the last digit.
"""

import contextlib
import functools
import math
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import torch

PROC_STAT = Path("/proc/stat")
CGROUP_CPU_MAX = Path("/sys/fs/cgroup/cpu.max")
# The default thread count of this process, before anything here changes it: OMP_NUM_THREADS when set (the launchers
# set it for each of their processes), else the physical cores this process may run on.
TORCH_DEFAULT_THREADS = torch.get_num_threads()
# Idle cores round up from three quarters (1.75 idle cores: 2 threads, 1.7: 1): a thread too many costs several times
# more than a thread too few.
FREE_CORE_SLACK = 0.25
# CPU inference measures once over this window (a sleep, at its first call in the process), and then from the counters
# between calls, at most every `INFERENCE_RECHECK_INTERVAL_S` seconds: 10 ticks of /proc/stat per core at 100 Hz.
FIRST_INFERENCE_WINDOW_S = 0.1
INFERENCE_RECHECK_INTERVAL_S = 2.0
INFERENCE_THREAD_CHOICES = ("auto", "torch")
# Environment variables that set the thread count of a process: a caller who sets one has chosen it.
THREAD_COUNT_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")


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


@dataclass(frozen=True)
class IdleCoreReading:
    """One measurement of [`IdleCoreMonitor`].

    Args:
        idle (`float`): cores' worth of the usable cores left to this process (capped by a cgroup quota).
        threads (`int`): the thread count that this leaves this process.
        how (`str`): how it was measured, in words (e.g. `idle over 0.25 s, capped by the cgroup CPU quota`).
        seconds (`float`): the length of the window measured (0 with the load average).
        cores (`int`): the usable cores.
        processes (`int`): the processes of this run on the machine, which share the idle cores.
    """

    idle: float
    threads: int
    how: str
    seconds: float
    cores: int
    processes: int


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


class IdleCoreMonitor:
    """Thread counts from the idle usable cores, each measured over the time since the previous reading (nothing is
    slept here): `start()` reads the counters, and each `read()` measures from the previous reading to now.

    Args:
        limit (`int`): the most threads (PyTorch's default thread count of the process, for both users).
        interval_s (`float`): `due()` is true this many seconds after the last reading.
    """

    def __init__(self, limit: int, interval_s: float):
        self.limit = limit
        self.interval_s = interval_s
        self.cores = usable_cores()
        self.processes = local_processes()
        self.quota = cgroup_cpu_limit()
        self.last = None  # the `CpuSnapshot` of the last reading; None before `start()` or without /proc/stat
        self.next_reading_s = 0.0
        self.threads = limit

    def start(self) -> None:
        self.last = take_snapshot()
        self.next_reading_s = time.monotonic() + self.interval_s

    def due(self) -> bool:
        return time.monotonic() >= self.next_reading_s

    def read_over(self, window_s: float) -> IdleCoreReading:
        """`start()`, `window_s` seconds slept (not where there is no `/proc/stat`), then `read()`: a first reading."""
        self.start()
        if self.last is not None:
            time.sleep(window_s)
        return self.read(window_s)

    def read(self, window_s: float | None = None) -> IdleCoreReading:
        """The idle cores since the last reading (by the 1-minute load average where there is no `/proc/stat`), and
        `self.threads` set to the count they allow; `window_s` names the window in `how` where it was slept for.
        Raises `OSError` where neither can be read."""
        now = take_snapshot()
        if now is None or self.last is None:
            load = os.getloadavg()[0]
            idle, how, seconds = max(0.0, len(self.cores) - load), f"by the 1-minute load average {load:.2f}", 0.0
        else:
            idle = idle_cores(self.last, now, self.cores, self.processes)
            seconds = now.wall_s - self.last.wall_s
            how = f"over {seconds if window_s is None else window_s:.2g} s"
        self.last, self.next_reading_s = now, time.monotonic() + self.interval_s
        if self.quota is not None and self.quota < idle:
            idle, how = self.quota, f"{how}, capped by the cgroup CPU quota"
        self.threads = thread_count(idle, self.limit, self.processes)
        return IdleCoreReading(idle, self.threads, how, seconds, len(self.cores), self.processes)


def measure_idle_cores(limit: int, window_s: float) -> IdleCoreReading:
    """Idle usable cores now, over `window_s` seconds of `/proc/stat` (slept here), or by the 1-minute load average
    where there is none. Raises `OSError` where neither exists."""
    return IdleCoreMonitor(limit, interval_s=0.0).read_over(window_s)


class InferenceIdleCores:
    """The thread count of CPU inference under `inference_threads="auto"`, one for the process (idle cores are the
    machine's, whichever model asks): the first call measures over `FIRST_INFERENCE_WINDOW_S` (slept once), later calls
    read the counters again at most every `INFERENCE_RECHECK_INTERVAL_S` seconds, over all the time since the previous
    reading (this process's own use counts as free), and otherwise give the last count at the cost of a clock read."""

    def __init__(self):
        self.monitor = None
        self.lock = threading.Lock()  # one measurement at a time where several threads run models

    def threads(self) -> int:
        with self.lock:
            if self.monitor is None:
                self.monitor = IdleCoreMonitor(TORCH_DEFAULT_THREADS, INFERENCE_RECHECK_INTERVAL_S)
                self.measure(first=True)
            elif self.monitor.due():
                self.measure(first=False)
            return self.monitor.threads

    def measure(self, first: bool) -> None:
        if self.monitor.limit == 1:
            self.monitor.next_reading_s = math.inf  # one thread at most: nothing to choose
            return
        try:
            if first:
                self.monitor.read_over(FIRST_INFERENCE_WINDOW_S)
            else:
                self.monitor.read()
        except OSError:
            self.monitor.next_reading_s = math.inf  # nothing to measure with: PyTorch's default from now on


INFERENCE_IDLE_CORES = InferenceIdleCores()


def check_inference_threads(value, config_name: str) -> None:
    """A clear error unless `value`, the `inference_threads` of a `config_name`, is `"auto"`, `"torch"` or a positive
    integer."""
    if value in INFERENCE_THREAD_CHOICES or (type(value) is int and value >= 1):
        return
    raise ValueError(
        f"{config_name}.inference_threads must be 'auto', 'torch' or a positive number of threads, got {value!r}"
    )


def caller_chose_threads() -> bool:
    """Whether the thread count in force is the caller's choice: `torch.set_num_threads` left it other than the
    process's default, or `OMP_NUM_THREADS`/`MKL_NUM_THREADS` set it."""
    return torch.get_num_threads() != TORCH_DEFAULT_THREADS or any(os.environ.get(v) for v in THREAD_COUNT_VARIABLES)


def runs_cpu_inference(model: torch.nn.Module) -> bool:
    """Whether a call of `model` is CPU inference: its weights on the CPU, and not training under autograd."""
    return not (model.training and torch.is_grad_enabled()) and next(model.parameters()).device.type == "cpu"


def inference_thread_count(config) -> int | None:
    """The thread count of a CPU inference call under `config.inference_threads`, None to leave PyTorch's as it is:
    `"torch"` leaves it, a number is that many threads, and `"auto"` (the default) leaves a count the caller chose
    ([`caller_chose_threads`]) and otherwise takes the idle cores' ([`InferenceIdleCores`])."""
    setting = config.inference_threads  # checked by the config as it was set
    if setting == "torch" or (setting == "auto" and caller_chose_threads()):
        return None
    return setting if setting != "auto" else INFERENCE_IDLE_CORES.threads()


class InsideInference(threading.local):
    """Whether this thread runs inside a model's [`cpu_inference_threads`] (a task model's forward calls its encoder's):
    the outermost call alone decides."""

    inside = False


INSIDE_INFERENCE = InsideInference()


@contextlib.contextmanager
def cpu_inference_threads(model: torch.nn.Module):
    """Runs the block with the thread count of `model.config.inference_threads` when it is CPU inference
    ([`runs_cpu_inference`]) and not inside another model's, and gives the caller's count back afterwards, also when
    the block raises. PyTorch's thread count belongs to the calling thread, so callers in other threads keep theirs."""
    if INSIDE_INFERENCE.inside or not runs_cpu_inference(model):
        yield
        return
    threads, callers = inference_thread_count(model.config), torch.get_num_threads()
    INSIDE_INFERENCE.inside = True
    try:
        if threads is not None and threads != callers:
            torch.set_num_threads(threads)
        yield
    finally:
        INSIDE_INFERENCE.inside = False
        if torch.get_num_threads() != callers:
            torch.set_num_threads(callers)


def with_cpu_inference_threads(forward):
    """Decorates a model's `forward` to run in [`cpu_inference_threads`]; traced code (`torch.compile`, `torch.export`,
    `torch.jit.trace`) runs it unchanged, as a compiled graph guards on the thread count it was traced with."""

    @functools.wraps(forward)
    def forward_with_inference_threads(self, *args, **kwargs):
        if torch.compiler.is_compiling() or torch.jit.is_tracing():
            return forward(self, *args, **kwargs)
        with cpu_inference_threads(self):
            return forward(self, *args, **kwargs)

    return forward_with_inference_threads


__all__ = [
    "CpuSnapshot",
    "IdleCoreMonitor",
    "IdleCoreReading",
    "TORCH_DEFAULT_THREADS",
    "check_inference_threads",
    "cpu_inference_threads",
    "idle_cores",
    "measure_idle_cores",
    "thread_count",
    "with_cpu_inference_threads",
]
