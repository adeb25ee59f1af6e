"""Word-level tokenizer for the Sentence-State LSTM, with the spelling of every word.

The S-LSTM reads one embedding per word, so the tokenizer is a word-level vocabulary built with the `tokenizers`
library. [`SLSTMTokenizer`] wraps it in a `transformers` fast tokenizer and adds, for every token, the ids of its
characters (`char_ids`), so that a model with character features sees the spelling of every word, including the
words outside the vocabulary (which all share the `<unk>` word id).

Every sentence is framed as `<s> w_1 ... w_n </s>`; the special tokens always have the ids `<pad>`=0, `<unk>`=1,
`<s>`=2 and `</s>`=3, whatever the training data. A word of the user's text that reads like a special token (a
literal `<s>`, `</s>` or `<pad>`) is a word like any other: it is never matched as a special token and never given a
special id (it gets `<unk>`'s id and its own spelling), so it cannot drop out of a CRF chain.

How text is split into words:

- Pre-split input (`is_split_into_words=True`, the training data): exactly one token per given word, whatever it
  holds (`"York,"`, `"U.S."`, even `"New York"` stay one token each); an empty word, or a sentence without words,
  is an error.
- Raw text: split on whitespace (an empty or blank text has no words: it encodes as `<s> </s>`, as other tokenizers
  give their special tokens alone), then every chunk is cut into the successive matches of `WORD_PATTERN`, the first
  alternative that matches winning, as CoNLL-2003 / Penn-Treebank text is tokenised:

  1. a web address, without the punctuation that ends the chunk: `http://bit.ly/aQun1b`, `www.reuters.com`;
  2. a user mention or hashtag, as social-media corpora (WNUT) keep them: `@The_Score`, `#NFL`;
  3. letters each followed by a period, two or more: `U.S.`, `e.g.`, `U.S.A.`;
  4. a title or company abbreviation with its period: `Mr.`, `Mrs.`, `Ms.`, `Dr.`, `Prof.`, `St.`, `Jr.`, `Sr.`,
     `Inc.`, `Ltd.`, `Co.`, `Corp.`;
  5. digits joined by `.`, `,`, `:` or `/`: `1,000`, `3.5`, `12:30`, `1/2`;
  6. letters and digits, joined by single `-`, `&`, `.` or an apostrophe that does not start a clitic: `e-mail`,
     `AT&T`, `reuters.com`, `O'Neill`, `don't`, `3rd`, `1996-08-22`;
  7. an English clitic: `'s`, `'re`, `'ve`, `'ll`, `'d`, `'m`;
  8. a run of periods or of hyphens: `...`, `--`;
  9. any other single character (punctuation, symbols): `,` `.` `(` `$` `%` `"` `<`.

  A word never ends inside a grapheme (a character as the reader sees it, Unicode UAX #29): every match takes the
  rest of the grapheme it ends in, so an emoji is one word with its variation selector, skin tone or zero-width
  joiners (`❤️`, `👍🏽`, `👩‍🔬`), a flag's two regional indicators are one word (`🇨🇳`), and a combining mark stays
  on its letter. A word, mention or hashtag also goes on after a combining mark, so text written with decomposed
  accents (Unicode NFD: `naïve`, `#naïve`, `@Zürich` with U+0308) gives the words of its composed spelling (NFC),
  each in the spelling of the text, and a mention in a script with combining vowel signs stays whole (`@नमस्ते`).

  So "Just landed in New York, heading to Madison Square Garden." gives `Just landed in New York , heading to
  Madison Square Garden .`, and "York's" gives `York 's`. A final period is split off every other word (`York.`
  gives `York .`), single initials included (`J.` gives `J .`), since a capital and a period also end sentences
  ("plan B."); a sentence that ends with an abbreviation of rule 4 keeps its period on it.

Character ids (`char_ids`, shape `(sequence, max_word_length)` per sentence): a character vocabulary built from the
training words (their original spelling: case is kept even with `lowercase=True`), after four reserved entries:
0 = padding, 1 = a character never seen in training, 2 and 3 = the one-character rows of `<s>` and `</s>`. A word
longer than `max_word_length` characters keeps its first `max_word_length` characters; padding tokens have an
all-zero row. The tokenizer's `pad` (hence `DataCollatorWithPadding` and `DataCollatorForTokenClassification`) pads
`char_ids` along with `input_ids`.

Subword inputs of a pretrained feature encoder (only for a tokenizer built with a `subword_tokenizer`, e.g. a
BERT's): every sentence's words, as the word-level tokenizer split them, are also cut into the encoder's subwords
with the encoder's own tokenizer (its framing `[CLS] ... [SEP]` included), giving `subword_ids`,
`subword_attention_mask` and `subword_to_word` (per subword, the position of its word among the `input_ids`; the
encoder's leading framing token maps to `<s>`, its closing one to `</s>`). They have their own length (a word may
be many subwords) and are padded on the right with zeros, by the call itself and by `pad`.
"""

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from contextlib import contextmanager

