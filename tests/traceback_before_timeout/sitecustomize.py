"""Put on `PYTHONPATH` by `script_helpers.run_subprocess`: every Python process a test starts (the script, a
launcher, each distributed worker) writes the tracebacks of all its threads to stderr if it still runs
`SLSTM_TEST_TRACEBACK_AFTER_S` seconds after it started, so that a run that hangs shows where each process waits in
the test's failure message instead of only timing out."""

import faulthandler
import os

_seconds = os.environ.get("SLSTM_TEST_TRACEBACK_AFTER_S")
if _seconds:
    faulthandler.dump_traceback_later(float(_seconds), exit=False)
