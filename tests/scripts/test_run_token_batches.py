"""Token-budget batches (`--max_tokens_per_batch`, run_scripts/training/trainer.py's `TokenBudgetBatchSampler`): every
batch within the budget, every example exactly once per epoch, deterministic under the seed, the same number of
batches every epoch, each of two processes its own whole batches, and an exact resume."""

import itertools
import random

import pytest
from accelerate.data_loader import BatchSamplerShard
from safetensors.torch import load_file
from script_helpers import (
    SCRIPTS,
    free_port,
    read_json,
    run_args,
    run_main,
    run_subprocess,
    torchrun,
    write_generated_ner,
)

from run_scripts.training import data
from run_scripts.training.samplers import TokenBudgetBatchSampler

BUDGET = 60


def epoch_batches(sampler, epoch):
    sampler.set_epoch(epoch)
    return list(sampler)


def test_batches_fit_the_budget_and_cover_every_example_once():
    rng = random.Random(0)
    lengths = [rng.randint(3, 40) for _ in range(203)]
    sampler = TokenBudgetBatchSampler(lengths, 120, seed=5)
    sizes = None
    for epoch in range(3):
        batches = epoch_batches(sampler, epoch)
        assert len(batches) == len(sampler)
        assert sorted(index for batch in batches for index in batch) == list(range(len(lengths)))
        for batch in batches:
            assert len(batch) * max(lengths[index] for index in batch) <= 120
        # length-grouped: batches are runs of the sorted lengths, so their length ranges do not overlap
        ranges = sorted((min(lengths[i] for i in batch), max(lengths[i] for i in batch)) for batch in batches)
        assert all(high <= next_low for (_, high), (next_low, _) in itertools.pairwise(ranges))
        # the same batch sizes every epoch (the Trainer counts steps per epoch once)
        epoch_sizes = sorted(len(batch) for batch in batches)
        assert sizes is None or epoch_sizes == sizes
        sizes = epoch_sizes
    # greedy: each batch takes as many examples as fit, so the budget is mostly used
    assert sum(lengths) / (len(sampler) * 120) > 0.6


def test_batches_are_deterministic_under_the_seed():
    lengths = [random.Random(1).randint(3, 30) for _ in range(100)]
    first, again = (TokenBudgetBatchSampler(lengths, 90, seed=3) for _ in range(2))
    assert epoch_batches(first, 0) == epoch_batches(again, 0)
    assert epoch_batches(first, 1) == epoch_batches(again, 1)
    assert epoch_batches(first, 0) != epoch_batches(first, 1)  # a fresh order every epoch
    other_seed = TokenBudgetBatchSampler(lengths, 90, seed=4)
    assert epoch_batches(other_seed, 0) != epoch_batches(first, 0)
    # which examples of equal length share a batch changes with the epoch too
    as_sets = [{frozenset(batch) for batch in epoch_batches(first, epoch)} for epoch in (0, 1)]
    assert as_sets[0] != as_sets[1]


def test_two_processes_get_their_own_whole_batches():
    """accelerate deals batch i to process i % 2 (`BatchSamplerShard`, as the Trainer's prepared dataloader does);
    with an odd number of batches it would repeat batches from the start (`even_batches`), so the sampler halves its
    largest batch to make the number even."""
    lengths = [10] * 9  # three batches of three: an odd number
    assert TokenBudgetBatchSampler(lengths, 30).batch_sizes == [3, 3, 3]
    halved = TokenBudgetBatchSampler(lengths, 30, seed=2, num_processes=2)
    assert sorted(halved.batch_sizes) == [1, 2, 3, 3]
    rng = random.Random(3)
    varied = TokenBudgetBatchSampler([rng.randint(3, 50) for _ in range(77)], 100, num_processes=2)
    for sampler in (halved, varied):
        for epoch in range(2):
            sampler.set_epoch(epoch)
            shares = [list(BatchSamplerShard(sampler, num_processes=2, process_index=rank)) for rank in (0, 1)]
            assert len(shares[0]) == len(shares[1]) == len(sampler) // 2
            assert sorted(shares[0] + shares[1]) == sorted(sampler)  # whole batches of the sampler, none repeated
            used = [index for share in shares for batch in share for index in batch]
            assert sorted(used) == list(range(len(sampler.lengths)))  # each example once, on one process