from tokenizers import Encoding, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import AutoTokenizer, BatchEncoding, PreTrainedTokenizerFast
from transformers.tokenization_utils_base import VERY_LARGE_INTEGER, TruncationStrategy
from transformers.utils import PaddingStrategy

from .configuration_slstm import CHAR_PAD_ID, SLSTMConfig

PAD_TOKEN = "<pad>"
UNK_TOKEN = "<unk>"
BOS_TOKEN = "<s>"
EOS_TOKEN = "</s>"
# The position of a special token in this tuple is its id.
SPECIAL_TOKENS = (PAD_TOKEN, UNK_TOKEN, BOS_TOKEN, EOS_TOKEN)

# The character vocabulary starts with the same four entries (strings longer than one character, so they can never
# be taken for a character): padding (`CHAR_PAD_ID`), unknown character, and the rows of the boundary tokens.
CHAR_UNK_ID = 1
DEFAULT_MAX_WORD_LENGTH = 20
SUBWORD_INPUT_NAMES = ("subword_ids", "subword_attention_mask", "subword_to_word")

# `WordLevelTrainer` keeps only the 30000 most frequent words by default; the vocabulary size is meant to be
# limited by `min_frequency` alone.
_UNLIMITED_VOCAB_SIZE = 2**63 - 1

_CLITIC = r"'(?:[sSdDmM]|re|RE|ve|VE|ll|LL)(?!\p{L})"
_WORD_CHARACTER = r"[\p{L}\p{M}\p{N}]"
# `\Y` is Oniguruma's "not at a grapheme boundary" (Unicode UAX #29), so this takes the rest of the grapheme a match
# ends in.
_REST_OF_GRAPHEME = r"(?:\Y.)*"
WORD_PATTERN = (
    "(?:"
    + "|".join(
        [
            r"(?:https?://|www\.)\S+?(?=[.,;:!?)\]\"']*$)",
            rf"[@#][\p{{L}}\p{{N}}_](?:{_WORD_CHARACTER}|_)*",
            r"(?:\p{L}\.){2,}",
            r"(?:Mr|Mrs|Ms|Dr|Prof|St|Jr|Sr|Inc|Ltd|Co|Corp)\.",
            r"\p{N}+(?:[.,:/]\p{N}+)+",
            rf"[\p{{L}}\p{{N}}]{_WORD_CHARACTER}*(?:(?:[-&.]|'(?!{_CLITIC[1:]})){_WORD_CHARACTER}+)*",
            _CLITIC,
            r"\.{2,}|-{2,}",
            r"\S",
        ]
    )
    + ")"
    + _REST_OF_GRAPHEME
)
"""The raw-text word rule (see the module docstring), applied to each whitespace-separated chunk."""


