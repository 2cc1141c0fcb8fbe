"""Read an Nsight Systems SQLite export into numpy columns: NVTX ranges and marks, GPU ops, API calls.

Both schema generations in tests/data (nsys 2022.4, export schema 3.0; nsys 2025.3, schema 3.20) are read
the same way; anything the reader does not know is refused with a one-line reason. Names follow `nsys stats`:
a range's name comes from `text` or, for registered strings, from StringIds through `textId`; the domain
from the NvtxDomainCreate event with the same domainId in the same process.
"""

from __future__ import annotations

import os
import sqlite3
from dataclasses import dataclass, field

import numpy as np

from roseprof.errors import RoseprofError

# ENUM_NSYS_EVENT_TYPE ids (stable across the schema versions we read).
NVTX_MARK = 34
NVTX_PUSHPOP = 59
NVTX_STARTEND = 60
NVTXT_PUSHPOP = 70
NVTXT_STARTEND = 71
NVTX_DOMAIN_CREATE = 75
SUPPORTED_SCHEMA_MAJOR = 3

GPU_OP_TABLES = {
    "kernel": "CUPTI_ACTIVITY_KIND_KERNEL",
    "memcpy": "CUPTI_ACTIVITY_KIND_MEMCPY",
    "memset": "CUPTI_ACTIVITY_KIND_MEMSET",
}


@dataclass
class NsysTrace:
    """Columns of one capture. Ranges are sorted by (thread, start, end descending)."""

    tool_version: str
    schema_version: str
    names: list[str]  # range and kernel names, indexed by the *_name columns
    domains: list[str]  # domain names, "" for the default domain
    # NVTX ranges [R]
    range_start: np.ndarray
    range_end: np.ndarray
    range_name: np.ndarray
    range_domain: np.ndarray
    range_tid: np.ndarray
    range_style: np.ndarray  # 0 PushPop, 1 StartEnd
    # NVTX marks [M]
    mark_ts: np.ndarray
    mark_name: np.ndarray
    # GPU operations [G] joined to their launching API call (api_* = -1 where no call was found)
    op_kind: np.ndarray  # 0 kernel, 1 memcpy, 2 memset
    op_start: np.ndarray
    op_end: np.ndarray
    op_name: np.ndarray  # kernels: demangled name; copies/sets: a fixed label
    api_start: np.ndarray
    api_end: np.ndarray
    api_tid: np.ndarray
    gpus: list[dict] = field(default_factory=list)
    threads: dict[int, str] = field(default_factory=dict)
    session_start_utc_ns: int | None = None

    @property
    def has_gpu(self) -> bool:
        return len(self.op_start) > 0


def _fail(path: str, why: str) -> RoseprofError:
    return RoseprofError(f"{path}: {why}")


def open_sqlite(path: str) -> sqlite3.Connection:
    """Open read-only after checking the file really is an SQLite database."""
    if not os.path.exists(path):
        raise _fail(path, "no such file")
    if os.path.isdir(path):
        raise _fail(path, "is a folder, not an nsys SQLite export")
    size = os.path.getsize(path)
    if size == 0:
        raise _fail(path, "is empty (0 bytes), not an nsys SQLite export")
    with open(path, "rb") as fh:
        if fh.read(16) != b"SQLite format 3\x00":
            raise _fail(path, "is not an SQLite database")
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        page_size, page_count = (
            conn.execute("PRAGMA page_size").fetchone()[0],
            conn.execute("PRAGMA page_count").fetchone()[0],
        )
    except sqlite3.DatabaseError as e:
        conn.close()
        raise _fail(path, f"is not a readable SQLite database ({e})") from None
    if page_size * page_count > size:
        conn.close()
        raise _fail(
            path,
            f"is truncated: the database header says {page_size * page_count} bytes, the file has {size}",
        )
    return conn


def _tables(conn: sqlite3.Connection) -> set[str]:
    return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}


