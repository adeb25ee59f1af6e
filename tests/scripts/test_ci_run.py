"""`.ci/run` cleans up after itself: the transformers source it unpacks for the generic model tests is there while
the tests run and gone when the script ends, whether the tests pass or fail or a step before them fails. Run with a
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
        echo "$TRANSFORMERS_TESTS_DIR" > "$RECORD"
        [ -f "$TRANSFORMERS_TESTS_DIR/test_generic.py" ] || exit 2
        [ "$STEP_FAILS" != tests ] ;;
    *) echo "unexpected: python $*" >&2; exit 3 ;;
esac
"""


@pytest.mark.parametrize("step_fails, returncode", [("none", 0), ("tests", 1), ("download", 1)])
def test_ci_run_removes_the_transformers_source_it_unpacked(tmp_path, step_fails, returncode):
    bin_folder, temporary, record = tmp_path / "bin", tmp_path / "tmp", tmp_path / "record"
    bin_folder.mkdir()
    temporary.mkdir()
    (bin_folder / "python").write_text(FAKE_PYTHON)
    (bin_folder / "python").chmod(0o755)
    environment = {**os.environ, "PATH": f"{bin_folder}{os.pathsep}{os.environ['PATH']}", "TMPDIR": str(temporary),
                   "RECORD": str(record), "STEP_FAILS": step_fails}  # fmt: skip
    result = subprocess.run(["bash", str(REPO / ".ci" / "run")], env=environment, capture_output=True, text=True)
    assert result.returncode == returncode, result.stderr
    if step_fails != "download":  # the tests ran on the unpacked source, in the temporary folder
        assert Path(record.read_text().strip()).parent.parent.parent == temporary
    assert list(temporary.iterdir()) == []
