"""Tests of `modeling_slstm.crf.ConditionalRandomField` against brute-force enumeration and pytorch-crf, with its plain
loops and with the log-depth scans of `modeling_slstm.crf_parallel`, and of its export with `torch.export` and to ONNX.
Its Triton kernels are compared with these loops in `test_crf_kernels.py`."""

import itertools

import pytest
import torch
from torch import nn

from modeling_slstm import crf as crf_module
from modeling_slstm import crf_parallel
from modeling_slstm.crf import MAX_TRACED_LENGTH, ConditionalRandomField, validate_mask
from modeling_slstm.tag_schemes import allowed_transitions
from modeling_slstm.validation import IGNORE_INDEX

BIO_LABELS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
BIOES_LABELS = ["O", "B-PER", "I-PER", "E-PER", "S-PER", "B-LOC", "I-LOC", "E-LOC", "S-LOC"]

# Masks of 5 positions: full, right padding, left padding, holes, a single position, none.
MASKS = torch.tensor(
    [
        [1, 1, 1, 1, 1],
        [1, 1, 1, 0, 0],
        [0, 0, 1, 1, 1],
        [0, 1, 0, 1, 1],
        [1, 0, 1, 0, 1],
        [0, 0, 0, 1, 0],
        [0, 0, 0, 0, 0],
    ],
    dtype=torch.bool,
)


def use_log_depth_scans(monkeypatch, block_size=None):
    """Make eager calls take the log-depth scans of `crf_parallel` that traced graphs take."""
    monkeypatch.setattr(
        crf_module, "_recursions", lambda emissions: (crf_parallel.log_partition, crf_parallel.viterbi)
    )
    if block_size is not None:
        monkeypatch.setattr(crf_parallel, "_BLOCK_SIZE", block_size)


@pytest.fixture(params=["plain_loops", "log_depth_scans"])
def recursions(request, monkeypatch):
    """Run a test with the plain loops of eager calls and with the log-depth scans of traced graphs, in blocks of 2
    positions so that even 5 positions span several blocks and the scans over blocks."""
    if request.param == "log_depth_scans":
        use_log_depth_scans(monkeypatch, block_size=2)
    return request.param


def random_crf(num_tags, labels=None, scale=1.0, seed=0):
    """A CRF with random parameters of standard deviation ``scale``, constrained by ``labels`` if given."""
    torch.manual_seed(seed)
    crf = ConditionalRandomField.from_labels(labels) if labels else ConditionalRandomField(num_tags)
    with torch.no_grad():
        for parameter in crf.parameters():
            parameter.normal_(0.0, scale)
    return crf


def enumerate_paths(crf, emissions, mask, only_allowed=False):
    """All tag paths over the unmasked positions of one sentence and their float64 scores.

    Args:
        emissions: (seq, num_tags); mask: (seq,) bool.

    Returns:
        positions (k,), paths (S, k), scores (S,); with ``only_allowed``, only paths the constraints allow.
    """
    positions = mask.nonzero().squeeze(1)
    paths = all_paths(crf.num_tags, len(positions))  # (S, k)
    parameters = (crf.start_transitions, crf.end_transitions, crf.transitions)
    scores = path_scores(paths, emissions.detach().double()[positions], *(p.detach().double() for p in parameters))
    if only_allowed:
        keep = torch.tensor([is_allowed(crf, path.tolist()) for path in paths])
        paths, scores = paths[keep], scores[keep]
    return positions, paths, scores


def all_paths(num_tags, length):
    """(num_tags ** length, length): every tag path of ``length`` positions, in lexicographic order."""
    paths = torch.tensor(list(itertools.product(range(num_tags), repeat=length)), dtype=torch.long)
    return paths.view(-1, length)


def path_scores(paths, emissions, start, end, transitions):
    """(S,) scores of the paths (S, k) over the emissions (k, num_tags) of a chain, by summing their terms."""
    scores = emissions.gather(1, paths.T).sum(0) + start[paths[:, 0]] + end[paths[:, -1]]
    return scores + transitions[paths[:, :-1], paths[:, 1:]].sum(1)


def is_allowed(crf, path):
    """Whether a tag path (over unmasked positions) respects the CRF's constraints."""
    if crf.allowed_transitions is None or not path:
        return True
    start_allowed, end_allowed, transition_allowed = crf.allowed_transitions
    return (
        start_allowed[path[0]]
        and end_allowed[path[-1]]
        and all(transition_allowed[a][b] for a, b in itertools.pairwise(path))
    )


