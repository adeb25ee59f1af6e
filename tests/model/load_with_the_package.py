"""Run by test_save_load.py in a fresh interpreter: `import modeling_slstm` alone registers the Auto classes, so a
saved model and tokenizer load without `trust_remote_code`; prints the modules of their classes.

    python load_with_the_package.py CHECKPOINT
"""

import sys

from transformers import AutoModelForTokenClassification, AutoTokenizer

import modeling_slstm  # noqa: F401 (registers the Auto classes)

tokenizer = AutoTokenizer.from_pretrained(sys.argv[1])
model = AutoModelForTokenClassification.from_pretrained(sys.argv[1])
print(type(tokenizer).__module__, type(model).__module__)
