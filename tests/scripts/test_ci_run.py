"""`.ci/run` cleans up after itself: the transformers source it unpacks for the generic model tests, and whatever the
tests leave in their temporary folder (pytest's folders, the launchers' torchelastic_* folders), are there while the
tests run and gone when the script ends, whether the tests pass or fail or a step before them fails. Run with a
stand-in `python` on the PATH that installs nothing and fakes the download and the tests.

Its test run says where it is and how long it takes: the `file_progress` plugin (`tests/file_progress.py`), run on a
generated test folder with and without pytest-xdist's two workers."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

FAKE_PYTHON = """#!/usr/bin/env bash
case "$*" in
    "-m pip install"*) ;;
    "-c "*) echo 9.9.9 ;;
    "-m pip download"*)
        [ "$STEP_FAILS" = download ] && exit 1
        folder=${@: -1}
        mkdir -p "$folder/transformers-9.9.9/tests" && touch "$folder/transformers-9.9.9/tests/test_generic.py"
        tar -czf "$folder/transformers-9.9.9.tar.gz" -C "$folder" transformers-9.9.9
        rm -r "$folder/transformers-9.9.9" ;;
    "-m pytest -q"*)
        printf '%s\n%s\n' "$TRANSFORMERS_TESTS_DIR" "$TMPDIR" > "$RECORD"
        mkdir -p "$TMPDIR/pytest-of-$USER/pytest-0" "$TMPDIR/torchelastic_abc"  # as the tests leave them
        [ -f "$TRANSFORMERS_TESTS_DIR/test_generic.py" ] || exit 2
        [ "$STEP_FAILS" != tests ] ;;
    *) echo "unexpected: python $*" >&2; exit 3 ;;
esac
"""


@pytest.mark.parametrize("step_fails, returncode", [("none", 0), ("tests", 1), ("download", 1)])
def test_ci_run_removes_the_transformers_source_and_the_tests_temporary_files(tmp_path, step_fails, returncode):
    bin_folder, temporary, record = tmp_path / "bin", tmp_path / "tmp", tmp_path / "record"
    bin_folder.mkdir()
    temporary.mkdir()
    (bin_folder / "python").write_text(FAKE_PYTHON)
    (bin_folder / "python").chmod(0o755)
    environment = {**os.environ, "PATH": f"{bin_folder}{os.pathsep}{os.environ['PATH']}", "TMPDIR": str(temporary),
                   "RECORD": str(record), "STEP_FAILS": step_fails}  # fmt: skip
    result = subprocess.run(["bash", str(REPO / ".ci" / "run")], env=environment, capture_output=True, text=True)
    assert result.returncode == returncode, result.stderr
    if step_fails != "download":  # the tests ran on the unpacked source, both in a folder of the run's own
        tests_folder, tests_temporary = map(Path, record.read_text().split())
        assert tests_temporary.parent == temporary and tests_folder.is_relative_to(tests_temporary)
    assert list(temporary.iterdir()) == []


# The generated test folder: (file, source, the outcomes its tests give). test_slow.py's tests take longest.
GENERATED_TESTS = {
    "test_mixed.py": (
        "import pytest\n"
        "def test_passes(): pass\n"
        "def test_fails(): assert 1 == 2, 'the planted failure'\n"
        "@pytest.mark.skip(reason='planted')\n"
        "def test_skipped(): pass\n"
        "@pytest.mark.parametrize('value', range(3))\n"
        "def test_each(value): pass\n",
        {"passed": 4, "failed": 1, "skipped": 1},
    ),
    "test_slow.py": (
        "import time\n"
        "def test_first(): time.sleep(0.3)\n"
        "def test_second(): time.sleep(0.3)\n",
        {"passed": 2},
    ),
    "test_setup_error.py": (
        "import pytest\n"
        "@pytest.fixture\n"
        "def broken(): raise RuntimeError('planted setup error')\n"
        "def test_uses_it(broken): pass\n",
        {"failed": 1},
    ),
}
PROGRESS_LINE = re.compile(r"^\[ *(\d+)%\] (\S+): (.+) in (\d+\.\d) s \(run \d+:\d\d\)$")


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["one process", "xdist -n 2"])
def test_file_progress_prints_a_line_per_finished_file_and_the_slowest_files(tmp_path, workers):
    for name, (source, _) in GENERATED_TESTS.items():
        (tmp_path / name).write_text(source)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")  # the folder is the rootdir; the repository's options stay out
    plugin_path = os.pathsep.join(filter(None, [str(REPO / "tests"), os.environ.get("PYTHONPATH")]))
    environment = {**os.environ, "PYTHONPATH": plugin_path}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "file_progress", "-p", "no:cacheprovider", *workers]
    result = subprocess.run(command, cwd=tmp_path, env=environment, capture_output=True, text=True, timeout=120)
    assert result.returncode == 1, result.stdout + result.stderr
    lines = result.stdout.splitlines()

    progress = [PROGRESS_LINE.match(line) for line in lines if PROGRESS_LINE.match(line)]
    assert sorted(match[2] for match in progress) == sorted(GENERATED_TESTS), result.stdout
    total = sum(sum(outcomes.values()) for _, outcomes in GENERATED_TESTS.values())
    in_finished_files, percents = 0, [int(match[1]) for match in progress]
    for match, percent in zip(progress, percents):  # in the order the files finished
        outcomes = GENERATED_TESTS[match[2]][1]
        in_finished_files += sum(outcomes.values())
        # One process runs the files one after the other; two workers may have run tests of other files too.
        lowest = 100 * in_finished_files // total
        assert percent >= lowest if workers else percent == lowest
        assert match[3] == ", ".join(f"{outcomes[name]} {name}" for name in ("passed", "failed", "skipped")
                                     if name in outcomes)  # fmt: skip
    assert percents == sorted(percents) and percents[-1] == 100
    assert float(next(match[4] for match in progress if match[2] == "test_slow.py")) >= 0.6

    summary = lines[lines.index(next(line for line in lines if re.fullmatch(r"-+ time -+", line))) + 1 :]
    assert re.match(rf"{total} tests in \d+ s wall \(\d+:\d\d\), {workers[-1] if workers else 1} process", summary[0])
    assert summary[1].startswith("slowest files") and summary[2].endswith(" s  test_slow.py"), summary
    # pytest's own report of the failures is still there, in full.
    assert "the planted failure" in result.stdout and "planted setup error" in result.stdout
    assert "FAILED test_mixed.py::test_fails" in result.stdout
    assert "ERROR test_setup_error.py::test_uses_it" in result.stdout
