"""The fused step (Triton kernels, `modeling_slstm/triton_step.py`) against the readable PyTorch step it replaces:
outputs, the gradients of every parameter and of the input, exactness under padding, float32 and bfloat16, window 1
and 2, 0/1/2 sentence nodes, both initial states and both gate normalisations; and the dispatch of
`config.step_implementation`.

On the CPU the kernels run in Triton's interpreter (`TRITON_INTERPRET=1`, which `tests/conftest.py` sets on machines
without a CUDA GPU, before the package is imported); on a GPU the same cases also run compiled on `cuda`. Where this
process compiled the kernels (a GPU machine), `test_cpu_cases_in_the_interpreter` reruns the CPU cases in a fresh
process with the interpreter.

    python -m pytest tests/model/test_fused_step.py
"""

import copy
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import CANARY_BYTE, build, pad, random_ids, real, tiny_config

from modeling_slstm import (
    SLSTMConfig,
    SLSTMForSequenceClassification,
    SLSTMForTokenClassification,
    SLSTMModel,
    triton_step,
)
from modeling_slstm.kernel_dispatch import KERNELS_INTERPRETED, TRITON_IMPORT_ERROR

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
needs_triton = pytest.mark.skipif(
    TRITON_IMPORT_ERROR is not None, reason=f"{TRITON_IMPORT_ERROR}: pip install the test extra"
)
pytestmark = pytest.mark.usefixtures("guarded_kernel_buffers")  # every buffer a kernel writes, in guard regions
LENGTHS = (5, 1, 3, 2)  # mixed, including a one-token sentence
# Relative error = max |fused - readable| / max |readable| per tensor. The readable step rounds bf16 intermediates
# (sigmoids, tanh, sums) that the kernels keep in float32, so bf16 differs by a few bf16 roundings.
TOLERANCE = {torch.float32: 1e-5, torch.bfloat16: 1e-2}
# bf16 gradients (bf16 tensors, summed over steps in bf16) are themselves 1-2% from the float64 gradients of the
# same bf16 weights, in both steps: there the fused step must be as close to float64 as the readable one (within
# BF16_GRADIENT_SLACK times its error), and within 2e-2 of it.
BF16_GRADIENT_TOLERANCE = 2e-2
BF16_GRADIENT_SLACK = 1.5

CASES = {
    "w1 K1 learned sigmoid_softmax": {"window_size": 1, "num_sentence_nodes": 1},
    "w1 K0 input softmax": {"num_sentence_nodes": 0, "initial_state": "input", "gate_normalization": "softmax"},
    "w2 K2 input sigmoid_softmax": {"window_size": 2, "num_sentence_nodes": 2, "initial_state": "input"},
    "w2 K1 learned softmax": {"window_size": 2, "num_sentence_nodes": 1, "gate_normalization": "softmax"},
    "w1 K2 learned, embedding 7 != hidden 6": {"num_sentence_nodes": 2, "embedding_dim": 7, "initial_state": "input"},
    "w2 K0 learned sigmoid_softmax": {"window_size": 2, "num_sentence_nodes": 0},
}
BF16_CASES = ("w1 K1 learned sigmoid_softmax", "w2 K2 input sigmoid_softmax", "w1 K0 input softmax")


@pytest.fixture(params=["cpu", "cuda"])
def device(request) -> torch.device:
    """`cpu` (the kernels in Triton's interpreter) and `cuda` (compiled), each where this process can run it."""
    if request.param == "cuda" and not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    if request.param == "cpu" and not KERNELS_INTERPRETED:
        pytest.skip("the kernels were compiled in this process: test_cpu_cases_in_the_interpreter runs these")
    return torch.device(request.param)


def relative_error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    scale = expected.float().abs().max().clamp(min=1e-30)
    return ((actual.float() - expected.float()).abs().max() / scale).item()


def outputs_and_gradients(model, inputs_embeds, attention_mask, implementation, forward=None):
    """The encoder's outputs and the gradients of every parameter and of `inputs_embeds` under a loss that weighs
    every output value differently, with `config.step_implementation = implementation`; `forward` (default: `model`)
    runs the model, e.g. a compiled `model`."""
    model.config.step_implementation = implementation
    model.zero_grad()
    embeds = inputs_embeds.detach().clone().requires_grad_(True)
    torch.manual_seed(0)  # the same hidden-dropout masks for both implementations
    outputs = (model if forward is None else forward)(
        inputs_embeds=embeds, attention_mask=attention_mask, output_hidden_states=True
    )
    weights = torch.Generator().manual_seed(1)
    loss = sum(
        (tensor.float() * torch.randn(tensor.shape, generator=weights).to(tensor.device)).sum()
        for tensor in (*outputs.hidden_states[1:], outputs.pooler_output)
    )
    loss.backward()
    results = {f"hidden_states[{i}]": h.detach() for i, h in enumerate(outputs.hidden_states)}
    results["pooler_output"] = outputs.pooler_output.detach()
    results["grad inputs_embeds"] = embeds.grad
    # Every parameter but the word embedding (`inputs_embeds` replaces it).
    results.update({f"grad {name}": p.grad for name, p in model.named_parameters() if p.grad is not None})
    return results


