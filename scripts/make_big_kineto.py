"""A large Kineto trace from a real one: its events repeated with shifted timestamps and ids (for benchmarks).

Usage: python scripts/make_big_kineto.py SRC.json[.gz] OUT.json --copies N [--rank R --world-size W]

--rank / --world-size write the file as rank R of a world of W (distributedInfo: rank, world size and the default
process group's ranks), so that a folder of such files is W ranks to roseprof and to Holistic Trace Analysis alike
(HTA takes a file's rank from the first `"rank"` in its text, which is distributedInfo's).

Each copy moves every timestamp by the source's span (plus a gap), and correlation / External ids and flow
ids by the largest id of the source, so launches and kernels still join one to one. Written copy by copy:
the output is never held in memory. Each event is turned into JSON once, as a template with holes where its
shifted numbers go; a copy only formats those numbers (a 2.4 GB trace in minutes, not an hour of json.dumps
per event), and the bytes are the ones json.dumps of each shifted event would write.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math

HOLE = "\x00hole\x00"  # a string no trace holds; json.dumps writes it as "\u0000hole\u0000"
HOLE_JSON = json.dumps(HOLE)


def _number(v) -> str:
    """What json.dumps writes for the int or float `v` (repr for finite floats, as json does)."""
    if type(v) is int or (type(v) is float and math.isfinite(v)):
        return repr(v)
    return json.dumps(v)


def _template(e: dict) -> tuple[list[str], list[str]]:
    """(the event's JSON cut at its holes, which value goes in each hole: 'ts', 'id' or 'correlation')."""
    e2, holes = dict(e), []
    if isinstance(e2.get("ts"), (int, float)) and e2.get("ph") != "M":
        e2["ts"], holes = HOLE, [*holes, "ts"]
    if isinstance(e2.get("id"), int):
        e2["id"], holes = HOLE, [*holes, "id"]
    args = e2.get("args")
    if isinstance(args, dict) and "correlation" in args:
        e2["args"], holes = {**args, "correlation": HOLE}, [*holes, "correlation"]
    parts = json.dumps(e2).split(HOLE_JSON)
    # json.dumps writes the keys in the dict's order; the holes come in that order, not in the order found above
    order = sorted(holes, key=lambda h: _offset(e2, h))
    return parts, order


def _offset(e2: dict, hole: str) -> int:
    """Where the hole for `hole` sits in the event's JSON (top-level key order, args where args sits)."""
    keys = list(e2)
    return keys.index("args") if hole == "correlation" else keys.index(hole)


def _copy_template(events: list[dict], first: bool) -> tuple[str, list, list[bool]]:
    """(one copy's JSON text as a %-template, each hole's source value, whether it is a timestamp)."""
    texts, values, is_ts = [], [], []
    for e in events:
        if e.get("ph") == "M" and not first:
            continue
        parts, holes = _template(e)
        texts.append("%s".join(p.replace("%", "%%") for p in parts))
        for hole in holes:
            values.append(e["args"]["correlation"] if hole == "correlation" else e[hole])
            is_ts.append(hole == "ts")
    return ",\n".join(texts), values, is_ts


def _set_rank(doc: dict, rank: int, world: int) -> None:
    """The trace as rank `rank` of `world`: its distributedInfo says so, its default process group spans them all."""
    info = dict(doc.get("distributedInfo") or {})
    info["rank"], info["world_size"] = rank, world
    for pg in info.get("pg_config") or []:
        if isinstance(pg, dict):
            pg["pg_size"], pg["ranks"] = world, list(range(world))
    doc["distributedInfo"] = info


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("src")
    ap.add_argument("out")
    ap.add_argument("--copies", type=int, default=20)
    ap.add_argument("--rank", type=int, default=None)
    ap.add_argument("--world-size", type=int, default=None)
    a = ap.parse_args()
    opener = gzip.open if a.src.endswith(".gz") else open
    with opener(a.src, "rb") as fh:
        doc = json.load(fh)
    events = doc.pop("traceEvents")
    if a.rank is not None:
        _set_rank(doc, a.rank, a.world_size or a.rank + 1)
    timed = [e for e in events if isinstance(e.get("ts"), (int, float)) and e.get("ph") != "M"]
    t0 = min(e["ts"] for e in timed)
    span = max(e["ts"] + e.get("dur", 0) for e in timed) - t0 + 1000.0
    ids = [e["id"] for e in events if isinstance(e.get("id"), int)]
    ids += [e["args"].get("correlation", 0) for e in events if isinstance(e.get("args"), dict)]
    id_step = max(i for i in ids if isinstance(i, int)) + 1
    # One %-template per copy's text (the first copy keeps the metadata events, later copies drop them), and
    # each hole's source value and kind, in text order: a copy is one list of numbers and one % call.
    firsts, laters = _copy_template(events, first=True), _copy_template(events, first=False)
    with open(a.out, "w", encoding="utf-8") as out:
        out.write(json.dumps(doc)[:-1] + ', "traceEvents": [\n')
        for k in range(a.copies):
            text, values, is_ts = firsts if k == 0 else laters
            shift, id_shift = k * span, k * id_step
            numbers = tuple(
                _number(round(v + shift, 3)) if ts else _number(v + id_shift) for v, ts in zip(values, is_ts)
            )
            out.write(("" if k == 0 else ",\n") + text % numbers)
        out.write("\n]}\n")


if __name__ == "__main__":
    main()
