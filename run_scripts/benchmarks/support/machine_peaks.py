"""What a device can do at most: datasheet peaks of GPUs, the GEMM ceiling and copy bandwidth a run measures, and
each row's share of them."""

import statistics
from collections.abc import Callable

import torch
from torch import nn

from modeling_slstm import cpu_matmul
from run_scripts.benchmarks.support.timing import Timing, time_interleaved

# Peak dense matmul FLOP/s per dtype (float32 without TF32, as PyTorch runs float32 matmuls by default) and memory
# bandwidth, from NVIDIA's datasheets, keyed by a part of `torch.cuda.get_device_name()`; the longest matching key
# counts ("NVIDIA H100 PCIe" is not an SXM H100). Devices not listed use the run's own measurements (`run_peaks`).
DEVICE_PEAKS = {
    "H100": {"float32": 67e12, "bfloat16": 989e12, "float16": 989e12, "bandwidth": 3.35e12},
    "H100 PCIe": {"float32": 51e12, "bfloat16": 756e12, "float16": 756e12, "bandwidth": 2.0e12},
    "H100 NVL": {"float32": 60e12, "bfloat16": 835e12, "float16": 835e12, "bandwidth": 3.9e12},
    "H200": {"float32": 67e12, "bfloat16": 989e12, "float16": 989e12, "bandwidth": 4.8e12},
    "H200 NVL": {"float32": 60e12, "bfloat16": 835e12, "float16": 835e12, "bandwidth": 4.8e12},
}


def table_peaks(device_name: str) -> dict | None:
    """The `DEVICE_PEAKS` entry of the longest key contained in `device_name`, or None."""
    keys = [key for key in DEVICE_PEAKS if key in device_name]
    return DEVICE_PEAKS[max(keys, key=len)] if keys else None


def run_peaks(device_name: str, ceilings: dict[str, dict], bandwidth: float) -> dict:
    """`{"float32": FLOP/s, ..., "bandwidth": bytes/s, "source": "table" | "measured"}`: the datasheet figures of
    `DEVICE_PEAKS`, else the run's ceiling GEMMs and its copy bandwidth (`measure_bandwidth`)."""
    table = table_peaks(device_name)
    if table:
        return {**table, "source": "table"}
    measured = {dtype: ceiling["gflops"] * 1e9 for dtype, ceiling in ceilings.items()}
    return {**measured, "bandwidth": bandwidth, "source": "measured"}


def gemm_backends(device: torch.device, dtype: torch.dtype) -> list[str]:
    """The matmul backends worth timing: PyTorch's default (`torch.mm`: MKL on CPU, cuBLAS on GPU) and, for float32 on
    CPU, oneDNN: the two that `cpu_matmul.selected_backend()` chooses between."""
    onednn = device.type == "cpu" and dtype == torch.float32 and torch.backends.mkldnn.is_available()
    return ["default", "onednn"] if onednn else ["default"]


def ceiling_gemm_dtypes(device: torch.device, autocast_dtypes) -> list[torch.dtype]:
    """float32, and each autocast dtype where its GEMM can beat float32's: on a GPU, or bf16 on a CPU with native bf16
    (elsewhere a 2048³ bf16 GEMM takes tens of seconds and would not be the ceiling anyway)."""
    fast = [
        d for d in autocast_dtypes if device.type == "cuda" or (d == torch.bfloat16 and cpu_matmul.cpu_has_fast_bf16())
    ]
    return [torch.float32] + sorted(set(fast) - {torch.float32}, key=str)


def gemm(device: torch.device, dtype: torch.dtype, backend: str, size: int) -> Callable[[], None]:
    """A call of one `size`³ matmul by `backend` (see `gemm_backends`), without autograd."""
    generator = torch.Generator().manual_seed(0)
    a = torch.randn(size, size, generator=generator).to(device=device, dtype=dtype)
    if backend == "onednn":
        from torch.utils import mkldnn as mkldnn_utils

        product = mkldnn_utils.to_mkldnn(nn.Linear(size, size, bias=False).eval())
        operands = (a.to_mkldnn(),)
    else:
        product = torch.mm
        operands = (a, torch.randn(size, size, generator=generator).to(device=device, dtype=dtype))

    def call():
        with torch.no_grad():
            product(*operands)

    return call


