"""Tiny S-LSTM configs, models and batches shared by the tests (imported as `helpers`), where the shared benchmark
data lies, and the guard regions around the buffers that the Triton kernels write (`GuardedKernelBuffers`,
`CheckedKernel`)."""

import inspect
import math
import os
from pathlib import Path

import numpy as np
import torch

from modeling_slstm import SLSTMConfig, SLSTMForTokenClassification
from modeling_slstm.tokenization_slstm import build_word_tokenizer, update_config_from_tokenizer

VOCAB_SIZE = 20
PAD, BOS, EOS = 0, 2, 3  # the config defaults (the word tokenizer's fixed ids)
BIO_LABELS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
REPO = Path(__file__).resolve().parent.parent


def shared_data_root() -> Path:
    """The shared benchmark data folder: `$SLSTM_SHARED_DATA`, else `shared/data` beside the repository."""
    return Path(os.environ.get("SLSTM_SHARED_DATA", REPO.parent / "shared" / "data"))


def tiny_config(**overrides) -> SLSTMConfig:
    """A small config without dropout; `overrides` replace any setting."""
    settings = {
        "vocab_size": VOCAB_SIZE,
        "embedding_dim": 5,
        "hidden_size": 6,
        "num_steps": 3,
        "window_size": 1,
        "num_sentence_nodes": 1,
        "embedding_dropout": 0.0,
        "hidden_dropout": 0.0,
        "classifier_dropout": 0.0,
    }
    settings.update(overrides)
    return SLSTMConfig(**settings)


CHAR_VOCAB_SIZE = 12
MAX_WORD_LENGTH = 6


def char_settings(**overrides) -> dict:
    """Small character-feature settings without dropout, for `tiny_config(**char_settings())` and the baselines."""
    settings = {
        "use_char_features": True,
        "char_vocab_size": CHAR_VOCAB_SIZE,
        "char_embedding_dim": 4,
        "char_hidden_size": 3,
        "char_kernel_size": 3,
        "char_dropout": 0.0,
    }
    settings.update(overrides)
    return settings


def tagger_config(**overrides) -> SLSTMConfig:
    """`tiny_config` with the BIO labels of `BIO_LABELS`."""
    labels = {"id2label": dict(enumerate(BIO_LABELS)), "label2id": {label: i for i, label in enumerate(BIO_LABELS)}}
    return tiny_config(**{**labels, **overrides})


def word_tagger(sentences: list[list[str]], use_crf: bool = True):
    """A small BIO tagger (hidden 8, 2 steps, no dropout, default initialisation, seed 0) and the word tokenizer built
    from `sentences`, its vocabulary in the config: `(model, tokenizer)`, as the training scripts pair them."""
    tokenizer = build_word_tokenizer(sentences)
    config = SLSTMConfig(
        embedding_dim=8, hidden_size=8, num_steps=2, use_crf=use_crf, embedding_dropout=0.0,
        id2label=dict(enumerate(BIO_LABELS)), label2id={label: i for i, label in enumerate(BIO_LABELS)},
    )  # fmt: skip
    update_config_from_tokenizer(config, tokenizer)
    torch.manual_seed(0)
    return SLSTMForTokenClassification(config), tokenizer


