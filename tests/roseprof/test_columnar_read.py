"""The nsys reader's columnar fast path (drivers/nsys/columnar.py, issue 43): the GPU ops and runtime calls it
reads through the ADBC SQLite driver (and the NVTX ranges' integers) equal the row-wise reader's, value for value, on every real export; and
whatever it cannot read cleanly falls back to the row-wise reader, which names what is wrong."""

import dataclasses
import sqlite3

import numpy as np
import pytest

import roseprof.drivers.nsys.sqlite as nsys_sqlite
from roseprof.drivers.nsys.columnar import BATCH_ROWS, int_columns, int_columns_with_nulls
from roseprof.drivers.nsys.reader import read_nsys_sqlite
from roseprof.errors import RoseprofError
from tests.helpers import DATA, packed

# every export, the ones kept xz-compressed too (read unpacked: tests/helpers.packed)
EXPORTS = sorted(p.name.removesuffix(".xz") for p in (DATA / "nsys").glob("*.sqlite*"))


@pytest.mark.parametrize("name", EXPORTS)
def test_columnar_and_row_wise_reads_are_equal(monkeypatch, name):
    path = packed(DATA / "nsys" / name)
    used = []

    def spy(read):
        def spied(uri, sql, ncols):
            got = read(uri, sql, ncols)
            used.append(got is not None)
            return got

        return spied

    monkeypatch.setattr(nsys_sqlite, "int_columns", spy(int_columns))
    monkeypatch.setattr(nsys_sqlite, "int_columns_with_nulls", spy(int_columns_with_nulls))
    columnar = read_nsys_sqlite(path)
    assert all(used)  # a real export is read columnar, every table of it
    monkeypatch.setattr(nsys_sqlite, "int_columns", lambda *args: None)
    monkeypatch.setattr(nsys_sqlite, "int_columns_with_nulls", lambda *args: None)
    row_wise = read_nsys_sqlite(path)
    assert len(columnar.ops.start) == len(row_wise.ops.start)
    assert used or not len(row_wise.ops.start)  # GPU ops were read, and columnar
    for f in dataclasses.fields(row_wise.ops):
        np.testing.assert_array_equal(
            getattr(columnar.ops, f.name), getattr(row_wise.ops, f.name), err_msg=f.name
        )
    # the NVTX ranges' integers too, where every range is named by a registered string (nsys 2025's exports)
    for part in ("ranges", "marks"):
        for f in dataclasses.fields(getattr(row_wise, part)):
            np.testing.assert_array_equal(
                getattr(getattr(columnar, part), f.name),
                getattr(getattr(row_wise, part), f.name),
                err_msg=f.name,
            )
    assert list(columnar.names) == list(row_wise.names) and columnar.domains == row_wise.domains


def table_of(tmp_path, values) -> str:
    path = tmp_path / "t.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE t (a INTEGER, b INTEGER)")
    conn.executemany("INSERT INTO t VALUES (?, ?)", values)
    conn.commit()
    conn.close()
    return f"file:{path}?mode=ro"


def test_int_columns_reads_integers(tmp_path):
    uri = table_of(tmp_path, [(i, -i) for i in range(5000)])
    arr = int_columns(uri, "SELECT a, b FROM t", 2)
    assert arr.shape == (5000, 2)
    np.testing.assert_array_equal(arr[:, 0], np.arange(5000))
    np.testing.assert_array_equal(arr[:, 1], -np.arange(5000))
    assert int_columns(uri, "SELECT a, b FROM t WHERE a < 0", 2).shape == (0, 2)


WRONG = ["text", 1.5, None, b"\x00\x01"]
WRONG_IDS = ["text", "real", "null", "blob"]


@pytest.mark.parametrize("at", [0, 3, BATCH_ROWS + 10], ids=["first", "early", "after-a-batch"])
@pytest.mark.parametrize("wrong", WRONG, ids=WRONG_IDS)
def test_int_columns_refuses_what_is_not_an_integer_wherever_it_is(tmp_path, wrong, at):
    # The reader's SQL has no per-row check: the driver's own typing must refuse the value, in the first row, among
    # the first batch it infers the column's type from, or in a later batch (a change of type), never giving a
    # wrong number. None: the caller's row-wise reader then names it.
    rows = [(i, i) for i in range(BATCH_ROWS + 20)]
    rows[at] = (at, wrong)
    uri = table_of(tmp_path, rows)
    assert int_columns(uri, "SELECT a, b FROM t", 2) is None
    if wrong is not None:
        assert int_columns_with_nulls(uri, "SELECT a, b FROM t", 2) is None


