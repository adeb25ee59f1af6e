"""The memory limit on the products that the fused recurrence keeps from its forward for its backward
(`triton_step.kept_products` under `KEPT_PRODUCTS_BYTES`), decided by the shapes alone: checked on meta tensors,
which hold no memory, at the limit's exact size."""

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
