"""The shapes of a run folder's JSON files, checked when they are read back, so that a damaged run (a truncated
or hand-edited summary.json, steps of mismatched lengths, a manifest whose status is not text) is named as
damaged in one line instead of failing deep inside a renderer.

A spec is a type (int, float, str, bool, NUM), a tuple of allowed specs, a dict of {key: spec} (listed keys are
required unless their spec allows None; extra keys are allowed), MapOf(spec) (an object of any keys, every value
matching spec), or a one-element list [item spec]. NUM is a finite number; bools are never numbers here.

What summary.json holds is checked part by part: each analysis section names the checks of its part
(analysis/sections/), which the reader of a summary is handed (`check_summary(summary, section_checks)`: the
store gets them from roseprof.api.open_store); this module keeps the spec language and what is no section's
(warnings, gpus, the keys every summary has).
"""

from __future__ import annotations

import math

import numpy as np

NUM = "number"
OPT_NUM = (NUM, None)
# No number roseprof writes comes near this (2^62 ns is 146 years; FLOP rates are ~1e16): a p50 of 1e308 is a
# hand edit or damage, and would turn every delta computed from it into inf or NaN.
INT_LIMIT = 1 << 62
NUM_LIMIT = float(INT_LIMIT)


class MapOf:
    """A spec for an object of any keys whose every value matches `spec` (a step's time per region, by name)."""

    def __init__(self, spec) -> None:
        self.spec = spec


class Damaged(ValueError):
    """What is wrong, with a path into the file: "regions[3].count is not an integer"."""


def check(value, spec, where: str = "") -> None:
    if isinstance(spec, tuple):
        problems = []
        for option in spec:
            try:
                check(value, option, where)
                return
            except Damaged as e:
                problems.append(str(e))
        raise Damaged(problems[0])
    if spec is None:
        if value is not None:
            raise Damaged(f"{where or 'the file'} is not null")
        return
    if isinstance(spec, dict):
        if not isinstance(value, dict):
            raise Damaged(f"{where or 'the file'} is not an object")
        for key, sub in spec.items():
            if key not in value and not _allows_none(sub):
                raise Damaged(f"{where + '.' if where else ''}{key} is missing")
            check(value.get(key), sub, f"{where + '.' if where else ''}{key}")
        return
    if isinstance(spec, MapOf):
        check(value, dict, where)
        for key, item in value.items():
            check(item, spec.spec, f"{where}.{key}")
        return
    if isinstance(spec, list):
        if not isinstance(value, list):
            raise Damaged(f"{where or 'the file'} is not a list")
        if _scalars_ok(value, spec[0]):
            return
        for i, item in enumerate(value):  # the slow way, which names the first bad item
            check(item, spec[0], f"{where}[{i}]")
        return
    if spec == NUM:
        # an int is finite however long (math.isfinite cannot convert one beyond a float)
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not ok or (isinstance(value, float) and not math.isfinite(value)):
            raise Damaged(f"{where} is not a number")
        _within_limit(value, where)
        return
    if spec is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise Damaged(f"{where} is not an integer")
        _within_limit(value, where)  # an index beyond int64 would crash the readers' arrays
        return
    if not isinstance(value, spec):
        raise Damaged(f"{where} is not {'text' if spec is str else spec.__name__}")


def _within_limit(value: int | float, where: str) -> None:
    if abs(value) > NUM_LIMIT:
        try:
            shown = f"{float(value):g}"
        except OverflowError:
            shown = "an integer beyond any float"
        raise Damaged(f"{where} is {shown}, beyond any time, count or rate roseprof writes")


# Item specs whose lists `_scalars_ok` checks at once: the types an item may have (exactly: bool is not a number).
_SCALAR_TYPES = {NUM: {int, float}, int: {int}, bool: {bool}, str: {str}}


def _scalars_ok(values: list, item_spec) -> bool:
    """Whether every item of a list of plain scalars passes its spec, in one pass over the list: a long run's token
    series hold millions of numbers, which `check` item by item took 20 s to read back (batch 512). False when
    the spec is not a scalar one or any item fails (then the caller finds which)."""
    allowed = (
        _SCALAR_TYPES.get(item_spec) if isinstance(item_spec, (str, type)) else None
    )  # dicts: unhashable
    if allowed is None or not set(map(type, values)) <= allowed:
        return False
    if item_spec in (NUM, int) and values:
        try:
            a = np.asarray(values, dtype=np.float64 if item_spec == NUM else np.int64)
        except OverflowError:  # an integer beyond any float (or int64): the item-by-item check names it
            return False
        if item_spec is int:  # exact integer bounds
            return bool(a.min() >= -INT_LIMIT and a.max() <= INT_LIMIT)
        # strictly below: an integer just above the limit rounds to it as a float, and the exact check decides
        return bool(np.isfinite(a).all() and np.abs(a).max() < NUM_LIMIT)
    return True


def _allows_none(spec) -> bool:
    return spec is None or (isinstance(spec, tuple) and any(_allows_none(s) for s in spec))


