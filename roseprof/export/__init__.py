"""Stored runs written out in other tools' formats (chrome.py: Chrome trace-event JSON for Perfetto)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def part_file(out: Path) -> Iterator[Path]:
    """Where an export writes `out`: OUT.part, renamed onto OUT when whole and removed on any failure (a full disk,
    Ctrl-C, OUT a folder), so that no half export is left beside the file the user named. A link to a file is
    followed (the part file lies beside its target, which the rename replaces: the link stays); a stream
    (`written_in_place`) is written as it is: a rename would put a file where the device, pipe or link was."""
    if written_in_place(out):
        yield out
        return
    target = out.resolve() if out.is_symlink() else out
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + ".part")
    try:
        yield tmp
        tmp.replace(target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


_STREAM_FOLDERS = (Path("/dev"), Path("/proc"))
_FILE_FOLDERS = (Path("/dev/shm"),)  # under /dev, but files like any other


def written_in_place(path: Path) -> bool:
    """Whether an export writes `path` as it is, not through a renamed part file: a path under /dev or /proc
    (/dev/stdout, /dev/fd/1, whatever they point to: a pipe, a terminal, the file the shell redirected stdout to,
    whose open descriptor a rename would leave behind), a link whose next hop is there, or anything but a regular
    file, a folder or nothing (a pipe, a device)."""
    hops = [path.absolute()]
    if path.is_symlink():
        hops.append(path.parent.absolute() / os.readlink(path))
    for hop in hops:
        if any(_under(hop, f) for f in _STREAM_FOLDERS) and not any(_under(hop, f) for f in _FILE_FOLDERS):
            return True
    return path.exists() and not path.is_file() and not path.is_dir()


def _under(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents
