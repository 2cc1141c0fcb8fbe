"""Named baselines: a name for a set of stored runs (e.g. the last good build's captures), for CI to diff against.

Kept in the store as `<traces>/baselines.json`, written atomically (a whole new file renamed over the old), runs
referenced by id so that a later run with the same name does not change what the baseline means:

    {"version": 1, "baselines": {"main": {"runs": ["<run-id>", ...], "created_utc": "..."}}}
"""

from __future__ import annotations

import json
import re

from roseprof.errors import RoseprofError
from roseprof.run.json_files import read_json, write_json
from roseprof.run.store import Run, RunStore, utc_now

FILE = "baselines.json"
VERSION = 1


def _path(store: RunStore):
    return store.root / FILE


def read_all(store: RunStore) -> dict[str, dict]:
    """Every baseline: name -> {"runs": [ids], "created_utc"}."""
    path = _path(store)
    if not path.is_file():
        return {}
    try:
        data = read_json(path)
        return dict(data["baselines"])
    except (OSError, json.JSONDecodeError, KeyError, TypeError):
        raise RoseprofError(
            f"{path}: not a baselines file roseprof wrote (remove it to start again)"
        ) from None


def set_baseline(store: RunStore, name: str, runs: list[Run]) -> dict:
    if not re.fullmatch(r"[A-Za-z0-9._-]{1,64}", name):
        raise RoseprofError(f"baseline name {name!r}: use letters, digits, '.', '_' and '-' (at most 64)")
    bad = [r.id for r in runs if r.manifest.get("status") != "complete"]
    if bad:
        raise RoseprofError(f"a baseline takes complete runs only; not complete: {', '.join(bad)}")
    ids = list(dict.fromkeys(r.id for r in runs))
    baselines = read_all(store)
    baselines[name] = {"runs": ids, "created_utc": utc_now()}
    store.root.mkdir(parents=True, exist_ok=True)
    write_json(_path(store), {"version": VERSION, "baselines": baselines})
    return baselines[name]


def baseline_runs(store: RunStore, name: str) -> list[Run]:
    """The baseline's runs; a clear error when it does not exist or some of its runs were deleted."""
    baselines = read_all(store)
    if name not in baselines:
        known = ", ".join(sorted(baselines)) or "none yet: roseprof baseline set NAME RUN..."
        raise RoseprofError(f"no baseline {name!r} in {store.root} (baselines: {known})")
    by_id = {r.id: r for r in store.runs()}
    ids = baselines[name]["runs"]
    missing = [i for i in ids if i not in by_id]
    if missing:
        raise RoseprofError(
            f"baseline {name!r} refers to {len(missing)} of its {len(ids)} runs that no longer exist "
            f"({', '.join(missing[:3])}{', ...' if len(missing) > 3 else ''}): set it again with "
            f"`roseprof baseline set {name} RUN...`"
        )
    return [by_id[i] for i in ids]
