"""The README's examples run as written: the Python example, the training commands for a user's own files, and the
two set-up commands (the demo end to end; the tests), with what the README says about the tests' data."""

import ast
import re
import runpy
import shlex
from pathlib import Path

import pytest
from script_helpers import run_main, write_generated_classification, write_generated_ner

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"


def section(title: str) -> str:
    """The README's text under `## title`, up to the next `## ` heading."""
    text = README.read_text()
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else None]


def bash_commands(text: str) -> list[list[str]]:
    """The commands of each ```bash block of `text`: continuation lines joined, comments dropped."""
    blocks = re.findall(r"```bash\n(.*?)```", text, flags=re.DOTALL)
    commands = [[shlex.join(shlex.split(line, comments=True)) for line in block.replace("\\\n", " ").splitlines()]
                for block in blocks]  # fmt: skip
    return [[command for command in block if command] for block in commands]


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


def test_readme_sets_up_with_two_commands_the_demo_and_the_tests():
    """Exactly two set-up commands, both in the quick start: the demo end to end, then the tests (the full run that CI
    makes, with the quick run beside it); installation comes before training."""
    setup = [
        command for block in bash_commands(README.read_text()) for command in block if command.startswith("bash ")
    ]
    assert setup == ["bash run_scripts/demo.sh", "bash .ci/run"]
    assert bash_commands(section("Quick start on a fresh machine")) == [
        ["bash run_scripts/demo.sh"],
        ["bash .ci/run", "python -m pytest -q -m 'not slow'"],
    ]
    assert (REPO / "run_scripts" / "demo.sh").is_file()
    assert (REPO / ".ci" / "run").read_text().rstrip().splitlines()[-1] == "python -m pytest -q -n 2"
    assert re.search(r'^markers = \[.*"slow: ', (REPO / "pyproject.toml").read_text(), flags=re.MULTILINE)
    assert any("@pytest.mark.slow" in path.read_text() for path in (REPO / "tests").rglob("test_*.py"))
    headings = re.findall(r"^## (.+)$", README.read_text(), flags=re.MULTILINE)
    assert headings.index("Install") < headings.index("Training on your data")


def test_readme_names_the_data_folders_the_tests_read():
    """The shared data folders the README lists are those the tests ask the `shared_data` fixture for."""
    text = section("Quick start on a fresh machine")
    listed = re.search(r"\(`\.\./shared/data`:(.*?)\)", text, flags=re.DOTALL).group(1)
    readme_folders = set(re.findall(r"`(\w+)/", listed))
    asked = set()
    for path in (REPO / "tests").rglob("*.py"):
        asked |= set(re.findall(r"shared_data\(\"(\w+)", path.read_text()))
    assert readme_folders == asked
    assert (
        "SLSTM_SHARED_DATA" in text
        and "CI=true" in text
        and 'os.environ.get("CI"' in (REPO / "tests" / "conftest.py").read_text()
    )


def test_readme_describes_the_progress_lines_of_the_plugin_conftest_loads():
    text = " ".join(section("Quick start on a fresh machine").split())
    assert "a line as each test file finishes" in text and "the slowest files (`tests/file_progress.py`" in text
    assert 'pytest_plugins = ["file_progress"]' in (REPO / "tests" / "conftest.py").read_text()
    assert (REPO / "tests" / "file_progress.py").is_file()


def test_readme_gives_the_tests_time_on_idle_cores_and_with_other_jobs():
    text = " ".join(section("Quick start on a fresh machine").split())
    assert re.search(
        r"on 2 idle cores \(.*?\) the tests of `\.ci/run` on a clean clone took \d+ minutes \(\d+ s of pytest\)", text
    )
    assert re.search(r"the download before them \d+ more", text)
    assert re.search(
        r"with [^()]+ \([^()]*load average \d+(\.\d+)?\), the tests took \d+ minutes \(\d+ s of pytest\)", text
    )


@pytest.mark.slow
@pytest.mark.parametrize("script", ["run_ner", "run_classification"])
def test_readme_training_command_for_your_own_files_runs(script, tmp_path, monkeypatch):
    """The README's plain command for a user's own files, on generated files of the named formats (CoNLL columns;
    `text ||| label`), with a tiny model and two steps appended (the last value of a flag wins)."""
    (command,) = [c for block in bash_commands(section("Training on your data")) for c in block
                  if c.startswith(f"python run_scripts/{script}.py") and "--feature_encoder" not in c]  # fmt: skip
    write = write_generated_ner if script == "run_ner" else write_generated_classification
    generated = write(tmp_path)
    argv = shlex.split(command)[2:]
    value = {flag: argv[argv.index(flag) + 1] for flag in ("--train_file", "--validation_file", "--test_file")}
    for split, flag in (("train", "--train_file"), ("validation", "--validation_file"), ("test", "--test_file")):
        (tmp_path / value[flag]).write_text(generated[split].read_text())
    output_dir = tmp_path / argv[argv.index("--output_dir") + 1]
    in_tmp = {*value.values(), argv[argv.index("--output_dir") + 1]}
    argv = [str(tmp_path / a) if a in in_tmp else a for a in argv]
    tiny = ["--config_overrides", "hidden_size=8,num_steps=1", "--max_vectors", "3000", "--max_steps", "2"]
    run_main(script, argv + tiny + ["--report_to", "none", "--disable_tqdm", "true"], monkeypatch)
    predictions = "test_predictions.txt" if script == "run_ner" else "test_predictions.tsv"
    assert (output_dir / "model.safetensors").is_file() and (output_dir / predictions).is_file()