def _validated_sentences(sentences: Iterable[Sequence[str]]) -> list[Sequence[str]]:
    """Materialises the training sentences and checks that they are lists of non-empty words, with at least one word.

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
            raise TypeError(
                f"Expected each training sentence to be a sequence of words, got the string {sentence!r} at index "
                f"{index}; split it into words first."
            )
        _check_words(sentence, f"Sentence {index}")
    if not any(len(sentence) for sentence in sentences):
        raise ValueError(
            f"Cannot build a tokenizer from empty training data: got {len(sentences)} sentences and no words."
        )
    return sentences


def _check_words(words: Sequence[str], sentence_name: str) -> None:
    """Raises a `ValueError` naming the sentence (`sentence_name`, e.g. "Sentence 3") and the position of the first
    empty word of `words`."""
    for position, word in enumerate(words):
        if not word:
            raise ValueError(
                f"{sentence_name} has an empty word at position {position}: every word needs at least one character "
                f"(got the words {list(words)!r})."
            )


def _check_pre_split_sentences(sentences: Sequence, pair_side: str | None = None) -> None:
    """Raises a clear `ValueError` for a pre-split sentence that is a string, has no words or has an empty word,
    naming the sentence (its index in the batch, and its side of a pair), instead of letting the backend drop the
    empty words silently.

    Args:
        sentences (`Sequence`):
            A batch of sentences given with `is_split_into_words=True`, each a list of words.
        pair_side (`str`, *optional*):
            For the sentences of pairs, which side they are: `"first"` (`text`) or `"second"` (`text_pair`).
    """
    argument = {"first": "text", "second": "text_pair"}
    for index, sentence in enumerate(sentences):
        name = f"sentence {index}"
        if pair_side is not None:
            name = f"the {pair_side} sentence ({argument[pair_side]}) of pair {index}"
        capitalized = name[0].upper() + name[1:]
        if isinstance(sentence, str):
            raise ValueError(
                f"With is_split_into_words=True, expected {name} to be a list of words, got the string {sentence!r}."
            )
        if len(sentence) == 0:
            raise ValueError(
                f"{capitalized} is empty: with is_split_into_words=True, expected at least one word (an empty raw "
                "text, without is_split_into_words, encodes as <s> </s>)."
            )
        _check_words(sentence, capitalized)


def _is_batch(text, is_split_into_words: bool) -> bool:
    """Whether `text` is a batch of sentences, by the rule of `PreTrainedTokenizerBase.__call__`."""
    if is_split_into_words:
        return isinstance(text, (list, tuple)) and bool(text) and isinstance(text[0], (list, tuple))
    return isinstance(text, (list, tuple))


def _raw_text_pre_tokenizer() -> pre_tokenizers.PreTokenizer:
    """Splits raw text on whitespace, then into the successive matches of `WORD_PATTERN`."""
    return pre_tokenizers.Sequence(
        [pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Split(Regex(WORD_PATTERN), behavior="isolated")]
    )


def _word_decoder() -> decoders.Decoder:
    """Joins tokens with spaces, without the spaces before the punctuation and clitics that transformers'
    `clean_up_tokenization` removes (`.` `,` `!` `?` `'s` `n't` ...): `M . Wasim , Lahore 's` -> `M. Wasim, Lahore's`,
    as the text usually spells them; other punctuation keeps its spaces (`( ABC )`).

    It is `tokenizers`' WordPiece decoder, which BERT's tokenizers use: its continuation prefix is a Unicode
    noncharacter, which no word starts with, so no token is glued to the one before."""
    return decoders.WordPiece(prefix="\uffff", cleanup=True)


def _empty_word_tokenizer(lowercase: bool) -> Tokenizer:
    """Creates the untrained word-level pipeline: optional lower-casing and no pre-tokenizer, so that every given
    word is counted whole, as pre-split input is encoded.

    Args:
        lowercase (`bool`):
            Whether to lower-case text before looking words up.

    Returns:
        `tokenizers.Tokenizer`: A tokenizer with an empty `WordLevel` model.
    """
    tokenizer = Tokenizer(models.WordLevel(unk_token=UNK_TOKEN))
    if lowercase:
        tokenizer.normalizer = normalizers.Lowercase()
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


def _count_training_characters(sentences: list[Sequence[str]], min_frequency: int) -> list[str]:
    """Lists the characters of the training words (as written, before any lower-casing) seen at least
    `min_frequency` times, most frequent first and by code point among equal counts."""
    counts = Counter(character for sentence in sentences for word in sentence for character in word)
    kept = [character for character, count in counts.items() if count >= min_frequency]
    return sorted(kept, key=lambda character: (-counts[character], character))


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


class SLSTMTokenizer(PreTrainedTokenizerFast):
    r"""
    Word-level fast tokenizer that also returns the character ids of every token (`char_ids`, see the module
    docstring); build one with [`build_word_tokenizer`]. It saves with `save_pretrained` (its code and character
    vocabulary included) and loads with `AutoTokenizer.from_pretrained` (`trust_remote_code=True` where
    `modeling_slstm` is not installed).

    Outputs, per sentence: `input_ids` `(seq,)`, `attention_mask` `(seq,)` and `char_ids` `(seq, max_word_length)`;
    with `return_tensors="pt"` and a batch, `char_ids` is a `(batch, seq, max_word_length)` tensor. Pre-split input
    (`is_split_into_words=True`) gives exactly one token per word; raw text is split as described in the module
    docstring, with offsets into the given text. An empty or whitespace-only raw text encodes as `<s> </s>` (no
    words), as other tokenizers give their special tokens alone: `pipeline("token-classification")` then returns no
    entities for it, `pipeline("text-classification")` the prediction for the boundary tokens alone. A pre-split
    sentence without words, or with an empty word, raises a `ValueError` naming the sentence (and its side of a
    pair). Decoding joins tokens with spaces, less those before `.` `,` `!` `?` and clitics (`'s`), as BERT's
    tokenizers decode: `pipeline("token-classification", aggregation_strategy="simple")` gives the entity of the text
    "M. Wasim" the word `M. Wasim`.

    Args:
        char_vocabulary (`list[str]`):
            The reserved entries `["<pad>", "<unk>", "<s>", "</s>"]` (ids 0 to 3), then one character per entry.
        max_word_length (`int`, *optional*, defaults to 20):
            Characters kept per word (the first ones); the width of the `char_ids` rows.
        subword_tokenizer (`str`, *optional*):
            A feature encoder's tokenizer, serialised by `tokenizers` (`Tokenizer.to_str()`): with it the tokenizer
            also returns `subword_ids`, `subword_attention_mask` and `subword_to_word` (see the module docstring).
            Its own truncation and padding settings are switched off: nothing is cut silently.
        subword_max_length (`int`, *optional*):
            The most subwords (framing included) the feature encoder reads. With truncation on (`truncation=True`,
            which [`build_word_tokenizer`] makes mean this limit), a sentence, pre-split or raw text, also loses its
            last words until its subwords fit; without it, a longer sentence raises a `ValueError` naming it, as
            does a longer window with `return_overflowing_tokens` (windows cover the whole text).
        kwargs:
            The arguments of `PreTrainedTokenizerFast` (`tokenizer_object` or `tokenizer_file`, special tokens,
            `model_max_length`, ...). `split_special_tokens` defaults to `True`: the text's own `<s>` is a word.
    """

    model_input_names = ["input_ids", "attention_mask", "char_ids"]

    def __init__(
        self,
        *args,
        char_vocabulary: list[str] | None = None,
        max_word_length: int = DEFAULT_MAX_WORD_LENGTH,
        subword_tokenizer: str | None = None,
        subword_max_length: int | None = None,
        **kwargs,
    ):
        if char_vocabulary is None or list(char_vocabulary[: len(SPECIAL_TOKENS)]) != list(SPECIAL_TOKENS):
            raise ValueError(
                f"SLSTMTokenizer needs a char_vocabulary that starts with {list(SPECIAL_TOKENS)}, got "
                f"{None if char_vocabulary is None else list(char_vocabulary[:4])!r} (a tokenizer saved without "
                "characters loads with AutoTokenizer as a plain word-level tokenizer)."
            )
        if not isinstance(max_word_length, int) or max_word_length < 1:
            raise ValueError(f"Expected max_word_length to be an integer >= 1, got {max_word_length!r}.")
        kwargs.setdefault("split_special_tokens", True)
        if subword_tokenizer is not None:
            kwargs.update(subword_tokenizer=subword_tokenizer, subword_max_length=subword_max_length)
        super().__init__(*args, char_vocabulary=list(char_vocabulary), max_word_length=max_word_length, **kwargs)
        if self.backend_tokenizer.decoder is None:  # also for a tokenizer saved without it
            self.backend_tokenizer.decoder = _word_decoder()
        self.char_vocabulary = list(char_vocabulary)
        self.max_word_length = max_word_length
        self._char_ids = {character: index for index, character in enumerate(self.char_vocabulary)}
        self.subword_backend = None
        self.subword_max_length = subword_max_length
        if subword_tokenizer is not None:
            self.subword_backend = Tokenizer.from_str(subword_tokenizer)
            self.subword_backend.no_truncation()
            self.subword_backend.no_padding()
            self.model_input_names = [*type(self).model_input_names, *SUBWORD_INPUT_NAMES]

    @classmethod
    def convert_to_native_format(cls, trust_remote_code=False, **kwargs):
        # The whole word-level pipeline (normaliser, pre-tokenizer, framing) is stored in tokenizer.json: load it as
        # it is, instead of the default for subclasses, which rebuilds a backend from the vocabulary alone.
        return kwargs

    @property
    def char_vocab_size(self) -> int:
        """Number of character ids, reserved ones included: the `char_vocab_size` a model config needs."""
        return len(self.char_vocabulary)

    def spell(self, word: str) -> list[int]:
        """The `char_ids` row of `word`: the ids of its first `max_word_length` characters (1 for a character
        outside the vocabulary), then 0 up to `max_word_length`."""
        ids = [self._char_ids.get(character, CHAR_UNK_ID) for character in word[: self.max_word_length]]
        return ids + [CHAR_PAD_ID] * (self.max_word_length - len(ids))

    @contextmanager
    def _words_kept_whole(self, is_split_into_words: bool):
        """Switches the raw-text pre-tokenizer off for pre-split input: `tokenizers` runs it on every given word,
        which would cut `"York,"` or `"U.S."` given as one word into several tokens. Like the truncation and padding
        settings that `transformers` sets on the backend for every call, this is not meant for threads sharing one
        tokenizer."""
        pre_tokenizer = self.backend_tokenizer.pre_tokenizer
        if is_split_into_words:
            self.backend_tokenizer.pre_tokenizer = None
        try:
            yield
        finally:
            self.backend_tokenizer.pre_tokenizer = pre_tokenizer

    def _token_texts(self, encoding: Encoding, sentences: tuple, is_split_into_words: bool) -> list[str | None]:
        """The text of every word token of one encoded (possibly padded) sequence, as given (before any
        lower-casing); `None` for the framing tokens and padding.

        Args:
            encoding (`tokenizers.Encoding`): the backend's encoding of the sentence (or pair).
            sentences (`tuple`): the sentence and the pair sentence (or `None`), as given.
            is_split_into_words (`bool`): whether the sentences are word lists (offsets are then within a word).
        """
        texts = []
        for word_index, sequence_index, (start, end), attended in zip(
            encoding.word_ids, encoding.sequence_ids, encoding.offsets, encoding.attention_mask
        ):
            if not attended or sequence_index is None:
                texts.append(None)
                continue
            source = sentences[sequence_index]
            if is_split_into_words:
                source = source[word_index]
            texts.append(source[start:end])
        return texts

    def _token_spellings(self, encoding: Encoding, texts: list[str | None]) -> list[list[int]]:
        """The `char_ids` rows of one encoded sequence whose word tokens read `texts` (`_token_texts`)."""
        rows = []
        for token, text, attended in zip(encoding.tokens, texts, encoding.attention_mask):
            if not attended:
                rows.append([CHAR_PAD_ID] * self.max_word_length)
            elif text is None:  # `<s>` / `</s>` added by the framing
                rows.append(self._reserved_row(token))
            else:
                rows.append(self.spell(text))
        return rows

    def _subword_row(
        self, encoding: Encoding, texts: list[str | None], add_special_tokens: bool, sentence_index: int
    ) -> tuple[list[int], list[int]]:
        """The feature encoder's `subword_ids` of one encoded sequence whose word tokens read `texts`, and the
        `subword_to_word` position of each: its word's, or for the encoder's own framing tokens that of `<s>`
        (before the words) or `</s>` (after them)."""
        word_positions = [position for position, text in enumerate(texts) if text is not None]
        framing = [
            position
            for position, (special, attended) in enumerate(zip(encoding.special_tokens_mask, encoding.attention_mask))
            if special and attended
        ]
        subwords = self.subword_backend.encode(
            [texts[position] for position in word_positions],
            is_pretokenized=True,
            add_special_tokens=add_special_tokens,
        )
        if self.subword_max_length is not None and len(subwords.ids) > self.subword_max_length:
            raise ValueError(
                f"Sentence {sentence_index} is {len(subwords.ids)} subwords long for the feature encoder, which reads "
                f"at most {self.subword_max_length}: shorten it, or pass truncation=True, which drops its last words "
                "until its subwords fit (windows over a long text, return_overflowing_tokens or a pipeline's stride, "
                "must each fit: give them a smaller max_length)"
            )
        # Without words only the first framing token leads.
        first_word = next((j for j, word in enumerate(subwords.word_ids) if word is not None), 1)
        to_word = []
        for j, word in enumerate(subwords.word_ids):
            if word is not None:
                to_word.append(word_positions[word])
            elif not framing:
                raise ValueError(
                    "The feature encoder's tokenizer adds framing tokens but the sentence has no <s>/</s> to map them "
                    "to: call the tokenizer with add_special_tokens=True"
                )
            else:
                to_word.append(framing[0] if j < first_word else framing[-1])
        return subwords.ids, to_word

    def _words_fitting_subword_limit(self, words: Sequence[str], add_special_tokens: bool, sentence_index: int) -> int:
        """How many leading words of `words` fit, subwords and the encoder's framing together, in
        `subword_max_length` (at least one). Pre-split words are cut into subwords one by one, so every word has a
        fixed count."""
        subwords = self.subword_backend.encode(
            list(words), is_pretokenized=True, add_special_tokens=add_special_tokens
        )
        if len(subwords.ids) <= self.subword_max_length:
            return len(words)
        budget = self.subword_max_length - sum(word is None for word in subwords.word_ids)
        pieces_per_word = Counter(word for word in subwords.word_ids if word is not None)
        kept = 0
        while kept < len(words) and pieces_per_word[kept] <= budget:
            budget -= pieces_per_word[kept]
            kept += 1
        if kept == 0:
            raise ValueError(
                f"The first word of sentence {sentence_index} alone is {pieces_per_word[0]} subwords for the feature "
                f"encoder, which reads at most {self.subword_max_length} with its framing: nothing is left to keep"
            )
        return kept

    def _within_subword_limit(
        self, sentence: str | Sequence[str], is_split_into_words: bool, add_special_tokens: bool, sentence_index: int
    ) -> str | Sequence[str]:
        """The sentence (pre-split words or raw text) without the last words that do not fit in
        `subword_max_length`; raw text is cut after its last kept word, split as the tokenizer splits it."""
        if is_split_into_words:
            return sentence[: self._words_fitting_subword_limit(sentence, add_special_tokens, sentence_index)]
        words_and_offsets = self.backend_tokenizer.pre_tokenizer.pre_tokenize_str(sentence)
        kept = self._words_fitting_subword_limit(
            [word for word, _ in words_and_offsets], add_special_tokens, sentence_index
        )
        if kept == len(words_and_offsets):
            return sentence
        _, (_, end_of_last_kept) = words_and_offsets[kept - 1]
        return sentence[:end_of_last_kept]

    @staticmethod
    def _padded_subword_columns(columns: Mapping[str, Sequence[Sequence[int]]]) -> dict[str, list[list[int]]]:
        """The subword inputs of a batch (`SUBWORD_INPUT_NAMES` -> one row per sentence), padded on the right with
        zeros to the longest row."""
        width = max((len(ids) for ids in columns["subword_ids"]), default=0)
        return {name: [list(row) + [0] * (width - len(row)) for row in columns[name]] for name in SUBWORD_INPUT_NAMES}

    def _reserved_row(self, token: str) -> list[int]:
        """The fixed `char_ids` row of a framing token: its reserved character id, then padding."""
        return [self._char_ids.get(token, CHAR_UNK_ID)] + [CHAR_PAD_ID] * (self.max_word_length - 1)

    def _unmark_literal_special_tokens(self, input_ids: list[int], encoding: Encoding) -> None:
        """Gives the `<unk>` id to the user's words that the word-level model looked up as `<pad>`, `<s>` or `</s>`
        (they are vocabulary entries too), so that only the framing and padding carry those ids."""
        reserved = {self.pad_token_id, self.bos_token_id, self.eos_token_id}
        for position, (token_id, special) in enumerate(zip(encoding.ids, encoding.special_tokens_mask)):
            if not special and token_id in reserved:
                input_ids[position] = self.unk_token_id

    def _encode_plus(
        self,
        text,
        text_pair=None,
        is_split_into_words: bool = False,
        return_tensors=None,
        return_overflowing_tokens: bool = False,
        **kwargs,
    ) -> BatchEncoding:
        batched = _is_batch(text, is_split_into_words)
        texts = list(text) if batched else [text]
        if not texts:  # the backend fails on it with a bare IndexError, as transformers' fast tokenizers do
            raise ValueError("The batch of texts is empty (text=[]); expected at least one text")
        # An empty second text is no pair, as `TokenizersBackend._encode_plus` has it.
        pairs = text_pair if batched else [text_pair] if text_pair else None
        if is_split_into_words:
            with_pairs = isinstance(pairs, (list, tuple))
            _check_pre_split_sentences(texts, "first" if with_pairs else None)
            if with_pairs:
                _check_pre_split_sentences(pairs, "second")
        if pairs is not None and self.subword_backend is not None:
            raise ValueError(
                "Sentence pairs are not supported with a feature encoder's subwords (subword_tokenizer): pass single "
                "sentences"
            )
        add_special_tokens = kwargs.get("add_special_tokens", True)
        truncation = kwargs.get("truncation_strategy", TruncationStrategy.DO_NOT_TRUNCATE)
        # Windows over a long text (`return_overflowing_tokens`, the pipelines' `stride`) cover all of it instead:
        # each window is checked against the limit.
        if (
            self.subword_backend is not None
            and self.subword_max_length is not None
            and truncation != TruncationStrategy.DO_NOT_TRUNCATE
            and not return_overflowing_tokens
        ):
            texts = [
                self._within_subword_limit(sentence, is_split_into_words, add_special_tokens, index)
                for index, sentence in enumerate(texts)
            ]

        # Encoded as a batch, without tensors: the rows are completed below, then unbatched or converted.
        with self._words_kept_whole(is_split_into_words):
            encoded = super()._encode_plus(
                texts,
                pairs,
                is_split_into_words=is_split_into_words,
                return_tensors=None,
                return_overflowing_tokens=return_overflowing_tokens,
                **kwargs,
            )
        samples = encoded.get("overflow_to_sample_mapping", range(len(encoded.encodings)))
        char_ids, subword_rows = [], []
        for row, (encoding, sample) in enumerate(zip(encoded.encodings, samples)):
            sentences = (texts[sample], None if pairs is None else pairs[sample])
            token_texts = self._token_texts(encoding, sentences, is_split_into_words)
            char_ids.append(self._token_spellings(encoding, token_texts))
            if self.subword_backend is not None:
                subword_rows.append(self._subword_row(encoding, token_texts, add_special_tokens, sample))
            self._unmark_literal_special_tokens(encoded["input_ids"][row], encoding)
        encoded["char_ids"] = char_ids
        if self.subword_backend is not None:
            columns = {
                "subword_ids": [ids for ids, _ in subword_rows],
                "subword_attention_mask": [[1] * len(ids) for ids, _ in subword_rows],
                "subword_to_word": [to_word for _, to_word in subword_rows],
            }
            if kwargs.get("padding_strategy", PaddingStrategy.DO_NOT_PAD) != PaddingStrategy.DO_NOT_PAD:
                columns = self._padded_subword_columns(columns)
            encoded.update(columns)

        if not batched and return_tensors is None and not return_overflowing_tokens:
            single = {
                key: value[0] if value and isinstance(value[0], list) else value for key, value in encoded.items()
            }
            return BatchEncoding(single, encoded.encodings)
        return encoded.convert_to_tensors(return_tensors)

    def pad(self, encoded_inputs, *args, **kwargs) -> BatchEncoding:
        """`PreTrainedTokenizerBase.pad`, with the subword inputs (which have their own length) first padded on the
        right with zeros to the batch's longest."""
        if isinstance(encoded_inputs, (list, tuple)) and encoded_inputs and isinstance(encoded_inputs[0], Mapping):
            if SUBWORD_INPUT_NAMES[0] in encoded_inputs[0]:
                columns = {name: [example[name] for example in encoded_inputs] for name in SUBWORD_INPUT_NAMES}
                columns = self._padded_subword_columns(columns)
                encoded_inputs = [
                    {**example, **{name: columns[name][row] for name in SUBWORD_INPUT_NAMES}}
                    for row, example in enumerate(encoded_inputs)
                ]
        elif isinstance(encoded_inputs, Mapping) and SUBWORD_INPUT_NAMES[0] in encoded_inputs:
            rows = encoded_inputs[SUBWORD_INPUT_NAMES[0]]
            if rows and isinstance(rows[0], (list, tuple)):  # a batch, not one sentence
                encoded_inputs = {**encoded_inputs, **self._padded_subword_columns(encoded_inputs)}
        return super().pad(encoded_inputs, *args, **kwargs)

    def _pad(
        self,
        encoded_inputs: dict,
        max_length: int | None = None,
        padding_strategy: PaddingStrategy = PaddingStrategy.DO_NOT_PAD,
        pad_to_multiple_of: int | None = None,
        padding_side: str | None = None,
        return_attention_mask: bool | None = None,
    ) -> dict:
        """Pads one encoded sentence like `PreTrainedTokenizerBase._pad`, and its `char_ids` with all-zero rows on
        the same side; padding on the left moves the words, and `subword_to_word` with them."""
        length = len(encoded_inputs[self.model_input_names[0]])
        encoded_inputs = super()._pad(
            encoded_inputs, max_length, padding_strategy, pad_to_multiple_of, padding_side, return_attention_mask
        )
        added = len(encoded_inputs[self.model_input_names[0]]) - length
        side = padding_side if padding_side is not None else self.padding_side
        if added and "char_ids" in encoded_inputs:
            rows = list(encoded_inputs["char_ids"])
            width = len(rows[0]) if rows else self.max_word_length
            padding = [[CHAR_PAD_ID] * width for _ in range(added)]
            encoded_inputs["char_ids"] = rows + padding if side == "right" else padding + rows
        if added and side == "left" and "subword_to_word" in encoded_inputs:  # the words moved right
            encoded_inputs["subword_to_word"] = [position + added for position in encoded_inputs["subword_to_word"]]
        return encoded_inputs