NS_STATS = {"count": int, "p50_ns": OPT_NUM, "p99_ns": OPT_NUM}
MS_STATS = {"count": int, "p50_ms": OPT_NUM, "p95_ms": OPT_NUM, "p99_ms": OPT_NUM}
# What a summary holds that is no analysis section's: the analyses' warnings and the GPUs the capture saw. Each
# section's part is checked by the section's own `checks` (analysis/sections/).
SUMMARY = {
    "warnings": ([str], None),
    "gpus": ([dict], None),
}
ITL_ROW = {"t_ms": [NUM], "itl_ms": [NUM], "rollover": [bool], "step": ([int], None)}
TELEMETRY = {"interval_s": NUM, "samples": [dict]}


# Written into every summary (an empty object is a summary.json cut or replaced, not a run with nothing in it).
SUMMARY_KEYS = ("regions", "kernels", "warnings")


def check_summary(summary, section_checks: dict) -> None:
    """`section_checks`: {summary key: spec} of the analysis sections (each names the checks of what it stores),
    handed in by the reader, so that this module never imports them."""
    check(summary, section_checks)
    check(summary, SUMMARY)
    for key in SUMMARY_KEYS:
        if key not in summary:
            raise Damaged(f"{key} is missing")


def check_steps(steps) -> None:
    """{"regions": [names], "rows": None or {column: [S]}}, every column as long as the others."""
    check(steps, {"regions": [str], "rows": (dict, None), "ranks": ({}, None)})
    for label, rank_rows in (steps.get("ranks") or {}).items():  # several ranks: each one's own steps
        check(
            rank_rows,
            {"index": [NUM], "start_ns": [NUM], "dur_ns": [NUM], "rollovers": [NUM]},
            f"ranks.{label}",
        )
        if len({len(v) for v in rank_rows.values()}) > 1:
            raise Damaged(f"ranks.{label}: its columns have different lengths")
    rows = steps["rows"]
    if rows is None:
        return
    for col in ("start_ns", "dur_ns", "rollovers", *(f"region:{r}" for r in steps["regions"])):
        if col not in rows:
            raise Damaged(f"rows.{col} is missing")
    lengths = set()
    for col, values in rows.items():
        check(values, [NUM], f"rows.{col}")
        lengths.add(len(values))
    if len(lengths) > 1:
        raise Damaged(f"its columns have different lengths ({', '.join(map(str, sorted(lengths)))})")


def check_itl(itl) -> None:
    check(itl, [ITL_ROW])
    for i, row in enumerate(itl):
        n = {len(row["t_ms"]), len(row["itl_ms"]), len(row["rollover"])} | (
            {len(row["step"])} if row.get("step") is not None else set()
        )
        if len(n) > 1:
            raise Damaged(f"[{i}] has series of different lengths")


def check_names(meta) -> None:
    """names.json (run/tables.py): the trace's names, domains, threads and processes."""
    check(
        meta,
        {
            "version": (int, None),
            "tool": ({"name": (str, None), "version": (str, None), "format": (str, None)}, None),
            "names": ([str], None),
            "domains": ([str], None),
            "threads": ({}, None),
            "processes": ([PROCESS], None),
            "thread_pids": ({}, None),
        },
    )
    if isinstance(meta.get("threads"), dict):
        for t, n in meta["threads"].items():
            check(n, str, f"threads.{t}")
    for t, p in (meta.get("thread_pids") or {}).items():
        check(p, int, f"thread_pids.{t}")


# names.json's processes (version 3): model.Process, field by field.
PROCESS = {"pid": int, "name": str, "rank": (int, None), "world_size": (int, None), "rank_from": (str, None)}


def check_telemetry(telemetry) -> None:
    check(telemetry, TELEMETRY)


def _is_count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def sound_manifest(raw) -> dict:
    """The manifest with every field the listing, resolver and dashboards use of the right type; anything
    malformed is replaced and named in "damaged" (and the status becomes "damaged")."""
    if not isinstance(raw, dict):
        return {"status": "damaged", "damaged": "manifest.json is not an object", "name": "?"}
    m = dict(raw)
    problems = []
    for key, spec, default in (
        ("name", str, "?"),
        ("created_utc", str, ""),
        ("status", str, "damaged"),
        ("message", (str, None), None),
        ("source", (str, None), None),
        ("command", ([str], None), None),
        ("tool", {"name": (str, None), "version": (str, None)}, {"name": "?"}),
        ("environment", (dict, None), None),
        ("gpus", ([dict], None), None),
    ):
        try:
            check(m.get(key), spec, key)
        except Damaged as e:
            problems.append(str(e))
            m[key] = default
    # only what orders runs of one second (store.created_order): a bad one is dropped, the run not damaged by it
    if not _is_count(m.get("created_ns")):
        m["created_ns"] = None
    if m.get("status") not in ("complete", "incomplete", "failed", "damaged"):
        problems.append(f"status {m.get('status')!r} is not one roseprof writes")
    if problems:
        m["status"] = "damaged"
        m["damaged"] = "manifest.json: " + "; ".join(problems)
    return m
