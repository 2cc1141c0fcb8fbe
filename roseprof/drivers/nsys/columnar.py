"""Integer query results read column by column: the ADBC SQLite driver steps the rows in C into Arrow arrays,
which numpy then takes whole. Python's sqlite3 makes a Python int of every cell first, which is the floor of a
row-wise read: on the 1M-kernel export the GPU ops' and runtime calls' bare columns read in 2.9 to 3.3 s of CPU
this way against 6.2 to 7.2 s row-wise, side by side (scripts/bench_sqlite_read.py, docs/BENCHMARKS.md, issue 43).
The SQL needs no per-row type check: the driver refuses a value of another type by itself (below).

This is only ever a fast path. Whatever it does not read cleanly (text, a real or a blob where an integer
belongs, a NULL where the caller allows none, a damaged file, a driver error) comes back as None, and the caller
reads row-wise through sqlite.Export, which names what is wrong in one line. It is used only on real tables (never
views): they end, so the row-wise reader's work bound, which stops a view that never ends, is not needed here.
"""

from __future__ import annotations

import contextlib

import numpy as np

# Rows per Arrow batch: the driver's default (1,024) makes 8 KB buffers that stay on the C heap once freed (about
# 50 MB more peak RSS on the 1M-kernel export than batches of this many rows, whose buffers are returned).
BATCH_ROWS = 65_536


def int_columns(uri: str, sql: str, ncols: int) -> np.ndarray | None:
    """[rows, ncols] int64: the result of `sql` on the read-only SQLite `uri`, or None where any value is not a
    64-bit integer or the read fails for any reason (the caller falls back to its row-wise reader)."""
    got = _read(uri, sql, ncols, nulls=False)
    return None if got is None else got[0]


def int_columns_with_nulls(uri: str, sql: str, ncols: int) -> tuple[np.ndarray, np.ndarray] | None:
    """As int_columns, but a NULL is read too: ([rows, ncols] int64 with 0 for each NULL, [rows] bool: the row
    holds a NULL), or None where any value is neither an integer nor NULL, or the read fails."""
    return _read(uri, sql, ncols, nulls=True)


def _read(uri: str, sql: str, ncols: int, nulls: bool) -> tuple[np.ndarray, np.ndarray] | None:
    try:
        # The driver manager's own objects, not its DB-API module: that one imports pyarrow.dataset and
        # pyarrow.compute too, 0.12 s of CPU more for each import of a file.
        import adbc_driver_manager as adbc
        import adbc_driver_sqlite
        import pyarrow as pa
    except ImportError:  # an environment without the driver: the row-wise reader does the same, slower
        return None
    database = connection = statement = None
    try:
        database = adbc_driver_sqlite.connect(uri)
        connection = adbc.AdbcConnection(database)
        statement = adbc.AdbcStatement(connection)
        statement.set_options(**{"adbc.sqlite.query.batch_rows": str(BATCH_ROWS)})
        statement.set_sql_query(sql)
        stream, _ = statement.execute_query()
        table = pa.RecordBatchReader._import_from_c(stream.address).read_all()
    except Exception:  # noqa: BLE001 - any failure: the row-wise reader reads it again and names what is wrong
        return None
    finally:
        for handle in (statement, connection, database):
            if handle is not None:
                with contextlib.suppress(Exception):  # a close that fails loses nothing read
                    handle.close()
    if table.num_columns != ncols:
        return None
    # [ncols, rows], handed out transposed: each column is written once, contiguously, chunk by chunk (no
    # concatenated copy of the column first), and the caller's columns (arr[:, i]) are contiguous.
    out = np.empty((ncols, table.num_rows), dtype=np.int64)
    has_null = np.zeros(table.num_rows, dtype=bool)
    for i, column in enumerate(table.columns):
        # The driver infers each column's type from its first rows (a column of NULLs only: int64) and fails on a
        # later change of type, so an int64 column holds integers and NULLs only: no per-row check in SQL needed.
        if not pa.types.is_int64(column.type) or (column.null_count and not nulls):
            return None
        if column.null_count:
            has_null |= column.is_null().to_numpy(zero_copy_only=False)
            column = column.fill_null(0)
        at = 0
        for chunk in column.chunks:
            out[i, at : at + len(chunk)] = chunk.to_numpy()
            at += len(chunk)
    return out.T, has_null
