"""Read an Nsight Systems SQLite export into the run model: NVTX ranges and marks, GPU ops and the API calls
that launched them, threads, GPUs.

Every export `nsys stats` 2022.4 reads is read the same way (schema 2.9 from nsys 2022.2, 3.x up to 3.25 from
nsys 2026.2, and exports with no metadata table at all): columns are looked up, not assumed from the schema
version, and a file that lacks one this reader needs is refused with a one-line reason. Names follow
`nsys stats`: a range's name comes from `text` or, for registered strings, from StringIds through `textId`;
the domain from the NvtxDomainCreate event with the same domainId in the same process.

Damage is refused, not guessed around (sqlite.py): a NULL, text, blob or real where nsys writes an integer,
a range or GPU op that ends before it starts. An NVTX range with no end (never popped) runs to the capture's
last timestamp, as in `nsys stats`.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np

from roseprof.drivers.nsys.graphs import read_graph_nodes
from roseprof.drivers.nsys.nvtx import read_nvtx
from roseprof.drivers.nsys.sqlite import Export, clean_name, clean_scalar, fail, quote
from roseprof.errors import NothingRecorded
from roseprof.model import GpuOps, Marks, Names, Process, Ranges, Tool, Trace

# ENUM_NSYS_EVENT_TYPE ids (stable across the schema versions we read).

GPU_OP_TABLES = {
    "kernel": "CUPTI_ACTIVITY_KIND_KERNEL",
    "memcpy": "CUPTI_ACTIVITY_KIND_MEMCPY",
    "memset": "CUPTI_ACTIVITY_KIND_MEMSET",
}
RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
# Export schema majors read here: 2 (nsys 2021-2022.2) and 3 (2022.3 on). A new major may change what columns
# mean without changing their names, so it is refused until checked against `nsys stats`.
KNOWN_SCHEMA_MAJORS = ("2", "3")


def read_nsys_sqlite(path: str, label: str | None = None) -> Trace:
    """Read the export at `path`; errors name `label` (the user's file) when given."""
    db = Export(path, label or path)
    try:
        return _read(db)
    finally:
        db.close()


def _export_meta(db: Export) -> dict[str, str]:
    for table in ("META_DATA_EXPORT", "EXPORT_META_DATA"):  # 2023+ name, 2021-2022 name
        if table in db.tables:
            rows = db.query(f"SELECT CAST(name AS TEXT), CAST(value AS TEXT) FROM {table}")
            return {n: v for n, v in rows if n is not None}
    return {}


def _read(db: Export) -> Trace:
    tables = db.tables
    meta = _export_meta(db)
    warnings: list[str] = []
    has_nvtx = "NVTX_EVENTS" in tables
    has_kernels = GPU_OP_TABLES["kernel"] in tables
    schema = meta.get("EXPORT_SCHEMA_VERSION") or "?"
    major = (meta.get("EXPORT_SCHEMA_VERSION_MAJOR") or schema.split(".")[0]).strip()
    if meta and major not in KNOWN_SCHEMA_MAJORS:
        raise fail(
            db.label,
            f"nsys export schema {schema} is not supported (this reader knows schemas 2.x and 3.x, "
            "nsys 2021 to 2026.2)",
        )
    if not meta:
        # Exports of nsys 2020 have no metadata table; their tables are the ones read here.
        if "StringIds" not in tables or not (has_nvtx or any(t in tables for t in GPU_OP_TABLES.values())):
            raise fail(db.label, "is an SQLite database but not an nsys export (no nsys tables)")
        warnings.append("the export has no metadata table (an nsys 2020 export?): tool version unknown")
    if "StringIds" not in tables:
        raise fail(db.label, "has no StringIds table: an incomplete nsys export")
    if not has_nvtx and not has_kernels:
        raise NothingRecorded(
            f"{db.label}: has neither NVTX_EVENTS nor CUPTI_ACTIVITY_KIND_KERNEL: nothing to analyse "
            "(capture with -t nvtx or -t cuda)"
        )
    names = Names()
    domains = [""]
    ranges, marks = Ranges(), Marks()
    with ThreadPoolExecutor(max_workers=1) as pool:
        # The runtime calls are read on a second thread from the start, while this one reads the NVTX ranges and the
        # GPU ops: each table is stepped by SQLite on a connection of its own, outside the GIL (pyarrow's read), so
        # on two cores the reads overlap (the calls, 2.4M rows of the 1M-kernel export, are the largest table).
        calls = _start_calls_read(db, pool)
        if has_nvtx:
            ranges, marks, domains = read_nvtx(db, names, schema)
        ops = _read_gpu_ops(db, names, warnings, calls)
    if not len(ranges) and not len(marks) and not len(ops):
        raise NothingRecorded(f"{db.label}: holds no NVTX range or mark and no GPU op: nothing to analyse")
    threads: dict[int, str] = {}
    if "ThreadNames" in tables and {"nameId", "globalTid"} <= db.columns("ThreadNames"):
        for name, gtid in db.query(
            "SELECT s.value, t.globalTid FROM ThreadNames t JOIN StringIds s ON t.nameId = s.id "
            "WHERE typeof(t.globalTid) = 'integer'"
        ):
            threads[int(gtid)] = clean_name(name)
    session = None
    if "TARGET_INFO_SESSION_START_TIME" in tables and "utcEpochNs" in db.columns(
        "TARGET_INFO_SESSION_START_TIME"
    ):
        row = db.query("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME LIMIT 1")
        value = clean_scalar(row[0][0]) if row else None
        session = value if isinstance(value, int) and not isinstance(value, bool) else None
    trace = Trace(
        graph_nodes=read_graph_nodes(db),
        tool=Tool("nsys", meta.get("EXPORT_PRODUCT_VERSION") or "?", schema),
        names=names,
        domains=domains,
        ranges=ranges,
        marks=marks,
        ops=ops,
        threads=threads,
        gpus=db.gpus(),
        session_start_utc_ns=session,
        warnings=warnings,
    )
    _read_processes(db, trace)
    return trace


def _read_processes(db: Export, trace: Trace) -> None:
    """Fills trace.thread_pids (globalTid -> pid, bits 24..47) and trace.processes for the pids the events use,
    each named as nsys' PROCESSES table names it. nsys records no rank: the step logs' meta records give it
    later (analysis/ranks.py)."""
    tids = trace.used_thread_ids()
    tids = tids[tids >= 0]
    pids = (tids >> 24) & 0xFFFFFF
    trace.thread_pids = dict(zip(tids.tolist(), pids.tolist()))
    names: dict[int, str] = {}
    if "PROCESSES" in db.tables and {"globalPid", "name"} <= db.columns("PROCESSES"):
        for gpid, name in db.query(
            "SELECT globalPid, name FROM PROCESSES WHERE typeof(globalPid) = 'integer'"
        ):
            names.setdefault((int(gpid) >> 24) & 0xFFFFFF, clean_name(name))
    trace.processes = {p: Process(p, names.get(p, "")) for p in np.unique(pids).tolist()}


def _read_op_tables(db: Export) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str]]:
    """[8, ops] (start, end, name id, correlationId, globalPid, deviceId, streamId, graphNodeId; -1 where NULL or
    absent) of the kernels, memcpys and memsets in that order; [ops] each one's kind (GPU_OP_TABLES' index); [ops]
    whether its table has a correlationId column; the SQL that selects those tables' correlation ids."""
    parts, kinds, corr_sources, corr_known = [], [], [], []
    for kind, table in enumerate(GPU_OP_TABLES.values()):
        if table not in db.tables:
            continue
        cols = db.columns(table)
        if not {"start", "end"} <= cols:
            raise fail(db.label, f"{table} lacks its start/end columns: unknown nsys schema")
        name_col = next((c for c in ("demangledName", "shortName") if c in cols), None) if kind == 0 else None
        optional = [
            c for c in ("correlationId", "globalPid", "deviceId", "streamId", "graphNodeId") if c in cols
        ]
        exprs = [f"coalesce({quote(c)}, -1)" if c in cols else "-1" for c in ("correlationId", "globalPid")]
        exprs += [
            f"coalesce({quote(c)}, -1)" if c in cols else "-1"
            for c in ("deviceId", "streamId", "graphNodeId")
        ]
        name_expr = f"coalesce({quote(name_col)}, -1)" if name_col else "-1"
        # One pass: the values and the check that each is an integer (sqlite.Export.checked_ints).
        arr = db.checked_ints(
            table,
            ["start", "end", name_expr, *exprs],
            ["start", "end"],
            optional + ([name_col] if name_col else []),
        )
        if len(arr):
            parts.append(arr.T)  # [8, rows]: the columnar reader's columns are contiguous, and stay so
            kinds.append(np.full(len(arr), kind, dtype=np.int64))
            corr_known.append(np.full(len(arr), "correlationId" in cols))
            if "correlationId" in cols:
                corr_sources.append(f"SELECT correlationId FROM {table}")
    # Joined column by column ([8, ops]): a row-major [ops, 8] copy of column-major parts cost 0.3 s of CPU on the
    # 1M-kernel export, and left every column strided for the numpy work after it.
    ops = (
        (np.concatenate(parts, axis=1) if len(parts) > 1 else parts[0])
        if parts
        else np.zeros((8, 0), np.int64)
    )
    op_kind = np.concatenate(kinds) if kinds else np.zeros(0, dtype=np.int64)
    has_corr = np.concatenate(corr_known) if corr_known else np.zeros(0, dtype=bool)
    return ops, op_kind, has_corr, corr_sources