def float64_oracle(model, inputs_embeds, attention_mask):
    """`outputs_and_gradients` of the readable step in float64, with `model`'s weights (exactly representable)."""
    oracle = copy.deepcopy(model).double()
    return outputs_and_gradients(oracle, inputs_embeds.double(), attention_mask, "eager")


def assert_close_to_readable(fused, readable, dtype, oracle=None):
    """Every tensor of `fused` within `TOLERANCE[dtype]` of `readable`; in bf16 the gradients as described at
    `BF16_GRADIENT_TOLERANCE`, against the float64 `oracle`."""
    assert fused.keys() == readable.keys()
    errors = {name: relative_error(fused[name], readable[name]) for name in readable}
    if dtype == torch.float32:
        assert max(errors.values()) <= TOLERANCE[dtype], errors
        return
    outputs = {name: error for name, error in errors.items() if not name.startswith("grad ")}
    assert max(outputs.values()) <= TOLERANCE[dtype], outputs
    assert max(errors.values()) <= BF16_GRADIENT_TOLERANCE, errors
    fused_error = max(relative_error(fused[name], oracle[name]) for name in oracle if name.startswith("grad "))
    readable_error = max(relative_error(readable[name], oracle[name]) for name in oracle if name.startswith("grad "))
    assert fused_error <= BF16_GRADIENT_SLACK * readable_error, (fused_error, readable_error)


def padded_batch(config: SLSTMConfig, device, dtype, side="right"):
    """Random word embeddings for `LENGTHS` sentences padded on `side`, and the bool mask."""
    _, mask = pad(random_ids(LENGTHS), side)
    embeds = torch.randn(*mask.shape, config.embedding_dim, generator=torch.Generator().manual_seed(2))
    return embeds.to(device=device, dtype=dtype), mask.to(device)


@needs_triton
@pytest.mark.parametrize(
    ("case", "dtype"),
    [(name, torch.float32) for name in CASES] + [(name, torch.bfloat16) for name in BF16_CASES],
    ids=lambda value: str(value).replace("torch.", ""),
)
def test_fused_step_matches_the_readable_step(case, dtype, device):
    model = build(SLSTMModel, tiny_config(num_steps=2, **CASES[case]), dtype=dtype).to(device)
    embeds, mask = padded_batch(model.config, device, dtype, side="left")
    readable = outputs_and_gradients(model, embeds, mask, "eager")
    fused = outputs_and_gradients(model, embeds, mask, "triton")
    oracle = float64_oracle(model, embeds, mask) if dtype == torch.bfloat16 else None
    assert_close_to_readable(fused, readable, dtype, oracle)
    transition_gradients = [name for name in fused if name.startswith("grad transition.")]
    assert len(transition_gradients) == len(list(model.transition.parameters()))
    for name, tensor in fused.items():
        assert tensor.dtype == readable[name].dtype, name
    # The fused step keeps padding at exactly zero state, and padding receives exactly zero gradient.
    padding = ~mask
    assert not fused["hidden_states[2]"][padding].any()
    assert not fused["grad inputs_embeds"][padding].any()


@needs_triton
def test_fused_step_under_bf16_autocast_and_hidden_dropout(device):
    """bf16 autocast feeds the kernels bf16 matmul outputs and float32 cells; dropout on `h^{t-1}` and `g^{t-1}`
    (training mode) runs before the kernels, with the same masks for both steps under the same seed."""
    model = build(SLSTMModel, tiny_config(num_steps=2, hidden_dropout=0.3, initial_state="input")).to(device).train()
    embeds, mask = padded_batch(model.config, device, torch.float32)
    with torch.autocast(device.type, dtype=torch.bfloat16):
        readable = outputs_and_gradients(model, embeds, mask, "eager")
        fused = outputs_and_gradients(model, embeds, mask, "triton")
    assert_close_to_readable(fused, readable, torch.bfloat16, float64_oracle(model, embeds, mask))


@needs_triton
@pytest.mark.parametrize("case", ["w1 K1 learned sigmoid_softmax"])  # the kept path: every other fused test's
def test_products_kept_or_recomputed_give_the_readable_gradients(case, device, monkeypatch):
    """The backward reads each step's product kept from the forward (short batches) or recomputes it
    (`kept_products_limit` exceeded), with the gradient of the word weights taken over all steps at once or summed
    step by step: both match the readable step, with hidden dropout on the matmuls' inputs."""
    model = build(SLSTMModel, tiny_config(num_steps=3, hidden_dropout=0.3, **CASES[case])).to(device).train()
    embeds, mask = padded_batch(model.config, device, torch.float32, side="left")
    readable = outputs_and_gradients(model, embeds, mask, "eager")
    weights = model.transition.word_window.weight
    states = embeds.new_empty(*mask.shape, model.config.hidden_size)
    assert triton_step.kept_products(3, states, weights) is not None  # this batch is short
    kept = outputs_and_gradients(model, embeds, mask, "triton")
    monkeypatch.setattr(triton_step, "kept_products_limit", lambda device: 0)
    assert triton_step.kept_products(3, states, weights) is None
    recomputed = outputs_and_gradients(model, embeds, mask, "triton")
    assert_close_to_readable(kept, readable, torch.float32)
    assert_close_to_readable(recomputed, readable, torch.float32)