def build_word_tokenizer(
    sentences: Iterable[Sequence[str]],
    min_frequency: int = 1,
    extra_vocabulary: Iterable[str] | None = None,
    lowercase: bool = False,
    model_max_length: int | None = None,
    max_word_length: int = DEFAULT_MAX_WORD_LENGTH,
    min_char_frequency: int = 1,
    subword_tokenizer: PreTrainedTokenizerFast | None = None,
) -> SLSTMTokenizer:
    """Builds a word-level tokenizer, with its character vocabulary, from training sentences, optionally united with a
    pretrained-vector vocabulary.

    Ids are deterministic for the same input: the special tokens `<pad>`=0, `<unk>`=1, `<s>`=2, `</s>`=3 come first,
    then the training words by decreasing frequency (alphabetically among equal counts), then the words of
    `extra_vocabulary` not seen yet, in their given order. Character ids likewise: the four reserved entries, then
    the characters of the training words by decreasing frequency (by code point among equal counts).

    Args:
        sentences (`Iterable[Sequence[str]]`):
            Training sentences, each already split into words, e.g. `[["The", "cat", "sat"], ["It", "ran"]]`.
        min_frequency (`int`, *optional*, defaults to 1):
            Minimum number of occurrences in `sentences` for a training word to enter the vocabulary.
        extra_vocabulary (`Iterable[str]`, *optional*):
            Words added even when unseen in training, typically the words that have a pretrained vector (GloVe).
            They are normalised like the input text (lower-cased when `lowercase=True`). They add no characters.
        lowercase (`bool`, *optional*, defaults to `False`):
            Whether to lower-case all text, when building the vocabulary and when encoding. The characters keep
            their case.
        model_max_length (`int`, *optional*):
            Maximum number of tokens, `<s>` and `</s>` included, used when truncating. The S-LSTM has no length
            limit (its cost grows linearly with length), so by default nothing is truncated, in `pipeline(...)`
            either; the training scripts cut their examples with their own `--max_seq_length`. With a
            `subword_tokenizer` the default is the feature encoder's limit instead (the subword tokenizer's
            `model_max_length`): a sentence has no more words than subwords, and `truncation=True` then cuts every
            sentence to what the encoder reads, as with the encoder's own tokenizer.
        max_word_length (`int`, *optional*, defaults to 20):
            Characters kept per word in `char_ids` (longer words keep their first `max_word_length` characters).
        min_char_frequency (`int`, *optional*, defaults to 1):
            Minimum number of occurrences in the training words for a character to get its own id; rarer
            characters share the unknown-character id 1.
        subword_tokenizer (`PreTrainedTokenizerFast`, *optional*):
            The tokenizer of a pretrained feature encoder (e.g. `AutoTokenizer.from_pretrained` of a BERT folder):
            the tokenizer then also returns that encoder's subword inputs (see the module docstring), and saves the
            subword tokenizer with itself. Its `model_max_length` bounds the subwords of a sentence (longer
            sentences raise a `ValueError`, or lose their last words with `truncation=True`).

    Returns:
        [`SLSTMTokenizer`]: The tokenizer. Call it with `is_split_into_words=True` on pre-split words (one token per
        word) or on raw text; its `word_ids()` are `None` at `<s>` and `</s>`. It saves with `save_pretrained` and
        loads back with `AutoTokenizer.from_pretrained`.

    Raises:
        `ValueError`: If `min_frequency` or `min_char_frequency` is smaller than 1, the training data holds no words,
        a sentence is a string instead of a sequence of words, or a word is empty (the message names the sentence).
    """
    for name, value in (("min_frequency", min_frequency), ("min_char_frequency", min_char_frequency)):
        if value < 1:
            raise ValueError(f"Expected {name} to be at least 1, got {value}.")
    sentences = _validated_sentences(sentences)
    subword_max_length = None if subword_tokenizer is None else subword_tokenizer.model_max_length
    if model_max_length is None:
        model_max_length = VERY_LARGE_INTEGER if subword_max_length is None else subword_max_length

    tokenizer = _empty_word_tokenizer(lowercase)
    words = _count_training_words(tokenizer, sentences, min_frequency)
    if extra_vocabulary is not None:
        normalizer = tokenizer.normalizer
        # The library's normaliser, not str.lower, so extra words match exactly what encoding will look up.
        words += [normalizer.normalize_str(word) if normalizer else word for word in extra_vocabulary]

    tokenizer.model = models.WordLevel(_build_vocabulary(words), unk_token=UNK_TOKEN)
    tokenizer.pre_tokenizer = _raw_text_pre_tokenizer()
    # Registering them as special keeps them whole, out of normalisation, and lets decoding skip them.
    tokenizer.add_special_tokens(list(SPECIAL_TOKENS))
    tokenizer.post_processor = _sentence_framing()

    return SLSTMTokenizer(
        tokenizer_object=tokenizer,
        char_vocabulary=[*SPECIAL_TOKENS, *_count_training_characters(sentences, min_char_frequency)],
        max_word_length=max_word_length,
        pad_token=PAD_TOKEN,
        unk_token=UNK_TOKEN,
        bos_token=BOS_TOKEN,
        eos_token=EOS_TOKEN,
        model_max_length=model_max_length,
        subword_tokenizer=None if subword_tokenizer is None else subword_tokenizer.backend_tokenizer.to_str(),
        subword_max_length=subword_max_length,
    )


