"""A pytest plugin (loaded by `conftest.py`) that makes a quiet run show where it is and what it costs: one line as
each test file finishes,

    [ 37%] tests/model/test_crf.py: 41 passed, 2 skipped in 12.3 s (run 2:05)

(the share of all collected tests done, the file's outcomes and the seconds its tests took, the run's wall time so
far), and at the end the run's wall time, the machine's load before and after it, and the slowest files.

It runs where the reports arrive: in the one process of a plain run, on the controller of a pytest-xdist run (`-n 2`),
whose workers run the tests and send every report there. The per-test dots and the failures' reports stay pytest's.
"""

import os
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field

import pytest

SLOWEST_FILES_SHOWN = 8


@dataclass
class FileTally:
    """The tests of one file: how many were collected, their outcomes so far, and the seconds their setup, call and
    teardown took (summed over the tests, whichever worker ran them)."""

    collected: int = 0
    outcomes: Counter = field(default_factory=Counter)
    seconds: float = 0.0

    @property
    def done(self) -> int:
        return sum(self.outcomes.values())

    def describe(self) -> str:
        counts = ", ".join(f"{self.outcomes[name]} {name}" for name in ("passed", "failed", "skipped")
                           if self.outcomes[name])  # fmt: skip
        return f"{counts or 'nothing run'} in {self.seconds:.1f} s"


def file_of(nodeid: str) -> str:
    """The file of a test id (`tests/model/test_crf.py::TestCRF::test_decode[2]` -> `tests/model/test_crf.py`)."""
    return nodeid.split("::", 1)[0]


def clock(seconds: float) -> str:
    """`seconds` as `m:ss`, or `h:mm:ss` from an hour on."""
    minutes, seconds = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{seconds:02d}" if hours else f"{minutes}:{seconds:02d}"


class FileProgress:
    """Counts each test once, at its teardown report (the last of its setup, call and teardown reports): failed if
    any of them failed, skipped if its setup or call skipped, else passed."""

    def __init__(self, terminal, writer):
        self.terminal = terminal
        self.writer = writer
        self.files: dict[str, FileTally] = defaultdict(FileTally)
        self.total = 0
        self.finished = 0
        self.outcome_so_far: dict[str, str] = {}
        self.start = time.monotonic()
        self.load_at_start = os.getloadavg()[0]

    def count_collected(self, nodeids) -> None:
        if self.total:  # every xdist worker collects the same tests; the first one's list is enough
            return
        for nodeid in nodeids:
            self.files[file_of(nodeid)].collected += 1
        self.total = len(nodeids)

    @pytest.hookimpl(trylast=True)
    def pytest_collection_finish(self, session):
        self.count_collected([item.nodeid for item in session.items])

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node, ids):
        self.count_collected(ids)

    def pytest_runtest_logreport(self, report):
        tally = self.files[file_of(report.nodeid)]
        tally.seconds += report.duration
        outcome = "skipped" if report.skipped else report.outcome
        if outcome != "passed" and self.outcome_so_far.get(report.nodeid) != "failed":
            self.outcome_so_far[report.nodeid] = outcome
        if report.when != "teardown":
            return
        tally.outcomes[self.outcome_so_far.pop(report.nodeid, "passed")] += 1
        self.finished += 1
        if tally.done == tally.collected:
            percent = 100 * self.finished // max(self.total, 1)
            elapsed = clock(time.monotonic() - self.start)
            if self.writer.width_of_current_line:  # after pytest's dots, which leave the line open
                self.writer.line()
            self.terminal.write_line(f"[{percent:3d}%] {file_of(report.nodeid)}: {tally.describe()} (run {elapsed})")

    def pytest_terminal_summary(self, terminalreporter):
        wall = time.monotonic() - self.start
        workers = getattr(terminalreporter.config.option, "numprocesses", None) or 1  # xdist's -n, resolved
        terminalreporter.write_sep("-", "time")
        terminalreporter.write_line(
            f"{self.finished} tests in {wall:.0f} s wall ({clock(wall)}), {workers} process(es) running tests, "
            f"{os.cpu_count()} CPUs; load average {self.load_at_start:.1f} at the start, {os.getloadavg()[0]:.1f} at "
            "the end"
        )
        slowest = sorted(self.files.items(), key=lambda item: item[1].seconds, reverse=True)[:SLOWEST_FILES_SHOWN]
        terminalreporter.write_line("slowest files (seconds of their tests, summed over the workers):")
        for path, tally in slowest:
            terminalreporter.write_line(f"  {tally.seconds:7.1f} s  {path}")


@pytest.hookimpl(trylast=True)  # after the terminal plugin's own pytest_configure, which registers the reporter
def pytest_configure(config):
    """On the process that reports (not on an xdist worker, whose output nobody sees), when there is a terminal."""
    terminal = config.pluginmanager.get_plugin("terminalreporter")
    if terminal is not None and not hasattr(config, "workerinput"):
        config.pluginmanager.register(FileProgress(terminal, config.get_terminal_writer()), "file_progress_tally")
