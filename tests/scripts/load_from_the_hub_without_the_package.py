"""Run by test_run_push_to_hub.py in an interpreter that can import neither `modeling_slstm` (`python -I -S`) nor
`triton` (blocked below, whatever this machine has installed: CPU-only wheels, macOS and Windows have no Triton):
downloads a repository from the Hub stand-in, loads its model and tokenizer by repo id with `trust_remote_code=True`
and the model again from the downloaded folder, and prints `RESULT` and a JSON object: the downloaded files' git blob
ids, the tag ids of TEXT (by repo id and from the folder) and the pipeline's entities, and the classes' module and
name. The folder's model must refuse `step_implementation="triton"` with a message that names Triton.

    python -I -S load_from_the_hub_without_the_package.py REPO_ID TEXT MODULE_CACHE SITE_DIR...
"""

import hashlib
import importlib.util
import json
import os
import sys

repo_id, text, module_cache, *site_dirs = sys.argv[1:]
sys.path = [p for p in sys.path if p] + site_dirs  # stdlib (from -I -S) + bare site-packages, no .pth files
assert importlib.util.find_spec("modeling_slstm") is None, "modeling_slstm is importable: the test proves nothing"


class NoTriton:
    """A meta-path finder that makes `triton` unimportable."""

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] == "triton":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)


sys.meta_path.insert(0, NoTriton())
from huggingface_hub import snapshot_download
from transformers import AutoModelForTokenClassification, AutoTokenizer, pipeline

folder = snapshot_download(repo_id)
blobs = {}
for root, _, names in os.walk(folder):
    for name in names:
        with open(os.path.join(root, name), "rb") as file:
            data = file.read()
        git_blob_id = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
        blobs[os.path.relpath(os.path.join(root, name), folder)] = git_blob_id
model = AutoModelForTokenClassification.from_pretrained(repo_id, trust_remote_code=True).eval()
tokenizer = AutoTokenizer.from_pretrained(repo_id, trust_remote_code=True)
assert "modeling_slstm" not in sys.modules and "triton" not in sys.modules

local_model = AutoModelForTokenClassification.from_pretrained(folder, trust_remote_code=True).eval()
local_model.config.step_implementation = "triton"
try:
    local_model(**tokenizer(text, return_tensors="pt"))
except ValueError as error:
    assert "step_implementation='triton' cannot run the fused step here: triton cannot be imported" in str(error), (
        error
    )
else:
    raise AssertionError("step_implementation='triton' ran without Triton")
local_model.config.step_implementation = "auto"
local_ids = local_model(**tokenizer(text, return_tensors="pt")).logits.argmax(-1)[0].tolist()

code_files = [sys.modules[type(item).__module__].__file__ for item in (model, tokenizer)]
assert all(path.startswith(module_cache) for path in code_files), code_files
tagger = pipeline("token-classification", model=model, tokenizer=tokenizer)
ids = model(**tokenizer(text, return_tensors="pt")).logits.argmax(-1)[0].tolist()
result = {
    "blobs": blobs,
    "ids": ids,
    "local_ids": local_ids,
    "entities": [e["entity"] for e in tagger(text)],
    "module": type(model).__module__,
    "tokenizer": type(tokenizer).__name__,
}
print("RESULT " + json.dumps(result))