def brute_force_decode(crf, emissions, mask, only_allowed=False):
    """(seq,) best path by enumeration, IGNORE_INDEX at masked positions."""
    decoded = torch.full(mask.shape, IGNORE_INDEX, dtype=torch.long)
    if mask.any():
        positions, paths, scores = enumerate_paths(crf, emissions, mask, only_allowed)
        decoded[positions] = paths[scores.argmax()]
    return decoded


@pytest.mark.parametrize("num_tags", [3, 4])
def test_log_likelihood_matches_brute_force(num_tags, recursions):
    crf = random_crf(num_tags, seed=num_tags)
    emissions = torch.randn(len(MASKS), 5, num_tags)
    tags = torch.randint(num_tags, (len(MASKS), 5)).masked_fill(~MASKS, IGNORE_INDEX)
    log_likelihood = crf.log_likelihood(emissions, tags, MASKS)
    assert log_likelihood.dtype == torch.float32
    for sentence, mask in enumerate(MASKS):
        if not mask.any():
            assert log_likelihood[sentence] == 0.0
            continue
        positions, paths, scores = enumerate_paths(crf, emissions[sentence], mask)
        gold = scores[(paths == tags[sentence, positions]).all(1)].item()
        expected = gold - torch.logsumexp(scores, 0).item()
        assert log_likelihood[sentence].item() == pytest.approx(expected, abs=1e-4)


@pytest.mark.parametrize("num_tags", [3, 4])
def test_decode_and_max_marginals_match_brute_force(num_tags, recursions):
    crf = random_crf(num_tags, seed=10 + num_tags)
    emissions = torch.randn(len(MASKS), 5, num_tags)
    decoded = crf.decode(emissions, MASKS)
    max_marginals = crf.max_marginals(emissions, MASKS)
    assert max_marginals.shape == emissions.shape and max_marginals.dtype == torch.float32
    for sentence, mask in enumerate(MASKS):
        assert torch.equal(decoded[sentence], brute_force_decode(crf, emissions[sentence], mask))
        assert torch.all(max_marginals[sentence, ~mask] == 0.0)
        if not mask.any():
            continue
        positions, paths, scores = enumerate_paths(crf, emissions[sentence], mask)
        for index, position in enumerate(positions):
            # Best score of a path with each tag at this position, relative to the best path.
            expected = torch.stack([scores[paths[:, index] == tag].max() for tag in range(num_tags)]) - scores.max()
            torch.testing.assert_close(max_marginals[sentence, position].double(), expected, atol=1e-4, rtol=0)
    assert torch.equal(max_marginals.argmax(-1)[MASKS], decoded[MASKS])


def test_masked_positions_do_not_matter(recursions):
    crf = random_crf(4, seed=3)
    emissions = torch.randn(len(MASKS), 5, 4)
    tags = torch.randint(4, (len(MASKS), 5))
    noisy_emissions = torch.where(MASKS[..., None], emissions, torch.randn_like(emissions) * 100)
    noisy_tags = tags.masked_fill(~MASKS, IGNORE_INDEX)
    torch.testing.assert_close(
        crf.log_likelihood(noisy_emissions, noisy_tags, MASKS), crf.log_likelihood(emissions, tags, MASKS)
    )
    assert torch.equal(crf.decode(noisy_emissions, MASKS), crf.decode(emissions, MASKS))
    torch.testing.assert_close(crf.max_marginals(noisy_emissions, MASKS), crf.max_marginals(emissions, MASKS))


def test_agrees_with_pytorch_crf(recursions):
    torchcrf = pytest.importorskip("torchcrf")
    num_tags, batch, length = 5, 6, 9
    crf = random_crf(num_tags, seed=4)
    reference = torchcrf.CRF(num_tags, batch_first=True)
    reference.load_state_dict(crf.state_dict())
    emissions = torch.randn(batch, length, num_tags)
    tags = torch.randint(num_tags, (batch, length))
    lengths = torch.tensor([9, 1, 5, 9, 3, 7])
    mask = torch.arange(length) < lengths[:, None]  # starts with True, as pytorch-crf requires
    torch.testing.assert_close(
        -crf(emissions, tags, mask, reduction="sum"), reference(emissions, tags, mask, reduction="sum")
    )
    decoded = crf.decode(emissions, mask)
    assert [row[row != IGNORE_INDEX].tolist() for row in decoded] == reference.decode(emissions, mask)