@needs_triton
def test_later_backwards_through_kept_products_give_the_readable_gradients_again(device):
    """The backward writes dP over the products kept from the forward (all but the first step's): every later
    backward through the same graph (`retain_graph=True`) must recompute them, and gives the readable step's
    gradients again."""
    model = build(SLSTMModel, tiny_config(num_steps=3, **CASES["w1 K1 learned sigmoid_softmax"])).to(device).eval()
    embeds, mask = padded_batch(model.config, device, torch.float32, side="left")

    def gradients_of_backwards(implementation):
        model.config.step_implementation = implementation
        outputs = model(inputs_embeds=embeds, attention_mask=mask)
        weights = torch.randn(outputs.last_hidden_state.shape, generator=torch.Generator().manual_seed(1))
        loss = (outputs.last_hidden_state * weights.to(device)).sum() + outputs.pooler_output.sum()
        gradients = []
        for retain_graph in (True, True, False):
            model.zero_grad()
            loss.backward(retain_graph=retain_graph)
            gradients.append({name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None})
        return gradients

    readable, *_ = gradients_of_backwards("eager")
    for gradients in gradients_of_backwards("triton"):
        assert gradients.keys() == readable.keys()
        for name, gradient in gradients.items():
            torch.testing.assert_close(gradient, readable[name], rtol=1e-4, atol=1e-5, msg=name)


@needs_triton
@pytest.mark.parametrize("side", ["right", "left"])
def test_fused_step_is_exact_under_padding(side, device):
    """Each sentence alone gives the same outputs as inside the padded batch, through the fused step."""
    config = tiny_config(num_steps=2, window_size=2, num_sentence_nodes=2, step_implementation="triton")
    model = build(SLSTMModel, config).to(device)
    embeds, mask = padded_batch(config, device, torch.float32, side)
    with torch.no_grad():
        batched = model(inputs_embeds=embeds, attention_mask=mask)
        for row in range(len(LENGTHS)):
            alone = model(inputs_embeds=real(embeds, mask, row).unsqueeze(0))
            torch.testing.assert_close(real(batched.last_hidden_state, mask, row), alone.last_hidden_state[0])
            torch.testing.assert_close(batched.pooler_output[row], alone.pooler_output[0])


@needs_triton
def test_torch_compile_keeps_the_fused_step_in_one_graph(device):
    """`fullgraph=True` fails on any graph break: the kernels are custom operators that the graph calls."""
    model = build(SLSTMModel, tiny_config(num_steps=2, step_implementation="triton")).to(device)
    embeds, mask = padded_batch(model.config, device, torch.float32)
    compiled = torch.compile(model, backend="aot_eager", fullgraph=True)
    expected = outputs_and_gradients(model, embeds, mask, "triton")
    actual = outputs_and_gradients(model, embeds, mask, "triton", forward=compiled)
    errors = {name: relative_error(actual[name], expected[name]) for name in expected}
    assert max(errors.values()) <= TOLERANCE[torch.float32], errors


def upstream_gradient(output: torch.Tensor, layout: str, seed: int) -> torch.Tensor:
    """A random gradient for `output` `(batch, positions or nodes, hidden)` in `layout`: `"expanded"` (one vector
    broadcast with stride 0, as `output.sum().backward()` gives), `"sliced"` (every other column of a wider tensor),
    `"transposed"` (a `(positions, batch, hidden)` tensor transposed), or `"contiguous"`."""
    generator = torch.Generator().manual_seed(seed)
    batch, rows, hidden = output.shape
    draws = {
        "expanded": lambda: torch.randn(hidden, generator=generator).expand(batch, rows, hidden),
        "sliced": lambda: torch.randn(batch, rows, 2 * hidden, generator=generator)[..., 1::2],
        "transposed": lambda: torch.randn(rows, batch, hidden, generator=generator).transpose(0, 1),
        "contiguous": lambda: torch.randn(batch, rows, hidden, generator=generator),
    }
    gradient = draws[layout]().to(device=output.device, dtype=output.dtype)
    assert gradient.is_contiguous() == (layout == "contiguous")
    return gradient


def recurrence_gradients(model, inputs_embeds, attention_mask, implementation, gradients, monkeypatch):
    """The gradients of every parameter and of `inputs_embeds` when the recurrence's outputs receive `gradients`:
    `{name: layout}` for `"step 1"` (`h^1`, an intermediate step's hidden states), `"last step"` (`h^T`) and
    `"sentence states"` (`g^T`, every node), an output left out receiving none (`None` in the backward)."""
    model.config.step_implementation = implementation
    model.zero_grad()
    embeds = inputs_embeds.detach().clone().requires_grad_(True)
    sentence_states = []  # g^T: the readable step's last call, or the fused recurrence's second output
    if implementation == "eager":
        hook = model.transition.register_forward_hook(lambda module, inputs, output: sentence_states.append(output[2]))
    else:
        fused_recurrence = model.transition.fused_recurrence

        def recorded(*args):
            steps, states = fused_recurrence(*args)
            sentence_states.append(states)
            return steps, states

        monkeypatch.setattr(model.transition, "fused_recurrence", recorded)
    outputs = model(inputs_embeds=embeds, attention_mask=attention_mask, output_hidden_states=True)
    if implementation == "eager":
        hook.remove()
    else:
        monkeypatch.undo()
    named = {"step 1": outputs.hidden_states[1], "last step": outputs.last_hidden_state,
             "sentence states": sentence_states[-1]}  # fmt: skip
    chosen = [named[name] for name in gradients]
    seeds = [list(named).index(name) for name in gradients]  # the same draws for both implementations
    torch.autograd.backward(
        chosen, [upstream_gradient(t, gradients[n], s) for t, n, s in zip(chosen, gradients, seeds)]
    )
    results = {"grad inputs_embeds": embeds.grad}
    results.update({f"grad {name}": p.grad for name, p in model.named_parameters() if p.grad is not None})
    return results