def ceiling_calls(device: torch.device, dtypes, size: int) -> dict[str, Callable]:
    """`{"<dtype>/<backend>": call}`: one ceiling GEMM per dtype and backend."""
    return {
        f"{str(dtype).removeprefix('torch.')}/{backend}": gemm(device, dtype, backend, size)
        for dtype in dtypes
        for backend in gemm_backends(device, dtype)
    }


def ceilings_from_times(times: dict[str, list[float]], size: int) -> dict[str, dict]:
    """`{dtype: {"gflops": best, "backend": its name, "all": {backend: GFLOP/s}}}` from times of `ceiling_calls`."""
    ceilings = {}
    for key, seconds in times.items():
        dtype, backend = key.split("/")
        ceiling = ceilings.setdefault(dtype, {"all": {}})
        ceiling["all"][backend] = 2.0 * size**3 / statistics.median(seconds) / 1e9
    for ceiling in ceilings.values():
        ceiling["backend"] = max(ceiling["all"], key=ceiling["all"].get)
        ceiling["gflops"] = ceiling["all"][ceiling["backend"]]
    return ceilings


def measure_ceilings(device: torch.device, dtypes, size: int, repeats: int = 5) -> dict[str, dict]:
    """GFLOP/s of a `size`³ matmul per dtype: the faster backend is the ceiling (see `ceilings_from_times`)."""
    times = time_interleaved(ceiling_calls(device, dtypes, size), device, Timing(2, repeats, 0.0, repeats))
    return ceilings_from_times(times, size)


def measure_bandwidth(device: torch.device, megabytes: int, repeats: int = 5) -> float:
    """Bytes/s of copying a `megabytes` float32 buffer into another (bytes read plus bytes written), the best of
    `repeats` timed copies after one untimed one."""
    source = torch.ones(megabytes * 2**18, device=device)
    target = torch.empty_like(source)
    times = time_interleaved({"copy": lambda: target.copy_(source)}, device, Timing(1, repeats, 0.0, repeats))
    return 2 * source.numel() * source.element_size() / min(times["copy"])


def row_ceiling_dtypes(variant_name: str) -> list[str]:
    """The ceilings a row is compared with: float32, and under bf16/fp16 autocast also that dtype (the faster counts,
    since autocast may keep matmuls in float32 where the low-precision path is slow)."""
    low_precision = {"bf16": "bfloat16", "fp16": "float16"}.get(variant_name.split("+")[0])
    return ["float32"] + ([low_precision] if low_precision else [])


def apply_ceilings(rows: list[dict], ceilings: dict[str, dict]):
    """Set `ceiling_gflops_per_s` and `pct_of_ceiling` of every row from the run's ceilings."""
    for row in rows:
        best = max((ceilings[d]["gflops"] for d in row_ceiling_dtypes(row["variant"]) if d in ceilings), default=None)
        row["ceiling_gflops_per_s"] = best if best else float("nan")
        row["pct_of_ceiling"] = 100 * row["gflops_per_s"] / best if best else float("nan")


def apply_peaks(rows: list[dict], peaks: dict):
    """Set every row's peaks (`peak_gflops_per_s` of its dtype, `peak_gb_per_s`, `peak_source`), the share of each
    reached (`pct_of_peak_flops`, `pct_of_peak_bandwidth`), and its floor: `floor_ms`, the time that its FLOPs at
    the peak FLOP/s or its bytes at the peak bandwidth take, whichever is longer, and `pct_of_floor`, that time as a
    share of the measured one (100%: the row runs at the machine's limit)."""
    for row in rows:
        flops = max(peaks.get(dtype, 0.0) for dtype in row_ceiling_dtypes(row["variant"]))
        seconds = row["median_ms"] / 1e3
        floor = max(row["gflop"] * 1e9 / flops, row["gbytes"] * 1e9 / peaks["bandwidth"])
        row.update(
            peak_gflops_per_s=flops / 1e9,
            peak_gb_per_s=peaks["bandwidth"] / 1e9,
            peak_source=peaks["source"],
            pct_of_peak_flops=100 * row["gflop"] * 1e9 / seconds / flops,
            pct_of_peak_bandwidth=100 * row["gbytes"] * 1e9 / seconds / peaks["bandwidth"],
            floor_ms=floor * 1e3,
            pct_of_floor=100 * floor / seconds,
        )
