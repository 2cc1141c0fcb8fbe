"""Stored runs written out in other tools' formats (chrome.py: Chrome trace-event JSON for Perfetto)."""

from __future__ import annotations

import contextlib
import errno
import gzip
import io
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

from roseprof.errors import RoseprofError


@contextmanager
def text_output(out: Path, level: int | None = None) -> Iterator[TextIO]:
    """A UTF-8 text handle on `out`, gzip-compressed (at `level`) where its name ends in .gz:
    - stdout's or stderr's own file, pipe or terminal (`-`, /dev/stdout, /dev/fd/1, a link to one: `stream_fd`) is
      written through a copy of that descriptor, where the shell left it: never reopened (which truncated a file
      the shell redirected stdout to, before the shell's own lines) nor renamed over;
    - another pipe or device is written as it is;
    - a file is written as OUT.part beside it (beside a link's final target, so the link stays) and renamed onto it
      when whole, removed on any failure (a full disk, Ctrl-C): no half export is left where the user looks."""
    gz = out.name.endswith(".gz")
    fd = stream_fd(out)
    with contextlib.ExitStack() as stack:
        if fd is not None:
            raw = stack.enter_context(os.fdopen(os.dup(fd), "wb"))
        elif is_stream(out):
            raw = stack.enter_context(open(out, "wb"))
        else:
            tmp = stack.enter_context(part_file(file_target(out)))
            raw = stack.enter_context(open(tmp, "wb"))
        if gz:
            raw = stack.enter_context(gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=level or 9))
        fh = stack.enter_context(io.TextIOWrapper(raw, encoding="utf-8"))
        yield fh
        fh.flush()


@contextmanager
def part_file(target: Path) -> Iterator[Path]:
    """TARGET.part, renamed onto `target` when the block ends, removed on any failure."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + ".part")
    try:
        yield tmp
        tmp.replace(target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def stream_fd(path: Path) -> int | None:
    """1 or 2 where `path` is stdout's or stderr's own file, pipe or terminal (`-`; /dev/stdout, /dev/fd/1 or any
    link to them, whatever stdout is: compared by device and inode), else None."""
    if str(path) == "-":
        return 1
    try:
        st = os.stat(path)
    except OSError:
        return None
    for fd in (1, 2):
        try:
            own = os.fstat(fd)
        except OSError:
            continue
        if (st.st_dev, st.st_ino) == (own.st_dev, own.st_ino):
            return fd
    return None


def is_stream(path: Path) -> bool:
    """Whether `path` is something other than a file or a folder to write (a device, a pipe), links followed."""
    return path.exists() and not path.is_file() and not path.is_dir()


def written_in_place(path: Path) -> bool:
    """Whether an export to `path` goes into a stream (`stream_fd`, `is_stream`) rather than a file it names."""
    return stream_fd(path) is not None or is_stream(path)


def file_target(path: Path) -> Path:
    """The file an export to `path` replaces: `path`, or the end of its chain of links (`..` resolved), so that a
    link stays a link. A loop of links is the user's error (one line)."""
    try:
        os.stat(path)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise RoseprofError(f"{path}: a loop of links, no file to write") from None
    return Path(os.path.realpath(path)) if path.is_symlink() else path
