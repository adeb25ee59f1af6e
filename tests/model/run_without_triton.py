"""Run by `test_fused_step.py::test_the_package_imports_and_runs_without_triton`: with `triton` unimportable, the
package imports, `"auto"` runs the readable step and `"triton"` says why it cannot run."""

import sys

sys.modules["triton"] = None  # `import triton` raises ImportError

import torch

from modeling_slstm import SLSTMConfig, SLSTMModel, triton_step

assert triton_step.load_kernels().import_error is not None
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