def _columns(conn: sqlite3.Connection, table: str) -> set[str]:
    return {r[1] for r in conn.execute(f"PRAGMA table_info({table})")}


def _export_meta(conn: sqlite3.Connection, tables: set[str]) -> dict[str, str]:
    for table in ("META_DATA_EXPORT", "EXPORT_META_DATA"):  # 2025.x name, 2022.x name
        if table in tables:
            return dict(conn.execute(f"SELECT name, value FROM {table}").fetchall())
    return {}


def _array(rows, dtype=np.int64) -> np.ndarray:
    return np.asarray(rows, dtype=dtype) if rows else np.zeros(0, dtype=dtype)


def read_nsys_sqlite(path: str) -> NsysTrace:
    conn = open_sqlite(path)
    try:
        return _read(conn, path)
    except sqlite3.DatabaseError as e:
        raise _fail(path, f"could not be read as an nsys export ({e})") from None
    finally:
        conn.close()


def _read(conn: sqlite3.Connection, path: str) -> NsysTrace:
    tables = _tables(conn)
    meta = _export_meta(conn, tables)
    if not meta:
        raise _fail(
            path, "has no nsys export metadata (META_DATA_EXPORT / EXPORT_META_DATA): not an nsys export"
        )
    schema = meta.get("EXPORT_SCHEMA_VERSION", "?")
    major = meta.get("EXPORT_SCHEMA_VERSION_MAJOR", schema.split(".")[0])
    if str(major) != str(SUPPORTED_SCHEMA_MAJOR):
        raise _fail(
            path,
            f"nsys export schema {schema} is not supported (this reader knows schema {SUPPORTED_SCHEMA_MAJOR}.x)",
        )
    if "StringIds" not in tables:
        raise _fail(path, "has no StringIds table: an incomplete nsys export")
    has_nvtx = "NVTX_EVENTS" in tables
    has_kernels = GPU_OP_TABLES["kernel"] in tables
    if not has_nvtx and not has_kernels:
        raise _fail(
            path,
            "has neither NVTX_EVENTS nor CUPTI_ACTIVITY_KIND_KERNEL: nothing to analyse (capture with -t nvtx or -t cuda)",
        )
    if has_nvtx:
        need = {"start", "end", "eventType", "text", "textId", "globalTid", "domainId"}
        missing = need - _columns(conn, "NVTX_EVENTS")
        if missing:
            raise _fail(
                path,
                f"NVTX_EVENTS lacks column(s) {', '.join(sorted(missing))}: unknown nsys schema {schema}",
            )

    names: list[str] = []
    name_index: dict[str, int] = {}

    def intern(values) -> np.ndarray:
        out = np.empty(len(values), dtype=np.int64)
        for i, v in enumerate(values):
            v = "" if v is None else v
            j = name_index.get(v)
            if j is None:
                j = name_index[v] = len(names)
                names.append(v)
            out[i] = j
        return out

    domains = [""]
    if has_nvtx:
        ranges, marks, domains = _read_nvtx(conn)
    else:
        ranges, marks = [], []
    r = list(zip(*ranges)) if ranges else [[]] * 6
    order_cols = (
        _array(r[0]),
        _array(r[1]),
        intern(r[2]) if ranges else _array([]),
        _array(r[3]),
        _array(r[4]),
        _array(r[5]),
    )
    start, end, name, dom, tid, style = order_cols
    order = np.lexsort(
        (-end, start, tid)
    )  # by thread, then start, then longest first (parents before children)
    m = list(zip(*marks)) if marks else [[], []]

    ops = _read_gpu_ops(conn, tables, intern)
    gpus = _read_gpus(conn, tables)
    threads = {}
    if "ThreadNames" in tables:
        for name_id, gtid in conn.execute(
            "SELECT s.value, t.globalTid FROM ThreadNames t JOIN StringIds s ON t.nameId = s.id"
        ).fetchall():
            threads[int(gtid)] = name_id
    session = None
    if "TARGET_INFO_SESSION_START_TIME" in tables and "utcEpochNs" in _columns(
        conn, "TARGET_INFO_SESSION_START_TIME"
    ):
        row = conn.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME").fetchone()
        session = int(row[0]) if row and row[0] is not None else None
    return NsysTrace(
        tool_version=meta.get("EXPORT_PRODUCT_VERSION", "?"),
        schema_version=schema,
        names=names,
        domains=domains,
        range_start=start[order],
        range_end=end[order],
        range_name=name[order],
        range_domain=dom[order],
        range_tid=tid[order],
        range_style=style[order],
        mark_ts=_array(m[0]),
        mark_name=intern(m[1]) if marks else _array([]),
        gpus=gpus,
        threads=threads,
        session_start_utc_ns=session,
        **ops,
    )