@pytest.mark.parametrize("moves", ["random", "cyclic"])
def test_long_sentences_decode_as_pytorch_crf_backtraces_them(moves):
    # The plain loops backtrace all positions at once (pointer jumping over 2**9 positions here); pytorch-crf walks
    # back position by position. Left padding for the loops, the same chains right-padded for pytorch-crf. Random
    # moves' backtraces soon merge whatever the tag they start from; cyclic ones (tag i + 1 after tag i, all else
    # costly) never do, so every position's tag depends on the whole backtrace.
    torchcrf = pytest.importorskip("torchcrf")
    num_tags, length = 21, 300
    crf = random_crf(num_tags, seed=16)
    if moves == "cyclic":
        with torch.no_grad():
            crf.transitions.fill_(-10.0)
            crf.transitions[torch.arange(num_tags), (torch.arange(num_tags) + 1) % num_tags] = 0.0
    reference = torchcrf.CRF(num_tags, batch_first=True)
    reference.load_state_dict(crf.state_dict())
    lengths = torch.tensor([300, 257, 129, 1])
    emissions = torch.randn(len(lengths), length, num_tags, generator=torch.Generator().manual_seed(16))
    emissions *= 0.1 if moves == "cyclic" else 2.0  # small beside the cycle's moves: the best path follows it
    right_padded = torch.arange(length) < lengths[:, None]
    left_padded = right_padded.flip(1)
    shifted = torch.stack([row.roll(int(n) - length, dims=0) for row, n in zip(emissions, lengths)])  # chains left
    decoded = crf.decode(emissions, left_padded)
    expected = reference.decode(shifted, right_padded)
    assert [row[row != IGNORE_INDEX].tolist() for row in decoded] == expected


def test_masks_with_left_padding_and_holes_agree_with_pytorch_crf_on_the_chain(recursions):
    # pytorch-crf needs masks that start with 1 and have no holes: it gets each chain moved to the front.
    torchcrf = pytest.importorskip("torchcrf")
    masks = MASKS[MASKS.any(dim=1)]  # (batch, 5); pytorch-crf cannot take an empty sentence
    crf = random_crf(4, seed=14)
    reference = torchcrf.CRF(4, batch_first=True)
    reference.load_state_dict(crf.state_dict())
    emissions = torch.randn(len(masks), 5, 4)
    tags = torch.randint(4, (len(masks), 5)).masked_fill(~masks, IGNORE_INDEX)
    order = torch.sort((~masks).long(), dim=1, stable=True).indices  # (batch, 5): chain positions first, in order
    chain_emissions = emissions.gather(1, order[..., None].expand(-1, -1, 4))
    chain_tags = tags.gather(1, order).clamp(min=0)
    chain_mask = masks.gather(1, order)
    expected = torch.stack(
        [reference(e[None], t[None], m[None]) for e, t, m in zip(chain_emissions, chain_tags, chain_mask)]
    )
    torch.testing.assert_close(crf.log_likelihood(emissions, tags, masks), expected)
    decoded = crf.decode(emissions, masks)
    assert [row[row != IGNORE_INDEX].tolist() for row in decoded] == reference.decode(chain_emissions, chain_mask)


@pytest.mark.parametrize("labels", [None, BIO_LABELS], ids=["unconstrained", "BIO"])
def test_zero_parameter_crf_decodes_equal_emissions_to_tag_zero(labels, recursions):
    # Every allowed path ties: ties go to the lowest tag index, as in pytorch-crf (tag 0 is O under BIO).
    crf = ConditionalRandomField.from_labels(labels) if labels else ConditionalRandomField(len(BIO_LABELS))
    with torch.no_grad():
        for parameter in crf.parameters():
            parameter.zero_()
    emissions = torch.full((len(MASKS), 5, crf.num_tags), 0.25)
    decoded = crf.decode(emissions, MASKS)
    assert torch.equal(decoded, torch.where(MASKS, 0, IGNORE_INDEX))
    assert torch.all(crf.max_marginals(emissions, MASKS).argmax(-1)[MASKS] == 0)
    torchcrf = pytest.importorskip("torchcrf")
    reference = torchcrf.CRF(crf.num_tags, batch_first=True)
    reference.load_state_dict(crf.state_dict())
    assert reference.decode(emissions[:1], MASKS[:1]) == decoded[:1].tolist()


