"""Read an Nsight Systems SQLite export into the run model: NVTX ranges and marks, GPU ops and the API calls
that launched them, threads, GPUs.

Both schema generations in tests/data (nsys 2022.4, export schema 3.0; nsys 2025.3, schema 3.20) are read
the same way; anything the reader does not know is refused with a one-line reason. Names follow `nsys stats`:
a range's name comes from `text` or, for registered strings, from StringIds through `textId`; the domain
from the NvtxDomainCreate event with the same domainId in the same process.
"""

from __future__ import annotations

import os
import sqlite3

import numpy as np

from roseprof.drivers.nsys.graphs import read_graph_nodes
from roseprof.errors import NothingRecorded, RoseprofError
from roseprof.model import GpuOps, Marks, Names, Ranges, Tool, Trace

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


def _fail(path: str, why: str) -> RoseprofError:
    return RoseprofError(f"{path}: {why}")


def open_sqlite(path: str, label: str | None = None) -> sqlite3.Connection:
    """Open read-only after checking the file really is an SQLite database (errors name `label`)."""
    label = label or path
    if not os.path.exists(path):
        raise _fail(label, "no such file")
    if os.path.isdir(path):
        raise _fail(label, "is a folder, not an nsys SQLite export")
    size = os.path.getsize(path)
    if size == 0:
        raise _fail(label, "is empty (0 bytes), not an nsys SQLite export")
    with open(path, "rb") as fh:
        if fh.read(16) != b"SQLite format 3\x00":
            raise _fail(label, "is not an SQLite database")
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        page_size, page_count = (
            conn.execute("PRAGMA page_size").fetchone()[0],
            conn.execute("PRAGMA page_count").fetchone()[0],
        )
    except sqlite3.DatabaseError as e:
        conn.close()
        raise _fail(label, f"is not a readable SQLite database ({e})") from None
    if page_size * page_count > size:
        conn.close()
        raise _fail(
            label,
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


def read_nsys_sqlite(path: str, label: str | None = None) -> Trace:
    """Read the export at `path`; errors name `label` (the user's file) when given."""
    label = label or path
    conn = open_sqlite(path, label)
    try:
        return _read(conn, label)
    except sqlite3.DatabaseError as e:
        raise _fail(label, f"could not be read as an nsys export ({e})") from None
    finally:
        conn.close()


def _read(conn: sqlite3.Connection, path: str) -> Trace:
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
        raise NothingRecorded(
            f"{path}: has neither NVTX_EVENTS nor CUPTI_ACTIVITY_KIND_KERNEL: nothing to analyse "
            "(capture with -t nvtx or -t cuda)"
        )
    if has_nvtx:
        need = {"start", "end", "eventType", "text", "textId", "globalTid", "domainId"}
        missing = need - _columns(conn, "NVTX_EVENTS")
        if missing:
            raise _fail(
                path,
                f"NVTX_EVENTS lacks column(s) {', '.join(sorted(missing))}: unknown nsys schema {schema}",
            )

    names = Names()
    domains = [""]
    if has_nvtx:
        range_rows, mark_rows, domains = _read_nvtx(conn)
    else:
        range_rows, mark_rows = [], []
    r = list(zip(*range_rows)) if range_rows else [[]] * 6
    ranges = Ranges(
        start=_array(r[0]),
        end=_array(r[1]),
        name=names.intern_many(r[2]),
        domain=_array(r[3]),
        tid=_array(r[4]),
        style=_array(r[5]),
    ).sort()
    ops = _read_gpu_ops(conn, tables, names)
    m = list(zip(*mark_rows)) if mark_rows else [[], [], []]
    marks = Marks(ts=_array(m[0]), name=names.intern_many(m[1]), tid=_array(m[2]))
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
    return Trace(
        graph_nodes=read_graph_nodes(conn, tables, _columns),
        tool=Tool("nsys", meta.get("EXPORT_PRODUCT_VERSION", "?"), schema),
        names=names,
        domains=domains,
        ranges=ranges,
        marks=marks,
        ops=ops,
        threads=threads,
        gpus=_read_gpus(conn, tables),
        session_start_utc_ns=session,
    )


def _read_nvtx(conn: sqlite3.Connection):
    """Ranges as (start, end, name, domain index, tid, style) and marks as (ts, name, tid)."""
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
        f"""SELECT e.start, coalesce(s.value, e.text), coalesce(e.globalTid, 0)
            FROM NVTX_EVENTS e LEFT JOIN StringIds s ON e.textId = s.id
            WHERE e.eventType = {NVTX_MARK} ORDER BY e.start"""
    ).fetchall()
    return ranges, marks, domains