def update_config_from_tokenizer(config, tokenizer) -> None:
    """Sets the fields of a fresh model's config that the tokenizer decides: `vocab_size`, `pad_token_id`,
    `bos_token_id`, `eos_token_id` and, for a config with `use_char_features`, `char_vocab_size`.

    Args:
        config (`PreTrainedConfig`):
            An [`SLSTMConfig`] or any config with the same fields (the baselines'), changed in place.
        tokenizer (`PreTrainedTokenizerFast`):
            The word-level tokenizer the model will read; an [`SLSTMTokenizer`] when the config has character
            features.

    Raises:
        `ValueError`: If the config asks for character features and the tokenizer gives no `char_ids`.
    """
    config.vocab_size = len(tokenizer)
    config.pad_token_id = tokenizer.convert_tokens_to_ids(PAD_TOKEN)
    config.bos_token_id = tokenizer.convert_tokens_to_ids(BOS_TOKEN)
    config.eos_token_id = tokenizer.convert_tokens_to_ids(EOS_TOKEN)
    if getattr(config, "use_char_features", False):
        if not isinstance(tokenizer, SLSTMTokenizer):
            raise ValueError(
                f"The config has use_char_features=True but the tokenizer ({type(tokenizer).__name__}) gives no "
                "char_ids: build it with build_word_tokenizer, or set use_char_features=false."
            )
        config.char_vocab_size = tokenizer.char_vocab_size


SLSTMTokenizer.register_for_auto_class("AutoTokenizer")
AutoTokenizer.register(SLSTMConfig, tokenizer_class=SLSTMTokenizer, exist_ok=True)
