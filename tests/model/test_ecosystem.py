"""The model as the ecosystem uses it: forward hooks, PEFT/LoRA and dynamic quantisation on the encoder's own
`nn.Linear` modules, and `torch.export` of every task model with a dynamic batch and sequence length."""

import warnings

import pytest
import torch
from helpers import build, char_settings, pad, pad_spellings, random_ids, random_spellings, tagger_config, tiny_config
from torch import nn
from torch.ao.nn.quantized.dynamic import Linear as DynamicQuantizedLinear
from torch.ao.quantization import quantize_dynamic

from modeling_slstm import SLSTMForSequenceClassification, SLSTMForTokenClassification, SLSTMModel, cpu_matmul
from modeling_slstm.crf import MAX_TRACED_LENGTH

peft = pytest.importorskip("peft", reason="peft is not installed")


def encoder_linear_names(model: nn.Module) -> list[str]:
    return [name for name, module in model.named_modules() if isinstance(module, nn.Linear)]


def test_forward_hooks_fire_on_every_encoder_linear():
    """Every `nn.Linear` of the encoder runs as a module, so hooks (and whatever replaces the module) see it."""
    model = build(SLSTMModel, num_sentence_nodes=2)
    names = encoder_linear_names(model)
    assert len(names) == 6
    calls = dict.fromkeys(names, 0)
    for name in names:
        model.get_submodule(name).register_forward_hook(lambda *_, name=name: calls.__setitem__(name, calls[name] + 1))
    ids, mask = pad(random_ids([5, 3]))
    model(input_ids=ids, attention_mask=mask)
    steps = model.config.num_steps
    expected = {name: 1 if name.endswith("word_input") else steps for name in names}
    assert calls == expected


def test_dynamic_quantization_after_swapping_in_the_plain_torch_modules():

    model = build(SLSTMForTokenClassification, tagger_config(**char_settings()))
    ids, mask = pad(random_ids([5, 3]))
    inputs = {"input_ids": ids, "attention_mask": mask, "char_ids": pad_spellings(random_spellings([5, 3]))}
    with torch.no_grad():
        expected = model(**inputs).logits
    state = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # torch.ao.quantization points to torchao
        assert not any(type(m) is DynamicQuantizedLinear for m in quantize_dynamic(model, {nn.Linear}).modules())
        cpu_matmul.as_plain_torch_modules(model)
        assert {type(m) for m in model.modules()}.isdisjoint({cpu_matmul.SLSTMLinear, cpu_matmul.SLSTMConv1d})
        assert all(torch.equal(tensor, state[name]) for name, tensor in model.state_dict().items())
        with torch.no_grad():
            torch.testing.assert_close(model(**inputs).logits, expected)  # the same model, PyTorch's kernels
        quantized = quantize_dynamic(model, {nn.Linear})
    assert sum(type(m) is DynamicQuantizedLinear for m in quantized.modules()) >= 6
    with torch.no_grad():
        torch.testing.assert_close(quantized(**inputs).logits, expected, rtol=0.1, atol=0.1)


def test_lora_on_every_encoder_linear_changes_outputs_and_trains():
    """LoRA adapters on all encoder matmuls get gradients and change the outputs once trained a step."""
    model = build(SLSTMForSequenceClassification, num_labels=2)
    targets = [name.rsplit(".", 1)[-1] for name in encoder_linear_names(model.slstm)]
    lora = peft.get_peft_model(model, peft.LoraConfig(target_modules=targets, r=2, init_lora_weights=True))
    ids, mask = pad(random_ids([5, 3]))
    before = lora(input_ids=ids, attention_mask=mask).logits.detach()

    loss = lora(input_ids=ids, attention_mask=mask, labels=torch.tensor([0, 1])).loss
    loss.backward()
    adapters = {name: p for name, p in lora.named_parameters() if "lora_" in name}
    assert len(adapters) == 2 * len(targets)
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for name, p in adapters.items() if "lora_B" in name)
    with torch.no_grad():
        for parameter in adapters.values():
            parameter.add_(0.1)
    after = lora(input_ids=ids, attention_mask=mask).logits
    assert not torch.allclose(before, after)


def test_a_lora_adapter_on_the_step_keeps_the_model_off_the_fused_step():
    """The fused recurrence reads the step's weights bare: with an adapter on a step layer `"triton"` is refused,
    naming the layer, and `"auto"` runs the readable step, whose outputs the adapter changes."""
    model = build(SLSTMForSequenceClassification, num_labels=2)
    lora = peft.get_peft_model(model, peft.LoraConfig(target_modules=["word_window"], r=2, init_lora_weights=False))
    ids, mask = pad(random_ids([5, 3]))
    assert lora.base_model.model.slstm.transition.replaced_layers() == ["word_window"]
    model.config.step_implementation = "triton"
    with pytest.raises(ValueError, match="layers word_window are replaced"):
        lora(input_ids=ids, attention_mask=mask)
    model.config.step_implementation = "auto"
    with torch.no_grad(), lora.disable_adapter():
        bare = lora(input_ids=ids, attention_mask=mask).logits
    with torch.no_grad():
        adapted = lora(input_ids=ids, attention_mask=mask).logits
    assert not torch.allclose(bare, adapted)


EXPORTED = {
    "encoder": (SLSTMModel, tiny_config()),
    "sentence_pooling": (SLSTMForSequenceClassification, tiny_config(num_labels=3)),
    "attention_pooling": (SLSTMForSequenceClassification, tiny_config(num_labels=3, classifier_pooling="attention")),
    "mean_pooling": (SLSTMForSequenceClassification, tiny_config(num_labels=3, classifier_pooling="mean")),
    "softmax_tagger": (SLSTMForTokenClassification, tagger_config()),
    "crf_tagger": (SLSTMForTokenClassification, tagger_config(use_crf=True)),
}


@pytest.mark.parametrize("name", EXPORTED)
def test_export_with_dynamic_batch_and_length(name):
    """`torch.export` traces every task model once; the program then runs any batch size and length, with padding,
    and matches eager mode."""
    model_class, config = EXPORTED[name]
    model = build(model_class, config)
    ids, mask = pad(random_ids([4, 2]))
    # The CRF's traced recursions have a fixed number of scan rounds, so the length needs a bound.
    batch, seq = torch.export.Dim("batch"), torch.export.Dim("seq", max=MAX_TRACED_LENGTH)
    dynamic = {"input_ids": {0: batch, 1: seq}, "attention_mask": {0: batch, 1: seq}}
    program = torch.export.export(model, (), {"input_ids": ids, "attention_mask": mask.long()}, dynamic_shapes=dynamic)

    new_ids, new_mask = pad(random_ids([7, 1, 5], seed=3), side="left")
    exported = program.module()(input_ids=new_ids, attention_mask=new_mask.long())
    eager = model(input_ids=new_ids, attention_mask=new_mask.long())
    for got, expected in zip(exported.values(), eager.values()):
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
