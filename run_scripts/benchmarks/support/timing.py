"""Timing and memory of benchmark calls, and the machine they ran on.

Everything that is timed together is timed in turn (round-robin, `time_interleaved`), so that a ratio between two
calls compares the same moments of a machine whose load changes from minute to minute.
"""

import json
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from modeling_slstm import cpu_matmul


def machine_info(device: torch.device) -> dict:
    """What a reader needs to compare runs across machines. Calls `cpu_matmul.selected_backend()`, which decides the
    S-LSTM's float32 CPU matmul backend once per process, so that the decision is not part of a timed call."""
    info = cpu_matmul.cpu_info()
    cpu = info.get("model name", "")
    if "cpu family" in info:  # virtual machines may name every EPYC generation "AMD EPYC": the family tells them apart
        cpu += f" (family {info['cpu family']}, model {info.get('model', '?')})"
    return {
        "device": device.type,
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else cpu,
        "cpu": cpu,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "native_bf16": cpu_matmul.cpu_has_fast_bf16(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "matmul_backend": cpu_matmul.selected_backend(),
        "matmul_backend_requested": os.environ.get(cpu_matmul.MATMUL_BACKEND_ENV, "auto"),
    }


@dataclass
class Timing:
    """`warmup` untimed rounds, then at least `repeats` timed rounds, more while less than `min_time` seconds have
    passed, at most `max_repeats`; a call that took more than `time_once_above` seconds is not timed again (plain bf16
    autocast on a CPU without bf16 takes minutes per call)."""

    warmup: int
    repeats: int
    min_time: float
    max_repeats: int
    time_once_above: float = float("inf")


def synchronize(device: torch.device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_interleaved(calls: dict[str, Callable], device: torch.device, timing: Timing) -> dict[str, list[float]]:
    """Wall-clock seconds of every timed call of each of `calls`, which run in turn, one call each per round."""
    for _ in range(timing.warmup):
        for call in calls.values():
            call()
    synchronize(device)
    times = {name: [] for name in calls}
    started = time.perf_counter()
    rounds = 0
    while rounds < timing.repeats or (time.perf_counter() - started < timing.min_time and rounds < timing.max_repeats):
        for name, call in calls.items():
            if times[name] and times[name][-1] > timing.time_once_above:
                continue
            start = time.perf_counter()
            call()
            synchronize(device)
            times[name].append(time.perf_counter() - start)
        rounds += 1
    return times


def peak_memory_bytes(fn: Callable, device: torch.device) -> int:
    """Peak bytes held by PyTorch's allocator during `fn()` above those held before it.

    CUDA: `torch.cuda.max_memory_allocated`. CPU: the "Total Allocated" counter that the profiler records with every
    allocation and free (`profile_memory=True`), read from its Chrome trace.
    """
    if device.type == "cuda":
        synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        fn()
        synchronize(device)
        return torch.cuda.max_memory_allocated(device) - before
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as profiler:
        fn()
    with tempfile.TemporaryDirectory() as folder:
        trace = Path(folder) / "trace.json"
        profiler.export_chrome_trace(str(trace))
        events = json.loads(trace.read_text())["traceEvents"]
    cpu_memory = sorted(
        (e for e in events if e.get("name") == "[memory]" and e["args"].get("Device Type") == 0),
        key=lambda e: e["ts"],
    )
    if not cpu_memory:
        return 0
    first = cpu_memory[0]["args"]
    held_before = first["Total Allocated"] - first["Bytes"]
    return max(e["args"]["Total Allocated"] for e in cpu_memory) - held_before


# The operators that run matrix products, as `torch.profiler` names them: PyTorch's own and the oneDNN linear behind
# `SLSTMLinear`.
MATMUL_OPERATORS = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "mkldnn::_linear_pointwise"}


def matmul_time_share(fn: Callable) -> float:
    """Share of the operator time of one `fn()` (the self CPU time of every profiled operator, forward and backward)
    spent inside matrix products.

    A row reaching `p`% of the GEMM ceiling with a matmul share `s` would reach about `p / s`% if everything between
    the products were free: the bound that faster elementwise work (fusion, fewer copies) can approach, and beyond it
    only a faster GEMM on the model's own shapes helps. Meaningful on the CPU only (CUDA kernels run asynchronously,
    so `measure_shape` calls it for CPU rows); NaN for a call that runs no operator.
    """
    with profile(activities=[ProfilerActivity.CPU]) as profiler:
        fn()
    events = profiler.key_averages()
    total = sum(event.self_cpu_time_total for event in events)
    matmuls = sum(event.self_cpu_time_total for event in events if event.key in MATMUL_OPERATORS)
    return matmuls / total if total else float("nan")
