"""run_scripts/training/trainer.py's `EpochSeededLengthGroupedSampler`: each epoch's order is transformers'
`get_length_grouped_indices` drawn from a generator seeded with `seed + epoch`, so that the order changes from one
epoch to the next and a resumed run draws the same order for the same epoch as an uninterrupted one."""

import random

import torch
from transformers.trainer_pt_utils import get_length_grouped_indices

from run_scripts.training.samplers import EpochSeededLengthGroupedSampler

LENGTHS = [random.Random(0).randint(2, 40) for _ in range(97)]


def epoch_order(sampler, epoch):
    sampler.set_epoch(epoch)
    return list(sampler)


def stock_order(seed, batch_size=4):
    return get_length_grouped_indices(LENGTHS, batch_size, generator=torch.Generator().manual_seed(seed))


def test_each_epoch_draws_the_stock_order_of_seed_plus_epoch():
    sampler = EpochSeededLengthGroupedSampler(4, lengths=LENGTHS, seed=11)
    for epoch in (0, 1, 2):
        assert epoch_order(sampler, epoch) == stock_order(11 + epoch)
        assert sorted(epoch_order(sampler, epoch)) == list(range(len(LENGTHS)))  # each example once


def test_epochs_differ_and_an_epoch_is_reproducible():
    sampler = EpochSeededLengthGroupedSampler(4, lengths=LENGTHS, seed=3)
    first, second = epoch_order(sampler, 0), epoch_order(sampler, 1)
    assert first != second
    # the global RNG does not enter: drawing from it between epochs changes nothing
    torch.rand(5)
    assert epoch_order(sampler, 1) == second
    # a fresh sampler, as a resumed run builds one, draws the same order for epoch 1 and epoch 0 again
    resumed = EpochSeededLengthGroupedSampler(4, lengths=LENGTHS, seed=3)
    assert epoch_order(resumed, 1) == second
    assert epoch_order(resumed, 0) == first
