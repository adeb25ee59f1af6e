"""Word-level tokenizer for the Sentence-State LSTM.

The S-LSTM reads one embedding per word, so the tokenizer is a plain word-level vocabulary built with the
`tokenizers` library and wrapped in a `transformers.PreTrainedTokenizerFast`. The saved tokenizer therefore loads
with `AutoTokenizer.from_pretrained` and needs no custom code.

Every sentence is framed as `<s> w_1 ... w_n </s>`; the special tokens always have the ids `<pad>`=0, `<unk>`=1,
`<s>`=2 and `</s>`=3, whatever the training data.
"""

from collections.abc import Iterable, Sequence

from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast


PAD_TOKEN = "<pad>"
UNK_TOKEN = "<unk>"
BOS_TOKEN = "<s>"
EOS_TOKEN = "</s>"
# The position of a special token in this tuple is its id.
SPECIAL_TOKENS = (PAD_TOKEN, UNK_TOKEN, BOS_TOKEN, EOS_TOKEN)

# `WordLevelTrainer` keeps only the 30000 most frequent words by default; the vocabulary size is meant to be
# limited by `min_frequency` alone.
_UNLIMITED_VOCAB_SIZE = 2**63 - 1


def _validated_sentences(sentences: Iterable[Sequence[str]]) -> list[Sequence[str]]:
    """Materialises the training sentences and checks that they hold at least one word.

    Args:
        sentences (`Iterable[Sequence[str]]`):
            Training sentences, each already split into words.

    Returns:
        `list[Sequence[str]]`: The sentences as a list.
    """
    sentences = list(sentences)
    for index, sentence in enumerate(sentences):
        # A bare string would be iterated character by character and silently give a character vocabulary.
        if isinstance(sentence, str):
            raise ValueError(
                f"Expected each training sentence to be a sequence of words, got the string {sentence!r} at index "
                f"{index}; split it into words first."
            )
    if not any(len(sentence) for sentence in sentences):
        raise ValueError(
            f"Cannot build a tokenizer from empty training data: got {len(sentences)} sentences and no words."
        )
    return sentences


def _empty_word_tokenizer(lowercase: bool) -> Tokenizer:
    """Creates the untrained word-level pipeline: optional lower-casing, then splitting on whitespace.

    Args:
        lowercase (`bool`):
            Whether to lower-case text before looking words up.

    Returns:
        `tokenizers.Tokenizer`: A tokenizer with an empty `WordLevel` model.
    """
    tokenizer = Tokenizer(models.WordLevel(unk_token=UNK_TOKEN))
    if lowercase:
        tokenizer.normalizer = normalizers.Lowercase()
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return tokenizer


def _count_training_words(tokenizer: Tokenizer, sentences: list[Sequence[str]], min_frequency: int) -> list[str]:
    """Lists the training words seen at least `min_frequency` times, most frequent first.

    Args:
        tokenizer (`tokenizers.Tokenizer`):
            The untrained pipeline; its normalizer is applied while counting and its model is replaced by the
            trained one.
        sentences (`list[Sequence[str]]`):
            Training sentences, each already split into words.
        min_frequency (`int`):
            Minimum number of occurrences for a word to be kept.

    Returns:
        `list[str]`: The kept words, by decreasing frequency and alphabetically among equal counts.
    """
    # The trainer is given no special tokens: when one of them also occurs in the data it would no longer get its
    # fixed id. They are put in front of the vocabulary afterwards instead.
    trainer = trainers.WordLevelTrainer(
        vocab_size=_UNLIMITED_VOCAB_SIZE, min_frequency=min_frequency, special_tokens=[], show_progress=False
    )
    tokenizer.train_from_iterator(sentences, trainer=trainer)
    vocabulary = tokenizer.get_vocab()
    return sorted(vocabulary, key=vocabulary.__getitem__)


def _build_vocabulary(words: Iterable[str]) -> dict[str, int]:
    """Numbers the special tokens and then `words` in order, skipping repeats.

    Args:
        words (`Iterable[str]`):
            Vocabulary words after the special tokens; later repeats of a word (or of a special token) are ignored.

    Returns:
        `dict[str, int]`: Word to id, the special tokens having the ids 0 to 3.
    """
    # dict.fromkeys keeps the first occurrence of each word in order, so ids are deterministic.
    return {word: index for index, word in enumerate(dict.fromkeys((*SPECIAL_TOKENS, *words)))}