def test_ties_are_broken_towards_the_viterbi_path(recursions):
    # Tags must alternate, so [0, 1, 0] and [1, 0, 1] tie as best paths: every max-marginal of an unmasked position
    # is 0 and a plain argmax would pick tag 0 everywhere, which is not a best path.
    crf = ConditionalRandomField(2)
    with torch.no_grad():
        for parameter in crf.parameters():
            parameter.zero_()
        crf.transitions.fill_diagonal_(-5.0)
    emissions = torch.zeros(2, 4, 2)
    mask = torch.tensor([[1, 1, 1, 0], [0, 1, 1, 1]], dtype=torch.bool)
    decoded, max_marginals = crf.decode(emissions, mask), crf.max_marginals(emissions, mask)
    assert torch.equal(max_marginals.argmax(-1)[mask], decoded[mask])
    assert torch.equal(max_marginals.half().argmax(-1)[mask], decoded[mask])
    assert torch.all(max_marginals[mask].amax(-1) == 0.0)
    assert torch.all(max_marginals[mask].amin(-1) > -1e-3)
    # The lowest last tag wins, then the lowest previous tag: the first of the two paths, as pytorch-crf decodes.
    assert decoded[mask].tolist() == [0, 1, 0, 0, 1, 0]


@pytest.mark.parametrize("labels", [BIO_LABELS, BIOES_LABELS], ids=["BIO", "BIOES"])
def test_constrained_decoding_never_violates(labels, recursions):
    # Large random transitions favour forbidden moves as often as allowed ones.
    crf = random_crf(len(labels), labels, scale=3.0, seed=5)
    emissions = torch.randn(64, 12, len(labels)) * 3
    mask = torch.rand(64, 12) < 0.8
    decoded = crf.decode(emissions, mask)
    max_marginals = crf.max_marginals(emissions, mask)
    for row, row_mask in zip(decoded, mask):
        assert is_allowed(crf, row[row_mask].tolist())
    assert torch.equal(max_marginals.argmax(-1)[mask], decoded[mask])


@pytest.mark.parametrize("labels", [BIO_LABELS, BIOES_LABELS], ids=["BIO", "BIOES"])
def test_constraints_match_brute_force_over_allowed_paths(labels, recursions):
    crf = random_crf(len(labels), labels, scale=2.0, seed=6)
    masks = torch.tensor([[1, 1, 1, 1], [0, 1, 1, 0], [1, 0, 0, 1], [0, 0, 1, 0]], dtype=torch.bool)
    emissions = torch.randn(len(masks), 4, len(labels)) * 2
    decoded = crf.decode(emissions, masks)
    max_marginals = crf.max_marginals(emissions, masks)
    log_likelihood = crf.log_likelihood(emissions, decoded, masks)
    lowest = torch.finfo(torch.float32).min
    for sentence, mask in enumerate(masks):
        expected = brute_force_decode(crf, emissions[sentence], mask, only_allowed=True)
        assert torch.equal(decoded[sentence], expected)
        positions, paths, scores = enumerate_paths(crf, emissions[sentence], mask, only_allowed=True)
        # Forbidden paths carry a -1e4 penalty, so they vanish from the partition function.
        expected_log_likelihood = (scores.max() - torch.logsumexp(scores, 0)).item()
        assert log_likelihood[sentence].item() == pytest.approx(expected_log_likelihood, abs=1e-4)
        for index, position in enumerate(positions):
            # Tags that no allowed path reaches (I-X at the first position) get the lowest finite value.
            expected = torch.full((len(labels),), lowest, dtype=torch.float64)
            for tag in paths[:, index].unique():
                expected[tag] = scores[paths[:, index] == tag].max() - scores.max()
            torch.testing.assert_close(max_marginals[sentence, position].double(), expected, atol=1e-4, rtol=0)
    assert (max_marginals == lowest).any()
    assert torch.equal(max_marginals.argmax(-1)[masks], decoded[masks])


