"""What one timed call runs over: random full-length batches, and real training batches as the training scripts
make them; and the random training batches of the benchmarks that count or replay training steps (`random_batch`)."""

import math
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers.models.auto.modeling_auto import MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING
from transformers.trainer_pt_utils import LengthGroupedSampler

from modeling_slstm.validation import IGNORE_INDEX
from run_scripts.training import data, gpu_batching


def length_grouped_batches(lengths: list[int], batch_size: int, seed: int) -> list[list[int]]:
    """The example indices of each batch of one epoch, `batch_size` examples of similar length each (transformers'
    `LengthGroupedSampler`, which `group_by_length` uses: random mega-batches, each sorted by length)."""
    generator = torch.Generator().manual_seed(seed)
    order = list(LengthGroupedSampler(batch_size, lengths=lengths, generator=generator))
    return [order[start : start + batch_size] for start in range(0, len(order), batch_size)]


RANDOM = "random"
NER_CORPUS = "conll2003-ner"
CORPORA = {NER_CORPUS: "conll2003/ner/train.txt", "movie-review": "movie_review"}


@dataclass(frozen=True)
class Workload:
    """What one timed call runs over: `batches`, each a tuple of sentence lengths in tokens, padded to its `widths`
    entry. Random workloads are one full batch (`batch` x `length`); real ones (`data` a key of `CORPORA`) are
    batches of a training epoch (`real_workload`), with `length` their mean padded width (rounded)."""

    data: str
    batch: int
    length: int
    batches: tuple[tuple[int, ...], ...]
    widths: tuple[int, ...]

    @property
    def tokens(self) -> int:
        """The sentences' tokens (padding not counted): tokens/s of real workloads count the work a user asked for."""
        return sum(sum(lengths) for lengths in self.batches)

    def sort_key(self) -> tuple:
        return (self.data != RANDOM, self.data, self.batch, self.length)

    def label(self) -> str:
        shape = f"{self.batch}x{self.length}"
        return shape if self.data == RANDOM else f"{self.data} {shape} ({len(self.batches)} batches)"


def parse_shape(shape: str) -> tuple[int, int]:
    """A workload's shape from the command line: ``"10x14"`` -> ``(10, 14)`` (batch, length)."""
    try:
        batch, length = (int(size) for size in shape.lower().split("x"))
    except ValueError:
        raise ValueError(f"a shape is BATCHxLENGTH, e.g. 10x14, got {shape!r}") from None
    return batch, length


def random_batch(model, batch: int, length: int, word_length: int, seed: int = 0, shortest: int | None = None,
                 device: str | torch.device = "cpu") -> dict[str, torch.Tensor]:  # fmt: skip
    """A random training batch for `model` (its `config.vocab_size` and `config.char_vocab_size` bound the ids),
    drawn from `seed`: `batch` sentences of token ids without special tokens, `length` tokens each or, from
    `shortest` on, of lengths drawn between `shortest` and `length` (the first one `length`) and right padded (ids 0,
    labels -100); character ids of `word_length` characters per word if the model reads them; labels per token for a
    token classifier, else one per sentence.

    Args:
        model: an `SLSTMFor*` or baseline model over a random vocabulary (`random_vocabulary_model`).
        batch (`int`), length (`int`): the batch's shape `(batch, length)`.
        word_length (`int`): the characters per word of `char_ids` `(batch, length, word_length)`.
        seed (`int`, *optional*, defaults to 0): the seed of the draws.
        shortest (`int`, *optional*): the shortest sentence (default: every sentence `length` tokens, no padding).
        device (`str` or `torch.device`, *optional*, defaults to `"cpu"`): where the tensors go.
    """
    generator = torch.Generator().manual_seed(seed)
    config = model.config
    lengths = torch.full((batch,), length)
    if shortest is not None:
        lengths = torch.randint(shortest, length + 1, (batch,), generator=generator)
        lengths[0] = length
    mask = (torch.arange(length) < lengths[:, None]).long()  # (batch, length)
    inputs = {"input_ids": torch.randint(4, config.vocab_size, (batch, length), generator=generator) * mask,
              "attention_mask": mask}  # fmt: skip
    if config.use_char_features:
        chars = torch.randint(2, config.char_vocab_size, (batch, length, word_length), generator=generator)
        inputs["char_ids"] = chars * mask[:, :, None]  # (batch, length, word_length)
    if isinstance(model, MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING.get(type(config), ())):
        labels = torch.randint(config.num_labels, (batch, length), generator=generator)  # (batch, length)
        inputs["labels"] = labels.masked_fill(mask == 0, IGNORE_INDEX)
    else:
        inputs["labels"] = torch.randint(config.num_labels, (batch,), generator=generator)  # (batch,)
    return {name: tensor.to(device) for name, tensor in inputs.items()}


def random_workload(batch: int, length: int) -> Workload:
    return Workload(RANDOM, batch, length, ((length,) * batch,), (length,))


def corpus_lengths(data_dir: Path, corpus: str) -> list[int]:
    """Tokens per training sentence of `corpus` as the training scripts frame them (`<s> words </s>`): CoNLL-2003's
    train split (`run_ner.py`), the movie-review train split of `--split_seed 42` (`run_classification.py`)."""
    path = Path(data_dir) / CORPORA[corpus]
    if corpus == "movie-review":
        sentences = [example["text"].split() for example in data.read_rt_polarity(path, seed=42)["train"]]
    else:
        sentences = [example["tokens"] for example in data.read_conll(path)]
    return [len(words) + 2 for words in sentences]


def real_workload(
    lengths: list[int], corpus: str, batch: int, num_batches: int, pad_multiple: int | None, seed: int = 42
) -> Workload:
    """`num_batches` batches spread evenly over an epoch as the training scripts draw them (`group_by_length`:
    transformers' `LengthGroupedSampler`, seeded; it puts the longest batch first, so the first batches alone would be
    the longest: every `step`-th batch from `step // 2` on), each padded to its longest sentence, rounded up to a
    multiple of `pad_multiple` where given (`gpu_batching.pad_multiple_for`)."""
    batches = [tuple(lengths[i] for i in indices) for indices in length_grouped_batches(lengths, batch, seed)]
    step = max(len(batches) // num_batches, 1)
    batches = batches[step // 2 :: step][:num_batches]
    multiple = pad_multiple or 1
    widths = tuple(math.ceil(max(b) / multiple) * multiple for b in batches)
    mean_width = round(sum(widths) / len(widths))
    return Workload(corpus, batch, mean_width, tuple(batches), widths)


def real_workloads(
    data_dir: Path | None, corpora: list[str], batch_sizes: list[int], num_batches: int, device: torch.device
) -> list[Workload]:
    """`real_workload` of each corpus and batch size; none (with the reason printed) where the data is missing."""
    workloads = []
    for corpus in corpora:
        path = Path(data_dir or "") / CORPORA[corpus]
        if data_dir is None or not path.exists():
            print(f"skipping the real {corpus} batches: {path} not found (--data_dir)", flush=True)
            continue
        lengths = corpus_lengths(data_dir, corpus)
        pad_multiple = gpu_batching.pad_multiple_for(device)
        workloads += [real_workload(lengths, corpus, batch, num_batches, pad_multiple) for batch in batch_sizes]
    return workloads
