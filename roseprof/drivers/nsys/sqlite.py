"""An SQLite export opened defensively: read-only, every query bounded in time, text decoded with U+FFFD where
it is not valid UTF-8, and integer columns checked before numpy sees them.

Whatever is wrong with the file (not SQLite, truncated, a malformed schema, a value of the wrong type, a view
that never ends) becomes one RoseprofError line naming `label`, the user's file, never the run's copy of it.
"""

from __future__ import annotations

import itertools
import os
import sqlite3
import time
import urllib.parse

import numpy as np

from roseprof.drivers.nsys.columnar import int_columns, int_columns_with_nulls
from roseprof.errors import RoseprofError, one_line
from roseprof.model import cut_name

SQLITE_MAGIC = b"SQLite format 3\x00"
# How long reading one file may take: a view that never ends must not hang the user. Generous: a 194 MB export
# with a million kernels reads in about 3 s here (docs/BENCHMARKS.md).
TIME_LIMIT_ENV = "ROSEPROF_SQLITE_TIME_LIMIT_S"
BASE_TIME_LIMIT_S = 120.0
TIME_LIMIT_S_PER_MB = 1.0
# How much work reading one file may take, in SQLite virtual-machine steps: the bound that does not depend on
# how busy the machine is. Every real export here needs under 1 step per byte of file (0.7 for the largest
# fixture); a view that never ends (WITH RECURSIVE) produces rows from no data at all, so it runs past this
# within a few seconds however busy the machine. ROSEPROF_SQLITE_STEP_LIMIT overrides it.
STEP_LIMIT_ENV = "ROSEPROF_SQLITE_STEP_LIMIT"
BASE_STEP_LIMIT = 200_000_000
STEP_LIMIT_PER_BYTE = 100
PROGRESS_EVERY = 20_000  # steps between two calls of the progress handler
# Timestamps and ids beyond this are damage, not data: keeping them would overflow end - start.
INT_LIMIT = 1 << 62


def fail(label: str, why: str) -> RoseprofError:
    return RoseprofError(f"{label}: {why}")


def clean_name(value) -> str:
    """A name as text: bytes decoded with U+FFFD, numbers written out, None empty, very long names cut."""
    if value is None:
        return ""
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    elif not isinstance(value, str):
        value = str(value)
    return cut_name(value)


