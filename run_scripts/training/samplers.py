"""The training samplers of `SLSTMTrainer`: length-grouped batches that resume exactly, and token-budget batches.
Both draw their order from `(seed, epoch)` only; `SamplerEpochCallback` gives them the epoch."""

from collections.abc import Iterator, Sequence

import torch
from torch.utils.data import Sampler
from transformers import Trainer, TrainerCallback
from transformers.trainer_pt_utils import LengthGroupedSampler

from run_scripts.training.usage_errors import UsageError


class EpochSeededLengthGroupedSampler(LengthGroupedSampler):
    """`LengthGroupedSampler` whose shuffle is a function of `(seed, epoch)` only (the stock one draws from the
    global RNG when iterated, so a resumed run shuffles its resumed epoch differently from an uninterrupted run)."""

    def __init__(self, *args, seed: int = 0, **kwargs):
        super().__init__(*args, **kwargs)
        self.seed = seed
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def __iter__(self):
        self.generator = torch.Generator().manual_seed(self.seed + self.epoch)
        return super().__iter__()


class TokenBudgetBatchSampler(Sampler[list[int]]):
    """Length-grouped batches of at most `max_tokens` padded tokens each (`examples * longest length`), all processes'
    batches of one epoch, for a `DataLoader`'s `batch_sampler`.

    Every epoch the examples are sorted by length, equal lengths in an order drawn from `(seed, epoch)`, and cut into
    consecutive batches at the same places: the cuts depend on the lengths alone (greedy, shortest first), so the
    number of batches and their sizes are the same every epoch (the Trainer and the per-epoch learning-rate decay
    count steps with them), while which examples of equal length share a batch changes. The batches are then yielded
    in an order drawn from `(seed, epoch)`. For several processes the largest batches are halved until the number of
    batches divides by `num_processes`: `accelerate` then deals batch `i` to process `i % num_processes`, each
    process gets the same number of whole batches and every example is used exactly once per epoch.

    Args:
        lengths (`Sequence[int]`): the length of every example in tokens (`<s>` and `</s>` included).
        max_tokens (`int`): the budget of one batch on one process; at least the longest length.
        seed (`int`, *optional*, defaults to 0): with the epoch, seeds the order of equal lengths and of the batches.
        num_processes (`int`, *optional*, defaults to 1): the number of training processes.
    """

    def __init__(self, lengths: Sequence[int], max_tokens: int, seed: int = 0, num_processes: int = 1):
        self.lengths = [int(length) for length in lengths]
        if not self.lengths:
            raise ValueError("Token-budget batches need at least one training example, got none")
        if max(self.lengths) > max_tokens:
            raise UsageError(
                f"--max_tokens_per_batch {max_tokens} is smaller than the longest training example "
                f"({max(self.lengths)} tokens with <s> and </s>): give at least {max(self.lengths)}, or cut the "
                "examples shorter with --max_seq_length"
            )
        self.max_tokens = max_tokens
        self.seed = seed
        self.num_processes = num_processes
        self.epoch = 0
        self.batch_sizes = self.cut_into_batches(sorted(self.lengths))

    def cut_into_batches(self, sorted_lengths: list[int]) -> list[int]:
        """The sizes of the consecutive batches of the sorted lengths: greedy within the budget, then the largest
        halved until their number divides by `num_processes`."""
        sizes, size = [], 0
        for length in sorted_lengths:
            if (size + 1) * length > self.max_tokens:  # `length` is the longest so far: it sets the padding
                sizes.append(size)
                size = 0
            size += 1
        sizes.append(size)
        while len(sizes) % self.num_processes:
            largest = max(range(len(sizes)), key=sizes.__getitem__)
            if sizes[largest] == 1:
                raise UsageError(
                    f"{len(self.lengths)} training examples in batches of one cannot be dealt evenly to "
                    f"{self.num_processes} processes: raise --max_tokens_per_batch or use fewer processes"
                )
            sizes[largest : largest + 1] = [sizes[largest] // 2, sizes[largest] - sizes[largest] // 2]
        return sizes

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def __len__(self) -> int:
        return len(self.batch_sizes)

    def __iter__(self) -> Iterator[list[int]]:
        generator = torch.Generator().manual_seed(self.seed + self.epoch)
        # A stable sort of a random permutation: by length, equal lengths in random order.
        order = sorted(torch.randperm(len(self.lengths), generator=generator).tolist(), key=self.lengths.__getitem__)
        batches, start = [], 0
        for size in self.batch_sizes:
            batches.append(order[start : start + size])
            start += size
        for index in torch.randperm(len(batches), generator=generator).tolist():
            yield batches[index]


class SamplerEpochCallback(TrainerCallback):
    """Gives the trainer's epoch-seeded sampler (length-grouped or token-budget) its epoch before each epoch's batches
    are drawn: the Trainer's own `set_epoch` calls do not reach it through the wrappers of a resumed multi-process
    run (`SkipBatchSampler(BatchSamplerShard(...))`). The epoch is the whole part of `state.epoch`, which a resumed
    run restores from its checkpoint.

    Args:
        trainer ([`SLSTMTrainer`]): whose `epoch_seeded_sampler` to set.
    """

    def __init__(self, trainer: Trainer):
        self.trainer = trainer

    def on_epoch_begin(self, args, state, control, **kwargs):
        if self.trainer.epoch_seeded_sampler is not None:
            self.trainer.epoch_seeded_sampler.set_epoch(int(state.epoch or 0))
