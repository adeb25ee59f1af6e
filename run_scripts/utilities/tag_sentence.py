#!/usr/bin/env python
"""Tags sentences with a saved S-LSTM token classifier through `pipeline("token-classification")`.

    python run_scripts/utilities/tag_sentence.py --model_dir outputs/demo-wnut16 \\
        --sentences "Going to see Taylor Swift in New York tonight" "Another sentence"

The model loads with `trust_remote_code=True` from the code files saved next to it. Sentences are typed as a person
writes them: the tokenizer splits words and punctuation the way CoNLL data is split (see `SLSTMTokenizer`).

`--threads`: `auto`, the default, leaves the count to the model, which runs CPU inference with as many threads as
there are idle cores, measured again every few seconds while it tags (at most PyTorch's default, one per physical
core; `config.inference_threads="auto"`), so that tagging does not wait at every parallel operator for a core another
job keeps busy. A number forces that many threads, as in the training scripts (run_scripts/training/threads.py). In
your own code the model does the same by itself; README.md ("Tag raw text") says how to choose the threads yourself.
"""

from dataclasses import dataclass, field

from transformers import AutoModelForTokenClassification, AutoTokenizer, pipeline

from run_scripts.training.arguments import parse_arguments
from run_scripts.training.threads import apply_thread_setting, parse_thread_setting
from run_scripts.training.usage_errors import DebugArguments, UsageError, check_saved_model_dir, run_script


@dataclass
class TagArguments(DebugArguments):
    model_dir: str = field(metadata={"help": "folder of a saved token classifier (e.g. run_ner.py's --output_dir)"})
    sentences: list[str] = field(metadata={"help": "one or more sentences, each one quoted argument"})
    threads: str = field(
        default="auto",
        metadata={
            "help": "PyTorch threads: 'auto' (the model's choice: as many as there are idle cores, measured again "
            "while it tags, at most PyTorch's default) or a number"
        },
    )

    def __post_init__(self):
        # Clear errors before the model loads.
        parse_thread_setting(self.threads)
        check_saved_model_dir(self.model_dir)
        empty = [index for index, sentence in enumerate(self.sentences) if not sentence.strip()]
        if empty:
            raise UsageError(f"--sentences: sentence {empty[0] + 1} of {len(self.sentences)} is empty; give text to tag")


def tag(model_dir: str, sentences: list[str], threads: str = "auto"):
    """The pipeline's entity groups of each sentence; `threads` as `--threads` (a number: set by `main` beforehand)."""
    model = AutoModelForTokenClassification.from_pretrained(model_dir, trust_remote_code=True)
    if hasattr(model.config, "inference_threads"):
        model.config.inference_threads = "auto" if threads == "auto" else "torch"
    elif threads == "auto":  # code saved before the models chose their threads: measured here, once
        apply_thread_setting(threads)
    # trust_remote_code: AutoTokenizer reads the model config, whose model type is defined by the shipped code.
    tokenizer = AutoTokenizer.from_pretrained(model_dir, trust_remote_code=True)
    tagger = pipeline(
        "token-classification", model=model, tokenizer=tokenizer, aggregation_strategy="simple", trust_remote_code=True
    )
    return [tagger(sentence) for sentence in sentences]


def main(argv=None):
    args = parse_arguments(TagArguments, argv, description=__doc__)
    if parse_thread_setting(args.threads) is not None:
        apply_thread_setting(args.threads)  # a forced count, which the model then keeps
    for sentence, entities in zip(args.sentences, tag(args.model_dir, args.sentences, args.threads)):
        print(f"\n{sentence}")
        if not entities:
            print("  (no entities)")
        for entity in entities:
            print(f"  {entity['entity_group']:<14} {entity['word']!r:<30} score {entity['score']:.2f}")


if __name__ == "__main__":
    run_script(main)