def _sentence_framing() -> processors.TemplateProcessing:
    """Creates the post-processor that frames a sentence as `<s> $A </s>` and a pair as `<s> $A </s> $B </s>`.

    Returns:
        `tokenizers.processors.TemplateProcessing`: The post-processor; the second sentence of a pair has type id 1.
    """
    return processors.TemplateProcessing(
        single=f"{BOS_TOKEN} $A {EOS_TOKEN}",
        pair=f"{BOS_TOKEN} $A {EOS_TOKEN} $B:1 {EOS_TOKEN}:1",
        special_tokens=[(BOS_TOKEN, SPECIAL_TOKENS.index(BOS_TOKEN)), (EOS_TOKEN, SPECIAL_TOKENS.index(EOS_TOKEN))],
    )


def build_word_tokenizer(
    sentences: Iterable[Sequence[str]],
    min_frequency: int = 1,
    extra_vocabulary: Iterable[str] | None = None,
    lowercase: bool = False,
    model_max_length: int = 512,
) -> PreTrainedTokenizerFast:
    """Builds a word-level tokenizer from training sentences, optionally united with a pretrained-vector vocabulary.

    Ids are deterministic for the same input: the special tokens `<pad>`=0, `<unk>`=1, `<s>`=2, `</s>`=3 come first,
    then the training words by decreasing frequency (alphabetically among equal counts), then the words of
    `extra_vocabulary` not seen yet, in their given order.

    Args:
        sentences (`Iterable[Sequence[str]]`):
            Training sentences, each already split into words, e.g. `[["The", "cat", "sat"], ["It", "ran"]]`.
        min_frequency (`int`, *optional*, defaults to 1):
            Minimum number of occurrences in `sentences` for a training word to enter the vocabulary.
        extra_vocabulary (`Iterable[str]`, *optional*):
            Words added even when unseen in training, typically the words that have a pretrained vector (GloVe).
            They are normalised like the input text (lower-cased when `lowercase=True`). Words containing whitespace
            can never be produced by the whitespace pre-tokenizer, so they only take up ids.
        lowercase (`bool`, *optional*, defaults to `False`):
            Whether to lower-case all text, when building the vocabulary and when encoding.
        model_max_length (`int`, *optional*, defaults to 512):
            Maximum number of tokens, `<s>` and `</s>` included, used when truncating.

    Returns:
        `PreTrainedTokenizerFast`: The tokenizer. Call it with `is_split_into_words=True` on pre-split words; its
        `word_ids()` are `None` at `<s>` and `</s>`. It saves with `save_pretrained` and loads back with
        `AutoTokenizer.from_pretrained`.

    Raises:
        `ValueError`: If `min_frequency` is smaller than 1, the training data holds no words, or a sentence is a
        string instead of a sequence of words.
    """
    if min_frequency < 1:
        raise ValueError(f"Expected min_frequency to be at least 1, got {min_frequency}.")
    sentences = _validated_sentences(sentences)

    tokenizer = _empty_word_tokenizer(lowercase)
    words = _count_training_words(tokenizer, sentences, min_frequency)
    if extra_vocabulary is not None:
        normalizer = tokenizer.normalizer
        # The library's normaliser, not str.lower, so extra words match exactly what encoding will look up.
        words += [normalizer.normalize_str(word) if normalizer else word for word in extra_vocabulary]

    tokenizer.model = models.WordLevel(_build_vocabulary(words), unk_token=UNK_TOKEN)
    # Registering them as special keeps them whole, out of normalisation, and lets decoding skip them.
    tokenizer.add_special_tokens(list(SPECIAL_TOKENS))
    tokenizer.post_processor = _sentence_framing()

    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        pad_token=PAD_TOKEN,
        unk_token=UNK_TOKEN,
        bos_token=BOS_TOKEN,
        eos_token=EOS_TOKEN,
        model_max_length=model_max_length,
    )