def test_budget_errors():
    with pytest.raises(ValueError, match=r"--max_tokens_per_batch 20 is smaller than the longest .* \(25 tokens"):
        TokenBudgetBatchSampler([5, 25], 20)
    with pytest.raises(ValueError, match="cannot be dealt evenly to 2 processes"):
        TokenBudgetBatchSampler([10, 10, 10], 10, num_processes=2)


def train_lengths(paths) -> list[int]:
    """The token lengths of the generated training sentences as run_ner.py counts them (`<s>` and `</s>` added)."""
    return [len(sentence["tokens"]) + 2 for sentence in data.read_conll(paths["train"])]


def learning_rates_by_epoch(output_dir) -> dict[int, set[float]]:
    """The logged learning rates grouped by the (0-based) epoch in which their step ran, as the Trainer counts
    epochs (the `epoch` of a step's log is in `(e, e + 1]`)."""
    import math

    rates = {}
    for entry in read_json(output_dir / "trainer_state.json")["log_history"]:
        if "learning_rate" in entry:
            rates.setdefault(math.ceil(entry["epoch"] - 1e-9) - 1, set()).add(entry["learning_rate"])
    return rates


def token_budget_options(**more) -> dict:
    options = {
        "max_tokens_per_batch": BUDGET,
        "num_train_epochs": 3,
        "lr_decay_per_epoch": 0.5,
        "logging_steps": 1,
        "config_overrides": "hidden_size=12,embedding_dim=12,num_steps=2,embedding_dropout=0.5,char_dropout=0.5",
        "do_eval": None,
    }
    return options | more


@pytest.mark.slow
def test_token_budget_run_decays_per_epoch_and_resumes_exactly(tmp_path, monkeypatch):
    paths = write_generated_ner(tmp_path)
    steps_per_epoch = len(TokenBudgetBatchSampler(train_lengths(paths), BUDGET))
    assert steps_per_epoch != 5  # differs from the 40 / 8 batches of --per_device_train_batch_size 8
    checkpoint_step = steps_per_epoch + steps_per_epoch // 2  # mid second epoch
    full = tmp_path / "full"
    run_main("run_ner", run_args(full, paths, save_steps=checkpoint_step, **token_budget_options()), monkeypatch)
    state = read_json(full / "trainer_state.json")
    assert state["global_step"] == 3 * steps_per_epoch
    assert learning_rates_by_epoch(full) == {0: {0.01}, 1: {0.005}, 2: {0.0025}}

    resumed = tmp_path / "resumed"
    checkpoint = full / f"checkpoint-{checkpoint_step}"
    steps_done = record_optimizer_steps(monkeypatch)
    options = token_budget_options(resume_from_checkpoint=checkpoint, save_strategy="no")
    run_main("run_ner", run_args(resumed, paths, **options), monkeypatch)
    # It continued from the checkpoint's step (a run that ignored the checkpoint would start again at step 1 and, with
    # the same seed, end the same), on the same batches as the uninterrupted run: same losses, same weights.
    assert steps_done == list(range(checkpoint_step + 1, 3 * steps_per_epoch + 1))
    resumed_state = read_json(resumed / "trainer_state.json")
    assert losses(resumed_state) == losses(state)
    a, b = load_file(full / "model.safetensors"), load_file(resumed / "model.safetensors")
    assert a.keys() == b.keys() and all((a[key] == b[key]).all() for key in a)


def losses(state: dict) -> list[tuple[int, float]]:
    return [(entry["step"], entry["loss"]) for entry in state["log_history"] if "loss" in entry]


