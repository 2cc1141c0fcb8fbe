"""The shapes of a run folder's JSON files, checked when they are read back, so that a damaged run (a truncated
or hand-edited summary.json, steps of mismatched lengths, a manifest whose status is not text) is named as
damaged in one line instead of failing deep inside a renderer.

A spec is a type (int, float, str, bool, NUM), a tuple of allowed specs, a dict of {key: spec} (listed keys are
required unless their spec allows None; extra keys are allowed), or a one-element list [item spec]. NUM is a
finite number; bools are never numbers here.
"""

from __future__ import annotations

import math

NUM = "number"
OPT_NUM = (NUM, None)
# No number roseprof writes comes near this (2^62 ns is 146 years; FLOP rates are ~1e16): a p50 of 1e308 is a
# hand edit or damage, and would turn every delta computed from it into inf or NaN.
NUM_LIMIT = float(1 << 62)


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
    if isinstance(spec, list):
        if not isinstance(value, list):
            raise Damaged(f"{where or 'the file'} is not a list")
        for i, item in enumerate(value):
            check(item, spec[0], f"{where}[{i}]")
        return
    if spec == NUM:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        if not ok:
            raise Damaged(f"{where} is not a number")
        if abs(value) > NUM_LIMIT:
            raise Damaged(f"{where} is {value:g}, beyond any time, count or rate roseprof writes")
        return
    if spec is int and (isinstance(value, bool) or not isinstance(value, int)):
        raise Damaged(f"{where} is not an integer")
    if not isinstance(value, spec):
        raise Damaged(f"{where} is not {'text' if spec is str else spec.__name__}")


def _allows_none(spec) -> bool:
    return spec is None or (isinstance(spec, tuple) and any(_allows_none(s) for s in spec))


NS_STATS = {"count": int, "p50_ns": OPT_NUM, "p99_ns": OPT_NUM}
MS_STATS = {"count": int, "p50_ms": OPT_NUM, "p95_ms": OPT_NUM, "p99_ms": OPT_NUM}
SUMMARY = {
    "regions": (
        [
            {
                "name": str,
                "domain": str,
                "count": int,
                "total_ns": NUM,
                "self_ns": NUM,
                "gpu_proj_ns": OPT_NUM,
                "gpu_kernel_ns": OPT_NUM,
                "p50_ns": OPT_NUM,
                "p99_ns": OPT_NUM,
            }
        ],
        None,
    ),
    "kernels": (
        [{"name": str, "count": int, "total_ns": NUM, "p50_ns": OPT_NUM, "region": (str, None)}],
        None,
    ),
    "steps": (
        {
            **NS_STATS,
            "rollover": {**NS_STATS, "regions": (dict, None)},
            "normal": {**NS_STATS, "regions": (dict, None)},
            "rollover_excess": ({"region": str, "mean_ns": NUM}, None),
        },
        None,
    ),
    "itl": ({**MS_STATS, "at_rollover": MS_STATS, "elsewhere": MS_STATS}, None),
    "requests": (
        {"count": int, "completion_tokens": int, "throughput_tok_s": NUM, "ttft": MS_STATS, "tpot": MS_STATS},
        None,
    ),
    "warnings": ([str], None),
    "gpus": ([dict], None),
    "marks": ([{"name": str, "count": int}], None),
}
ITL_ROW = {"t_ms": [NUM], "itl_ms": [NUM], "rollover": [bool], "step": ([int], None)}
TELEMETRY = {"interval_s": NUM, "samples": [dict]}


# {summary key: spec} of the analysis sections (analysis/sections/: each names the checks of what it stores),
# handed over when the analyses are imported, so that this module never imports them.
SECTION_CHECKS: dict = {}

# Written into every summary (an empty object is a summary.json cut or replaced, not a run with nothing in it).
SUMMARY_KEYS = ("regions", "kernels", "warnings")


def check_summary(summary) -> None:
    check(summary, SUMMARY)
    check(summary, dict(SECTION_CHECKS))
    for key in SUMMARY_KEYS:
        if key not in summary:
            raise Damaged(f"{key} is missing")
    steps = summary.get("steps")
    if steps:
        for group in ("rollover", "normal"):
            for name, v in (steps[group].get("regions") or {}).items():
                check(v, OPT_NUM, f"steps.{group}.regions.{name}")


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


def check_telemetry(telemetry) -> None:
    check(telemetry, TELEMETRY)


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
    if m.get("status") not in ("complete", "incomplete", "failed", "damaged"):
        problems.append(f"status {m.get('status')!r} is not one roseprof writes")
    if problems:
        m["status"] = "damaged"
        m["damaged"] = "manifest.json: " + "; ".join(problems)
    return m
