"""torch.profiler (Kineto): capture.py runs a command with the profiler on; reader.py reads Kineto / Chrome-trace
JSON (plain or gzipped) into the model."""

from __future__ import annotations

import re
import zlib
from pathlib import Path

from roseprof.drivers.base import Limits, Reader
from roseprof.model import Trace

GZIP_MAGIC = b"\x1f\x8b"
# A JSON object whose first keys include one a Chrome trace or Kineto file starts with.
_TRACE_KEY = re.compile(rb'^\s*\{\s*(?:"[^"]*"\s*:[^"]*)?"(traceEvents|schemaVersion|deviceProperties)"\s*:')
_KEY_ANYWHERE = re.compile(rb'"(traceEvents|schemaVersion)"\s*:')


def split_thread_id(tid):
    """(pid, tid) of the model's thread ids, which the Kineto reader packs as pid << 32 | tid (reader.thread_id)."""
    return tid >> 32, tid & 0xFFFFFFFF


def sniff(head: bytes) -> bool:
    """A gzip stream whose start inflates to a trace, or a `{` with a trace key in the first bytes."""
    if head.startswith(GZIP_MAGIC):
        try:
            head = zlib.decompressobj(wbits=31).decompress(head, 4096)
        except zlib.error:
            return False
    stripped = head.lstrip()
    return stripped[:1] == b"{" and bool(_TRACE_KEY.match(head) or _KEY_ANYWHERE.search(head))


def read(path: Path, raw: Path, label: str, limits: Limits | None = None) -> Trace:
    from roseprof.drivers.torch.reader import read_kineto

    return read_kineto(path, raw, label, limits)


def read_many(paths: list[Path], raw: Path, labels: list[str], limits: Limits | None = None) -> Trace:
    """One Kineto file per rank (HTA's layout, or `roseprof torch` of a tensor-parallel engine) as one run: each
    file read on its own (streamed), then merged (capture.merge: Unix-time bases aligned, processes kept apart)."""
    from roseprof.drivers.torch.capture import merge
    from roseprof.drivers.torch.reader import read_kineto

    # One file read at a time, merged as it comes (capture.merge lets each go once its columns are taken).
    seen: dict[int, str] = {}
    traces = (
        _one_file_per_rank(read_kineto(p, raw, label, limits), label, seen) for p, label in zip(paths, labels)
    )
    return merge(traces, labels)


def _one_file_per_rank(trace: Trace, label: str, seen: dict[int, str]) -> Trace:
    """Two files that say one rank (the same file twice, another run's rank 0 beside this one's, copies made for a
    benchmark): the later file's processes lose that rank (in place) and a warning names both files. Merged as one
    rank, its steps, collectives and kernel time would be two programs' as one; kept apart, each is a process of
    unknown rank (a step log naming its pid still gives it one). `seen`: the ranks of the files before, by the file
    that said each first."""
    mine = {p.rank for p in trace.processes.values() if p.rank is not None}
    for rank in sorted(mine & seen.keys()):
        trace.warnings.append(
            f"{label}: says rank {rank} (its distributedInfo), as {seen[rank]} does: its processes are kept "
            "apart, of unknown rank"
        )
        for p in trace.processes.values():
            if p.rank == rank:
                p.rank, p.rank_from = None, None
    seen.update(dict.fromkeys(mine - seen.keys(), label))
    return trace


READERS = (
    Reader(
        "torch",
        "torch.profiler / Kineto / Chrome-trace .json and .json.gz",
        (".pt.trace.json", ".pt.trace.json.gz", ".json.gz", ".json"),
        sniff,
        read,
        read_many,
    ),
)