def _call_exprs(db: Export) -> list[str] | None:
    """The runtime calls' columns the join reads (correlationId, globalTid, start, end, nameId or -1), or None
    where the export has no runtime calls to join to."""
    rt_cols = db.columns(RUNTIME) if RUNTIME in db.tables else set()
    if not {"correlationId", "globalTid", "start", "end"} <= rt_cols:
        return None
    return [
        "correlationId",
        "globalTid",
        "start",
        "end",
        "coalesce(nameId, -1)" if "nameId" in rt_cols else "-1",
    ]


def _start_calls_read(db: Export, pool: ThreadPoolExecutor) -> Future | None:
    """Every runtime call read columnar (Export.int_rows) on `pool`'s thread, where the export has GPU ops to join
    them to; None where it has none, or is not read columnar (_launching_calls then reads row-wise)."""
    exprs = _call_exprs(db)
    if exprs is None or not db.columnar or not any(t in db.tables for t in GPU_OP_TABLES.values()):
        return None
    return pool.submit(db.int_rows, RUNTIME, exprs)


def _read_gpu_ops(db: Export, names: Names, warnings: list[str], calls: Future | None) -> GpuOps:
    """Kernels, memcpys and memsets, each joined to its CUDA API call through (process, correlationId). `calls`:
    the runtime calls' columnar read under way (_start_calls_read), or None."""
    call_exprs = _call_exprs(db)
    ops, op_kind, has_corr, corr_sources = _read_op_tables(db)
    calls = calls.result() if calls is not None else None
    op_start, op_end, op_name_sid, op_corr, op_pid, device, stream, graph_node = ops  # [ops] each, contiguous
    if (op_end < op_start).any():
        raise fail(db.label, "a GPU op ends before it starts: a damaged export")
    # Kernel names: look up each distinct StringIds id once; copies and sets get a fixed label.
    n_ops = len(op_start)
    op_name = np.zeros(n_ops, dtype=np.int64)
    strings: dict = {}
    if n_ops:
        is_kernel = op_kind == 0
        sids, inverse = _distinct(op_name_sid[is_kernel])
        strings = dict(db.query("SELECT id, value FROM StringIds"))
        op_name[is_kernel] = names.intern_many(
            [clean_name(strings.get(int(i), f"[unknown kernel {int(i)}]")) for i in sids]
        )[inverse]
        for kind, label in ((1, "[CUDA memcpy]"), (2, "[CUDA memset]")):
            op_name[op_kind == kind] = names.intern(label)
    api_start = np.full(n_ops, -1, dtype=np.int64)
    api_end = api_start.copy()
    api_tid = api_start.copy()
    api_sid = api_start.copy()
    if n_ops and corr_sources and call_exprs is not None:
        rt_corr, rt_tid, rt_start, rt_end, rt_sid = _launching_calls(
            db, call_exprs, calls, corr_sources, op_corr[has_corr]
        )
        if (rt_end < rt_start).any():
            raise fail(db.label, f"{RUNTIME} holds a call that ends before it starts: a damaged export")
        rt_pid = rt_tid & np.int64(-(1 << 24))  # globalTid without the thread bits = the op's globalPid
        pids = op_pid[:1] if op_pid.min() == op_pid.max() else np.unique(op_pid)  # one process: no sort
        for pid in pids:
            # One process (the usual capture): every op and call, without masks or copies.
            ops_i = np.flatnonzero(op_pid == pid) if len(pids) > 1 else np.arange(n_ops)
            rt_i = np.flatnonzero(rt_pid == pid)
            if len(rt_i) == 0:
                continue
            # A correlation id seen twice in one process (damage) joins to its first call.
            corr_sorted = rt_i[np.argsort(rt_corr[rt_i], kind="stable")]
            keys = rt_corr[corr_sorted]
            wanted = op_corr[ops_i]
            pos = np.searchsorted(keys, wanted)
            pos_ok = np.minimum(pos, len(keys) - 1)
            hit = (pos < len(keys)) & (keys[pos_ok] == wanted)
            src = corr_sorted[pos_ok[hit]]
            dst = ops_i[hit]
            api_tid[dst], api_start[dst], api_end[dst] = rt_tid[src], rt_start[src], rt_end[src]
            api_sid[dst] = rt_sid[src]
    elif n_ops:
        warnings.append("no CUDA runtime calls in the export: GPU work is not attributed to ranges")
    # Launching calls' names (cudaLaunchKernel, cudaGraphLaunch, ...), interned after the ops' own names.
    api_name = np.full(n_ops, -1, dtype=np.int64)
    known = api_sid >= 0
    if known.any():
        sids, inverse = _distinct(api_sid[known])
        api_name[known] = names.intern_many([clean_name(strings.get(int(i), "?")) for i in sids])[inverse]
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


