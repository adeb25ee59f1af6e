"""The CPU fast path degrades, never breaks: when PyTorch's private oneDNN op is missing, raises or computes another
product, the S-LSTM layers compute with `torch.nn.functional.linear` and say so once."""

import logging
import types

import pytest
import torch

from modeling_slstm import cpu_matmul

BREAKAGES = {
    "missing": lambda monkeypatch: monkeypatch.setattr(torch.ops, "mkldnn", types.SimpleNamespace()),
    "raises": lambda monkeypatch: monkeypatch.setattr(
        torch.ops.mkldnn, "_linear_pointwise", lambda *args: (_ for _ in ()).throw(RuntimeError("changed signature"))
    ),
    "wrong_product": lambda monkeypatch: monkeypatch.setattr(
        torch.ops.mkldnn, "_linear_pointwise", lambda inputs, weight, *rest: inputs @ weight.t() + 1.0
    ),
    # Right for a contiguous `(out, in)` weight (the forward product), wrong for the transposed view that the input
    # gradient passes: only a probe of both directions sees it.
    "wrong_for_transposed_weight": lambda monkeypatch: monkeypatch.setattr(
        torch.ops.mkldnn,
        "_linear_pointwise",
        lambda inputs, weight, *rest: inputs @ weight.t() + (0.0 if weight.is_contiguous() else 1.0),
    ),
}


@pytest.fixture
def onednn_requested():
    """`SLSTM_MATMUL_BACKEND=onednn` for the test, the process's own choice again after it."""
    cpu_matmul.set_matmul_backend("onednn")
    yield
    cpu_matmul.set_matmul_backend(None)


@pytest.mark.parametrize("breakage", BREAKAGES)
def test_layer_falls_back_to_functional_linear_with_one_warning(monkeypatch, caplog, onednn_requested, breakage):
    BREAKAGES[breakage](monkeypatch)
    torch.manual_seed(0)
    layer = cpu_matmul.SLSTMLinear(5, 3)
    inputs = torch.randn(4, 5, requires_grad=True)
    with caplog.at_level(logging.WARNING, logger=cpu_matmul.__name__):
        outputs = [layer(inputs) for _ in range(3)]
    assert cpu_matmul.selected_backend() == "default"
    warnings = [record for record in caplog.records if "fall back to torch.nn.functional.linear" in record.message]
    assert len(warnings) == 1
    reference_inputs = inputs.detach().clone().requires_grad_()
    reference = torch.nn.Linear(5, 3)
    reference.load_state_dict(layer.state_dict())
    expected = torch.nn.functional.linear(reference_inputs, reference.weight, reference.bias)
    torch.testing.assert_close(outputs[0], expected, rtol=0, atol=0)
    # and it trains: the same gradients as F.linear's, for the inputs, the weight and the bias
    outgoing = torch.linspace(-1.0, 2.0, 12).view(4, 3)  # (rows, out): not all ones, so that a transposition shows
    outputs[0].backward(outgoing)
    expected.backward(outgoing)
    for got, want in ((inputs, reference_inputs), (layer.weight, reference.weight), (layer.bias, reference.bias)):
        torch.testing.assert_close(got.grad, want.grad, rtol=0, atol=0)


def test_the_probe_passes_where_the_op_works(onednn_requested):
    if not torch.backends.mkldnn.is_available():
        pytest.skip("this PyTorch has no oneDNN")
    assert cpu_matmul.onednn_matmul_problem() is None
    assert cpu_matmul.selected_backend() == "onednn"


@pytest.mark.parametrize("breakage", ["wrong_product", "wrong_for_transposed_weight"])
def test_the_probe_reports_a_product_wrong_in_either_direction(monkeypatch, breakage):
    BREAKAGES[breakage](monkeypatch)
    assert "computed a different product" in cpu_matmul.onednn_matmul_problem()


def test_a_backend_for_a_block_gives_back_the_override_set_before_it():
    cpu_matmul.set_matmul_backend("default")
    try:
        with cpu_matmul.matmul_backend("onednn"):
            inside = cpu_matmul.selected_backend()
        assert inside == ("default" if cpu_matmul.onednn_matmul_problem() else "onednn")
        assert cpu_matmul.selected_backend() == "default"
    finally:
        cpu_matmul.set_matmul_backend(None)
