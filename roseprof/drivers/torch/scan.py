"""Stream a Chrome-trace / Kineto JSON file as byte segments of whole events, without parsing the file at once.

A Kineto trace is one JSON object, `{"schemaVersion": 1, ..., "traceEvents": [{...}, {...}, ...], ...}`, often
hundreds of MB. Parsing it whole builds a Python object per event (several times the file in memory). Instead
the file is read (and gunzipped) in chunks, and each chunk is cut after the last complete event of the
`traceEvents` array: the cut is found with numpy on the JSON's structural characters only (quotes, brackets,
backslashes), so a segment can be decoded on its own (`[` + segment + `]`) and dropped before the next one.
Everything outside the array (deviceProperties, baseTimeNanoseconds, ...) is small and kept as the "header".
A file that is a bare JSON array of events (Chrome's "JSON Array Format") is read the same way.
"""

from __future__ import annotations

import gzip
import re
import zlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from roseprof.drivers.base import Limits
from roseprof.errors import RoseprofError

CHUNK = 4 << 20  # bytes of JSON per segment (decompressed): the scan's temporaries are a few times this
GZIP_MAGIC = b"\x1f\x8b"
HEADER_LIMIT = 256 << 20  # give up looking for traceEvents after this much JSON
# One event longer than this is damage (real events, args and all, are under a few MB): refused, because a
# segment is rescanned from its start until it holds a whole event, so a 1 GiB event would take minutes.
MAX_EVENT_BYTES = 64 << 20

QUOTE, BACKSLASH, OPEN, CLOSE_OBJ, CLOSE_ARR = 1, 2, 3, 4, 5
_CLASS = np.zeros(256, dtype=np.uint8)  # byte -> structural class (0: not structural)
_CLASS[ord('"')] = QUOTE
_CLASS[ord("\\")] = BACKSLASH
_CLASS[ord("{")] = _CLASS[ord("[")] = OPEN
_CLASS[ord("}")] = CLOSE_OBJ
_CLASS[ord("]")] = CLOSE_ARR
_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')


def _structure(buf: bytes) -> tuple[np.ndarray, np.ndarray]:
    """Positions [N] and classes [N] of the structural characters of `buf` outside strings.

    `buf` must start outside any string. A quote preceded by an odd run of backslashes is escaped; a quote
    toggles "inside a string"; brackets inside strings are text. Only what lies before a position decides
    its result, so a buffer cut anywhere gives right answers up to the cut.
    """
    cls = _CLASS[np.frombuffer(buf, dtype=np.uint8)]
    pos = np.flatnonzero(cls)
    c = cls[pos]
    is_bs = c == BACKSLASH
    if is_bs.any():
        bs = pos[is_bs]
        new_run = np.ones(len(bs), dtype=bool)
        new_run[1:] = bs[1:] != bs[:-1] + 1
        first = np.flatnonzero(new_run)
        length = np.diff(np.append(first, len(bs)))
        escaped = bs[first + length - 1][length % 2 == 1] + 1  # the character after an odd run
        keep = ~is_bs & ~np.isin(pos, escaped)
        pos, c = pos[keep], c[keep]
    quotes = pos[c == QUOTE]
    other = c != QUOTE
    pos, c = pos[other], c[other]
    outside = np.searchsorted(quotes, pos) % 2 == 0  # an even number of quotes before it
    return pos[outside], c[outside]