def randomize_(model: torch.nn.Module, seed: int = 0, scale: float = 0.5) -> torch.nn.Module:
    """Overwrite every parameter (biases, `initial_state` and CRF scores included) with N(0, scale²) draws, so that
    no term of the recurrence is hidden by a zero initialisation. Keeps the embedding's padding row at zero."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in model.parameters():
            draw = torch.randn(parameter.shape, generator=generator, dtype=torch.float64) * scale
            parameter.copy_(draw.to(parameter.dtype))
        for module in model.modules():
            if isinstance(module, torch.nn.Embedding) and module.padding_idx is not None:
                module.weight[module.padding_idx].zero_()
    return model


def build(model_class, config: SLSTMConfig | None = None, seed: int = 0, dtype=torch.float32, **overrides):
    """`model_class(config)` with random weights (see `randomize_`), in `dtype` and eval mode."""
    config = config if config is not None else tiny_config(**overrides)
    torch.manual_seed(seed)
    model = model_class(config).to(dtype)
    return randomize_(model, seed).eval()


def random_ids(lengths, seed: int = 0, low: int = 4) -> list[list[int]]:
    """One list of non-special token ids per length."""
    generator = torch.Generator().manual_seed(seed)
    return [torch.randint(low, VOCAB_SIZE, (n,), generator=generator).tolist() for n in lengths]


def pad(sequences, side: str = "right", value: int = PAD) -> tuple[torch.Tensor, torch.Tensor]:
    """Stack lists of ids (or labels) into `(batch, max_len)` with `value` on `side`, plus the bool real-token mask."""
    width = max(len(s) for s in sequences)
    rows, masks = [], []
    for sequence in sequences:
        filler = [value] * (width - len(sequence))
        ones, zeros = [True] * len(sequence), [False] * len(filler)
        rows.append(sequence + filler if side == "right" else filler + sequence)
        masks.append(ones + zeros if side == "right" else zeros + ones)
    return torch.tensor(rows), torch.tensor(masks)


def real(tensor: torch.Tensor, mask: torch.Tensor, row: int) -> torch.Tensor:
    """The real positions of `tensor[row]` (dim 1 is the sequence)."""
    return tensor[row][mask[row]]


def random_spellings(lengths, seed: int = 0) -> list[list[list[int]]]:
    """One sentence per length, each a list of words given as character ids (non-padding ids, 1 to
    `MAX_WORD_LENGTH` characters per word, unpadded)."""
    generator = torch.Generator().manual_seed(seed)
    sentences = []
    for n in lengths:
        word_lengths = torch.randint(1, MAX_WORD_LENGTH + 1, (n,), generator=generator).tolist()
        sentences.append([torch.randint(1, CHAR_VOCAB_SIZE, (k,), generator=generator).tolist() for k in word_lengths])
    return sentences


def pad_spellings(sentences, side: str = "right", width: int | None = None) -> torch.Tensor:
    """`char_ids` `(batch, max_len, width)` of `random_spellings` output: every word padded with 0 to `width` (the
    longest word by default), sentences padded with all-zero rows on `side` (as `pad` pads the ids)."""
    width = width if width is not None else max(len(word) for sentence in sentences for word in sentence)
    rows = [[word + [0] * (width - len(word)) for word in sentence] for sentence in sentences]
    return pad(rows, side, value=[0] * width)[0]


def save_tiny_encoder(folder) -> str:
    """Saves a tiny randomly initialised BERT (2 layers, hidden 8) and its uncased WordPiece tokenizer into `folder`
    as `AutoModel` / `AutoTokenizer` load them, and returns the folder. The vocabulary holds every lower-case letter
    with and without `##` and a few longer pieces, so any lower-case word is cut into pieces, often many
    (`"unbelievable"` -> `un ##bel ##iev ##able`, `"zq"` -> `z ##q`)."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
    from transformers import BertConfig, BertModel, PreTrainedTokenizerFast

    letters = [chr(code) for code in range(ord("a"), ord("z") + 1)]
    pieces = ["un", "##bel", "##iev", "##able", "the", "cat", "new", "york", "##s", ".", ",", "'"]
    vocabulary = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *letters, *(f"##{c}" for c in letters), *pieces]
    backend = Tokenizer(models.WordPiece({piece: i for i, piece in enumerate(vocabulary)}, unk_token="[UNK]"))
    backend.normalizer = normalizers.BertNormalizer(lowercase=True)
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    backend.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)]
    )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]", sep_token="[SEP]",
        mask_token="[MASK]", model_max_length=64,
    )  # fmt: skip
    config = BertConfig(
        vocab_size=len(vocabulary), hidden_size=8, num_hidden_layers=2, num_attention_heads=2, intermediate_size=16,
        max_position_embeddings=64, hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1,
    )  # fmt: skip
    torch.manual_seed(0)
    BertModel(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


def tiny_bert_tokenizer(words: list[str]):
    """A `BertTokenizerFast` over `words` (lower-case), built in memory: the special tokens `[PAD]`=0, `[UNK]`=1,
    `[CLS]`=2, `[SEP]`=3 have the ids of the word tokenizer's `<pad>`, `<unk>`, `<s>`, `</s>`, so that the two frame
    and pad a text with the same ids. The oracle for what `transformers`' tokenizers do with odd input."""
    from transformers import BertTokenizerFast

    vocabulary = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]
    return BertTokenizerFast(vocab={token: index for index, token in enumerate(vocabulary)})


def markdown_rows(text: str) -> list[dict[str, str]]:
    """The body rows of every Markdown table in `text`, each as `{column header: cell}` (cells stripped): tests read
    a table by its columns, so a reworded title or a new column elsewhere does not break them."""
    rows, header = [], None
    for line in text.splitlines():
        if not line.startswith("|"):
            header = None
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if header is None:
            header = cells
        elif not all(set(cell) <= set("-: ") for cell in cells):
            rows.append(dict(zip(header, cells, strict=True)))
    return rows