def _fetch_columns(conn: sqlite3.Connection, sql: str, ncols: int) -> np.ndarray:
    """An integer query result as a [rows, ncols] array (NULL -> -1), without a Python object per value."""
    rows = conn.execute(sql).fetchall()
    if not rows:
        return np.zeros((0, ncols), dtype=np.int64)
    return np.array(rows, dtype=np.int64).reshape(-1, ncols)


def _read_gpu_ops(conn: sqlite3.Connection, tables: set[str], names: Names) -> GpuOps:
    """Kernels, memcpys and memsets, each joined to its CUDA API call through (process, correlationId)."""
    parts, corr_sources = [], []
    for kind, (label, table) in enumerate(GPU_OP_TABLES.items()):
        if table not in tables:
            continue
        cols = _columns(conn, table)
        if label == "kernel":
            name_col = "demangledName" if "demangledName" in cols else "shortName"
            name_expr = f"coalesce({name_col}, -1)"
        else:
            name_expr = "-1"
        optional = [
            f"coalesce({c}, -1)" if c in cols else "-1" for c in ("deviceId", "streamId", "graphNodeId")
        ]
        arr = _fetch_columns(
            conn,
            f"SELECT start, end, {name_expr}, coalesce(correlationId, -1), coalesce(globalPid, -1), {kind}, "
            f"{', '.join(optional)} FROM {table}",
            9,
        )
        if len(arr):
            parts.append(arr)
            corr_sources.append(f"SELECT correlationId FROM {table}")
    ops = np.concatenate(parts) if parts else np.zeros((0, 9), dtype=np.int64)
    op_start, op_end, op_name_sid, op_corr, op_pid, op_kind, device, stream, graph_node = (
        ops[:, i] for i in range(9)
    )
    # Kernel names: look up each distinct StringIds id once; copies and sets get a fixed label.
    op_name = np.zeros(len(ops), dtype=np.int64)
    strings: dict[int, str] = {}
    if len(ops):
        is_kernel = op_kind == 0
        sids, inverse = np.unique(op_name_sid[is_kernel], return_inverse=True)
        strings = dict(conn.execute("SELECT id, value FROM StringIds").fetchall())
        op_name[is_kernel] = names.intern_many(
            [strings.get(int(i), f"[unknown kernel {int(i)}]") for i in sids]
        )[inverse]
        for kind, label in ((1, "[CUDA memcpy]"), (2, "[CUDA memset]")):
            op_name[op_kind == kind] = names.intern(label)
    api_start = np.full(len(ops), -1, dtype=np.int64)
    api_end = api_start.copy()
    api_tid = api_start.copy()
    api_sid = api_start.copy()
    if len(ops) and "CUPTI_ACTIVITY_KIND_RUNTIME" in tables:
        has_name = "nameId" in _columns(conn, "CUPTI_ACTIVITY_KIND_RUNTIME")
        # Only the API calls that launched GPU work (most calls launch none).
        rt = _fetch_columns(
            conn,
            f"SELECT correlationId, globalTid, start, end, {'coalesce(nameId, -1)' if has_name else '-1'} "
            "FROM CUPTI_ACTIVITY_KIND_RUNTIME "
            f"WHERE correlationId IN ({' UNION ALL '.join(corr_sources)})",
            5,
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
            api_sid[dst] = rt[src, 4]
    # Launching calls' names (cudaLaunchKernel, cudaGraphLaunch, ...), interned after the ops' own names.
    api_name = np.full(len(ops), -1, dtype=np.int64)
    known = api_sid >= 0
    if known.any():
        sids, inverse = np.unique(api_sid[known], return_inverse=True)
        api_name[known] = names.intern_many([strings.get(int(i), "?") for i in sids])[inverse]
    order = np.argsort(op_start, kind="stable")
    return GpuOps(
        kind=op_kind[order],
        start=op_start[order],
        end=op_end[order],
        name=op_name[order],
        device=device[order],
        stream=stream[order],
        graph_node=graph_node[order],
        api_start=api_start[order],
        api_end=api_end[order],
        api_tid=api_tid[order],
        api_name=api_name[order],
    )


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
