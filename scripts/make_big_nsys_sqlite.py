"""Build a large nsys SQLite export by replicating a real capture's rows (for the import benchmark).

    python scripts/make_big_nsys_sqlite.py tests/data/nsys/h100-nsys2025.3-roseinfer-decode.sqlite /tmp/big.sqlite \
        --copies 36 --nvtx-threads 5

Every copy of the capture is shifted in time past the previous one, with correlation ids shifted so that GPU
work still joins its own API call. Each copy's NVTX rows are also repeated on `--nvtx-threads - 1` more thread
ids (ranges on threads that launch nothing), so the file reaches 200k+ ranges as well as 1M+ kernels.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3

REPLICATED = (
    "CUPTI_ACTIVITY_KIND_KERNEL",
    "CUPTI_ACTIVITY_KIND_MEMCPY",
    "CUPTI_ACTIVITY_KIND_MEMSET",
    "CUPTI_ACTIVITY_KIND_RUNTIME",
)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("--copies", type=int, default=36)
    ap.add_argument("--nvtx-threads", type=int, default=5)
    args = ap.parse_args()
    if os.path.exists(args.dst):
        os.remove(args.dst)
    shutil.copyfile(args.src, args.dst)
    db = sqlite3.connect(args.dst)
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    lo, hi = db.execute("SELECT min(start), max(end) FROM NVTX_EVENTS").fetchone()
    k_lo, k_hi = db.execute("SELECT min(start), max(end) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()
    span = max(hi, k_hi) - min(lo, k_lo) + 1_000_000
    corr_span = db.execute("SELECT max(correlationId) FROM CUPTI_ACTIVITY_KIND_RUNTIME").fetchone()[0] + 1
    nvtx_cols = [r[1] for r in db.execute("PRAGMA table_info(NVTX_EVENTS)")]
    nvtx_rows = db.execute("SELECT max(rowid) FROM NVTX_EVENTS").fetchone()[0]
    originals = {
        t: db.execute(f"SELECT max(rowid) FROM {t}").fetchone()[0] for t in REPLICATED if t in tables
    }
    for copy in range(args.copies):
        for thread in range(args.nvtx_threads):
            if copy == 0 and thread == 0:
                continue
            cols = ", ".join(
                f"{c} + {copy * span}"
                if c in ("start", "end")
                else f"globalTid + {thread}"
                if c == "globalTid"
                else c
                for c in nvtx_cols
            )
            db.execute(
                f"INSERT INTO NVTX_EVENTS SELECT {cols} FROM NVTX_EVENTS WHERE rowid <= {nvtx_rows} AND eventType IN (59, 60)"
            )
        if copy == 0:
            continue
        for table, n in originals.items():
            cols = [r[1] for r in db.execute(f"PRAGMA table_info({table})")]
            sel = ", ".join(
                f"{c} + {copy * span}"
                if c in ("start", "end")
                else f"correlationId + {copy * corr_span}"
                if c == "correlationId"
                else c
                for c in cols
            )
            db.execute(f"INSERT INTO {table} SELECT {sel} FROM {table} WHERE rowid <= {n}")
        db.commit()
    counts = {
        t: db.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
        for t in ("NVTX_EVENTS",) + REPLICATED
        if t in tables
    }
    db.close()
    print(f"{args.dst}: {os.path.getsize(args.dst) / 1e6:.0f} MB", counts)


if __name__ == "__main__":
    main()
