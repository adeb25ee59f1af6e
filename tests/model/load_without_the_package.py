"""Run by test_save_load.py in an interpreter that cannot import `modeling_slstm` (`python -I -S`): loads a saved
checkpoint with `trust_remote_code=True` and checks its logits (and, given a text, its tokenizer's inputs) against the
ones saved beside it.

    python -I -S load_without_the_package.py CHECKPOINT DATA_FILE MODULE_CACHE SITE_DIR...
"""

import importlib.util
import sys

checkpoint, data_file, module_cache, *site_dirs = sys.argv[1:]
sys.path = [p for p in sys.path if p] + site_dirs  # stdlib (from -I -S) + bare site-packages, no .pth files
import torch

assert importlib.util.find_spec("modeling_slstm") is None, "modeling_slstm is importable: the test proves nothing"
from transformers import AutoModelForTokenClassification, AutoTokenizer

model = AutoModelForTokenClassification.from_pretrained(checkpoint, trust_remote_code=True).eval()
assert "modeling_slstm" not in sys.modules
code_file = sys.modules[type(model).__module__].__file__
assert code_file.startswith(module_cache), code_file  # the code copied from the checkpoint
data = torch.load(data_file)
if "text" in data:  # the tokenizer saved with the checkpoint, from its copied code too
    tokenizer = AutoTokenizer.from_pretrained(checkpoint, trust_remote_code=True)
    assert type(tokenizer).__name__ == "SLSTMTokenizer", type(tokenizer)
    assert sys.modules[type(tokenizer).__module__].__file__.startswith(module_cache)
    encoded = tokenizer(data.pop("text"), return_tensors="pt")
    assert encoded.keys() == data.keys() - {"logits"}, (encoded.keys(), data.keys())
    for key in encoded:
        assert torch.equal(encoded[key], data[key]), key
expected = data.pop("logits")
with torch.no_grad():
    logits = model(**data).logits
# Equal up to float summation order: the matmul library may split the work over another number of threads in
# another process (seen once under load: 6e-8), so bit-equality is not guaranteed across processes.
assert torch.allclose(logits, expected, rtol=0, atol=1e-5), (logits - expected).abs().max()
assert torch.equal(logits.argmax(-1), expected.argmax(-1))
print("fresh process OK")