class EventStream:
    """Iterate `segments()` for the events; afterwards `header` holds the JSON text around the array."""

    def __init__(self, path: Path, label: str, limits: Limits | None = None) -> None:
        self.path, self.label, self.limits = path, label, limits or Limits()
        self.header = b""
        self.bare_array = False

    def _chunks(self) -> Iterator[bytes]:
        with open(self.path, "rb") as fh:
            gz = fh.read(2) == GZIP_MAGIC
            fh.seek(0)
            if not gz:
                while chunk := fh.read(CHUNK):
                    yield chunk
                return
            try:
                yield from self._inflate(fh)
            except (zlib.error, gzip.BadGzipFile) as e:
                raise RoseprofError(f"{self.label}: is not a readable gzip file ({e})") from None

    def _inflate(self, fh) -> Iterator[bytes]:
        """The gzip file's members inflated one after another (`cat a.gz b.gz c.gz` is one gzip file, as `gzip -d`
        reads it), each piece at most CHUNK bytes (zlib directly, not gzip.GzipFile: the same inflate, less Python
        per chunk); what the file inflates to is bounded by `self.limits` (a decompression bomb)."""
        d = zlib.decompressobj(wbits=31)
        pending, read, inflated, member = b"", 0, 0, False
        while True:
            if not pending:
                pending = fh.read(CHUNK // 4)
                read += len(pending)
                if not pending:
                    break
            if not member and not pending.startswith(GZIP_MAGIC[: len(pending)]):
                while pending:  # gzip -d ignores zeros after the last member
                    if pending.strip(b"\0"):
                        raise RoseprofError(
                            f"{self.label}: holds bytes after its last gzip member that are not gzip"
                        )
                    pending = fh.read(CHUNK)
                return
            member = True
            out = d.decompress(pending, CHUNK)
            pending = d.unconsumed_tail
            if d.eof:  # a member ends: what follows it is the next member's (or padding)
                pending, member = d.unused_data + pending, False
                d = zlib.decompressobj(wbits=31)
            inflated += len(out)
            self.limits.check_inflated(inflated, read, self.label)
            if out:
                yield out
        if member:
            raise RoseprofError(f"{self.label}: the gzip stream is truncated (the file was cut short)")

    def segments(self) -> Iterator[bytes]:
        """Byte segments, each a comma-separated run of whole events (no brackets)."""
        chunks = self._chunks()
        buf = b""
        # Find the events array: the "traceEvents" key at the top level, or a bare array.
        for chunk in chunks:
            buf += chunk
            start = self._find_array(buf)
            if start is not None:
                break
            if len(buf) > HEADER_LIMIT:
                break
        else:
            start = None
        if start is None:
            self._no_events(buf)
        self.header = buf[: start - 1]  # up to the array's "[", added back with the "]" below
        buf = buf[start:]
        done = False
        while not done:
            pos, c = _structure(buf)
            depth = np.cumsum(np.where(c == OPEN, 1, -1))  # [N] depth after each bracket, events at 1
            closed = np.flatnonzero(depth < 0)
            limit = pos[closed[0]] if len(closed) else len(buf)
            ends = pos[(c == CLOSE_OBJ) & (depth == 0) & (pos < limit)]
            cut = int(ends[-1]) + 1 if len(ends) else 0
            if len(closed):
                cut, done = int(limit), True
            if cut:
                yield buf[:cut]
            rest = buf[cut:]
            if done:
                self.header += b"[]" + rest[1:]
                for chunk in chunks:
                    self.header += chunk
                    if len(self.header) > HEADER_LIMIT:
                        raise RoseprofError(
                            f"{self.label}: holds over {HEADER_LIMIT >> 20} MiB of JSON after traceEvents: "
                            "not a trace"
                        )
                if self._top_level_keys(self.header, _EVENTS_KEY) > 1:
                    # JSON readers differ (the first, the last, or an error): which one is the trace is unknown.
                    raise RoseprofError(
                        f"{self.label}: has two traceEvents arrays (a duplicated key): which one is the trace "
                        "is ambiguous"
                    )
                break
            if not cut and len(rest) > MAX_EVENT_BYTES:
                raise RoseprofError(
                    f"{self.label}: an event of traceEvents is over {MAX_EVENT_BYTES >> 20} MiB long: damage, "
                    "not a trace event (a name or args of that size?)"
                )
            nxt = next(chunks, None)
            if nxt is None:
                raise RoseprofError(
                    f"{self.label}: the JSON ends inside the traceEvents array (the file is truncated)"
                )
            buf = (rest + nxt).lstrip(b" \t\r\n,")  # the comma after the last event may start `nxt`

    def _find_array(self, buf: bytes) -> int | None:
        """Offset just after the `[` that opens the events array, or None if not in `buf` yet."""
        head = buf.lstrip()
        if head[:1] == b"[":
            self.bare_array = True
            return len(buf) - len(head) + 1
        m = next(self._top_level(buf, _EVENTS_KEY), None)
        return m.end() if m is not None else None

    @staticmethod
    def _top_level(buf: bytes, key: re.Pattern):
        """Matches of `key` that are keys of the top-level object (not inside a string or a nested value)."""
        for m in key.finditer(buf):
            # A probe "{" after the text before the key: reported only when that text ends outside a string.
            pos, c = _structure(buf[: m.start()] + b"{")
            outside = len(pos) > 0 and pos[-1] == m.start()
            if outside and int(np.where(c[:-1] == OPEN, 1, -1).sum()) == 1:  # a key of the top-level object
                yield m

    def _top_level_keys(self, buf: bytes, key: re.Pattern) -> int:
        return sum(1 for _ in self._top_level(buf, key))

    def _no_events(self, buf: bytes) -> None:
        head = buf.lstrip()[:1]
        if not head:
            raise RoseprofError(f"{self.label}: is empty (no JSON)")
        if head not in (b"{", b"["):
            raise RoseprofError(
                f"{self.label}: is not JSON (a Chrome trace or Kineto trace is a JSON object)"
            )
        raise RoseprofError(f"{self.label}: is JSON but not a trace (no traceEvents array)")