GRADIENT_CASES = {
    "all expanded": dict.fromkeys(("step 1", "last step", "sentence states"), "expanded"),
    "all sliced": dict.fromkeys(("step 1", "last step", "sentence states"), "sliced"),
    "all transposed": dict.fromkeys(("step 1", "last step", "sentence states"), "transposed"),
    "step 1 alone (h^1.sum())": {"step 1": "expanded"},
    "none for step 1": {"last step": "sliced", "sentence states": "transposed"},
}


@needs_triton
@pytest.mark.parametrize("case", list(GRADIENT_CASES))
def test_fused_gradients_for_any_upstream_gradient_layout(case, device, monkeypatch):
    """Upstream gradients that are not contiguous (a loss `h.sum()` on one step's hidden states gives a stride-0 one)
    or absent (`None`, an output the loss does not read) reach the kernels as they reach the readable step."""
    model = build(SLSTMModel, tiny_config(num_steps=2, num_sentence_nodes=2)).to(device)
    _, mask = pad(random_ids((5, 2)), "left")
    embeds = torch.randn(*mask.shape, model.config.embedding_dim, generator=torch.Generator().manual_seed(2))
    embeds, mask = embeds.to(device), mask.to(device)
    gradients = GRADIENT_CASES[case]
    readable = recurrence_gradients(model, embeds, mask, "eager", gradients, monkeypatch)
    fused = recurrence_gradients(model, embeds, mask, "triton", gradients, monkeypatch)
    assert readable.keys() <= fused.keys()
    errors = {name: relative_error(fused[name], readable[name]) for name in readable}
    assert max(errors.values()) <= TOLERANCE[torch.float32], errors
    # Parameters that the readable step leaves without a gradient (none reaches them) get zeros from the fused one.
    assert all(not fused[name].any() for name in fused.keys() - readable.keys())


def kernel_tiles(in_the_interpreter: bool = True, **tiles):
    """The kernels tiled by `KernelTiles(**tiles)` within the block, by default in the interpreter too (where they take
    a sentence per tile otherwise)."""
    from modeling_slstm import triton_kernels

    return triton_kernels.using_tiles(triton_kernels.KernelTiles(**tiles), in_the_interpreter)


def assert_fused_matches_readable(actual: dict, expected: dict) -> None:
    """Every float32 output and gradient of the fused recurrence (`actual`) within tolerance of the readable steps'
    (`expected`); gradients, summed over more terms in another order, within 10 times that."""
    assert actual.keys() == expected.keys()
    for name, readable in expected.items():
        tolerance = 10 * TOLERANCE[torch.float32] if name.startswith("grad ") else TOLERANCE[torch.float32]
        assert relative_error(actual[name], readable) <= tolerance, name


@needs_triton
def test_fused_recurrence_matches_the_readable_steps_across_tiles():
    """Eqs. 2-3 over all steps, the fused recurrence against the readable steps, output by output and gradient by
    gradient, at hidden 40 and 37 words (with padding), with the GPU's tiles, which cross position and hidden blocks
    there: the forward's word bodies in 10 position blocks of 4 and 2 hidden blocks of 32, its sentence bodies in 2
    position blocks of 32; the backward's tiles of 8 rows (4 owned, 2 halo rows each side at window 2) in 10 position
    blocks and 3 hidden blocks of 16. Smaller tiles through every head:
    `test_parallel_backward_matches_the_readable_step_and_repeats_bitwise`."""
    if not KERNELS_INTERPRETED:
        pytest.skip("tiles are chosen per GPU where the kernels are compiled: the CUDA cases cover them")
    config = tiny_config(
        hidden_size=40, embedding_dim=8, num_steps=2, window_size=2, num_sentence_nodes=2, initial_state="input"
    )
    model = build(SLSTMModel, config)
    mask = torch.arange(37) < torch.tensor([[37], [23]])  # (batch, seq)
    embeds = torch.randn(2, 37, 8, generator=torch.Generator().manual_seed(3))
    expected = outputs_and_gradients(model, embeds, mask, "eager")
    with kernel_tiles():
        actual = outputs_and_gradients(model, embeds, mask, "triton")
    assert_fused_matches_readable(actual, expected)