def brute_force_log_likelihood(crf, parameters, emissions, tags, mask):
    """(batch,) log-likelihood by enumeration, differentiable in ``parameters`` (start (L,), end (L,), transitions
    (L, L)) and ``emissions`` (batch, seq, L): forbidden moves score the documented penalty of the likelihood."""
    penalty = crf_module._LIKELIHOOD_PENALTY
    allowed = (crf.start_allowed, crf.end_allowed, crf.transition_allowed)
    start, end, transitions = (p.masked_fill(~ok, penalty) for p, ok in zip(parameters, allowed))
    log_likelihoods = []
    for sentence_emissions, sentence_tags, sentence_mask in zip(emissions, tags, mask):
        paths = all_paths(crf.num_tags, int(sentence_mask.sum()))
        scores = path_scores(paths, sentence_emissions[sentence_mask], start, end, transitions)
        gold = path_scores(
            sentence_tags[sentence_mask][None], sentence_emissions[sentence_mask], start, end, transitions
        )
        log_likelihoods.append(gold[0] - torch.logsumexp(scores, 0))
    return torch.stack(log_likelihoods)


def test_forbidden_gold_sequence_costs_the_penalty_with_brute_force_gradients(recursions):
    crf = random_crf(len(BIO_LABELS), BIO_LABELS, seed=13)
    emissions = torch.randn(3, 4, len(BIO_LABELS), requires_grad=True)
    # O I-PER: forbidden; B-PER I-PER O: allowed; I-LOC at the start (forbidden) behind left padding.
    tags = torch.tensor([[0, 2, 2, 0], [1, 2, 0, 0], [IGNORE_INDEX, 4, 3, 4]])
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0], [0, 1, 1, 1]], dtype=torch.bool)
    loss = crf(emissions, tags, mask, reduction="none")
    loss.sum().backward()
    parameters = tuple(p.detach().double().requires_grad_() for p in crf.parameters())
    reference_emissions = emissions.detach().double().requires_grad_()
    expected = -brute_force_log_likelihood(crf, parameters, reference_emissions, tags, mask)
    expected.sum().backward()
    torch.testing.assert_close(loss.double(), expected.detach(), rtol=1e-6, atol=1e-4)
    assert loss[0] > -crf_module._LIKELIHOOD_PENALTY > loss[1]  # the forbidden move's penalty is in the loss
    torch.testing.assert_close(emissions.grad.double(), reference_emissions.grad, rtol=0, atol=1e-5)
    for parameter, reference in zip(crf.parameters(), parameters):
        torch.testing.assert_close(parameter.grad.double(), reference.grad, rtol=0, atol=1e-5)


def test_from_labels():
    assert ConditionalRandomField.from_labels(BIO_LABELS).allowed_transitions == allowed_transitions(BIO_LABELS)
    assert ConditionalRandomField.from_labels(BIO_LABELS, use_constraints=False).allowed_transitions is None
    unconstrained = ConditionalRandomField.from_labels(["NN", "VB", "DT"])
    assert unconstrained.num_tags == 3 and unconstrained.allowed_transitions is None
    assert unconstrained.transition_allowed.all()


def test_checkpoint_holds_only_parameters_and_meta_init_recovers_constraints():
    crf = ConditionalRandomField.from_labels(BIOES_LABELS)
    assert set(crf.state_dict()) == {"start_transitions", "end_transitions", "transitions"}
    # What transformers does when loading: build on the meta device, materialise uninitialised, then initialise.
    with torch.device("meta"):
        loaded = ConditionalRandomField.from_labels(BIOES_LABELS)
    loaded = loaded.to_empty(device="cpu")
    loaded.reset_parameters()
    loaded.load_state_dict(crf.state_dict())
    for name in ("start_allowed", "end_allowed", "transition_allowed"):
        assert torch.equal(getattr(loaded, name), getattr(crf, name))


def test_low_precision_and_autocast_compute_in_float32():
    crf = random_crf(4, seed=7)
    emissions = torch.randn(3, 6, 4)
    tags = torch.randint(4, (3, 6))
    mask = torch.rand(3, 6) < 0.7
    expected_log_likelihood = crf.log_likelihood(emissions.bfloat16().float(), tags, mask)
    expected_max_marginals = crf.max_marginals(emissions.bfloat16().float(), mask)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        log_likelihood = crf.log_likelihood(emissions.bfloat16(), tags, mask)
        max_marginals = crf.max_marginals(emissions.bfloat16(), mask)
        decoded = crf.decode(emissions.bfloat16(), mask)
    assert log_likelihood.dtype == max_marginals.dtype == torch.float32
    torch.testing.assert_close(log_likelihood, expected_log_likelihood)
    torch.testing.assert_close(max_marginals, expected_max_marginals)
    assert torch.equal(decoded, crf.decode(emissions.bfloat16().float(), mask))
    assert crf.log_likelihood(emissions.half(), tags, mask).dtype == torch.float32


