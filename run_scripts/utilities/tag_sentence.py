#!/usr/bin/env python
"""Tags sentences with a saved S-LSTM token classifier through `pipeline("token-classification")`.

    python run_scripts/utilities/tag_sentence.py --model_dir outputs/demo-wnut16 \\
        --sentences "Going to see Taylor Swift in New York tonight" "Another sentence"

The model loads with `trust_remote_code=True` from the code files saved next to it. Sentences are typed as a person
writes them: the tokenizer splits words and punctuation the way CoNLL data is split (see `SLSTMTokenizer`).
"""

from dataclasses import dataclass, field

from transformers import AutoModelForTokenClassification, AutoTokenizer, pipeline

from run_scripts.training.arguments import parse_arguments


@dataclass
class TagArguments:
    model_dir: str = field(metadata={"help": "folder of a saved token classifier (e.g. run_ner.py's --output_dir)"})
    sentences: list[str] = field(metadata={"help": "one or more sentences, each one quoted argument"})


def tag(model_dir: str, sentences: list[str]):
    model = AutoModelForTokenClassification.from_pretrained(model_dir, trust_remote_code=True)
    # trust_remote_code: AutoTokenizer reads the model config, whose model type is defined by the shipped code.
    tokenizer = AutoTokenizer.from_pretrained(model_dir, trust_remote_code=True)
    tagger = pipeline(
        "token-classification", model=model, tokenizer=tokenizer, aggregation_strategy="simple", trust_remote_code=True
    )
    return [tagger(sentence) for sentence in sentences]


def main(argv=None):
    args = parse_arguments(TagArguments, argv, description=__doc__)
    for sentence, entities in zip(args.sentences, tag(args.model_dir, args.sentences)):
        print(f"\n{sentence}")
        if not entities:
            print("  (no entities)")
        for entity in entities:
            print(f"  {entity['entity_group']:<14} {entity['word']!r:<30} score {entity['score']:.2f}")


if __name__ == "__main__":
    main()