CANARY_BYTE = 0xFF
"""Every byte of a kernel buffer's guard regions (and of the buffer before the kernel writes it): NaN in every float
dtype, -1 in the integer ones. A kernel stores no such value (its NaNs are quiet NaNs without a payload, its tags and
indices are never -1), so a changed guard byte is a store outside the buffer."""
SMALLEST_GUARD = 4096
"""Elements of each guard region at least; a region is as long as its buffer where that is longer (a store past the
end of a sentence, or of the last position block, lands within one buffer's length of it), rounded up to 16 elements
(a buffer then starts 16-byte aligned, as Triton specialises its pointers on a GPU)."""


class GuardedKernelBuffers:
    """Stands in for `kernel_dispatch.kernel_buffer` (`allocate`): hands out each buffer as the middle of a larger
    tensor whose bytes are all `CANARY_BYTE` (so what a kernel leaves unwritten reads as NaN), and checks with
    `assert_guards_intact` that no byte before or after any buffer changed. Under `torch.compile`'s tracing (fake
    tensors, nothing stored) the buffers are `allocate`'s."""

    def __init__(self, allocate):
        self.allocate = allocate
        self.guarded = []  # (the whole tensor, where the buffer starts and ends in it, what the buffer is)

    def __call__(self, like: torch.Tensor, shape: tuple[int, ...], dtype: torch.dtype | None = None) -> torch.Tensor:
        if torch.compiler.is_compiling() or type(like) not in (torch.Tensor, torch.nn.Parameter):
            return self.allocate(like, shape, dtype)
        size = math.prod(shape)
        guard = -(-max(size, SMALLEST_GUARD) // 16) * 16
        whole = torch.empty(guard + size + guard, dtype=like.dtype if dtype is None else dtype, device=like.device)
        if whole.device.type == "cpu":  # NumPy, one thread: PyTorch's pool waits for a busy machine's cores (ms)
            whole.view(torch.uint8).numpy().fill(CANARY_BYTE)
        else:
            whole.view(torch.uint8).fill_(CANARY_BYTE)
        frame = inspect.currentframe().f_back
        while frame.f_code.co_name.startswith("<") and frame.f_back:  # a generator expression: what runs it
            frame = frame.f_back
        allocator = frame.f_code.co_qualname
        self.guarded.append((whole, guard, guard + size, f"{allocator}'s {tuple(shape)} {whole.dtype}"))
        return whole[guard : guard + size].view(shape)

    def assert_guards_intact(self):
        """Fails, naming each buffer and the elements (counted from its start) written outside it, where a kernel
        stored outside its buffer."""
        damaged = []
        for whole, start, end, name in self.guarded:
            # NumPy, for the reason given in `__call__`
            guard_bytes = whole.view(torch.uint8).cpu().numpy()
            width = whole.element_size()
            changed_before = np.flatnonzero(guard_bytes[: start * width] != CANARY_BYTE) // width - start
            changed_after = np.flatnonzero(guard_bytes[end * width :] != CANARY_BYTE) // width + end - start
            outside = np.unique(np.concatenate([changed_before, changed_after]))
            if len(outside):
                damaged.append(
                    f"{name} at elements {outside.min()} to {outside.max()} ({len(outside)} written; it holds 0 to "
                    f"{end - start - 1})"
                )
        assert not damaged, f"kernels stored outside their buffers: {'; '.join(damaged)}"


class CheckedKernel:
    """Stands in for a Triton kernel: `kernel[grid](...)` launches it after checking that none of its tensors is
    empty. An empty tensor has a null pointer (`data_ptr()` is 0, whatever its storage), which no guard region can
    surround: a store through it (e.g. into a buffer a block too small, where there was one block) would crash the
    interpreter rather than fail a test."""

    def __init__(self, kernel, name: str):
        self.kernel, self.name = kernel, name

    def __getitem__(self, grid):
        launch = self.kernel[grid]

        def checked(*args, **kwargs):
            arguments = {**dict(enumerate(args)), **kwargs}
            empty = [name for name, value in arguments.items() if torch.is_tensor(value) and not value.numel()]
            assert not empty, f"{self.name} got empty tensors (null pointers) for {empty}"
            return launch(*args, **kwargs)

        return checked