def test_gradcheck_float64(recursions):
    crf = random_crf(3, seed=8).double()
    emissions = torch.randn(3, 4, 3, dtype=torch.float64, requires_grad=True)
    tags = torch.randint(3, (3, 4))
    mask = torch.tensor([[1, 1, 0, 1], [0, 1, 1, 0], [0, 0, 0, 0]], dtype=torch.bool)
    assert torch.autograd.gradcheck(lambda emissions: crf.log_likelihood(emissions, tags, mask), (emissions,))

    def negative_log_likelihood(start_transitions, end_transitions, transitions):
        parameters = {
            "start_transitions": start_transitions,
            "end_transitions": end_transitions,
            "transitions": transitions,
        }
        return torch.func.functional_call(crf, parameters, (emissions.detach(), tags, mask), {"reduction": "none"})

    parameters = tuple(parameter.detach().clone().requires_grad_() for parameter in crf.parameters())
    assert torch.autograd.gradcheck(negative_log_likelihood, parameters)


def test_forward_reductions_and_integer_masks():
    crf = random_crf(3, seed=9)
    emissions = torch.randn(len(MASKS), 5, 3)
    tags = torch.randint(3, (len(MASKS), 5))
    log_likelihood = crf.log_likelihood(emissions, tags, MASKS)
    torch.testing.assert_close(crf(emissions, tags, MASKS), -log_likelihood.mean())
    torch.testing.assert_close(crf(emissions, tags, MASKS, reduction="sum"), -log_likelihood.sum())
    torch.testing.assert_close(crf(emissions, tags, MASKS, reduction="none"), -log_likelihood)
    torch.testing.assert_close(crf.log_likelihood(emissions, tags, MASKS.long()), log_likelihood)
    assert torch.equal(crf.decode(emissions, MASKS.to(torch.uint8)), crf.decode(emissions, MASKS))
    full = torch.ones(len(MASKS), 5, dtype=torch.bool)
    torch.testing.assert_close(crf.log_likelihood(emissions, tags), crf.log_likelihood(emissions, tags, full))
    assert torch.equal(crf.decode(emissions), crf.decode(emissions, full))


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda crf: crf.decode(torch.randn(2, 3)), "3-D tensor"),
        (lambda crf: crf.decode(torch.randn(2, 3, 4)), "num_tags=3"),
        (lambda crf: crf.decode(torch.randn(2, 0, 3)), "at least one position"),
        (lambda crf: crf.decode(torch.ones(2, 3, 3, dtype=torch.long)), "floating-point"),
        (lambda crf: crf.decode(torch.randn(2, 3, 3), torch.ones(2, 4, dtype=torch.bool)), "mask must have"),
        (lambda crf: crf.decode(torch.randn(2, 3, 3), torch.ones(2, 3)), "bool or 0/1 integer"),
        (lambda crf: crf.log_likelihood(torch.randn(2, 3, 3), torch.zeros(2, 4, dtype=torch.long)), "tags must have"),
        (lambda crf: crf.log_likelihood(torch.randn(2, 3, 3), torch.zeros(2, 3)), "integer tensor"),
        (lambda crf: crf.log_likelihood(torch.randn(2, 3, 3), torch.tensor([[0, 1, 7], [0, 0, 0]])), "got [7]"),
        (lambda crf: crf.log_likelihood(torch.randn(1, 2, 3), torch.tensor([[-100, 0]])), "got [-100]"),
        (lambda crf: crf(torch.randn(1, 2, 3), torch.zeros(1, 2, dtype=torch.long), reduction="avg"), "'avg'"),
        (lambda crf: ConditionalRandomField(0), "positive integer, got 0"),
        (lambda crf: ConditionalRandomField(2, ([True], [True])), "triple"),
        (lambda crf: ConditionalRandomField(2, ([True] * 2, [True] * 2, [[True] * 3] * 2)), "(2, 3)"),
    ],
)
def test_validation_errors(call, message):
    with pytest.raises(ValueError) as error:
        call(ConditionalRandomField(3))
    assert message in str(error.value)


