"""Fixtures shared by the test modules.

- `isolated_hf_caches` (every test): the Hugging Face caches in a temporary folder and the Hub offline, for this
  process and for every script, launcher or fresh interpreter a test starts (they inherit the environment).
- `shared_data`: the benchmark corpora beside the repository (`../shared/data`, or `$SLSTM_SHARED_DATA`).
- `guarded_kernel_buffers`: every buffer the Triton kernels write inside guard regions, checked after the test.

The plugin `file_progress.py` prints a line as each test file finishes (the share of the run done, the file's
outcomes and seconds, the time so far) and, at the end, the run's wall time and its slowest files.

On a machine without a CUDA GPU, `TRITON_INTERPRET=1` (unless set otherwise): Triton reads it when it decorates the
kernels of `modeling_slstm/triton_kernels.py`, i.e. at the package's first import, which the test modules do after
this file. The kernels then run in Triton's interpreter on CPU tensors, and `tests/model/test_fused_step.py` checks
them there; with a GPU they are compiled for it. Under pytest-xdist each worker takes its share of PyTorch's threads
(`share_the_cores_among_workers`).
"""

import os
import sys
from pathlib import Path

import datasets
import huggingface_hub
import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


def share_the_cores_among_workers() -> None:
    """Under pytest-xdist, PyTorch's threads of each worker process are its share of PyTorch's default count (at least
    one): with every worker on the default count, each parallel operator waits for a thread whose core another worker
    holds (docs/benchmarks.md, "Inference on a busy machine"). Before the package's import, which takes the count in
    force as the process's default (`cpu_threads.TORCH_DEFAULT_THREADS`)."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    torch.set_num_threads(max(1, torch.get_num_threads() // workers))


share_the_cores_among_workers()

from helpers import CheckedKernel, GuardedKernelBuffers, shared_data_root

pytest_plugins = ["file_progress"]


@pytest.fixture(autouse=True)
def isolated_hf_caches(tmp_path_factory, monkeypatch) -> Path:
    """`HF_HOME` and `HF_DATASETS_CACHE` in a fresh temporary folder and `HF_HUB_OFFLINE=1`: no test reads or writes
    the user's caches (downloads, datasets, the `trust_remote_code` modules of a fresh process) or reaches the Hub.

    The libraries read these variables when they are imported, so this process's already imported copies of the
    datasets cache and the offline switches are pointed at the same values too.
    """
    home = tmp_path_factory.mktemp("hf_home")
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.setenv("HF_DATASETS_CACHE", str(home / "datasets"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", home / "datasets")
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    return home


@pytest.fixture
def shared_data():
    """`shared_data(*parts)`: the path of benchmark data in the shared data folder.

    When it does not exist the test is skipped with the path in the reason, except with `CI=true`: CI has the data
    beside the clone, so there a missing folder fails the test instead of letting a skip hide a regression.
    """

    def find(*parts: str) -> Path:
        path = shared_data_root().joinpath(*parts)
        if not path.exists():
            message = f"shared benchmark data not found at {path} (set SLSTM_SHARED_DATA to the data folder)"
            if os.environ.get("CI", "").lower() == "true":
                pytest.fail(f"CI=true and {message}", pytrace=False)
            pytest.skip(message)
        return path

    return find


@pytest.fixture
def guarded_kernel_buffers(monkeypatch) -> GuardedKernelBuffers:
    """Every buffer that the package allocates for a Triton kernel to write (`kernel_dispatch.kernel_buffer`, in each
    of its modules that imports it) inside guard regions (`GuardedKernelBuffers`), which must be intact when the test
    ends: a kernel's store outside its buffer fails the test by an assertion that names the buffer, where the
    interpreter would crash or write over other memory, and a GPU run on silently. Each kernel is launched through a
    `CheckedKernel`, which fails on an empty tensor (one that no guard region can surround)."""
    from modeling_slstm import kernel_dispatch

    guards = GuardedKernelBuffers(kernel_dispatch.kernel_buffer)
    modules = [module for name, module in list(sys.modules.items()) if name.partition(".")[0] == "modeling_slstm"]
    for module in modules:
        for name, value in list(vars(module).items()):
            if value is guards.allocate:
                monkeypatch.setattr(module, name, guards)
            elif name.endswith("_kernel") and hasattr(value, "run"):  # a Triton kernel, by the package's naming
                monkeypatch.setattr(module, name, CheckedKernel(value, name))
    yield guards
    guards.assert_guards_intact()
