"""Errors in what a user gives the scripts (data files, labels, arguments), and how the scripts end on one.

The scripts raise `UsageError` (a `ValueError`; `MissingFileError` is a `FileNotFoundError` too) on purpose for input
they cannot use, with a message that names the file, line or argument, what was expected, what came and the fix.
`run_script` ends such an error with that message alone, one line on stderr, and exit code 1: the traceback above it
says nothing the user needs. `--debug` on the command line keeps the traceback; any other exception, a bug, keeps it
always.
"""

import sys
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

DEBUG_FLAG = "--debug"
DEBUG_HELP = "On an error in the data or the arguments, show the full traceback, not the message alone."


class UsageError(ValueError):
    """Input that a script cannot use (a data file, a label, an argument); the message says what was expected, what
    came, and the fix."""


class MissingFileError(UsageError, FileNotFoundError):
    """A file that the user named does not exist."""


def check_saved_model_dir(model_dir: str) -> None:
    """A `MissingFileError` unless `model_dir` (`--model_dir`) holds a saved model's `config.json`."""
    if not (Path(model_dir) / "config.json").is_file():
        raise MissingFileError(f"--model_dir {model_dir}: no config.json there; give the folder of a saved model")


@contextmanager
def as_usage_error(source: str | None = None):
    """The `ValueError`s and `FileNotFoundError`s of the package's own checks of the user's input (a config's
    values, a tag scheme's name, a vector file, a batch's values) as `UsageError`s, the original chained to them:
    `modeling_slstm` knows nothing of the scripts. `source`, when given, leads the message (`"<source>: <message>"`)
    for a check whose message does not name what it read (e.g. `json.loads`)."""
    try:
        yield
    except UsageError:
        raise
    except (FileNotFoundError, ValueError) as error:
        message = str(error) if source is None else f"{source}: {error}"
        raise (MissingFileError if isinstance(error, FileNotFoundError) else UsageError)(message) from error


@dataclass(kw_only=True)
class DebugArguments:
    """`--debug` for the utilities' `HfArgumentParser` dataclasses, which inherit it (keyword-only, so that their
    own fields need no defaults). `run_script` reads the flag from the command line itself."""

    debug: bool = field(default=False, metadata={"help": DEBUG_HELP})


def debug_requested(argv: Sequence[str]) -> bool:
    """Whether `argv` gives `--debug`, alone or with a value."""
    return any(arg == DEBUG_FLAG or arg.startswith(f"{DEBUG_FLAG}=") for arg in argv)


def run_script(main: Callable[[], object], argv: Sequence[str] | None = None) -> None:
    """Runs a script's `main()`. A `UsageError` ends the process with its message as the last line of stderr and exit
    code 1, unless the command line (`argv`, default `sys.argv[1:]`) gives `--debug`: then it propagates with its
    traceback. The flag is read from the command line, not from the parsed arguments, because the parsing itself
    raises such errors (the arguments' checks in `__post_init__`)."""
    argv = sys.argv[1:] if argv is None else argv
    try:
        main()
    except UsageError as error:
        if debug_requested(argv):
            raise
        sys.exit(str(error))  # the message on stderr, exit code 1