@pytest.mark.parametrize("at", [0, 3, BATCH_ROWS + 10], ids=["first", "early", "after-a-batch"])
def test_int_columns_with_nulls_reads_nulls_and_says_where(tmp_path, at):
    rows = [(i, i) for i in range(BATCH_ROWS + 20)]
    rows[at] = (at, None)
    uri = table_of(tmp_path, rows)
    arr, has_null = int_columns_with_nulls(uri, "SELECT a, b FROM t", 2)
    np.testing.assert_array_equal(np.flatnonzero(has_null), [at])
    np.testing.assert_array_equal(arr[:, 0], np.arange(len(rows)))
    assert arr[at, 1] == 0 and (np.delete(arr[:, 1], at) == np.delete(arr[:, 0], at)).all()


def test_a_column_of_nulls_first_then_text_is_refused(tmp_path):
    # A first batch of NULLs only gives the column no type to infer (the driver takes int64): a text after it
    # must still be refused.
    uri = table_of(tmp_path, [(i, None) for i in range(BATCH_ROWS + 10)] + [(1, "x")])
    assert int_columns_with_nulls(uri, "SELECT a, b FROM t", 2) is None


def damaged_copy(tmp_path, *sql: str) -> str:
    path = tmp_path / "damaged.sqlite"
    path.write_bytes((DATA / "nsys" / "h100-nsys2025.3-roseinfer-decode.sqlite").read_bytes())
    conn = sqlite3.connect(path)
    for statement in sql:
        conn.execute(statement)
    conn.commit()
    conn.close()
    return str(path)


def test_a_text_in_a_runtime_call_that_launched_nothing_is_named(tmp_path):
    # The launching calls are kept in numpy after every call is read: a damaged call that launched nothing is
    # still read, and refused, as the row-wise reader's `OR NOT ok` did.
    path = damaged_copy(
        tmp_path,
        "UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET start = 'x' WHERE rowid = (SELECT max(rowid) FROM "
        "CUPTI_ACTIVITY_KIND_RUNTIME WHERE correlationId NOT IN (SELECT correlationId FROM "
        "CUPTI_ACTIVITY_KIND_KERNEL UNION ALL SELECT correlationId FROM CUPTI_ACTIVITY_KIND_MEMCPY))",
    )
    with pytest.raises(RoseprofError, match="RUNTIME.start holds a text value"):
        read_nsys_sqlite(path, label="damaged.sqlite")


@pytest.mark.parametrize(
    "sql",
    [
        # a launching call with a NULL thread: skipped, its op unattributed
        "UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET globalTid = NULL WHERE correlationId IN "
        "(SELECT correlationId FROM CUPTI_ACTIVITY_KIND_KERNEL LIMIT 5)",
        # a kernel with a NULL correlation id (read as -1), and a call whose id is -1: the SQL filter's reading
        "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET correlationId = NULL WHERE rowid IN "
        "(SELECT rowid FROM CUPTI_ACTIVITY_KIND_KERNEL LIMIT 3)",
        "UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET correlationId = -1 WHERE rowid = 7",
        # a call that launched nothing ending before it starts: not a launching call, not refused
        "UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET end = start - 5 WHERE correlationId NOT IN "
        "(SELECT correlationId FROM CUPTI_ACTIVITY_KIND_KERNEL UNION ALL SELECT correlationId FROM "
        "CUPTI_ACTIVITY_KIND_MEMCPY)",
    ],
    ids=["null-thread", "null-kernel-id", "call-id-minus-one", "odd-idle-call"],
)
def test_launching_calls_are_the_row_wise_readers_on_odd_exports(monkeypatch, tmp_path, sql):
    path = damaged_copy(tmp_path, sql)
    columnar = read_nsys_sqlite(path)
    monkeypatch.setattr(nsys_sqlite, "int_columns", lambda *args: None)
    monkeypatch.setattr(nsys_sqlite, "int_columns_with_nulls", lambda *args: None)
    row_wise = read_nsys_sqlite(path)
    for f in dataclasses.fields(row_wise.ops):
        np.testing.assert_array_equal(
            getattr(columnar.ops, f.name), getattr(row_wise.ops, f.name), err_msg=f.name
        )


def test_a_late_text_value_in_a_kernel_column_is_named(tmp_path):
    path = tmp_path / "late-text.sqlite"
    path.write_bytes((DATA / "nsys" / "h100-nsys2025.3-roseinfer-decode.sqlite").read_bytes())
    conn = sqlite3.connect(path)
    conn.execute(
        "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET streamId = 'x' "
        "WHERE rowid = (SELECT max(rowid) FROM CUPTI_ACTIVITY_KIND_KERNEL)"
    )
    conn.commit()
    conn.close()
    with pytest.raises(RoseprofError, match="streamId holds a text value"):
        read_nsys_sqlite(str(path), label="late-text.sqlite")
