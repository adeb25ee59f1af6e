"""The memory limit on the products that the fused recurrence keeps from its forward for its backward
(`triton_step.kept_products` under `kept_products_limit`), decided by the shapes and the limit alone: checked on meta
tensors, which hold no memory, at the CPU limit's exact size (`KEPT_PRODUCTS_BYTES`); on a GPU the limit is a fraction
of the memory free at the first query, checked with a stand-in for CUDA's memory query."""

from unittest import mock

import pytest
import torch

from modeling_slstm import triton_step

STEPS, WIDTH, HIDDEN = 2, 64, 16  # recurrent steps, the rows R of the word weights `(R, H)`, H


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
def test_products_of_exactly_the_limit_in_bytes_are_kept_and_one_row_more_recomputed(dtype):
    weight = torch.empty(WIDTH, HIDDEN, dtype=dtype, device="meta")  # (R, H)
    row_bytes = STEPS * WIDTH * dtype.itemsize  # one word position's products over all steps
    rows = triton_step.KEPT_PRODUCTS_BYTES // row_bytes
    assert rows * row_bytes == triton_step.KEPT_PRODUCTS_BYTES and rows % 4 == 0  # the limit, to the byte
    at_the_limit = torch.empty(4, rows // 4, HIDDEN, dtype=dtype, device="meta")  # (batch, seq, H)
    kept = triton_step.kept_products(STEPS, at_the_limit, weight)
    assert kept is not None and kept.shape == (STEPS, rows, WIDTH) and kept.dtype == dtype
    assert kept.numel() * kept.element_size() == triton_step.KEPT_PRODUCTS_BYTES
    one_row_more = torch.empty(1, rows + 1, HIDDEN, dtype=dtype, device="meta")  # (batch, seq, H)
    assert triton_step.kept_products(STEPS, one_row_more, weight) is None


GIB = 2**30
PAPER_NER_PRODUCTS = 9 * 32 * 512 * 7_200 * 2  # steps x words x R (24 x hidden 300) x bf16 bytes: 2.1 GB at 32 x 512


@pytest.fixture
def cuda_memory(monkeypatch):
    """A stand-in for a CUDA device's memory query (no GPU here): `set(free, reserved, allocated)` in bytes; counts
    the queries. The query's cache is emptied before and after."""
    queries = []
    memory = {}

    def mem_get_info(device):
        queries.append(device)
        return memory["free"], 141 * GIB

    monkeypatch.setattr(torch.cuda, "mem_get_info", mem_get_info)
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device: memory["reserved"])
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device: memory["allocated"])
    triton_step.free_device_memory.cache_clear()
    yield lambda free, reserved=0, allocated=0: memory.update(free=free, reserved=reserved, allocated=allocated), queries
    triton_step.free_device_memory.cache_clear()


def test_on_a_gpu_the_limit_is_a_fraction_of_the_memory_free_at_the_first_query(cuda_memory):
    """A quarter of what the device and PyTorch's cache hold free at the first query, the same at every later step
    (one query, whatever the memory becomes); another device queries its own; the CPU keeps `KEPT_PRODUCTS_BYTES`."""
    set_memory, queries = cuda_memory
    device = torch.device("cuda", 0)
    set_memory(free=100 * GIB, reserved=12 * GIB, allocated=4 * GIB)  # 8 GiB in PyTorch's cache, unused
    assert triton_step.kept_products_limit(device) == 27 * GIB
    set_memory(free=GIB)  # the memory the first step kept: not counted against the next
    assert triton_step.kept_products_limit(device) == 27 * GIB and queries == [device]
    assert triton_step.kept_products_limit(torch.device("cuda", 1)) == GIB // 4 and len(queries) == 2
    assert triton_step.kept_products_limit(torch.device("cpu")) == triton_step.KEPT_PRODUCTS_BYTES


@pytest.mark.parametrize(("free_gib", "kept"), [(141, True), (7, False)])
def test_the_paper_ner_products_at_32_by_512_are_kept_on_a_gpu_with_room(cuda_memory, free_gib, kept):
    """The paper NER configuration's products at 32 x 512 in bf16 (2.1 GB, over the CPU's 128 MiB) are kept with an
    H200's memory free, and recomputed with 7 GiB (a quarter is under 2.1 GB). Shapes on the meta device; the limit
    asked for as for a CUDA tensor."""
    set_memory, _ = cuda_memory
    set_memory(free=free_gib * GIB)
    weight = torch.empty(7_200, 300, dtype=torch.bfloat16, device="meta")  # (R, H)
    states = torch.empty(32, 512, 300, dtype=torch.bfloat16, device="meta")  # (batch, seq, H)
    assert PAPER_NER_PRODUCTS > triton_step.KEPT_PRODUCTS_BYTES
    limit = triton_step.kept_products_limit(torch.device("cuda", 0))
    with mock.patch.object(triton_step, "kept_products_limit", lambda device: limit):
        products = triton_step.kept_products(9, states, weight)
    assert (products is not None) == kept
    if kept:
        assert products.numel() * products.element_size() == PAPER_NER_PRODUCTS
