"""Stored runs written out in other tools' formats (chrome.py: Chrome trace-event JSON for Perfetto)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def part_file(out: Path) -> Iterator[Path]:
    """Where an export writes `out`: OUT.part, renamed onto OUT when whole and removed on any failure (a full disk,
    Ctrl-C, OUT a folder), so that no half export is left beside the file the user named. A stream (/dev/stdout, a
    pipe, or a link to one) is written as it is: a rename would put a file in its place."""
    if is_stream(out):
        yield out
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".part")
    try:
        yield tmp
        tmp.replace(out)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def is_stream(path: Path) -> bool:
    """Whether `path` is something other than a file or a folder to write (a device, a pipe), links followed."""
    return path.exists() and not path.is_file() and not path.is_dir()