def test_all_masked_batch_has_zero_loss_and_finite_gradients(recursions):
    crf = ConditionalRandomField.from_labels(BIO_LABELS)
    emissions = torch.randn(2, 3, len(BIO_LABELS), requires_grad=True)
    mask = torch.zeros(2, 3, dtype=torch.bool)
    loss = crf(emissions, torch.full((2, 3), IGNORE_INDEX), mask)
    assert loss.item() == 0.0
    loss.backward()
    assert torch.all(emissions.grad == 0)
    assert torch.all(crf.decode(emissions, mask) == IGNORE_INDEX)
    assert torch.all(crf.max_marginals(emissions, mask) == 0.0)


def test_value_checks_are_public_and_keep_their_messages():
    crf = ConditionalRandomField(3)
    with pytest.raises(ValueError, match=r"got \[7\]"):
        crf.validate_tags(torch.tensor([[0, 1, 7]]))
    with pytest.raises(ValueError, match="only 0 and 1"):
        crf.validate_tags(torch.zeros(1, 2, dtype=torch.long), mask=torch.tensor([[1, 2]]))
    with pytest.raises(ValueError, match="only 0 and 1"):
        validate_mask(torch.tensor([[1, 2]]))
    # Masked positions may hold any tag.
    crf.validate_tags(torch.tensor([[0, IGNORE_INDEX]]), mask=torch.tensor([[1, 0]]))
    validate_mask(torch.tensor([[True, False]]))


def test_unchecked_out_of_range_tags_fail_rather_than_give_a_loss():
    # The forward methods do not read values (a host sync): a bad tag must still not be scored, and fails in an
    # indexing (on a GPU a device-side assert), named on the host for CPU tensors.
    crf = ConditionalRandomField(3)
    emissions = torch.randn(1, 3, 3)
    for bad_tag in (3, -1, IGNORE_INDEX):
        with pytest.raises(ValueError, match=rf"tags at unmasked positions must be in \[0, 3\), got \[{bad_tag}\]"):
            crf.log_likelihood(emissions, torch.tensor([[0, bad_tag, 1]]))
    mask = torch.tensor([[1, 0, 1]])
    masked = crf.log_likelihood(emissions, torch.tensor([[0, IGNORE_INDEX, 1]]), mask)
    torch.testing.assert_close(masked, crf.log_likelihood(emissions, torch.tensor([[0, 2, 1]]), mask))


@pytest.mark.parametrize("labels", [BIO_LABELS, BIOES_LABELS], ids=["BIO", "BIOES"])
def test_log_depth_scans_of_traced_graphs_match_plain_loops_on_long_sentences(labels, monkeypatch):
    # Traced graphs use blocks of 16 positions: 70 positions, with padding and holes, span several of them. In float64,
    # so that the two summation orders agree to float64 rounding (scores reach ~500, where float32 steps by 6e-5).
    crf = random_crf(len(labels), labels, scale=2.0, seed=11).double()
    inputs = padded_inputs(len(labels), batch=6, length=70, seed=3)
    emissions, mask = inputs["emissions"].double(), inputs["mask"] & (torch.rand(6, 70) < 0.9)
    tags = crf.decode(emissions, mask)
    expected = crf.log_likelihood(emissions, tags, mask), tags, crf.max_marginals(emissions, mask)
    use_log_depth_scans(monkeypatch)
    log_likelihood, decoded, max_marginals = (
        crf.log_likelihood(emissions, tags, mask),
        crf.decode(emissions, mask),
        crf.max_marginals(emissions, mask),
    )
    torch.testing.assert_close(log_likelihood, expected[0])
    assert torch.equal(decoded, expected[1])
    torch.testing.assert_close(max_marginals, expected[2])
    assert torch.equal(max_marginals.argmax(-1)[mask], decoded[mask])


