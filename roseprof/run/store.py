"""The run store: one folder per run under the traces folder, written atomically.

A run is built in `.tmp-<run-id>/` beside the others and renamed to `<run-id>/` when it is whole (or when
a capture was interrupted or failed: then with that status and what was written so far). Readers list only
renamed folders, so they never see half a run, and run ids carry a random suffix, so two captures at once
never collide.
"""

from __future__ import annotations

import datetime as dt
import errno
import os
import re
import secrets
import shutil
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from roseprof.errors import RoseprofError, one_line
from roseprof.run import tables
from roseprof.run.checks import sound_manifest
from roseprof.run.json_files import read_json, write_json

__all__ = [
    "Run",
    "RunStore",
    "RunWriter",
    "damage_is_one_line",
    "read_json",
    "safe_name",
    "utc_now",
    "write_json",
]

STATUSES = ("complete", "incomplete", "failed")


def utc_now() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def created_order(run) -> tuple:
    """What orders runs oldest first: the creation time to the second as `ls` shows it, then to the nanosecond
    (runs stored since session 33; two captures of a quick command can start within one second, and the random
    part of their ids ordered them by chance), then the id."""
    return (run.manifest.get("created_utc", ""), run.manifest.get("created_ns") or 0, run.id)


def safe_name(name: str) -> str:
    """A name as a run id holds it. Cut at 46 characters: an id is then at most 68 (a time stamp of 16, the name,
    4 hex, 2 dashes), which `ls` keeps whole beside a whole status (`incomplete`) in 80 columns."""
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.")[:46]
    return cleaned or "run"


@dataclass
class Run:
    path: Path
    manifest: dict
    # {summary key: spec}: what the analysis sections say their parts of summary.json hold (run/checks.py's spec
    # language), handed to the store by whoever knows the sections (roseprof.api.open_store)
    summary_checks: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def id(self) -> str:
        return self.path.name

    def has_summary(self) -> bool:
        return tables.has_summary(self.path)

    def no_summary(self) -> str:
        """What is said of a run without summary.json (failed, or incomplete before analysis)."""
        return f"run {self.id} has no {tables.SUMMARY} (status {self.manifest.get('status')})"

    def changed(self) -> float:
        """When its JSON files last changed (a file time): a view rendered before is out of date."""
        return max((p.stat().st_mtime for p in self.path.iterdir() if p.suffix == ".json"), default=0)

    def summary(self) -> dict:
        summary = tables.read_summary(self.path, self.summary_checks)  # RoseprofError when damaged
        if summary is None:
            raise RoseprofError(self.no_summary())
        return summary


@contextmanager
def damage_is_one_line(*runs):
    """Reading stored runs back: damage the checks in run/tables.py did not name becomes one line naming the
    run(s), never a traceback from deep inside an analysis or a renderer."""
    try:
        yield
    except RoseprofError:
        raise
    except (ValueError, TypeError, KeyError, IndexError, AttributeError, ArithmeticError, EOFError) as e:
        ids = " / ".join(r.id if isinstance(r, Run) else str(r) for r in runs)
        raise RoseprofError(
            f"run {ids} looks damaged ({type(e).__name__}: {one_line(str(e), 200)}); re-import its raw/ file"
        ) from None


def _remove_empty(folders: list[Path]) -> None:
    """The folders a run created, deepest first, while they are empty (another run may have been stored there
    meanwhile: that one and the folders above it stay)."""
    for folder in folders:
        try:
            folder.rmdir()
        except OSError:
            return


class RunWriter:
    """A run being written; `finish()` renames it into place, `abort()` removes it."""

    def __init__(self, store: RunStore, name: str, tool: str, made: list[Path] | None = None) -> None:
        stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        # the folders new_run created for this run (the traces folder and any missing parents, deepest first):
        # an aborted first run leaves none of them behind
        self.made = list(made or [])
        self.run_id = f"{stamp}-{safe_name(name)}-{secrets.token_hex(2)}"
        self.store = store
        self.final = store.root / self.run_id
        self.path = store.root / f".tmp-{self.run_id}"
        self._done = False
        try:
            self.path.mkdir()
            (self.path / "raw").mkdir()
        except OSError:  # nothing of the run stays: its folder (if made) and the traces folders new_run made
            self.abort()
            raise
        self.manifest: dict = {
            "run_id": self.run_id,
            "name": name,
            "tool": {"name": tool},
            "created_utc": utc_now(),
            "created_ns": time.time_ns(),  # the order of runs created within one second (created_order)
        }

    @property
    def raw(self) -> Path:
        return self.path / "raw"

    def write(self, name: str, obj) -> None:
        write_json(self.path / name, obj)

    def finish(self, status: str, **fields) -> Run:
        assert status in STATUSES
        self.manifest.update(fields)
        self.manifest["status"] = status
        self.manifest["finished_utc"] = utc_now()
        write_json(self.path / "manifest.json", self.manifest)
        os.rename(self.path, self.final)
        self._done = True
        return Run(self.final, self.manifest, self.store.summary_checks)

    def abort(self) -> None:
        if not self._done:
            shutil.rmtree(self.path, ignore_errors=True)
            _remove_empty(self.made)
            self._done = True