def _read_nvtx(conn: sqlite3.Connection):
    """Ranges as (start, end, name, domain index, tid, style) and marks as (ts, name)."""
    # Domains are per process: (domainId, pid bits of globalTid) -> name, as nsys stats joins them.
    domain_rows = conn.execute(
        f"SELECT domainId, globalTid & 0x0000FFFFFF000000, text FROM NVTX_EVENTS WHERE eventType = {NVTX_DOMAIN_CREATE}"
    ).fetchall()
    domains = [""]
    domain_of: dict[tuple[int, int], int] = {}
    for dom_id, pid_bits, text in domain_rows:
        if text is None:
            continue
        if text not in domains:
            domains.append(text)
        domain_of[(dom_id, pid_bits)] = domains.index(text)
    # Incomplete ranges (no end) run to the last timestamp of the capture, as in `nsys stats`.
    max_ts = (
        conn.execute("SELECT max(max(start), max(coalesce(end, start))) FROM NVTX_EVENTS").fetchone()[0] or 0
    )
    rows = conn.execute(
        f"""SELECT e.start, coalesce(e.end, {int(max_ts)}), coalesce(s.value, e.text), e.domainId,
                   e.globalTid & 0x0000FFFFFF000000, e.globalTid, e.eventType
            FROM NVTX_EVENTS e LEFT JOIN StringIds s ON e.textId = s.id
            WHERE e.eventType IN ({NVTX_PUSHPOP}, {NVTX_STARTEND}, {NVTXT_PUSHPOP}, {NVTXT_STARTEND})"""
    ).fetchall()
    ranges = [
        (
            start,
            end,
            text,
            domain_of.get((dom, pid_bits), 0) if dom else 0,
            gtid or 0,
            0 if etype in (NVTX_PUSHPOP, NVTXT_PUSHPOP) else 1,
        )
        for start, end, text, dom, pid_bits, gtid, etype in rows
    ]
    marks = conn.execute(
        f"""SELECT e.start, coalesce(s.value, e.text) FROM NVTX_EVENTS e LEFT JOIN StringIds s ON e.textId = s.id
            WHERE e.eventType = {NVTX_MARK} ORDER BY e.start"""
    ).fetchall()
    return ranges, marks, domains


def _fetch_columns(conn: sqlite3.Connection, sql: str, ncols: int) -> np.ndarray:
    """An integer query result as a [rows, ncols] array (NULL -> -1), without a Python object per value."""
    rows = conn.execute(sql).fetchall()
    if not rows:
        return np.zeros((0, ncols), dtype=np.int64)
    return np.array(rows, dtype=np.int64).reshape(-1, ncols)


