"""`.ci/run` cleans up after itself: the transformers source it unpacks for the generic model tests, and whatever the
tests leave in their temporary folder (pytest's folders, the launchers' torchelastic_* folders), are there while the
tests run and gone when the script ends, whether the tests pass or fail or a step before them fails. Run with a
stand-in `python` on the PATH that installs nothing and fakes the download and the tests."""

import os
import subprocess
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
