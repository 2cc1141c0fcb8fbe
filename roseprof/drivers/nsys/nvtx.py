"""NVTX ranges and marks of an Nsight Systems SQLite export (reader.py reads the rest): names as `nsys stats` gives
them (from `text`, or from StringIds through `textId` for registered strings), the domain from the
NvtxDomainCreate event with the same domainId in the same process, and a range with no end (never popped) running
to the capture's last timestamp."""

from __future__ import annotations

import numpy as np

from roseprof.drivers.nsys.sqlite import Export, clean_name, fail, quote
from roseprof.model import Marks, Names, Ranges

NVTX_MARK = 34
NVTX_PUSHPOP = 59
NVTX_STARTEND = 60
NVTXT_PUSHPOP = 70
NVTXT_STARTEND = 71
NVTX_DOMAIN_CREATE = 75
RANGE_TYPES = f"{NVTX_PUSHPOP}, {NVTX_STARTEND}, {NVTXT_PUSHPOP}, {NVTXT_STARTEND}"


def _optional(cols: set[str], name: str, default: str = "NULL", expr: str | None = None) -> str:
    return (expr or quote(name)) if name in cols else default


def read_nvtx(db: Export, names: Names, schema: str) -> tuple[Ranges, Marks, list[str]]:
    cols = db.columns("NVTX_EVENTS")
    missing = {"start", "end", "eventType"} - cols
    if missing:
        raise fail(
            db.label,
            f"NVTX_EVENTS lacks column(s) {', '.join(sorted(missing))}: unknown nsys schema {schema}",
        )
    db.check_integers(
        "NVTX_EVENTS", ["start", "eventType"], [c for c in ("end", "globalTid", "domainId") if c in cols]
    )
    tid = _optional(cols, "globalTid", "0", "coalesce(e.globalTid, 0)")
    dom = _optional(cols, "domainId", "0", "coalesce(e.domainId, 0)")
    pid_bits = f"({tid}) & 0x0000FFFFFF000000"
    text = _optional(cols, "text", "NULL", "e.text")
    if "textId" in cols:
        name_expr = f"coalesce(s.value, {text})"
        join = "LEFT JOIN StringIds s ON e.textId = s.id"
    else:
        name_expr, join = text, ""
    # Domains are per process: (domainId, pid bits of globalTid) -> name, as nsys stats joins them.
    domains = [""]
    domain_of: dict[tuple[int, int], int] = {}
    for dom_id, bits, name in db.query(
        f"SELECT {dom}, {pid_bits}, {text} FROM NVTX_EVENTS e WHERE e.eventType = {NVTX_DOMAIN_CREATE}"
    ):
        if name is None:
            continue
        name = clean_name(name)
        if name not in domains:
            domains.append(name)
        domain_of[(dom_id, bits)] = domains.index(name)
    # Incomplete ranges (no end) run to the last timestamp of the capture, as in `nsys stats`.
    max_ts = db.query("SELECT max(max(start), max(coalesce(end, start))) FROM NVTX_EVENTS")[0][0] or 0
    # A range named by a registered string comes with its StringIds id (and no text): its name is looked up once
    # per distinct id, not made and interned once per range. The others (-1) bring their text.
    if "textId" in cols:
        sid_expr = "CASE WHEN s.value IS NOT NULL THEN s.id ELSE -1 END"
        text_expr = f"CASE WHEN s.value IS NULL THEN {text} END"
    else:
        sid_expr, text_expr = "-1", text
    ints = f"e.start, coalesce(e.end, {int(max_ts)}), {dom}, {pid_bits}, {tid}, e.eventType, {sid_expr}"
    source = f"FROM NVTX_EVENTS e {join} WHERE e.eventType IN ({RANGE_TYPES})"
    # Columnar where every range is named by a registered string (no text to read; 0.6 s of CPU less on the
    # 1M-kernel export, whose 232k ranges are all so named); else, or where a value is off, row-wise as before.
    nums, rows = db.int_query(f"SELECT {ints} {source}", 7, "NVTX_EVENTS"), []
    if nums is None or (nums[:, 6] < 0).any():
        rows = db.query(f"SELECT {ints}, {text_expr} {source}")
        nums = db.to_ints([r[:7] for r in rows], 7, "NVTX_EVENTS")
    start, end, dom_ids, bits, tids, etype, sid = (nums[:, i] for i in range(7))
    if (end < start).any():
        raise fail(db.label, "NVTX_EVENTS holds a range that ends before it starts: a damaged export")
    domain = np.zeros(len(start), dtype=np.int64)  # domain 0 (none) where its domainId is 0 or never created
    for (d, b), index in domain_of.items():  # a pass a created domain (a few), not a Python step a range
        if d:
            domain[(dom_ids == d) & (bits == b)] = index
    ranges = Ranges(
        start=start,
        end=end,
        name=_range_names(db, names, sid, rows),
        domain=domain,
        tid=tids,
        style=np.where((etype == NVTX_PUSHPOP) | (etype == NVTXT_PUSHPOP), 0, 1).astype(np.int64),
    ).sort()
    mark_rows = db.query(
        f"SELECT e.start, {tid}, {name_expr} FROM NVTX_EVENTS e {join} WHERE e.eventType = {NVTX_MARK}"
    )
    mark_nums = db.to_ints([r[:2] for r in mark_rows], 2, "NVTX_EVENTS")
    order = np.argsort(mark_nums[:, 0], kind="stable")
    mark_names = names.intern_many([clean_name(r[2]) for r in mark_rows])
    marks = Marks(ts=mark_nums[order, 0], name=mark_names[order], tid=mark_nums[order, 1])
    return ranges, marks, domains


def _range_names(db: Export, names: Names, sid: np.ndarray, rows: list) -> np.ndarray:
    """[R] each range's interned name, interned in the order the ranges first use them (as one by one would)."""
    if not len(sid) or (sid < 0).any():
        strings = dict(db.query("SELECT id, value FROM StringIds")) if (sid >= 0).any() else {}
        return names.intern_many(
            [clean_name(strings[i] if i >= 0 else r[7]) for i, r in zip(sid.tolist(), rows)]
        )
    ids, first, inverse = np.unique(sid, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")
    where = f" WHERE id IN ({', '.join(map(str, ids.tolist()))})" if len(ids) <= 10_000 else ""
    values = dict(db.query(f"SELECT id, value FROM StringIds{where}"))
    interned = np.empty(len(ids), dtype=np.int64)
    interned[order] = names.intern_many([clean_name(values[int(i)]) for i in ids[order]])
    return interned[inverse.ravel()]