def _distinct(sids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """np.unique(sids, return_inverse=True) of StringIds ids: by a count over the ids where they are small, as
    nsys numbers its strings (a sort of a million kernels' ids cost 0.1 s), by a sort otherwise (damage)."""
    if len(sids) and 0 <= sids.min() and sids.max() < max(len(sids), 1 << 20):
        present = np.bincount(sids) > 0
        return np.flatnonzero(present), (np.cumsum(present) - 1)[sids]
    return np.unique(sids, return_inverse=True)


def _launching_calls(
    db: Export,
    exprs: list[str],
    calls: tuple[np.ndarray, np.ndarray] | None,
    corr_sources: list[str],
    op_corr: np.ndarray,
) -> np.ndarray:
    """[5, calls] (correlationId, globalTid, start, end, nameId or -1): the runtime calls that launched GPU work
    (most calls launch none; a call with a NULL among its first four is skipped), in the table's order, every
    call's integers checked (sqlite.Export.checked_ints' rule). `calls`: every call as Export.int_rows read it
    (None: not read columnar); `op_corr`: the correlation ids of the GPU ops of the tables that have the column
    (`corr_sources` selects them in SQL)."""
    # Columnar: every call read, the launching ones kept in numpy (the SQL filter below costs more than reading
    # the calls that launch nothing). Exact only where no op's id is -1, the value a NULL id reads as.
    if calls is not None and not (op_corr == -1).any():
        values, has_null = calls  # [calls, 5], each column contiguous
        keep = np.flatnonzero(~has_null & np.isin(values[:, 0], op_corr))
        return db.in_range(RUNTIME, values.T.take(keep, axis=1))  # column by column: [5, kept], contiguous
    # Row-wise: the same pass also checks every call's integers (sqlite.Export.checked_ints).
    return np.ascontiguousarray(
        db.checked_ints(
            RUNTIME,
            exprs,
            [],
            ["correlationId", "globalTid", "start", "end"] + ["nameId"] * (exprs[4] != "-1"),
            where=f"correlationId IN ({' UNION ALL '.join(corr_sources)}) "
            "AND globalTid IS NOT NULL AND start IS NOT NULL AND end IS NOT NULL",
        ).T
    )
