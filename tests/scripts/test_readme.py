"""The README's Python example runs as written."""

import ast
import re
import runpy
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_python_example_runs(tmp_path, monkeypatch, capsys):
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)
    assert blocks, "README.md has no ```python example"
    script = tmp_path / "readme_example.py"
    script.write_text(blocks[0])
    monkeypatch.chdir(tmp_path)
    runpy.run_path(str(script), run_name="__main__")
    printed = capsys.readouterr().out.strip().splitlines()[-1]
    predicted_tags = ast.literal_eval(printed)  # the example prints the decoded tag names
    assert len(predicted_tags) == 5  # "Mary lives in Paris." split as CoNLL data is: the period is a word
    assert set(predicted_tags) <= {"O", "B-PER", "I-PER", "B-LOC", "I-LOC"}
    # The CRF's BIO constraints hold even after one training step: I-X only continues X.
    for previous, tag in zip(["O"] + predicted_tags, predicted_tags):
        if tag.startswith("I-"):
            assert previous[2:] == tag[2:], predicted_tags
    assert (tmp_path / "my-slstm-tagger" / "model.safetensors").is_file()
