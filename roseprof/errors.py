"""Errors the CLI turns into one line on stderr and an exit code (2: bad input or usage)."""


class RoseprofError(Exception):
    exit_code = 2


class CaptureFailed(RoseprofError):
    """The profiler itself failed and left nothing to parse."""

    exit_code = 3


class NothingRecorded(RoseprofError):
    """The trace holds no ranges and no GPU activity: nothing to analyse. A capture words this for the user
    (the command failed, or it is not instrumented); an import names the file."""
