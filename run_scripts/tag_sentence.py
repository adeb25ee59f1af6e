#!/usr/bin/env python
"""Tags sentences with a saved S-LSTM token classifier through `pipeline("token-classification")`.

    python run_scripts/tag_sentence.py outputs/demo-wnut16 "Going to see Taylor Swift in New York tonight"

The model loads with `trust_remote_code=True` from the code files saved next to it. Words are split on whitespace
(the tokenizer is word-level), so put spaces around punctuation.
"""

import argparse

from transformers import AutoModelForTokenClassification, AutoTokenizer, pipeline


def tag(model_dir: str, sentences: list[str]):
    model = AutoModelForTokenClassification.from_pretrained(model_dir, trust_remote_code=True)
    # trust_remote_code: AutoTokenizer reads the model config, whose model type is defined by the shipped code.
    tokenizer = AutoTokenizer.from_pretrained(model_dir, trust_remote_code=True)
    tagger = pipeline(
        "token-classification", model=model, tokenizer=tokenizer, aggregation_strategy="simple", trust_remote_code=True
    )
    return [tagger(sentence) for sentence in sentences]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model_dir")
    parser.add_argument("sentences", nargs="+")
    args = parser.parse_args(argv)
    for sentence, entities in zip(args.sentences, tag(args.model_dir, args.sentences)):
        print(f"\n{sentence}")
        if not entities:
            print("  (no entities)")
        for entity in entities:
            print(f"  {entity['entity_group']:<14} {entity['word']!r:<30} score {entity['score']:.2f}")


if __name__ == "__main__":
    main()