def padded_inputs(num_tags, batch, length, seed):
    """Emissions, tags (IGNORE_INDEX where masked) and a mask with right and left padding, a hole and an empty sentence
    (``batch >= 4``)."""
    generator = torch.Generator().manual_seed(seed)
    emissions = torch.randn(batch, length, num_tags, generator=generator) * 3
    mask = torch.ones(batch, length, dtype=torch.bool)
    mask[0, length // 2 :] = False
    mask[1, : length // 3] = False
    mask[2, length // 2] = False
    mask[-1] = False
    tags = torch.randint(num_tags, (batch, length), generator=generator).masked_fill(~mask, IGNORE_INDEX)
    return {"emissions": emissions, "tags": tags, "mask": mask}


class CRFMethod(nn.Module):
    """One method of a CRF as the forward of a module, which `torch.export` and the ONNX exporter take."""

    def __init__(self, crf):
        super().__init__()
        self.crf = crf


class MaxMarginals(CRFMethod):
    def forward(self, emissions, mask):
        return self.crf.max_marginals(emissions, mask)


class NegativeLogLikelihood(CRFMethod):
    def forward(self, emissions, tags, mask):
        return self.crf(emissions, tags, mask, reduction="none")


class Decode(CRFMethod):
    def forward(self, emissions, mask):
        return self.crf.decode(emissions, mask)


METHODS = {"max_marginals": MaxMarginals, "negative_log_likelihood": NegativeLogLikelihood, "decode": Decode}
ARGUMENTS = {MaxMarginals: ("emissions", "mask"), NegativeLogLikelihood: ("emissions", "tags", "mask")}


def method_arguments(module, inputs):
    return tuple(inputs[name] for name in ARGUMENTS.get(type(module), ("emissions", "mask")))


def export_dynamic(module, inputs):
    """`torch.export` (default, non-strict) with a dynamic batch size and sequence length in every input."""
    batch, seq = torch.export.Dim("batch"), torch.export.Dim("seq", max=MAX_TRACED_LENGTH)
    arguments = method_arguments(module, inputs)
    return torch.export.export(module, arguments, dynamic_shapes=tuple({0: batch, 1: seq} for _ in arguments))


@pytest.fixture(scope="module")
def bioes_crf():
    return random_crf(len(BIOES_LABELS), BIOES_LABELS, seed=12)


@pytest.fixture(scope="module")
def exported_max_marginals(bioes_crf):
    return export_dynamic(MaxMarginals(bioes_crf), padded_inputs(len(BIOES_LABELS), batch=4, length=9, seed=0))


@pytest.mark.parametrize("method", METHODS)
def test_torch_export_with_dynamic_batch_and_length_runs_new_shapes(method, bioes_crf, exported_max_marginals):
    module = METHODS[method](bioes_crf)
    example = padded_inputs(len(BIOES_LABELS), batch=4, length=9, seed=0)
    program = exported_max_marginals if method == "max_marginals" else export_dynamic(module, example)
    for batch, length in ((5, 37), (4, 2)):
        arguments = method_arguments(module, padded_inputs(len(BIOES_LABELS), batch, length, seed=1))
        exported, eager = program.module()(*arguments), module(*arguments)
        torch.testing.assert_close(exported, eager, rtol=1e-5, atol=1e-4)
        if method == "max_marginals":
            mask = arguments[-1]
            assert torch.equal(exported.argmax(-1)[mask], bioes_crf.decode(*arguments)[mask])


def test_exported_program_refuses_sequences_beyond_max_traced_length(exported_max_marginals):
    emissions = torch.zeros(2, MAX_TRACED_LENGTH + 1, len(BIOES_LABELS))
    mask = torch.ones(2, MAX_TRACED_LENGTH + 1, dtype=torch.bool)
    with pytest.raises(AssertionError, match=str(MAX_TRACED_LENGTH)):
        exported_max_marginals.module()(emissions, mask)


def test_onnx_max_marginals_match_pytorch_on_a_new_shape(tmp_path, bioes_crf, exported_max_marginals):
    onnxruntime = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")  # used by the ONNX exporter
    path = tmp_path / "crf_max_marginals.onnx"
    torch.onnx.export(exported_max_marginals, dynamo=True).save(path)
    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    input_names = [node.name for node in session.get_inputs()]
    for batch, length in ((5, 37), (4, 1)):
        inputs = padded_inputs(len(BIOES_LABELS), batch, length, seed=2)
        emissions, mask = inputs["emissions"], inputs["mask"]
        (max_marginals,) = session.run(None, dict(zip(input_names, (emissions.numpy(), mask.numpy()))))
        max_marginals = torch.from_numpy(max_marginals)
        expected = bioes_crf.max_marginals(emissions, mask).detach()
        torch.testing.assert_close(max_marginals, expected, rtol=0, atol=1e-4)
        assert torch.equal(max_marginals.argmax(-1)[mask], expected.argmax(-1)[mask])
