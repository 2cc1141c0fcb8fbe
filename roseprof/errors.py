"""Errors the CLI turns into one line on stderr and an exit code (2: bad input or usage)."""

from __future__ import annotations

import re

MAX_MESSAGE_CHARS = 600


class RoseprofError(Exception):
    exit_code = 2


class CaptureFailed(RoseprofError):
    """The profiler itself failed and left nothing to parse."""

    exit_code = 3


class NothingRecorded(RoseprofError):
    """The trace holds no range, mark or GPU op: nothing to analyse, so nothing is stored. A capture words this
    for the user (the command failed, or it is not instrumented); an import names the file."""


class NothingWritten(NothingRecorded):
    """The program ran and the tool wrote no file to read (a program that runs no torch.profiler): its message is
    the user's (what the program must do), where a reader's NothingRecorded names a file of the run's."""


def one_line(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """`text` as one bounded line: runs of whitespace (an SQL statement in an SQLite error) become one space."""
    text = re.sub(r"\s+", " ", str(text)).strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"
