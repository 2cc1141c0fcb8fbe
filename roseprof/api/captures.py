"""`roseprof import DIR` of a folder of SLO captures (`roseinfer serve --capture-on ... --capture-dir DIR`): each
file is a step log of its own, so each becomes a run of its own (a folder of Kineto files is one run of several
ranks instead: intake.import_path). The server writes a capture whole or not at all (a hidden temporary file
renamed), so a file being written is never read here: its hidden name is passed over."""

from __future__ import annotations

from pathlib import Path

from roseprof.drivers import SNIFF_BYTES, readers
from roseprof.drivers.steps import TOOL, sniff
from roseprof.errors import RoseprofError
from roseprof.run.store import Run, RunStore

SUFFIXES = (".jsonl", ".ndjson")


def step_log_files(paths: list[str]) -> list[Path] | None:
    """The step logs of `paths` when it is one folder holding step logs and no file of another trace's suffix (None
    otherwise: an import as before, e.g. a folder of rank files with the engine's step log beside them), by name (a
    capture's name begins with its Unix time, so by time)."""
    if len(paths) != 1 or not Path(paths[0]).is_dir():
        return None
    folder = Path(paths[0])
    try:
        files = sorted(p for p in folder.iterdir() if p.is_file() and not p.name.startswith("."))
    except OSError as e:
        raise RoseprofError(f"{folder}: cannot read the folder ({e.strerror})") from None
    others = tuple(s for r in readers() if r.tool != TOOL for s in r.suffixes)
    if any(p.name.lower().endswith(others) for p in files):
        return None
    logs = []
    for p in files:
        if not p.name.lower().endswith(SUFFIXES):
            continue
        try:
            with open(p, "rb") as fh:
                head = fh.read(SNIFF_BYTES)
        except OSError as e:
            raise RoseprofError(f"{p}: cannot read ({e.strerror})") from None
        if sniff(head):
            logs.append(p)
    return logs or None


def import_each(store: RunStore, files: list[Path], name: str | None) -> list[Run]:
    """One run per step log (named `name`, or the file's name without its suffix)."""
    from roseprof.api.intake import import_path

    return [import_path(store, str(f), name or f.stem, None) for f in files]
