"""Drivers: one folder per tool (nsys/, torch/, ncu/), each turning the tool's files into the run model
(`roseprof.model.Trace`: a `Reader`) and, where the tool can run a command, saying how (a capture class whose
`launch` gives a `Launch`; roseprof/capture/process.py runs every tool's launch the same one way).

What a driver is made of (Reader, Launch, find_tool) is drivers/base.py's; this module is the registry. It picks a
driver for a file by its suffix, then by sniffing its first bytes (SQLite's magic, a
"traceEvents" key, ncu's CSV header), so an unknown file gets one clear line instead of a wrong reader.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

from roseprof.drivers.base import SNIFF_BYTES, Launch, Limits, Reader, find_tool
from roseprof.errors import RoseprofError

__all__ = [
    "CAPTURES",
    "SNIFF_BYTES",
    "Launch",
    "Limits",
    "Reader",
    "capturer",
    "find_tool",
    "pick_reader",
    "rank_files",
    "readers",
    "split_thread_id",
]

# Each tool's capture class, by its options' `tool` (imported only when a capture runs).
CAPTURES = {
    "nsys": "roseprof.drivers.nsys.capture:NsysCapture",
    "ncu": "roseprof.drivers.ncu.capture:NcuCapture",
    "torch": "roseprof.drivers.torch.capture:TorchCapture",
}


def capturer(options, has_gpu: bool):
    """The capture object for a tool's options (e.g. drivers/nsys/capture.py: NsysOptions -> NsysCapture)."""
    module, name = CAPTURES[options.tool].split(":")
    return getattr(importlib.import_module(module), name)(options, has_gpu)


def split_thread_id(tool: str, tid):
    """The (pid, tid) arrays a model's thread ids stand for, as the tool's driver packed them (its package's
    `split_thread_id`); a tool that packs no pid: every thread in process 1."""
    split = None
    if tool in {r.tool for r in readers()}:  # not a stored run's tool that this roseprof has no driver for
        split = getattr(importlib.import_module(f"roseprof.drivers.{tool}"), "split_thread_id", None)
    if split is not None:
        return split(tid)
    return (tid & 0) + 1, tid & 0x7FFFFFFF


def readers() -> list[Reader]:
    from roseprof.drivers.ncu import READERS as NCU
    from roseprof.drivers.nsys import READERS as NSYS
    from roseprof.drivers.steps import READERS as STEPS
    from roseprof.drivers.torch import READERS as TORCH

    return [*NSYS, *NCU, *TORCH, *STEPS]


def pick_reader(path: Path, label: str | None = None) -> Reader:
    """The reader for `path`: by suffix first, then by content; one clear line when none fits."""
    label = label or str(path)
    name = path.name.lower()
    by_suffix = [r for r in readers() if any(name.endswith(s) for s in r.suffixes)]
    try:
        with open(path, "rb") as fh:
            head = fh.read(SNIFF_BYTES)
    except OSError as e:
        raise RoseprofError(f"{label}: cannot read ({e.strerror})") from None
    for r in by_suffix:
        if r.sniff(head) or len(by_suffix) == 1 and not any(o.sniff(head) for o in readers()):
            return r
    for r in readers():
        if r.sniff(head):
            return r
    known = ", ".join(sorted({r.description for r in readers()}))
    if not head:
        raise RoseprofError(f"{label}: is empty (0 bytes); roseprof import reads {known}")
    raise RoseprofError(f"{label}: not a file roseprof can read (it reads {known})")


_RANK_IN_NAME = re.compile(r"rank[-_]?(\d+)", re.IGNORECASE)


def rank_files(folder: Path, label: str) -> tuple[list[Path], list[str]]:
    """The trace files of a folder of per-rank traces (HTA's layout: rank-N.<anything>.json[.gz]), by rank (the
    number after `rank` in the name; names without one after, by name), and a line for each file of a trace's
    suffix that is no trace (empty, or a file not named for a rank whose first bytes are no trace's: a
    config.json), which is skipped.
    One line naming `label` when it has no trace."""
    many = [r for r in readers() if r.read_many is not None]
    suffixes = tuple(s for r in many for s in r.suffixes)
    try:
        files = [p for p in folder.iterdir() if p.is_file() and p.name.lower().endswith(suffixes)]
    except OSError as e:
        raise RoseprofError(f"{label}: cannot read the folder ({e.strerror})") from None
    traces, skipped = [], []
    for p in files:
        try:
            with open(p, "rb") as fh:
                head = fh.read(SNIFF_BYTES)
        except OSError as e:
            raise RoseprofError(f"{p}: cannot read ({e.strerror})") from None
        # A rank's file is read (its damage refused, not passed over), unless it is empty; another file only where
        # its first bytes are a trace's (a config.json beside the ranks is not).
        if head and (_RANK_IN_NAME.search(p.name) or any(r.sniff(head) for r in many)):
            traces.append(p)
        else:
            why = "is empty (0 bytes)" if not head else "is not a trace"
            skipped.append(f"{p}: {why}: skipped, the run is the folder's other files")
    if not traces:
        raise RoseprofError(
            f"{label}: is a folder with no trace in it; give a trace file, or a folder of one Kineto file per rank "
            f"(rank-0.*.json.gz, rank-1.*, ...: {', '.join(suffixes)})"
        )

    def order(p: Path):
        m = _RANK_IN_NAME.search(p.name)
        return (0, int(m.group(1)), p.name) if m else (1, 0, p.name)

    return sorted(traces, key=order), sorted(skipped)
