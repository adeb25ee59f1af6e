"""Tests of the CRF's Triton kernels (`modeling_slstm/triton_crf.py`) against the CRF's plain loops (`crf.py`), which
`test_crf.py` checks against brute-force enumeration and pytorch-crf; and of where the kernels run
(`modeling_slstm/kernel_dispatch.py`).

The kernels run on CUDA tensors where this process compiles them (a GPU machine, `TRITON_INTERPRET` unset), and on
CPU tensors in Triton's interpreter where it interprets them (`tests/conftest.py` sets `TRITON_INTERPRET=1` without a
GPU); elsewhere the tests that launch them skip and say why. The loops they are compared with run on the CPU. Inputs
stay within one tag tile (`BLOCK_TAGS`) and a few positions: the interpreter pays for every operation.
"""

import copy
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from test_crf import BIO_LABELS, BIOES_LABELS, MASKS, padded_inputs, random_crf

from modeling_slstm import crf as crf_module
from modeling_slstm import kernel_dispatch, triton_crf
from modeling_slstm.crf import ConditionalRandomField
from modeling_slstm.kernel_dispatch import KERNELS_INTERPRETED, TRITON_IMPORT_ERROR, kernel_device_obstacle
from modeling_slstm.validation import IGNORE_INDEX

HERE = Path(__file__).resolve().parent
CPU = torch.device("cpu")


def kernel_device() -> tuple[torch.device | None, str]:
    """The device whose tensors this process's kernels take, or None and why there is none."""
    if TRITON_IMPORT_ERROR:
        return None, f"{TRITON_IMPORT_ERROR}: pip install the test extra"
    if KERNELS_INTERPRETED:
        return CPU, ""
    if torch.cuda.is_available():
        return torch.device("cuda"), ""
    return None, "the kernels are compiled in this process (TRITON_INTERPRET is not 1) and there is no CUDA GPU"


DEVICE, NO_DEVICE_REASON = kernel_device()
needs_kernels = pytest.mark.skipif(DEVICE is None, reason=NO_DEVICE_REASON)
pytestmark = pytest.mark.usefixtures("guarded_kernel_buffers")  # every buffer a kernel writes, in guard regions


def on_device(crf: ConditionalRandomField, inputs: dict, device: torch.device) -> tuple:
    """A copy of ``crf`` and the ``inputs`` (emissions, tags, mask) on ``device``."""
    return copy.deepcopy(crf).to(device), {name: value.to(device) for name, value in inputs.items()}


