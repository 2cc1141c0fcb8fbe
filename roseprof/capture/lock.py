"""One capture per tool at a time: a file lock (fcntl.flock) around the profiling step.

Two captures under one tool at once collide inside the profiler (nsys: "Connection to the Agent lost"), so the
second waits, and says once for whom: the holder writes its pid, its command and its traces folder into the
lock file, so a newcomer's first `make demo` waiting on another checkout's capture knows whose it is.

Where. The lock lives in this machine's temporary folder (the profilers collide on the machine that runs them,
whichever traces folder the runs go to), one file per machine user (`roseprof-<uid>-<tool>-capture.lock`): a
lock file another user created cannot be truncated or rewritten by this one, and one user's captures never
block on another's stale file. `ROSEPROF_<TOOL>_LOCK` names another file (tests; a lock shared on purpose).
"""

from __future__ import annotations

import fcntl
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from roseprof.capture.process import say
from roseprof.errors import RoseprofError

LOCK_ENV = "ROSEPROF_{tool}_LOCK"  # e.g. ROSEPROF_NSYS_LOCK: where the capture lock lives
HOLDER_BYTES = 4096  # the most of a holder's record read back


class Interrupted(RoseprofError):
    exit_code = 130


def lock_path(tool: str) -> Path:
    env = os.environ.get(LOCK_ENV.format(tool=tool.upper()))
    if env:
        return Path(env)
    return Path(tempfile.gettempdir()) / f"roseprof-{os.getuid()}-{tool}-capture.lock"


FOLDER = "traces in "  # how the holder's record names its traces folder (capture/tool.py writes it)


def waiting_lines(what: str, record: str) -> list[str]:
    """What a capture waiting for the lock says, from what the holder wrote: its pid and, where it wrote them,
    its command and traces folder, each on a line of its own below (say() wraps them: a command can be 200
    characters; the folder, as long as it is and with spaces maybe, is never broken: holder_paths)."""
    lines = [line.strip() for line in record.splitlines()]
    pid = lines[0] if lines and lines[0] else "?"
    about = [line for line in lines[1:] if line]
    return [f"waiting for another {what} (pid {pid}) to finish" + (":" if about else ""), *about]


def holder_paths(lines: list[str]) -> tuple[str, ...]:
    """The paths in waiting_lines' `lines` (the holder's traces folder), for say() to keep whole."""
    return tuple(line.removeprefix(FOLDER) for line in lines if line.startswith(FOLDER))


@contextmanager
def exclusive(path: Path, what: str, about: str = "") -> Iterator[None]:
    """Hold an exclusive lock on `path` (created if needed) for the block; wait, saying for whom, if held.
    `about` (one line or several) is written after this process' pid for whoever waits next."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    except PermissionError:  # another user's lock file (an override shared on purpose): a read-only fd locks
        fd = os.open(path, os.O_RDONLY)
    except OSError as e:
        raise RoseprofError(f"cannot create the capture lock {path}: {e.strerror}") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            record = os.pread(fd, HOLDER_BYTES, 0).decode("utf-8", "replace")
            lines = waiting_lines(what, record)
            say(*lines, paths=holder_paths(lines))
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
            except KeyboardInterrupt:
                raise Interrupted(f"interrupted while waiting for another {what}; nothing was run") from None
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n{about}\n".encode(errors="replace"), 0)
        except OSError:
            pass
        yield
    finally:
        os.close(fd)