@needs_triton
def test_left_padding_longer_than_a_position_block():
    """A sentence whose left padding fills a whole position block and more: the sentence nodes' softmax over the
    positions starts with a block without a real position (where its running maximum must stay finite, or the
    rescaling turns into NaN), and the word bodies start with blocks of padding only. Tiles as small as the case:
    word blocks of 2 positions, sentence blocks of 4 (4 nodes, so that both are small at once), left padding of 5."""
    if not KERNELS_INTERPRETED:
        pytest.skip("tiles are chosen per GPU where the kernels are compiled: the CUDA cases cover them")
    config = tiny_config(hidden_size=4, num_steps=1, num_sentence_nodes=4, initial_state="input")
    model = build(SLSTMModel, config)
    seq, padding = 6, 5
    mask = torch.arange(seq) >= torch.tensor([[0], [padding]])  # (batch, seq): 6 and 1 real words, left-padded
    embeds = torch.randn(2, seq, config.embedding_dim, generator=torch.Generator().manual_seed(4))
    with kernel_tiles(values_per_tile=128, max_block_h=4, max_block_s=4):
        options = triton_step.StepKernels(2, seq, config.hidden_size, config.num_sentence_nodes, config.window_size,
                                          config.gate_normalization == "sigmoid_softmax").forward_options
        word_block, sentence_block = options["WORD_BLOCK_S"], options["SENTENCE_BLOCK_S"]
        assert (word_block, sentence_block) == (2, 4) and padding > sentence_block
        expected = outputs_and_gradients(model, embeds, mask, "eager")
        actual = outputs_and_gradients(model, embeds, mask, "triton")
    assert_fused_matches_readable(actual, expected)


HEAD_CASES = {
    # A head for each way a loss reaches the recurrence (every word's last state, the sentence node's, an attention
    # over the words'), and across them every window and node count the config allows (window_size >= 1) and both
    # gate normalisations; the second takes 2 tiles per backward program (its loop and sums over them).
    "token classification w2 K0 sigmoid_softmax": (
        SLSTMForTokenClassification, {"window_size": 2, "num_sentence_nodes": 0}, {}
    ),
    "sentence-node classifier w1 K2 softmax": (
        SLSTMForSequenceClassification, {"num_sentence_nodes": 2, "gate_normalization": "softmax"},
        {"backward_tiles_per_program": 2},
    ),
    "attention-pooling classifier w2 K1 sigmoid_softmax": (
        SLSTMForSequenceClassification, {"window_size": 2, "classifier_pooling": "attention"}, {}
    ),
}  # fmt: skip
HEAD_LENGTHS = (13, 6, 1)  # 13: no multiple of a backward tile's owned rows (6 at window 1, 4 at window 2)
SMALL_GPU_TILES = {
    "values_per_tile": 512, "max_block_h": 8, "backward_values_per_tile": 512, "backward_max_block_h": 8
}  # fmt: skip