def _read_gpu_ops(conn: sqlite3.Connection, tables: set[str], intern) -> dict[str, np.ndarray]:
    """Kernels, memcpys and memsets, each joined to its CUDA API call through (process, correlationId)."""
    parts, corr_sources = [], []
    for kind, (label, table) in enumerate(GPU_OP_TABLES.items()):
        if table not in tables:
            continue
        if label == "kernel":
            cols = _columns(conn, table)
            name_col = "demangledName" if "demangledName" in cols else "shortName"
            name_expr = f"coalesce({name_col}, -1)"
        else:
            name_expr = "-1"
        arr = _fetch_columns(
            conn,
            f"SELECT start, end, {name_expr}, coalesce(correlationId, -1), coalesce(globalPid, -1), {kind} FROM {table}",
            6,
        )
        if len(arr):
            parts.append(arr)
            corr_sources.append(f"SELECT correlationId FROM {table}")
    ops = np.concatenate(parts) if parts else np.zeros((0, 6), dtype=np.int64)
    op_start, op_end, op_name_sid, op_corr, op_pid, op_kind = (ops[:, i] for i in range(6))
    # Kernel names: look up each distinct StringIds id once; copies and sets get a fixed label.
    op_name = np.zeros(len(ops), dtype=np.int64)
    if len(ops):
        is_kernel = op_kind == 0
        sids, inverse = np.unique(op_name_sid[is_kernel], return_inverse=True)
        strings = dict(conn.execute("SELECT id, value FROM StringIds").fetchall()) if len(sids) else {}
        op_name[is_kernel] = intern([strings.get(int(i), f"[unknown kernel {int(i)}]") for i in sids])[
            inverse
        ]
        for kind, label in ((1, "[CUDA memcpy]"), (2, "[CUDA memset]")):
            op_name[op_kind == kind] = intern([label])[0]
    api_start = np.full(len(ops), -1, dtype=np.int64)
    api_end = api_start.copy()
    api_tid = api_start.copy()
    if len(ops) and "CUPTI_ACTIVITY_KIND_RUNTIME" in tables:
        # Only the API calls that launched GPU work (most calls launch none).
        rt = _fetch_columns(
            conn,
            "SELECT correlationId, globalTid, start, end FROM CUPTI_ACTIVITY_KIND_RUNTIME "
            f"WHERE correlationId IN ({' UNION ALL '.join(corr_sources)})",
            4,
        )
        rt_pid = rt[:, 1] & np.int64(-(1 << 24))  # globalTid without the thread bits = the op's globalPid
        for pid in np.unique(op_pid):
            ops_i = np.flatnonzero(op_pid == pid)
            rt_i = np.flatnonzero(rt_pid == pid)
            if len(rt_i) == 0:
                continue
            corr_sorted = rt_i[np.argsort(rt[rt_i, 0], kind="stable")]
            keys = rt[corr_sorted, 0]
            pos = np.searchsorted(keys, op_corr[ops_i])
            pos_ok = np.minimum(pos, len(keys) - 1)
            hit = (pos < len(keys)) & (keys[pos_ok] == op_corr[ops_i])
            src = corr_sorted[pos_ok[hit]]
            dst = ops_i[hit]
            api_tid[dst], api_start[dst], api_end[dst] = rt[src, 1], rt[src, 2], rt[src, 3]
    order = np.argsort(op_start, kind="stable")
    return {
        "op_kind": op_kind[order],
        "op_start": op_start[order],
        "op_end": op_end[order],
        "op_name": op_name[order],
        "api_start": api_start[order],
        "api_end": api_end[order],
        "api_tid": api_tid[order],
    }


def _read_gpus(conn: sqlite3.Connection, tables: set[str]) -> list[dict]:
    if "TARGET_INFO_GPU" not in tables:
        return []
    cols = _columns(conn, "TARGET_INFO_GPU")
    want = [
        c
        for c in ("id", "name", "busLocation", "totalMemory", "smCount", "chipName", "clockRate")
        if c in cols
    ]
    if not want:
        return []
    rows = conn.execute(f"SELECT {', '.join(want)} FROM TARGET_INFO_GPU").fetchall()
    return [dict(zip(want, row)) for row in rows]
