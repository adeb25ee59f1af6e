"""Run by test_run_push_to_hub.py: a saved model and tokenizer pushed by `model.push_to_hub` and
`tokenizer.push_to_hub`, without the training scripts.

    python push_with_the_model.py FOLDER REPO_ID
"""

import sys

from transformers import AutoModelForTokenClassification, AutoTokenizer

import modeling_slstm  # noqa: F401 (registers the Auto classes, as a user of the installed package has them)

folder, repo_id = sys.argv[1:]
AutoModelForTokenClassification.from_pretrained(folder).push_to_hub(repo_id)
AutoTokenizer.from_pretrained(folder).push_to_hub(repo_id)
