"""Errors the CLI turns into one line on stderr and an exit code (2: bad input or usage)."""


class RoseprofError(Exception):
    exit_code = 2


class CaptureFailed(RoseprofError):
    """The profiler itself failed and left nothing to parse."""

    exit_code = 3