class RunStore:
    """The traces folder. `summary_checks`: the analysis sections' checks of their parts of summary.json, which
    every run read back from here is checked against (roseprof.api.open_store passes them; without them only
    what is no section's is checked)."""

    def __init__(self, root: str | os.PathLike, summary_checks: dict | None = None) -> None:
        self.root = Path(root)
        self.summary_checks = dict(summary_checks or {})

    def new_run(self, name: str, tool: str) -> RunWriter:
        made = []  # the folders this created, deepest first: only those a mkdir of ours made (a path through
        # `..` names folders that exist whatever the parts before them, and another process may make one meanwhile)
        parts = self.root.parts
        try:
            for i in range(1, len(parts) + 1):
                folder = Path(*parts[:i])
                try:
                    os.mkdir(folder)
                except FileExistsError:
                    continue
                made.insert(0, folder)
            if not self.root.is_dir():
                raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR))
        except OSError as e:
            _remove_empty(made)
            raise RoseprofError(f"cannot create the traces folder {self.root}: {e.strerror}") from None
        try:
            return RunWriter(self, name, tool, made)
        except OSError as e:
            raise RoseprofError(
                f"cannot create a run in the traces folder {self.root}: {e.strerror}"
            ) from None

    def runs(self) -> list[Run]:
        """Every finished run, oldest first. A run whose manifest is damaged is listed with status "damaged"
        (and what is wrong in manifest["damaged"]): one bad folder never hides the others."""
        if not self.root.is_dir():
            return []
        out = []
        try:
            children = sorted(self.root.iterdir())
        except OSError as e:
            raise RoseprofError(f"cannot list the traces folder {self.root}: {e.strerror}") from None
        for child in children:
            if child.name.startswith(".") or not (child / "manifest.json").is_file():
                continue
            try:
                manifest = sound_manifest(read_json(child / "manifest.json"))
            except (OSError, ValueError, RecursionError) as e:
                manifest = {"name": "?", "status": "damaged", "damaged": f"manifest.json: {type(e).__name__}"}
            out.append(Run(child, manifest, self.summary_checks))
        out.sort(key=created_order)
        return out

    def resolve(self, ref: str) -> Run:
        """A run id, a unique prefix of one, or a name (the latest run with that name)."""
        # every id starts with "": an empty reference would name the only run, or be ambiguous among several
        if not ref.strip():
            raise RoseprofError(
                "an empty run reference: give a run id, a unique prefix of one, or a name (see `roseprof ls`)"
            )
        runs = self.runs()
        for run in runs:
            if run.id == ref:
                return run
        named = [r for r in runs if r.manifest.get("name") == ref]
        if named:
            return named[-1]
        prefixed = [r for r in runs if r.id.startswith(ref)]
        if len(prefixed) == 1:
            return prefixed[0]
        if len(prefixed) > 1:
            raise RoseprofError(f"run {ref!r} is ambiguous: {', '.join(r.id for r in prefixed[:5])}")
        raise RoseprofError(f"no run {ref!r} in {self.root} (see `roseprof ls`)")

    def resolve_group(self, ref: str, latest: bool = False) -> list[Run]:
        """The runs a reference stands for in a comparison: a run id or a unique prefix of one, that run; a name,
        every complete run with that name, oldest first (all of its runs when none is complete, so the caller
        can say why). latest=True: the latest run with that name only, as `resolve`."""
        if latest:
            return [self.resolve(ref)]
        runs = self.runs()
        if any(run.id == ref for run in runs):
            return [self.resolve(ref)]
        named = [r for r in runs if r.manifest.get("name") == ref]
        complete = [r for r in named if r.manifest.get("status") == "complete"]
        if complete:
            return complete
        return named or [self.resolve(ref)]
