"""Argument parsing shared by the utility scripts (benchmarks, data preparation, summaries, tagging).

Each script describes its arguments as a `@dataclass` (help in `field(metadata={"help": ...})`, choices checked in
`__post_init__`) parsed by `transformers.HfArgumentParser`, like the training scripts and transformers' example
scripts. HfArgumentParser registers every field under its underscore name and, for names with underscores, the dash
spelling too (`--dry_run` and `--dry-run`).
"""

import argparse
from collections.abc import Iterable, Sequence

from transformers import HfArgumentParser


class HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """`--help` shows the module docstring as written and each option's default."""


def check_choices(flag: str, values, choices: Iterable[str]):
    """Raise a ValueError naming the flag when `values` (one string or a list of them) are not all in `choices`."""
    choices = list(choices)
    values = [values] if isinstance(values, str) else list(values)
    unknown = [value for value in values if value not in choices]
    if unknown:
        raise ValueError(
            f"--{flag}: {', '.join(map(repr, unknown))} is not a valid choice; choose from {', '.join(choices)}"
        )


def parse_arguments(dataclass_type, argv: Sequence[str] | None = None, description: str | None = None,
                    allow_empty: Iterable[str] = ()):  # fmt: skip
    """Parse `argv` (default: the command line) into one `dataclass_type` instance with HfArgumentParser.

    HfArgumentParser gives list fields `nargs="+"`; the list fields named in `allow_empty` take `nargs="*"` instead,
    so the flag may be given with no value (e.g. `--variants` alone: an empty list).
    """
    parser = HfArgumentParser(dataclass_type, description=description, formatter_class=HelpFormatter)
    allow_empty = set(allow_empty)
    for action in parser._actions:
        if action.dest in allow_empty:
            action.nargs = "*"
    (arguments,) = parser.parse_args_into_dataclasses(args=argv, look_for_args_file=False)
    return arguments
