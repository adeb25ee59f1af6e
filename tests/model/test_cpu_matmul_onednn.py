"""The oneDNN route of the S-LSTM's float32 CPU matmuls (`cpu_matmul.SLSTMLinear`) computes what PyTorch's default
backend computes: outputs and gradients, in the layer and in a whole model."""

import pytest
import torch

from modeling_slstm import cpu_matmul, modeling_slstm
from modeling_slstm.configuration_slstm import SLSTMConfig

pytestmark = pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="no oneDNN in this torch build")


def test_onednn_step_matches_default_matmuls():
    """The oneDNN route of the step's float32 matmuls gives the outputs and gradients of PyTorch's default backend."""
    torch.manual_seed(0)
    model = modeling_slstm.SLSTMModel(
        SLSTMConfig(
            vocab_size=30, embedding_dim=8, hidden_size=12, num_steps=3, num_sentence_nodes=2, embedding_dropout=0.0
        )
    )
    input_ids = torch.randint(4, 30, (2, 6))
    mask = torch.tensor([[1, 1, 1, 1, 1, 1], [0, 1, 1, 1, 0, 0]])
    results = []
    try:
        for backend in ("onednn", "default"):
            cpu_matmul.set_matmul_backend(backend)
            assert cpu_matmul.selected_backend() == backend
            model.zero_grad()
            outputs = model(input_ids, attention_mask=mask)
            (outputs.last_hidden_state.pow(2).sum() + outputs.pooler_output.sum()).backward()
            results.append((outputs.last_hidden_state, [p.grad.clone() for p in model.parameters()]))
    finally:
        cpu_matmul.set_matmul_backend(None)
    torch.testing.assert_close(results[0][0], results[1][0], atol=1e-5, rtol=1e-5)
    for with_onednn, default in zip(results[0][1], results[1][1]):
        torch.testing.assert_close(with_onednn, default, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("rows", [3, 40])  # fewer and more rows than the weight's 20: both input-gradient paths
def test_onednn_linear_gradients_match_pytorch(rows):
    torch.manual_seed(0)
    layer = cpu_matmul.SLSTMLinear(7, 20)
    inputs = torch.randn(rows, 7, requires_grad=True)
    cpu_matmul.set_matmul_backend("onednn")
    try:
        output = layer(inputs)
        output.pow(2).sum().backward()
    finally:
        cpu_matmul.set_matmul_backend(None)
    reference_inputs = inputs.detach().clone().requires_grad_()
    reference_weight = layer.weight.detach().clone().requires_grad_()
    reference = torch.nn.functional.linear(reference_inputs, reference_weight, layer.bias.detach())
    reference.pow(2).sum().backward()
    torch.testing.assert_close(output, reference)
    torch.testing.assert_close(inputs.grad, reference_inputs.grad)
    torch.testing.assert_close(layer.weight.grad, reference_weight.grad)
