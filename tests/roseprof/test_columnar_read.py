"""The nsys reader's columnar fast path (drivers/nsys/columnar.py, issue 43): the GPU ops and runtime calls it
reads through the ADBC SQLite driver equal the row-wise reader's, value for value, on every real export; and
whatever it cannot read cleanly falls back to the row-wise reader, which names what is wrong."""

import dataclasses
import sqlite3

import numpy as np
import pytest

import roseprof.drivers.nsys.sqlite as nsys_sqlite
from roseprof.drivers.nsys.columnar import BATCH_ROWS, int_columns, int_columns_with_nulls
from roseprof.drivers.nsys.reader import read_nsys_sqlite
from roseprof.errors import RoseprofError
from tests.helpers import DATA

EXPORTS = sorted(p.name for p in (DATA / "nsys").glob("*.sqlite"))


@pytest.mark.parametrize("name", EXPORTS)
def test_columnar_and_row_wise_reads_are_equal(monkeypatch, name):
    path = str(DATA / "nsys" / name)
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
    assert list(columnar.names) == list(row_wise.names)


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


@pytest.mark.parametrize("late", ["text", 1.5, None, b"\x00\x01"], ids=["text", "real", "null", "blob"])
def test_int_columns_refuses_what_is_not_an_integer_even_after_many_rows(tmp_path, late):
    # The driver infers a column's type from its first batch of rows: a value of another type in a later batch
    # must still come back as None (the caller's row-wise reader then names it), never as a wrong number.
    uri = table_of(tmp_path, [(i, i) for i in range(BATCH_ROWS + 10)] + [(1, late)])
    assert int_columns(uri, "SELECT a, b FROM t", 2) is None


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
