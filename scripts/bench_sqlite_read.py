"""What reading the columns the nsys reader needs costs, way by way, side by side on one export (issue 43).

    PYTHONPATH=. python scripts/bench_sqlite_read.py /tmp/big.sqlite [--rounds 2] [--ways reader,adbc-bare,...]

(`reader` is the reader of the roseprof that PYTHONPATH names: run it with another checkout's to compare.)

Each way reads the kernels' 8 integer columns and the runtime calls that launched GPU work (5 columns), into
int64 numpy arrays; rounds alternate the ways so that a busy machine slows them alike. Printed: wall and CPU
seconds (user + sys of this process) per way and round, and the load average before and after. The ways:

- reader: the reader as it is (`Export.checked_ints`: one pass with the per-row integer check, columnar when it
  can be), for the whole GPU-op and runtime read (`reader._read_gpu_ops`, names and the join included)
- rowwise-checked: the same SQL through Python's sqlite3 (`np.fromiter` over the cursor)
- fetchall: sqlite3 `fetchall` of the bare columns (no check), then `np.array`
- fetchall-per-column: one query per column, `np.fromiter` of each
- adbc-checked: the ADBC SQLite driver into Arrow, the reader's SQL (with the per-row check)
- adbc-bare: the ADBC driver, the bare columns (the driver refuses a change of type by itself)
- adbc-bare-unfiltered: as adbc-bare, but every runtime call read and the launching ones kept in numpy (no
  `correlationId IN (...)` in SQL)
- adbc-threads: adbc-bare-unfiltered with the two tables read at once on two threads
- sql-floor: `SELECT sum(..)` of the same columns inside SQLite (its own stepping, nothing handed out)
"""

from __future__ import annotations

import argparse
import itertools
import os
import sqlite3
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from roseprof.drivers.nsys import reader
from roseprof.drivers.nsys.sqlite import Export
from roseprof.model import Names

K = "CUPTI_ACTIVITY_KIND_KERNEL"
R = "CUPTI_ACTIVITY_KIND_RUNTIME"
K_COLS = [
    "start",
    "end",
    "demangledName",
    "correlationId",
    "globalPid",
    "deviceId",
    "streamId",
    "graphNodeId",
]
R_COLS = ["correlationId", "globalTid", "start", "end", "nameId"]
K_BARE = ", ".join(f"coalesce({c}, -1)" for c in K_COLS)
R_BARE = ", ".join(R_COLS)
R_IN = f"correlationId IN (SELECT correlationId FROM {K} UNION ALL SELECT correlationId FROM CUPTI_ACTIVITY_KIND_MEMCPY)"
R_CHECK = " AND ".join(f"typeof({c}) IN ('integer', 'null')" for c in R_COLS)
K_CHECK = "typeof(start) = 'integer' AND typeof(end) = 'integer' AND " + " AND ".join(
    f"typeof({c}) IN ('integer', 'null')" for c in K_COLS[2:]
)


def k_checked_sql() -> str:
    return f"SELECT CASE WHEN ({K_CHECK}) THEN start END, {', '.join(f'coalesce({c}, -1)' for c in K_COLS[1:])} FROM {K}"


def r_checked_sql() -> str:
    return (
        f"SELECT CASE WHEN ({R_CHECK}) THEN correlationId END, globalTid, start, end, coalesce(nameId, -1) "
        f"FROM {R} WHERE ({R_IN} AND globalTid IS NOT NULL AND start IS NOT NULL AND end IS NOT NULL) "
        f"OR NOT ({R_CHECK})"
    )


def adbc(uri: str, sql: str) -> np.ndarray:
    import adbc_driver_sqlite.dbapi as dbapi

    with dbapi.connect(uri) as conn, conn.cursor() as cur:
        cur.adbc_statement.set_options(**{"adbc.sqlite.query.batch_rows": "65536"})
        cur.execute(sql)
        table = cur.fetch_arrow_table()
    return np.column_stack([c.to_numpy() for c in table.columns])