def clean_scalar(value):
    """A descriptive value (GPU name, memory size) safe to keep in JSON: finite numbers, text, or None."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return value if abs(value) < INT_LIMIT else None
    if isinstance(value, float):
        return value if np.isfinite(value) else None
    return clean_name(value)[:256]


def time_limit_s(size_bytes: int) -> float:
    env = os.environ.get(TIME_LIMIT_ENV)
    if env:
        try:
            return max(float(env), 0.1)
        except ValueError:
            pass
    return BASE_TIME_LIMIT_S + TIME_LIMIT_S_PER_MB * size_bytes / 1e6


def step_limit(size_bytes: int) -> int:
    env = os.environ.get(STEP_LIMIT_ENV)
    if env:
        try:
            return max(int(float(env)), PROGRESS_EVERY)
        except ValueError:
            pass
    return BASE_STEP_LIMIT + STEP_LIMIT_PER_BYTE * size_bytes


class Export:
    """A read-only connection to an SQLite file; every error names `label`."""

    def __init__(self, path: str, label: str) -> None:
        self.label = label
        if not os.path.exists(path):
            raise fail(label, "no such file")
        if os.path.isdir(path):
            raise fail(label, "is a folder, not an nsys SQLite export")
        self.size = size = os.path.getsize(path)
        if size == 0:
            raise fail(label, "is empty (0 bytes), not an nsys SQLite export")
        with open(path, "rb") as fh:
            if fh.read(16) != SQLITE_MAGIC:
                raise fail(label, "is not an SQLite database")
        self.limit_s = time_limit_s(size)
        self.deadline = time.monotonic() + self.limit_s
        self.step_limit = step_limit(size)
        self.steps = 0
        self.stopped_for = ""
        self.uri = uri = "file:" + urllib.parse.quote(os.path.abspath(path)) + "?mode=ro"
        try:
            self.conn = sqlite3.connect(uri, uri=True)
        except sqlite3.Error as e:
            raise fail(label, f"cannot be opened as an SQLite database ({one_line(str(e))})") from None
        # Invalid UTF-8 in one name shows as U+FFFD instead of refusing the whole file.
        self.conn.text_factory = lambda b: b.decode("utf-8", "replace")
        self.conn.set_progress_handler(self._over_budget, PROGRESS_EVERY)
        try:
            self.conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
            page_size = self.conn.execute("PRAGMA page_size").fetchone()[0]
            page_count = self.conn.execute("PRAGMA page_count").fetchone()[0]
        except (sqlite3.Error, UnicodeDecodeError) as e:
            self.close()
            raise self.error(e) from None
        if page_size * page_count > size:
            self.close()
            raise fail(
                label,
                f"is truncated: the database header says {page_size * page_count} bytes, the file has {size}",
            )
        kinds = self.query("SELECT name, type FROM sqlite_master WHERE type IN ('table', 'view')")
        self.tables = {name for name, _ in kinds if isinstance(name, str)}
        # The columnar reader only where every table is a real one (nsys writes no view): a table ends, a view
        # may not, and only the row-wise reader bounds its work (columnar.py).
        self.columnar = all(kind == "table" for _, kind in kinds)

    def _over_budget(self) -> bool:
        """SQLite's progress handler: True interrupts the running statement."""
        self.steps += PROGRESS_EVERY
        if self.steps > self.step_limit:
            self.stopped_for = "steps"
        elif time.monotonic() > self.deadline:
            self.stopped_for = "time"
        return bool(self.stopped_for)

    def close(self) -> None:
        self.conn.close()

    def error(self, e: Exception) -> RoseprofError:
        if isinstance(e, UnicodeDecodeError):
            return fail(self.label, "could not be read as an nsys export (a damaged schema)")
        if (
            isinstance(e, sqlite3.OperationalError)
            and "interrupted" in str(e)
            and self.stopped_for == "steps"
        ):
            return fail(
                self.label,
                f"reading it took over {self.step_limit / 1e6:.0f} million SQLite steps for a "
                f"{self.size / 1e6:.1f} MB file and was stopped (a view or a damaged table that never ends?); "
                f"set {STEP_LIMIT_ENV} to allow more",
            )
        if isinstance(e, sqlite3.OperationalError) and "interrupted" in str(e):
            return fail(
                self.label,
                f"reading it took over {self.limit_s:.0f} s and was stopped (a view or a damaged table that "
                f"never ends?); set {TIME_LIMIT_ENV} to allow longer",
            )
        return fail(self.label, f"could not be read as an nsys export ({one_line(str(e))})")

    def query(self, sql: str) -> list:
        return self._guarded(lambda: self.conn.execute(sql).fetchall())

    def _guarded(self, read):
        """read() with every way a query can fail turned into one RoseprofError line (or the user's interrupt)."""
        try:
            return read()
        except sqlite3.Error as e:
            if "interrupted" in str(e) and not self.stopped_for:
                # A signal (Ctrl-C, SIGTERM) arrived inside the progress handler, which SQLite turned into an
                # interruption: it is the user's, so it goes on as one (the run's temporary folder is removed).
                raise KeyboardInterrupt from None
            raise self.error(e) from None
        except UnicodeDecodeError:  # SQLite's own message quoting a damaged schema is not UTF-8
            raise fail(self.label, "could not be read as an nsys export (a damaged schema)") from None
        except (MemoryError, OverflowError) as e:
            raise fail(self.label, f"holds a value too large to read ({type(e).__name__})") from None

    def columns(self, table: str) -> set[str]:
        return {r[1] for r in self.query(f"PRAGMA table_info({quote(table)})") if isinstance(r[1], str)}

    def gpus(self) -> list[dict]:
        """The export's GPUs (TARGET_INFO_GPU, the columns it has of these; at most 64), [] without the table."""
        if "TARGET_INFO_GPU" not in self.tables:
            return []
        have = self.columns("TARGET_INFO_GPU")
        want = [
            c
            for c in ("id", "name", "busLocation", "totalMemory", "smCount", "chipName", "clockRate")
            if c in have
        ]
        if not want:
            return []
        rows = self.query(f"SELECT {', '.join(want)} FROM TARGET_INFO_GPU LIMIT 64")
        return [{k: clean_scalar(v) for k, v in zip(want, row)} for row in rows]

    def check_integers(self, table: str, required: list[str], nullable: list[str] = ()) -> None:
        """Refuse the file when a column that must hold integers holds anything else (text, a blob, a real)."""
        checks = [f"typeof({quote(c)}) != 'integer'" for c in required]
        checks += [f"typeof({quote(c)}) NOT IN ('integer', 'null')" for c in nullable]
        if not checks:
            return
        cols = list(required) + list(nullable)
        row = self.query(
            f"SELECT {', '.join(f'typeof({quote(c)})' for c in cols)} FROM {quote(table)} "
            f"WHERE {' OR '.join(checks)} LIMIT 1"
        )
        if row:
            for c, kind in zip(cols, row[0]):
                if kind != "integer" and not (kind == "null" and c in nullable):
                    raise fail(
                        self.label,
                        f"{table}.{c} holds a {kind} value where nsys writes an integer: a damaged export",
                    )

    def checked_ints(
        self, table: str, exprs: list[str], required: list[str], nullable: list[str] = (), where: str = ""
    ) -> np.ndarray:
        """[rows, len(exprs)] int64: SELECT exprs FROM table [WHERE where] in one pass that also checks
        check_integers' rule on every row it reads (a row that breaks the rule is read whatever `where` says, its
        first value NULL); such a row is refused with check_integers' message. exprs[0] is never NULL in a row
        that keeps the rule (a required column, or one `where` asks to be set). The rows stream from the cursor into numpy: no
        second scan of the table, no list of tuples."""
        ok = " AND ".join(
            [f"typeof({quote(c)}) = 'integer'" for c in required]
            + [f"typeof({quote(c)}) IN ('integer', 'null')" for c in nullable]
        )
        ok = f"({ok or '1'})"
        # The check rides on the first value, NULL where the row breaks the rule: no column of its own to fetch.
        first = f"CASE WHEN {ok} THEN {exprs[0]} END"
        sql = f"SELECT {', '.join([first, *exprs[1:]])} FROM {quote(table)}"
        if where:
            sql += f" WHERE ({where}) OR NOT {ok}"
        ncols = len(exprs)
        if self.columnar and not where:
            # No check in SQL: the driver refuses a value that is not an integer by itself, and a NULL where the
            # rule forbids one reaches it as a NULL (exprs keep a required column bare), which it refuses too.
            # Such a file is read again row-wise below, which names what is wrong.
            arr = int_columns(self.uri, f"SELECT {', '.join(exprs)} FROM {quote(table)}", ncols)
            if arr is not None:
                return self.in_range(table, arr)

        def read():
            try:
                return np.fromiter(itertools.chain.from_iterable(self.conn.execute(sql)), dtype=np.int64)
            except (TypeError, ValueError, OverflowError):  # a text, blob, real or NULL value
                return None

        flat = self._guarded(read)
        if flat is None or len(flat) % ncols:
            self.check_integers(table, required, nullable)
            raise fail(self.label, f"{table} holds a value that is not an integer: a damaged export")
        return self.in_range(table, flat.reshape(-1, ncols))

    def int_rows(self, table: str, exprs: list[str]) -> tuple[np.ndarray, np.ndarray] | None:
        """Columnar only: every row of SELECT exprs FROM table as ([rows, len(exprs)] int64, NULLs as 0; [rows]
        bool: the row holds a NULL), each value an integer or NULL; None where the file is not read columnar or a
        value is neither (the caller then reads with checked_ints, which names it). Not range-checked: the caller
        checks the rows it keeps (in_range)."""
        if not self.columnar:
            return None
        return int_columns_with_nulls(self.uri, f"SELECT {', '.join(exprs)} FROM {quote(table)}", len(exprs))

    def int_query(self, sql: str, ncols: int, table: str) -> np.ndarray | None:
        """Columnar only: the result of `sql` as [rows, ncols] int64, range-checked as `table`'s; None where the file
        is not read columnar or a value is not an integer (the caller reads row-wise, which names what is wrong)."""
        arr = int_columns(self.uri, sql, ncols) if self.columnar else None
        return None if arr is None else self.in_range(table, arr)

    def in_range(self, table: str, arr: np.ndarray) -> np.ndarray:
        # Two reductions, no boolean temporaries (the 1M-kernel export's 21M values: half the time)
        if arr.size and (arr.max() > INT_LIMIT or arr.min() < -INT_LIMIT):
            raise fail(self.label, f"{table} holds a value out of range (beyond ±2^62): a damaged export")
        return arr

    def ints(self, sql: str, ncols: int, what: str) -> np.ndarray:
        """An integer query result as a [rows, ncols] int64 array (after check_integers on its columns)."""
        return self.to_ints(self.query(sql), ncols, what)

    def to_ints(self, rows: list, ncols: int, what: str) -> np.ndarray:
        if not rows:
            return np.zeros((0, ncols), dtype=np.int64)
        try:
            arr = np.array(rows, dtype=np.int64).reshape(-1, ncols)
        except (TypeError, ValueError, OverflowError):
            raise fail(self.label, f"{what} holds a value that is not an integer: a damaged export") from None
        if ((arr > INT_LIMIT) | (arr < -INT_LIMIT)).any():
            raise fail(self.label, f"{what} holds a value out of range (beyond ±2^62): a damaged export")
        return arr


def quote(identifier: str) -> str:
    return '"' + identifier.replace('"', '""') + '"'
