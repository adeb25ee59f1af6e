#!/usr/bin/env python
"""The per-word most-frequent-tag baseline of a tagging corpus: each test word gets the tag it had most often in the
training data, and a word never seen in training the most frequent tag overall. Prints token accuracy.

    python run_scripts/utilities/most_frequent_tag.py --train_file ../shared/data/conll2003/pos/train.txt \\
        --test_file ../shared/data/conll2003/pos/test.txt --max_train_samples 1000

A tagger that does not beat this lookup has not learned from context. Files are CoNLL columns as `run_ner.py` reads
them (token first, tag last, UTF-8 unless `--file_encoding` says otherwise); `--max_train_samples`/
`--max_predict_samples` keep the first N sentences, as there.
"""

from collections import Counter, defaultdict
from dataclasses import dataclass, field

from run_scripts.training import data
from run_scripts.training.arguments import parse_arguments
from run_scripts.training.usage_errors import DebugArguments, run_script


@dataclass
class BaselineArguments(DebugArguments):
    train_file: str = field(metadata={"help": "CoNLL training file"})
    test_file: str = field(metadata={"help": "CoNLL file to tag and score"})
    max_train_samples: int | None = field(default=None, metadata={"help": "first N training sentences only"})
    max_predict_samples: int | None = field(default=None, metadata={"help": "first N test sentences only"})
    file_encoding: str = field(default="utf-8", metadata={"help": "text encoding of both files"})


def most_frequent_tags(sentences: list[dict]) -> tuple[dict[str, str], str]:
    """The most frequent tag of each training word (ties: the tag seen first), and the most frequent tag overall."""
    by_word, overall = defaultdict(Counter), Counter()
    for sentence in sentences:
        for word, tag in zip(sentence["tokens"], sentence["tags"], strict=True):
            by_word[word][tag] += 1
            overall[tag] += 1
    return {word: tags.most_common(1)[0][0] for word, tags in by_word.items()}, overall.most_common(1)[0][0]


def main(argv=None) -> float:
    args = parse_arguments(BaselineArguments, argv, description=__doc__)
    train = data.read_conll(args.train_file, encoding=args.file_encoding)[: args.max_train_samples]
    test = data.read_conll(args.test_file, encoding=args.file_encoding)[: args.max_predict_samples]
    lookup, fallback = most_frequent_tags(train)
    gold = [tag for sentence in test for tag in sentence["tags"]]
    predicted = [lookup.get(word, fallback) for sentence in test for word in sentence["tokens"]]
    accuracy = sum(g == p for g, p in zip(gold, predicted)) / len(gold)
    unseen = sum(word not in lookup for sentence in test for word in sentence["tokens"]) / len(gold)
    print(f"most-frequent-tag accuracy {accuracy:.4f} on {len(gold):,} tokens ({unseen:.1%} unseen in training)")
    return accuracy


if __name__ == "__main__":
    run_script(main)