def launching(rt: np.ndarray, corr: np.ndarray) -> np.ndarray:
    """The runtime calls whose correlation id some GPU op carries (the IN filter, in numpy)."""
    keep = np.isin(rt[:, 0], corr)
    return rt[keep]


def way_reader(path, uri):
    db = Export(path, path)
    try:
        reader._read_gpu_ops(db, Names(), [])
    finally:
        db.close()


def way_rowwise_checked(path, uri):
    conn = sqlite3.connect(uri, uri=True)
    for sql, n in ((k_checked_sql(), 8), (r_checked_sql(), 5)):
        np.fromiter(itertools.chain.from_iterable(conn.execute(sql)), dtype=np.int64).reshape(-1, n)
    conn.close()


def way_fetchall(path, uri):
    conn = sqlite3.connect(uri, uri=True)
    np.array(conn.execute(f"SELECT {K_BARE} FROM {K}").fetchall(), dtype=np.int64)
    np.array(conn.execute(f"SELECT {R_BARE} FROM {R} WHERE {R_IN}").fetchall(), dtype=np.int64)
    conn.close()


def way_fetchall_per_column(path, uri):
    conn = sqlite3.connect(uri, uri=True)
    for c in K_COLS:
        np.fromiter((r[0] for r in conn.execute(f"SELECT coalesce({c}, -1) FROM {K}")), dtype=np.int64)
    for c in R_COLS:
        np.fromiter((r[0] for r in conn.execute(f"SELECT {c} FROM {R} WHERE {R_IN}")), dtype=np.int64)
    conn.close()


def way_adbc_checked(path, uri):
    adbc(uri, k_checked_sql())
    adbc(uri, r_checked_sql())


def way_adbc_bare(path, uri):
    adbc(uri, f"SELECT {K_BARE} FROM {K}")
    adbc(uri, f"SELECT {R_BARE} FROM {R} WHERE {R_IN}")


def way_adbc_bare_unfiltered(path, uri):
    k = adbc(uri, f"SELECT {K_BARE} FROM {K}")
    m = adbc(uri, "SELECT correlationId FROM CUPTI_ACTIVITY_KIND_MEMCPY")
    launching(adbc(uri, f"SELECT {R_BARE} FROM {R}"), np.concatenate([k[:, 3], m[:, 0]]))


def way_adbc_threads(path, uri):
    with ThreadPoolExecutor(2) as pool:
        kf = pool.submit(adbc, uri, f"SELECT {K_BARE} FROM {K}")
        rf = pool.submit(adbc, uri, f"SELECT {R_BARE} FROM {R}")
        m = adbc(uri, "SELECT correlationId FROM CUPTI_ACTIVITY_KIND_MEMCPY")
        launching(rf.result(), np.concatenate([kf.result()[:, 3], m[:, 0]]))


def way_sql_floor(path, uri):
    conn = sqlite3.connect(uri, uri=True)
    conn.execute(f"SELECT {', '.join(f'total({c})' for c in K_COLS)} FROM {K}").fetchall()
    conn.execute(f"SELECT {', '.join(f'total({c})' for c in R_COLS)} FROM {R}").fetchall()
    conn.close()


WAYS = {name[4:].replace("_", "-"): fn for name, fn in globals().items() if name.startswith("way_")}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("path")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--ways", default=",".join(WAYS))
    args = ap.parse_args()
    uri = "file:" + urllib.parse.quote(os.path.abspath(args.path)) + "?mode=ro"
    print(f"load average before: {os.getloadavg()[0]:.2f} ({os.cpu_count()} cores)")
    for rnd in range(1, args.rounds + 1):
        for name in args.ways.split(","):
            t0, c0 = time.perf_counter(), time.process_time()
            WAYS[name](args.path, uri)
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            print(f"round {rnd}  {name:24s} {wall:6.2f} s wall  {cpu:6.2f} s CPU", flush=True)
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