def record_optimizer_steps(monkeypatch) -> list[int]:
    """The global steps that run_ner.py's next in-process run does, in order (a callback on its Trainer)."""
    from transformers import TrainerCallback

    from run_scripts import run_ner

    steps = []

    class RecordSteps(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            steps.append(state.global_step)

    class RecordingTrainer(run_ner.SLSTMTrainer):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.add_callback(RecordSteps())

    monkeypatch.setattr(run_ner, "SLSTMTrainer", RecordingTrainer)
    return steps


@pytest.mark.slow
def test_token_budget_with_two_processes_gradient_accumulation_and_resume(tmp_path):
    """Each process trains on its own half of the batches: an epoch is (batches / 2) / accumulation optimizer steps,
    with the learning rate decayed once per epoch. Resumed in the second epoch, the two processes continue on the
    same batches as the uninterrupted run: same losses, bit-identical weights. (The resumed epoch's order needs the
    epoch, which accelerate's `set_epoch` does not pass through `SkipBatchSampler(BatchSamplerShard(...))`: without
    `SLSTMTrainer._run_epoch` setting it, the resumed epoch is shuffled as epoch 0 and the weights differ.)"""
    paths = write_generated_ner(tmp_path)
    batches = len(TokenBudgetBatchSampler(train_lengths(paths), BUDGET, num_processes=2))
    steps_per_epoch = -(-(batches // 2) // 2)
    checkpoint_step = steps_per_epoch + 1  # in the second epoch

    def run(output_dir, **more):
        options = token_budget_options(gradient_accumulation_steps=2, seed=3, **more)
        command = [*torchrun(free_port()), str(SCRIPTS / "run_ner.py"), *run_args(output_dir, paths, **options)]
        return run_subprocess(command)

    full, resumed = tmp_path / "full", tmp_path / "resumed"
    result = run(full, save_steps=checkpoint_step)
    assert "world size 2" in result.stdout + result.stderr
    state = read_json(full / "trainer_state.json")
    assert state["global_step"] == 3 * steps_per_epoch
    assert learning_rates_by_epoch(full) == {0: {0.01}, 1: {0.005}, 2: {0.0025}}
    assert len(data.read_conll(full / "test_predictions.txt")) == 12

    run(resumed, resume_from_checkpoint=full / f"checkpoint-{checkpoint_step}", save_strategy="no")
    assert losses(read_json(resumed / "trainer_state.json")) == losses(state)
    a, b = load_file(full / "model.safetensors"), load_file(resumed / "model.safetensors")
    assert a.keys() == b.keys() and all((a[key] == b[key]).all() for key in a)


def test_batches_come_in_a_fresh_random_order_every_epoch():
    """Length-grouped batches handed out shortest first (or in one fixed order) would give every epoch the same
    curriculum: the batch order is drawn anew each epoch. Ranked by length, each epoch's batches come in a different
    permutation, unrelated to length (Spearman's rank correlation of position and length far from ±1)."""
    lengths = [length for length in range(3, 63) for _ in range(4)]  # 240 examples
    random.Random(2).shuffle(lengths)
    sampler = TokenBudgetBatchSampler(lengths, 120, seed=7)
    assert len(sampler) >= 30
    permutations = []
    for epoch in range(4):
        shortest = [min(lengths[index] for index in batch) for batch in epoch_batches(sampler, epoch)]
        by_length = sorted(range(len(shortest)), key=lambda position: (shortest[position], position))
        ranks = [by_length.index(position) for position in range(len(shortest))]  # the rank of each position
        count = len(ranks)
        spearman = 1 - 6 * sum((rank - position) ** 2 for position, rank in enumerate(ranks)) / (count**3 - count)
        assert abs(spearman) < 0.5, (epoch, ranks)
        permutations.append(tuple(ranks))
    assert len(set(permutations)) == len(permutations)