def make_leaf(emissions: torch.Tensor, layout: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Emissions ``(batch, seq, L)`` with the values of ``emissions`` in ``layout``, and the leaf whose gradient is
    theirs: `"contiguous"`; `"transposed"` (seq-major storage); `"sliced"` (every other column of a wider tensor);
    `"expanded"` (the first sentence repeated over the batch with stride 0: the values change)."""
    if layout == "expanded":
        leaf = emissions[:1].detach().clone().requires_grad_()
        return leaf, leaf.expand_as(emissions)
    if layout == "transposed":
        leaf = emissions.transpose(0, 1).detach().clone().requires_grad_()
        return leaf, leaf.transpose(0, 1)
    if layout == "sliced":
        leaf = emissions.repeat_interleave(2, dim=-1).detach().clone().requires_grad_()
        return leaf, leaf[..., ::2]
    leaf = emissions.detach().clone().requires_grad_()
    return leaf, leaf


def upstream_loss(output: torch.Tensor, upstream: str) -> torch.Tensor:
    """A scalar loss on ``output`` whose gradient reaches it in the layout ``upstream`` names: `"weighted"`
    (contiguous, a different weight per value), `"expanded"` (stride 0, the gradient of a sum), `"sliced"` (every other
    value of a stacked pair's gradient), `"transposed"` (a select of a transposed gradient)."""
    weights = torch.linspace(0.5, 2.0, 2 * output.numel(), device=output.device)
    if upstream == "expanded":
        return output.sum()
    if upstream == "sliced":
        return (torch.stack([output, output.detach()], dim=-1) * weights.view(*output.shape, 2)).sum()
    if upstream == "transposed":
        return (torch.stack([output, output.detach()]).movedim(0, -1) * weights.view(*output.shape, 2)).sum()
    return (output * weights[: output.numel()].view_as(output)).sum()


def run(crf, inputs, implementation, device=CPU, layout="contiguous", upstream=("weighted", "weighted")):
    """The log-likelihood, decoded tags and max-marginals of ``crf`` on ``inputs`` with ``implementation`` on
    ``device``, with the emissions in ``layout`` (`make_leaf`), and the gradients (of the emissions' leaf, then the
    CRF's parameters) of a loss on the log-likelihood and of one on the max-marginals, their upstream gradients in the
    layouts ``upstream`` names (`upstream_loss`; `"absent"`: no loss on that output). All returned on the CPU, with
    the layout each upstream gradient reached the output in."""
    crf, inputs = on_device(crf, inputs, device)
    leaf, emissions = make_leaf(inputs["emissions"], layout)
    log_likelihood = crf.log_likelihood(emissions, inputs["tags"], inputs["mask"], implementation)
    max_marginals = crf.max_marginals(emissions, inputs["mask"], implementation)
    decoded = crf.decode(emissions, inputs["mask"], implementation)
    gradients, strides = [], {}
    for index, (output, layout_name) in enumerate(zip((log_likelihood, max_marginals), upstream)):
        if layout_name == "absent":
            gradients.append(None)
            continue
        output.register_hook(lambda gradient, index=index: strides.__setitem__(index, gradient.stride()))
        wanted = [leaf, *crf.parameters()]
        found = torch.autograd.grad(upstream_loss(output, layout_name), wanted, retain_graph=True, allow_unused=True)
        gradients.append([torch.zeros_like(w) if g is None else g.to(CPU) for g, w in zip(found, wanted)])
    values = (log_likelihood.detach().to(CPU), decoded.to(CPU), max_marginals.detach().to(CPU))
    return SimpleNamespace(values=values, gradients=gradients, strides=strides)


def assert_kernels_match_the_loops(crf, inputs, layout="contiguous", upstream=("weighted", "weighted")):
    """The kernels on `DEVICE` against the loops on the CPU: the log-likelihood (float32 loops), its gradients
    (float64 loops: the float32 loops are themselves up to ~5e-5 off them), the decoded tags exactly, the
    max-marginals and their gradients (float32 loops: the kernels' backward recomputes theirs)."""
    actual = run(crf, inputs, "triton", DEVICE, layout, upstream)
    expected = run(crf, inputs, "eager", CPU, layout, upstream)
    exact_inputs = {**inputs, "emissions": inputs["emissions"].double()}
    exact = run(crf.double(), exact_inputs, "eager", CPU, layout, upstream)
    low_precision = inputs["emissions"].dtype != torch.float32
    torch.testing.assert_close(actual.values[0], expected.values[0], rtol=1e-5, atol=1e-4)
    assert torch.equal(actual.values[1], expected.values[1])
    torch.testing.assert_close(actual.values[2], expected.values[2], rtol=0, atol=1e-5)
    mask = inputs["mask"]
    assert torch.equal(actual.values[2].argmax(-1)[mask], actual.values[1][mask])
    tolerance = {"rtol": 1e-2, "atol": 1e-4} if low_precision else {"rtol": 0, "atol": 1e-4}
    if actual.gradients[0] is not None:
        assert actual.gradients[0][0].dtype == inputs["emissions"].dtype
        for gradient, exact_gradient in zip(actual.gradients[0], exact.gradients[0], strict=True):
            torch.testing.assert_close(gradient.double(), exact_gradient, **tolerance)
    if actual.gradients[1] is not None:
        for gradient, expected_gradient in zip(actual.gradients[1], expected.gradients[1], strict=True):
            torch.testing.assert_close(gradient, expected_gradient, rtol=1e-5, atol=1e-5)
    return actual


def tied_crf() -> tuple[ConditionalRandomField, dict]:
    # Tags must alternate, so [0, 1, 0] and [1, 0, 1] tie as best paths (test_crf's tie test).
    crf = ConditionalRandomField(2)
    with torch.no_grad():
        for parameter in crf.parameters():
            parameter.zero_()
        crf.transitions.fill_diagonal_(-5.0)
    mask = torch.tensor([[1, 1, 1, 0], [0, 1, 1, 1]], dtype=torch.bool)
    return crf, {"emissions": torch.zeros(2, 4, 2), "tags": torch.tensor([[0, 1, 0, 0], [0, 1, 0, 1]]), "mask": mask}


def zero_parameter_bio_crf() -> tuple[ConditionalRandomField, dict]:
    # Every allowed path ties (test_crf's zero-parameter test): ties go to the lowest tag, O.
    crf = ConditionalRandomField.from_labels(BIO_LABELS)
    with torch.no_grad():
        for parameter in crf.parameters():
            parameter.zero_()
    tags = torch.zeros(len(MASKS), 5, dtype=torch.long).masked_fill(~MASKS, IGNORE_INDEX)
    return crf, {"emissions": torch.full((len(MASKS), 5, crf.num_tags), 0.25), "tags": tags, "mask": MASKS}


def random_crf_over_every_mask(num_tags: int, seed: int) -> tuple[ConditionalRandomField, dict]:
    # Full, right- and left-padded, holed, single-position and empty chains; random (often forbidden) gold tags.
    crf = random_crf(num_tags, seed=seed)
    generator = torch.Generator().manual_seed(seed)
    emissions = torch.randn(len(MASKS), 5, num_tags, generator=generator)
    tags = torch.randint(num_tags, (len(MASKS), 5), generator=generator).masked_fill(~MASKS, IGNORE_INDEX)
    return crf, {"emissions": emissions, "tags": tags, "mask": MASKS}


def bioes_crf_with_forbidden_gold_paths() -> tuple[ConditionalRandomField, dict]:
    # Random gold tags under BIOES constraints: most paths carry the likelihood's penalty for a forbidden move.
    crf = random_crf(len(BIOES_LABELS), BIOES_LABELS, scale=2.0, seed=6)
    return crf, padded_inputs(len(BIOES_LABELS), batch=4, length=5, seed=6)


def all_masked_bio_crf() -> tuple[ConditionalRandomField, dict]:
    crf = ConditionalRandomField.from_labels(BIO_LABELS)
    tags = torch.full((2, 3), IGNORE_INDEX)
    return crf, {"emissions": torch.randn(2, 3, len(BIO_LABELS)), "tags": tags, "mask": torch.zeros(2, 3, dtype=bool)}


CASES = {
    "3 tags, every mask": lambda: random_crf_over_every_mask(3, seed=3),
    "4 tags, every mask": lambda: random_crf_over_every_mask(4, seed=4),
    "two tied best paths": tied_crf,
    "zero parameters, BIO": zero_parameter_bio_crf,
    "BIOES, forbidden gold paths": bioes_crf_with_forbidden_gold_paths,
    "all masked": all_masked_bio_crf,
}


@needs_kernels
@pytest.mark.parametrize("case", CASES)
def test_kernels_match_the_loops(case):
    crf, inputs = CASES[case]()
    assert_kernels_match_the_loops(crf, inputs)


@needs_kernels
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_kernels_match_the_loops_on_long_padded_sentences(dtype):
    # 10 positions with left and right padding, a hole and an empty sentence; BIOES: 9 tags padded to 16 in the
    # kernels, constraints applied there. The kernels read bfloat16 emissions as they are; the loops cast them first.
    crf = random_crf(len(BIOES_LABELS), BIOES_LABELS, scale=0.5, seed=15)
    inputs = padded_inputs(len(BIOES_LABELS), batch=4, length=10, seed=4)
    inputs["emissions"] = inputs["emissions"].to(dtype)
    inputs["tags"] = crf.decode(inputs["emissions"], inputs["mask"])  # allowed gold paths, so the loss is not ~1e4
    actual = assert_kernels_match_the_loops(crf, inputs)
    assert torch.all(actual.gradients[0][0][~inputs["mask"]] == 0)


@needs_kernels
@pytest.mark.parametrize("layout", ["transposed", "sliced", "expanded"])
def test_kernels_take_emissions_in_any_layout(layout):
    crf, inputs = random_crf_over_every_mask(4, seed=8)
    inputs["mask"], inputs["tags"] = inputs["mask"].t().contiguous().t(), inputs["tags"].t().contiguous().t()
    assert not inputs["mask"].is_contiguous()
    assert_kernels_match_the_loops(crf, inputs, layout)


@needs_kernels
@pytest.mark.parametrize("upstream", ["expanded", "sliced", "transposed", "absent"])
@pytest.mark.parametrize("output", ["log_likelihood", "max_marginals"])
def test_gradients_for_any_upstream_layout(output, upstream):
    # The gradient that reaches an output may be a view (the expanded gradient of a sum, a select of a stacked or
    # transposed one) or none at all; the other output takes a plain weighted loss.
    crf, inputs = random_crf_over_every_mask(3, seed=9)
    layouts = (upstream, "weighted") if output == "log_likelihood" else ("weighted", upstream)
    actual = assert_kernels_match_the_loops(crf, inputs, upstream=layouts)
    if upstream != "absent":  # the loss gave the output the layout under test
        index = 0 if output == "log_likelihood" else 1
        stride = actual.strides[index]
        shape = inputs["emissions"].shape[:1] if output == "log_likelihood" else inputs["emissions"].shape
        assert stride != torch.empty(shape).stride()
        assert (0 in stride) == (upstream == "expanded")


@needs_kernels
def test_launchers_take_parameters_and_masks_in_any_layout():
    # The operators are public (`torch.ops`): a caller may pass transposed transitions and constraint buffers.
    crf, inputs = random_crf_over_every_mask(4, seed=10)
    crf, inputs = on_device(crf, inputs, DEVICE)
    emissions, tags, mask = inputs["emissions"], inputs["tags"], inputs["mask"]
    scores = (crf.start_transitions, crf.end_transitions, crf.transitions)
    constraints = (crf.start_allowed, crf.end_allowed, crf.transition_allowed)
    transposed = (*scores[:2], scores[2].t().contiguous().t(), *constraints[:2], constraints[2].t().contiguous().t())
    assert not transposed[2].is_contiguous()
    expected = triton_crf.crf_viterbi(emissions, mask, *scores, *constraints, 2.0**-13, True)
    actual = triton_crf.crf_viterbi(emissions.transpose(0, 1).contiguous().transpose(0, 1), mask, *transposed,
                                    2.0**-13, True)  # fmt: skip
    assert torch.equal(actual[0], expected[0]) and torch.equal(actual[1], expected[1])
    expected = triton_crf.crf_log_likelihood(emissions, tags, mask, *scores, *constraints, -1e4)
    actual = triton_crf.crf_log_likelihood(emissions, tags.t().contiguous().t(), mask, *transposed, -1e4)
    torch.testing.assert_close(actual[0], expected[0], rtol=0, atol=0)
    assert not expected[1].requires_grad and not expected[2].requires_grad  # the backward's inputs only


@needs_kernels
@pytest.mark.parametrize("bad_tag", [3, -1])
def test_out_of_range_tags_make_the_sentence_nan_in_the_kernels(bad_tag):
    # The forward methods read no values beforehand (a host sync): the loops fail on a tag outside [0, num_tags) at a
    # chain position, in an indexing that the CRF names; the kernels, which cannot raise without waiting for the
    # device, make that sentence's loss and gradients NaN. The other sentences, and any tag at masked positions, are
    # unaffected.
    crf, inputs = random_crf_over_every_mask(3, seed=11)
    inputs["tags"][0, 2] = bad_tag  # a chain position of sentence 0 (all positions)
    inputs["tags"][1, 4] = bad_tag  # a masked position of sentence 1
    emissions, tags, mask = inputs.values()
    with pytest.raises(ValueError, match=r"tags at unmasked positions must be in \[0, 3\)"):
        crf.log_likelihood(emissions, tags, mask, implementation="eager")
    expected = crf.log_likelihood(emissions[1:], tags[1:], mask[1:], implementation="eager")
    crf, inputs = on_device(crf, inputs, DEVICE)
    emissions = inputs["emissions"].detach().requires_grad_()
    log_likelihood = crf.log_likelihood(emissions, inputs["tags"], inputs["mask"], implementation="triton")
    log_likelihood.sum().backward()
    assert torch.isnan(log_likelihood[0]) and torch.isnan(emissions.grad[0]).all()
    assert torch.isnan(crf.transitions.grad).all()  # summed over the batch: a bad tag cannot train silently
    torch.testing.assert_close(log_likelihood[1:].detach().cpu(), expected.detach(), rtol=1e-5, atol=1e-4)


def test_the_tag_limit_is_an_obstacle_at_one_over_it():
    limit = triton_crf.MAX_KERNEL_TAGS
    device = DEVICE or CPU
    emissions = {
        tags: torch.randn(2, 3, tags, generator=torch.Generator().manual_seed(tags)) for tags in (limit, limit + 1)
    }
    over = ConditionalRandomField(limit + 1).to(device)
    limit_message = f"there are {limit + 1} tags, and the kernels take at most {limit}"
    assert limit_message in over.kernel_obstacles(emissions[limit + 1].to(device))
    with pytest.raises(
        ValueError, match=f"implementation='triton' cannot run the CRF's kernels here: .*{limit_message}"
    ):
        over.decode(emissions[limit + 1].to(device), implementation="triton")
    if DEVICE is None:
        return
    # "auto" falls back to the loops one over the limit (on a GPU; on a CPU it always takes them) and takes the
    # kernels at the limit, where they agree with the loops.
    assert not over.uses_kernels(emissions[limit + 1].to(device), "auto")
    expected = over.to(CPU).decode(emissions[limit + 1], implementation="eager")
    assert torch.equal(over.to(device).decode(emissions[limit + 1].to(device), implementation="auto").cpu(), expected)
    at_limit = random_crf(limit, seed=12)
    assert at_limit.to(device).kernel_obstacles(emissions[limit].to(device)) == []
    assert at_limit.uses_kernels(emissions[limit].to(device), "auto") == (device.type == "cuda")
    inputs = {
        "emissions": emissions[limit],
        "tags": torch.randint(limit, (2, 3)),
        "mask": torch.ones(2, 3, dtype=bool),
    }
    actual = run(at_limit, inputs, "triton", DEVICE, upstream=("weighted", "absent"))
    expected = run(at_limit, inputs, "eager", CPU, upstream=("weighted", "absent"))
    torch.testing.assert_close(actual.values[0], expected.values[0], rtol=1e-5, atol=1e-4)
    assert torch.equal(actual.values[1], expected.values[1])
    for gradient, expected_gradient in zip(actual.gradients[0], expected.gradients[0], strict=True):
        torch.testing.assert_close(gradient, expected_gradient, rtol=0, atol=1e-4)


@pytest.mark.parametrize(
    "scores_dtype, emissions_dtype", [(torch.float64, torch.float32), (torch.float32, torch.float64)]
)
def test_float64_scores_or_emissions_are_refused_by_the_kernels(scores_dtype, emissions_dtype):
    # The kernels compute in float32: a float64 CRF (e.g. for gradcheck) must not be run by them silently.
    crf = ConditionalRandomField(3).to(DEVICE or CPU, scores_dtype)
    emissions = torch.randn(2, 4, 3, dtype=emissions_dtype, device=DEVICE or CPU)
    obstacle = f"the emissions are {emissions_dtype} and the scores {scores_dtype}, and the kernels compute in float32"
    assert any(obstacle in reason for reason in crf.kernel_obstacles(emissions))
    for call in (crf.decode, crf.max_marginals):
        with pytest.raises(ValueError, match=f"cannot run the CRF's kernels here: .*{obstacle}"):
            call(emissions, implementation="triton")
    assert not crf.uses_kernels(emissions, "auto")
    assert crf.max_marginals(emissions).dtype == torch.float64  # the loops, in float64


def test_the_device_check_names_the_device_where_kernels_are_compiled():
    message = kernel_device_obstacle(torch.zeros(1), interpreted=False)
    assert message.startswith("the tensors are on cpu, and the kernels need CUDA tensors"), message
    assert "TRITON_INTERPRET=1" in message
    assert kernel_device_obstacle(torch.zeros(1), interpreted=True) is None
    assert "the tensors are on meta" in kernel_device_obstacle(torch.zeros(1, device="meta"), interpreted=True)
    if torch.cuda.is_available():
        assert kernel_device_obstacle(torch.zeros(1, device="cuda"), interpreted=False) is None


def test_one_rule_chooses_between_kernels_and_loops():
    cuda, cpu = SimpleNamespace(is_cuda=True), torch.zeros(1)
    choose = kernel_dispatch.uses_kernels
    assert not choose("eager", cuda, [], "implementation", "the kernels")
    assert choose("auto", cuda, [], "implementation", "the kernels")
    assert not choose("auto", cuda, ["no triton"], "implementation", "the kernels")
    assert not choose("auto", cpu, [], "implementation", "the kernels")  # on a CPU the loops are the faster
    assert choose("triton", cpu, [], "implementation", "the kernels")
    with pytest.raises(ValueError, match=r"^implementation='triton' cannot run the kernels here: one; two$"):
        choose("triton", cuda, ["one", "two"], "implementation", "the kernels")
    with pytest.raises(ValueError, match=r"implementation must be one of \('auto', 'eager', 'triton'\), got 'cuda'"):
        choose("cuda", cuda, [], "implementation", "the kernels")


def test_the_crf_names_its_implementations_as_the_model_does():
    crf = ConditionalRandomField(3)
    emissions = torch.randn(2, 4, 3)
    assert not crf.uses_kernels(emissions, "eager")
    assert not crf.uses_kernels(emissions, "auto")  # CPU tensors: the loops
    with pytest.raises(ValueError, match=r"implementation must be one of \('auto', 'eager', 'triton'\), got 'cuda'"):
        crf.decode(emissions, implementation="cuda")


def test_checkpoints_carry_the_kernels_and_load_without_triton():
    # A checkpoint's code must load where Triton is missing: transformers rejects a file that imports a missing
    # package at module level (outside try/except), and ships only the files that are imported relatively.
    # `run_without_triton.py` (run by test_fused_step.py) runs the package, the CRF included, without Triton.
    from transformers.dynamic_module_utils import get_imports, get_relative_imports

    package = Path(crf_module.__file__).parent
    for module in ("kernel_dispatch.py", "triton_crf.py", "crf.py"):
        assert "triton" not in get_imports(package / module), module
    assert {"triton_crf", "kernel_dispatch"} <= set(get_relative_imports(package / "crf.py"))
    assert "configuration_slstm" not in get_relative_imports(package / "crf.py")  # a drop-in CRF


@needs_kernels
def test_tagger_with_triton_step_implementation_runs_the_crf_kernels(monkeypatch):
    # The model passes `config.step_implementation` to its CRF: "triton" takes the kernels, "eager" the loops; loss,
    # logits and gradients agree. Left padding, so the chain does not start at 0.
    from helpers import build, pad, random_ids, tagger_config

    from modeling_slstm import SLSTMForTokenClassification

    model = build(SLSTMForTokenClassification, tagger_config(use_crf=True, num_steps=1)).train().to(DEVICE)
    ids, mask = pad(random_ids((4, 2, 3)), side="left")
    labels = torch.randint(len(BIO_LABELS), ids.shape, generator=torch.Generator().manual_seed(2))
    batch = {"input_ids": ids, "attention_mask": mask, "labels": labels.masked_fill(~mask, IGNORE_INDEX)}
    batch = {name: value.to(DEVICE) for name, value in batch.items()}
    kernel_calls = []
    uses_kernels = ConditionalRandomField.uses_kernels

    def recorded(crf, emissions, implementation):
        kernel_calls.append(uses_kernels(crf, emissions, implementation))
        return kernel_calls[-1]

    monkeypatch.setattr(ConditionalRandomField, "uses_kernels", recorded)
    results = {}
    for implementation in ("eager", "triton"):
        model.config.step_implementation = implementation
        model.zero_grad()
        output = model(**batch)
        output.loss.backward()
        # A parameter the loss does not reach: no gradient in the readable step, zeros from the fused recurrence.
        gradients = [torch.zeros_like(p) if p.grad is None else p.grad.clone() for p in model.parameters()]
        results[implementation] = (output.loss.detach(), output.logits.detach(), gradients)
    assert kernel_calls == [False, False, True, True]  # the loss and the logits of each forward
    torch.testing.assert_close(results["triton"][0], results["eager"][0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(results["triton"][1], results["eager"][1], rtol=1e-5, atol=1e-5)
    for gradient, expected in zip(results["triton"][2], results["eager"][2], strict=True):
        torch.testing.assert_close(gradient, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.skipif(TRITON_IMPORT_ERROR is not None, reason=f"{TRITON_IMPORT_ERROR}: pip install the test extra")
def test_kernels_compile_for_a_gpu():
    """Each CRF kernel compiles to an sm_90 binary (`compile_kernels_for_a_gpu.py crf`), which needs no GPU."""
    environment = {name: value for name, value in os.environ.items() if name != "TRITON_INTERPRET"}
    environment["PYTHONPATH"] = os.pathsep.join([str(HERE.parents[1]), os.environ.get("PYTHONPATH", "")])
    command = [sys.executable, str(HERE / "compile_kernels_for_a_gpu.py"), "crf"]
    run = subprocess.run(command, check=False, env=environment, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and "compiled" in run.stdout, run.stderr[-3000:]