def head_gradients(model, ids, mask, labels) -> dict[str, torch.Tensor]:
    """The gradient of every parameter under the head's loss."""
    model.zero_grad()
    model(input_ids=ids, attention_mask=mask, labels=labels).loss.backward()
    return {f"grad {name}": p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


@needs_triton
@pytest.mark.parametrize("offsets", ["int32", "int64"])
def test_long_sentences_layout_matches_the_readable_steps_and_repeats_bitwise(offsets, monkeypatch):
    """The launches of sentences too long for grid axis y (`triton_step.launch_grid`), forced at 13 words by a limit
    of 2 programs on axes y and z: each sentence's programs on axis x (3 of them, in small tiles of 8 positions), the
    3 sentences on axes y and z in 2 rows of 2 (one program past the batch's end); with int32 offsets within a
    sentence and, from a limit of 0 values, int64 ones (`INT64_OFFSETS`). Gradients as the readable step's, the
    same bits at a second run."""
    if not KERNELS_INTERPRETED:
        pytest.skip("the grid limits are CUDA's own on a GPU: test_launch_grids.py checks every launch against them")
    monkeypatch.setattr(triton_step, "MAX_GRID", (2**31 - 1, 2, 2))
    if offsets == "int64":
        monkeypatch.setattr(triton_step, "INT32_OFFSETS_LIMIT", 0)
    config = tiny_config(hidden_size=8, num_steps=2, initial_state="input")  # window 1, one sentence node
    model = build(SLSTMForTokenClassification, config)
    ids, mask = pad(random_ids(HEAD_LENGTHS), "right")
    labels = torch.randint(0, 2, ids.shape, generator=torch.Generator().manual_seed(5)).masked_fill(~mask, -100)
    expected = head_gradients(model, ids, mask, labels)
    model.config.step_implementation = "triton"
    triton_step.step_kernels.cache_clear()  # none made under the real limits
    try:
        with kernel_tiles(**SMALL_GPU_TILES):
            kernels = triton_step.StepKernels(len(HEAD_LENGTHS), max(HEAD_LENGTHS), 8, 1, 1, True)
            assert kernels.forward_grid == (3, 2, 2) and kernels.backward_grid == (3, 2, 2)
            options = kernels.backward_options
            assert options["LONG_SENTENCES"] and options["INT64_OFFSETS"] == (offsets == "int64")
            first = head_gradients(model, ids, mask, labels)
            second = head_gradients(model, ids, mask, labels)
    finally:
        triton_step.step_kernels.cache_clear()  # none kept for the real limits
    assert_fused_matches_readable(first, expected)
    for name, gradient in first.items():
        assert torch.equal(second[name], gradient), name


@needs_triton
@pytest.mark.parametrize("case", list(HEAD_CASES))
def test_parallel_backward_matches_the_readable_step_and_repeats_bitwise(case):
    """The backward's tiling as on a GPU (8 positions a tile, `2w` of them halo rows recomputed, 8 hidden units;
    position blocks whose partial sums `step_sums_kernel` adds up), in the interpreter, through each head: at a
    length that is no multiple of a tile's owned rows, left-padded, every parameter's gradient is the readable
    step's; and two runs give the same bits (the sums over positions in a fixed order, no atomics)."""
    if not KERNELS_INTERPRETED:
        pytest.skip("tiles are chosen per GPU where the kernels are compiled: the CUDA cases cover them")
    model_class, settings, tiles = HEAD_CASES[case]
    config = tiny_config(hidden_size=12, num_steps=2, initial_state="input", **settings)
    model = build(model_class, config)
    ids, mask = pad(random_ids(HEAD_LENGTHS), "left")
    if model_class is SLSTMForTokenClassification:
        labels = torch.randint(0, 2, ids.shape, generator=torch.Generator().manual_seed(5)).masked_fill(~mask, -100)
    else:
        labels = torch.tensor([0, 1, 1])
    expected = head_gradients(model, ids, mask, labels)
    model.config.step_implementation = "triton"
    with kernel_tiles(**SMALL_GPU_TILES, **tiles):
        kernels = triton_step.StepKernels(
            len(HEAD_LENGTHS), max(HEAD_LENGTHS), 12, config.num_sentence_nodes, config.window_size,
            config.gate_normalization == "sigmoid_softmax",
        )  # fmt: skip
        owned = kernels.backward_options["BLOCK_S"] - 2 * config.window_size
        assert kernels.backward_options["BLOCK_S"] == 8 and max(HEAD_LENGTHS) % owned and kernels.position_blocks > 1
        first = head_gradients(model, ids, mask, labels)
        second = head_gradients(model, ids, mask, labels)
    assert_fused_matches_readable(first, expected)
    for name, gradient in first.items():
        assert torch.equal(second[name], gradient), name


@needs_triton
def test_the_backward_programs_grow_with_the_sentence():
    """With a GPU's tiles, for the paper configuration (hidden 300, window 1, one sentence node) at 64 and 512 words:
    the backward, like the forward, launches at least 4 times as many programs for the longer sentences, each with
    the same tiles (its work does not grow with the length)."""
    with kernel_tiles():
        short, long = (triton_step.StepKernels(32, seq, 300, 1, 1, True) for seq in (64, 512))
    for launch in ("forward", "backward"):
        grids = [getattr(kernels, f"{launch}_grid") for kernels in (short, long)]
        assert math.prod(grids[1]) >= 4 * math.prod(grids[0]), (launch, grids)
        options = [getattr(kernels, f"{launch}_options") for kernels in (short, long)]
        assert options[1] == {**options[0], "seq": 512}, launch


@needs_triton
def test_use_tiles_holds_for_a_shape_already_launched():
    """The launches are worked out once per shape (`StepKernels.for_cells`), and `use_tiles` holds for every later
    launch: at 32 x 64 words x 300 hidden units, the launches under a tiling are those it makes anew (uncached),
    after launches of the same shape under another tiling (wider backward tiles, then the interpreter's own), and
    again after a return to the first."""
    cells, sentence_cells = torch.empty(32, 64, 300, device="meta"), torch.empty(32, 1, 300, device="meta")

    def launches(in_the_interpreter=True, **tiles) -> dict:
        with kernel_tiles(in_the_interpreter, **tiles):
            cached = vars(triton_step.StepKernels.for_cells(cells, sentence_cells, 1, True))
            assert cached == vars(triton_step.StepKernels(32, 64, 300, 1, 1, True)), (in_the_interpreter, tiles)
        return cached

    first = launches()
    wide = launches(backward_values_per_tile=4096, backward_max_block_h=32)
    launches(in_the_interpreter=False)
    assert launches() == first
    assert (first["backward_options"]["BLOCK_H"], wide["backward_options"]["BLOCK_H"]) == (16, 32)


@needs_triton
@pytest.mark.parametrize("seq", [1, 5, 16, 32, 37])  # 16 and 32: powers of 2 (the positions alone fill a tile)
@pytest.mark.parametrize(("window_size", "nodes"), [(1, 1), (2, 0), (2, 2)])
def test_the_interpreter_takes_a_sentence_per_program(seq, window_size, nodes, monkeypatch):
    """The interpreter pays per program, and takes a sentence per program (`tile_options`): the forward's word body
    and (with sentence nodes) its sentence body one program each, the backward one, whose tile holds the sentence's
    positions and its `w` halo rows on each side; at any length, a power of 2 included (where the positions alone
    fill a tile, the halo rows would take a second)."""
    from modeling_slstm import triton_kernels

    monkeypatch.setattr(triton_kernels, "KERNELS_INTERPRETED", True)  # the interpreter's tiles, wherever this runs
    monkeypatch.setattr(triton_kernels, "TILE_IN_THE_INTERPRETER", False)
    batch = 3
    kernels = triton_step.StepKernels(batch, seq, 12, nodes, window_size, sigmoid_scores=True)
    assert math.prod(kernels.forward_grid) == batch * (2 if nodes else 1), kernels.forward_grid
    assert math.prod(kernels.backward_grid) == batch and kernels.position_blocks == 1, kernels.backward_grid


def test_the_buffers_the_kernels_write_are_guarded(guarded_kernel_buffers):
    """The step's launchers make every buffer its kernels write inside the guard regions of `guarded_kernel_buffers`
    (which every test here takes), and a store one element past a buffer fails their check, which names it."""
    cells, sentence_cells = torch.zeros(2, 3, 4), torch.zeros(2, 1, 4)
    buffers = [
        *triton_step.step_update_outputs(cells, sentence_cells),
        *triton_step.step_update_gradients(torch.zeros(2, 5), cells, sentence_cells),
        triton_step.kept_products(2, cells, torch.zeros(8, 4)),
        triton_step.d_product_room(torch.zeros(2, 3, 8), (None, None), 1),
    ]
    guarded = [(whole[start:end].data_ptr(), end - start) for whole, start, end, _ in guarded_kernel_buffers.guarded]
    assert guarded == [(buffer.data_ptr(), buffer.numel()) for buffer in buffers]
    whole, _, end, _ = guarded_kernel_buffers.guarded[-1]
    whole[end] = 0.0
    with pytest.raises(AssertionError, match=r"d_product_room's \(2, 3, 8\) torch.float32 at elements 48 to 48"):
        guarded_kernel_buffers.assert_guards_intact()
    whole[end : end + 1].view(torch.uint8).fill_(CANARY_BYTE)  # intact again for the fixture's check


def fused_launches(monkeypatch) -> list[str]:
    """Records every launch of the fused step's forward kernel (direct in eager mode, or through its operator)."""
    launches = []
    launch = triton_step.StepKernels.forward
    monkeypatch.setattr(
        triton_step.StepKernels, "forward", lambda *args: launches.append("step_update") or launch(*args)
    )
    return launches


@needs_triton
@pytest.mark.parametrize(
    ("implementation", "fused"), [("eager", False), ("triton", True), ("auto", None)]
)  # fmt: skip
def test_step_implementation_chooses_the_step(implementation, fused, device, monkeypatch):
    """`"auto"` takes the fused step on CUDA tensors only (on the CPU the readable step keeps its speed)."""
    launches = fused_launches(monkeypatch)
    model = build(SLSTMModel, tiny_config(num_steps=3, step_implementation=implementation)).to(device)
    embeds, mask = padded_batch(model.config, device, torch.float32)
    model(inputs_embeds=embeds, attention_mask=mask)
    expected = fused if fused is not None else device.type == "cuda"
    assert launches == (["step_update"] * 3 if expected else [])


D_INPUT_TERMS, LATER_STEPS, D_PRODUCT = 5, 6, 7  # positions in the arguments of `step_update_backward`


def recorded_backward_launches(monkeypatch) -> list[tuple[list, list]]:
    """Records every launch of the fused step's backward kernel as `(arguments, results)`: its arguments as they came
    (copies), and its returned gradients followed by `d_input_terms` and `d_product` as it wrote them."""
    launches = []
    launch = triton_step.StepKernels.backward

    def recorded(kernels, *args):
        copies = [arg.clone() if isinstance(arg, torch.Tensor) else arg for arg in args]
        outputs = launch(kernels, *args)
        launches.append((copies, [*outputs, args[D_INPUT_TERMS].clone(), args[D_PRODUCT].clone()]))
        return outputs

    monkeypatch.setattr(triton_step.StepKernels, "backward", recorded)
    return launches


@needs_triton
def test_the_backward_operator_refuses_to_write_into_a_non_contiguous_tensor(device, monkeypatch):
    """`step_update_backward` writes the product's gradient into `d_product` and adds that of `U x + b` into
    `d_input_terms`, as contiguous tensors. A direct caller's contiguous tensors get what the recurrence's own launch
    wrote; the same values in another layout (transposed) are refused by name, not written as if contiguous."""
    model = build(SLSTMModel, tiny_config(num_steps=2)).to(device)
    model.config.step_implementation = "triton"
    _, mask = pad(random_ids((3, 1)))
    embeds = torch.randn(*mask.shape, model.config.embedding_dim, generator=torch.Generator().manual_seed(2))
    embeds, mask = embeds.to(device), mask.to(device)
    launches = recorded_backward_launches(monkeypatch)
    model(inputs_embeds=embeds.requires_grad_(True), attention_mask=mask).last_hidden_state.square().sum().backward()
    arguments, expected = launches[-1]  # the first step's: later_steps, so d_input_terms is read and added to
    assert arguments[LATER_STEPS] is True
    sigmoid_scores = model.config.gate_normalization == "sigmoid_softmax"
    options = {"window_size": model.config.window_size, "sigmoid_scores": sigmoid_scores}

    def direct_call(index: int | None = None, tensor: torch.Tensor | None = None) -> list[torch.Tensor]:
        """The operator on copies of `arguments` (it writes in place), argument `index` replaced by `tensor`."""
        fresh = [arg.clone() if isinstance(arg, torch.Tensor) else arg for arg in arguments]
        if index is not None:
            fresh[index] = tensor
        outputs = triton_step.step_update_backward(*fresh, **options)
        return [*outputs, fresh[D_INPUT_TERMS], fresh[D_PRODUCT]]

    for actual, wanted in zip(direct_call(), expected, strict=True):
        torch.testing.assert_close(actual, wanted, rtol=0, atol=0)
    for name, index in (("d_input_terms", D_INPUT_TERMS), ("d_product", D_PRODUCT)):
        transposed = arguments[index].transpose(0, 1).contiguous().transpose(0, 1)  # same values, another layout
        assert not transposed.is_contiguous() and torch.equal(transposed, arguments[index])
        with pytest.raises(ValueError, match=rf"^{name} must be contiguous \(the kernel writes it in place\)"):
            direct_call(index, transposed)


@needs_triton
def test_a_float16_model_runs_the_kernels(device, monkeypatch):
    """float16 is one of the kernels' dtypes: a float16 model forced to `"triton"` launches them, and its outputs are
    those of the readable step within float16's precision."""
    launches = fused_launches(monkeypatch)
    model = build(SLSTMModel, tiny_config(num_steps=2), dtype=torch.float16).to(device)
    embeds, mask = padded_batch(model.config, device, torch.float16)
    with torch.no_grad():
        readable = model(inputs_embeds=embeds, attention_mask=mask).last_hidden_state
        model.config.step_implementation = "triton"
        fused = model(inputs_embeds=embeds, attention_mask=mask).last_hidden_state
    assert launches == ["step_update"] * 2
    assert fused.dtype == torch.float16 and relative_error(fused, readable) <= 1e-2


def test_step_implementation_is_validated():
    with pytest.raises(ValueError, match=r"step_implementation must be one of \('auto', 'eager', 'triton'\), got 'x'"):
        SLSTMConfig(step_implementation="x")
    model = build(SLSTMModel, tiny_config())
    model.config.step_implementation = "fast"  # set after construction: checked when the step runs
    ids, mask = pad(random_ids(LENGTHS))
    with pytest.raises(ValueError, match=r"step_implementation must be one of .*got 'fast'"):
        model(input_ids=ids, attention_mask=mask)


@pytest.mark.parametrize(
    ("overrides", "dtype", "reason"),
    [
        ({"context_independent_content": True}, torch.float32, "context_independent_content=True is not covered"),
        ({"remove_output_gate": True}, torch.float32, "remove_output_gate=True is not covered"),
        ({}, torch.float64, "the dtype is torch.float64"),
    ],
)
def test_unsupported_options_take_the_readable_step_or_fail_clearly(overrides, dtype, reason):
    model = build(SLSTMModel, tiny_config(**overrides), dtype=dtype)
    ids, mask = pad(random_ids(LENGTHS))
    expected = model(input_ids=ids, attention_mask=mask).last_hidden_state
    model.config.step_implementation = "auto"  # the readable step, the same outputs
    torch.testing.assert_close(model(input_ids=ids, attention_mask=mask).last_hidden_state, expected, rtol=0, atol=0)
    model.config.step_implementation = "triton"
    with pytest.raises(ValueError, match=rf"step_implementation='triton' cannot run the fused step here: .*{reason}"):
        model(input_ids=ids, attention_mask=mask)


def test_the_package_imports_and_runs_without_triton():
    """With `triton` unimportable, the package imports, `"auto"` runs the readable step and `"triton"` says why it
    cannot run."""
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    run = subprocess.run(
        [sys.executable, str(HERE / "run_without_triton.py")],
        check=False,
        cwd=REPO,
        env=environment,
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr


@needs_triton
def test_cpu_cases_in_the_interpreter():
    """Where this process compiled the kernels (a GPU machine), the CPU cases in a fresh process with
    `TRITON_INTERPRET=1`."""
    if KERNELS_INTERPRETED:
        pytest.skip("the kernels are interpreted in this process: the CPU cases ran here")
    environment = {**os.environ, "TRITON_INTERPRET": "1"}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", __file__, "-k", "cpu"]
    run = subprocess.run(command, check=False, cwd=REPO, env=environment, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout[-5000:]


@needs_triton
def test_kernels_compile_for_a_gpu():
    """Each kernel compiles to an sm_90 binary (`compile_kernels_for_a_gpu.py`), which needs no GPU."""
    environment = {name: value for name, value in os.environ.items() if name != "TRITON_INTERPRET"}
    environment["PYTHONPATH"] = os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])
    command = [sys.executable, str(HERE / "compile_kernels_for_a_gpu.py"), "step"]
    run = subprocess.run(command, check=False, cwd=REPO, env=environment, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-5000:]


@needs_triton
def test_gradient_checkpointing_leaves_the_fused_recurrence_as_it_is(device):
    """The fused recurrence saves only each step's inputs, what checkpointing every step would keep: with gradient
    checkpointing enabled it runs unchanged, with the same gradients."""
    model = build(SLSTMModel, tiny_config(num_steps=2)).to(device).train()
    embeds, mask = padded_batch(model.config, device, torch.float32)
    plain = outputs_and_gradients(model, embeds, mask, "triton")
    model.gradient_checkpointing_enable()
    checkpointed = outputs_and_gradients(model, embeds, mask, "triton")
    assert plain.keys() == checkpointed.keys()
    for name, tensor in plain.items():
        assert torch.equal(checkpointed[name], tensor), name
