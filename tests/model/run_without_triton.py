"""Run by `test_fused_step.py::test_the_package_imports_and_runs_without_triton` and
`test_crf_kernels.py::test_the_crf_runs_its_loops_without_triton`: with `triton` unimportable, the package imports,
`"auto"` runs the readable step and the CRF's loops, and `"triton"` says why the kernels cannot run."""

import sys

sys.modules["triton"] = None  # `import triton` raises ImportError

import torch

from modeling_slstm import ConditionalRandomField, SLSTMConfig, SLSTMModel
from modeling_slstm.kernel_dispatch import TRITON_IMPORT_ERROR

assert TRITON_IMPORT_ERROR is not None
config = SLSTMConfig(vocab_size=20, embedding_dim=4, hidden_size=4, num_steps=2)
model = SLSTMModel(config)
model(input_ids=torch.tensor([[4, 5, 6]]))
model.config.step_implementation = "triton"
try:
    model(input_ids=torch.tensor([[4, 5, 6]]))
except ValueError as error:
    assert "triton cannot be imported" in str(error), error
else:
    raise AssertionError("step_implementation='triton' ran without triton")

crf = ConditionalRandomField(3)
emissions, mask = torch.randn(2, 4, 3), torch.tensor([[1, 1, 1, 0], [0, 1, 1, 1]], dtype=torch.bool)
assert crf.decode(emissions, mask, implementation="auto").shape == (2, 4)
try:
    crf.decode(emissions, mask, implementation="triton")
except ValueError as error:
    assert "implementation='triton' cannot run the CRF's kernels here: triton cannot be imported" in str(error), error
else:
    raise AssertionError("implementation='triton' ran the CRF's kernels without triton")
print("without triton OK")
