"""Hostile nsys exports, one case per kind of damage: each is read (a name shown with U+FFFD) or refused in one
line that names the user's file, never the run's temporary copy; nothing is left in the traces folder."""

import shutil

import pytest

from tests.helpers import DATA, one_line_error, run_cli
from tests.roseprof.mutate import edit_sqlite

CPU = DATA / "nsys" / "cpu-nsys2022.4-nvtx.sqlite"
MATMUL = DATA / "nsys" / "h100-nsys2025.3-matmul-nvtx.sqlite"


def damaged(tmp_path, src, *sql, name="damaged.sqlite", loose=()):
    path = tmp_path / name
    shutil.copyfile(src, path)
    edit_sqlite(path, *sql, loose=loose)
    return path


def import_(tmp_path, path, *extra, env=None):
    return run_cli(
        "import", path, *extra, "--traces-dir", tmp_path / "t", "--dashboards-dir", tmp_path / "d", env=env
    )


def stored(tmp_path):
    traces = tmp_path / "t"
    return sorted(p.name for p in traces.iterdir()) if traces.exists() else []


WRONG_VALUES = {"NULL": "NULL", "text": "'12x'", "blob": "x'00ff'", "inf": "9e999", "real": "1.5e300"}


@pytest.mark.parametrize("kind", WRONG_VALUES)
@pytest.mark.parametrize(
    "src, table, column",
    [
        (CPU, "NVTX_EVENTS", "start"),
        (MATMUL, "CUPTI_ACTIVITY_KIND_KERNEL", "start"),
        (MATMUL, "CUPTI_ACTIVITY_KIND_KERNEL", "end"),
        (MATMUL, "CUPTI_ACTIVITY_KIND_KERNEL", "streamId"),
        (MATMUL, "CUPTI_ACTIVITY_KIND_RUNTIME", "correlationId"),
    ],
    ids=lambda v: getattr(v, "name", v),
)
def test_wrong_values_in_integer_columns_are_refused_in_one_line(tmp_path, src, table, column, kind):
    value = WRONG_VALUES[kind]
    path = damaged(
        tmp_path,
        src,
        f"UPDATE {table} SET {column} = {value} WHERE rowid IN (SELECT rowid FROM {table} LIMIT 3)",
        loose=[table],
    )
    code, out, err = import_(tmp_path, path)
    if code == 0:  # NULL is what nsys writes where a value is unknown (a stream, a correlation id)
        assert kind == "NULL" and column in ("streamId", "correlationId"), err
    else:
        line = one_line_error(code, out, err, naming=path)
        assert ".tmp-" not in line and f"{table}" in line
    assert code == 0 or stored(tmp_path) == []


def test_huge_integers_are_refused(tmp_path):
    path = damaged(
        tmp_path,
        CPU,
        "UPDATE NVTX_EVENTS SET end = 9223372036854775807 WHERE rowid = 5",
        loose=["NVTX_EVENTS"],
    )
    line = one_line_error(*import_(tmp_path, path), naming=path)
    assert "out of range" in line and stored(tmp_path) == []


def test_odd_gpu_and_metadata_values_are_kept_safely(tmp_path):
    path = damaged(
        tmp_path,
        MATMUL,
        "UPDATE TARGET_INFO_GPU SET totalMemory = 9e999, smCount = x'00ff', name = CAST(x'48ff31' AS TEXT)",
        "UPDATE META_DATA_EXPORT SET value = x'ff' WHERE name = 'EXPORT_PRODUCT_VERSION'",
        loose=["TARGET_INFO_GPU"],
    )
    code, out, err = import_(tmp_path, path)
    assert code == 0, err
    (run,) = (tmp_path / "t").iterdir()
    manifest = (run / "manifest.json").read_text()
    assert '"totalMemory": null' in manifest and "H\\ufffd1" in manifest


def test_kernels_on_device_ids_far_apart_are_read_with_their_steps(tmp_path):
    # an engine capture with its step log whose kernels name devices 0xDEADBEEF and -5: the steps' GPU busy time and
    # their GPUs were counted over the ids' range (a 27.8 GiB array)
    graphs = DATA / "nsys" / "h100-nsys2025.3-roseinfer-graphs"
    path = damaged(
        tmp_path,
        f"{graphs}.sqlite",
        "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET deviceId = 3735928559 WHERE rowid % 2 = 0",
        "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET deviceId = -5 WHERE rowid % 3 = 0",
    )
    code, out, err = import_(tmp_path, path, "--steplog", f"{graphs}.steplog.jsonl")
    assert code == 0, err
    assert "Traceback" not in err and "decode steps" in out


def test_one_invalid_utf8_name_is_shown_with_replacement_characters(tmp_path):
    path = damaged(
        tmp_path,
        CPU,
        "UPDATE StringIds SET value = CAST(x'726f7365ff696e666572' AS TEXT) "
        "WHERE id = (SELECT textId FROM NVTX_EVENTS WHERE textId IS NOT NULL LIMIT 1)",
        "UPDATE NVTX_EVENTS SET text = CAST(x'c328' AS TEXT) WHERE rowid = (SELECT min(rowid) FROM NVTX_EVENTS "
        "WHERE textId IS NULL AND eventType = 59)",
    )
    code, out, err = import_(tmp_path, path)
    assert code == 0, err
    assert "\ufffd" in out


def test_malformed_schema_is_one_line(tmp_path):
    path = damaged(
        tmp_path,
        CPU,
        "PRAGMA writable_schema = ON",
        "UPDATE sqlite_master SET sql = 'CREATE TABLE StringIds (id INTEGER,\n value TEXT,\n oops(' "
        "WHERE name = 'StringIds'",
    )
    line = one_line_error(*import_(tmp_path, path), naming=path)
    assert "malformed" in line and stored(tmp_path) == []


def test_a_view_that_never_ends_is_refused_within_the_time_bound(tmp_path):
    path = damaged(
        tmp_path,
        CPU,
        "DROP TABLE NVTX_EVENTS",
        "CREATE VIEW NVTX_EVENTS AS WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n) "
        "SELECT x AS start, x + 1 AS end, 59 AS eventType, 'r' AS text, NULL AS textId, 1 AS globalTid, "
        "0 AS domainId FROM n",
    )
    code, out, err = import_(tmp_path, path, env={"ROSEPROF_SQLITE_TIME_LIMIT_S": "1"})
    line = one_line_error(code, out, err, naming=path)
    assert "took over 1 s and was stopped" in line and stored(tmp_path) == []


@pytest.mark.parametrize(
    "sql, message",
    [
        (["DROP TABLE StringIds"], "no StringIds table"),
        (
            ["ALTER TABLE NVTX_EVENTS RENAME COLUMN eventType TO kind"],
            "NVTX_EVENTS lacks column(s) eventType",
        ),
        (["UPDATE NVTX_EVENTS SET end = start - 5 WHERE rowid = 7"], "ends before it starts"),
        (["UPDATE META_DATA_EXPORT SET value = x'00' WHERE name = 'EXPORT_SCHEMA_VERSION_MAJOR'"], "schema"),
        (["DROP TABLE NVTX_EVENTS"], "nothing to analyse"),
    ],
)
def test_damaged_tables_are_one_line(tmp_path, sql, message):
    src = CPU
    if "META_DATA_EXPORT" in sql[0]:
        src = MATMUL
    path = damaged(tmp_path, src, *sql)
    line = one_line_error(*import_(tmp_path, path), naming=path)
    assert message in line and ".tmp-" not in line and stored(tmp_path) == []


def test_odd_characters_in_the_file_name_are_fine(tmp_path):
    odd = tmp_path / "a?b#c%20 d.sqlite"
    shutil.copyfile(CPU, odd)
    code, out, err = import_(tmp_path, odd)
    assert code == 0, err


def test_the_imported_file_is_a_copy(tmp_path):
    """Editing (or rewriting in place) the user's file later leaves the run's raw copy unchanged."""
    src = tmp_path / "mine.sqlite"
    shutil.copyfile(CPU, src)
    code, _, err = import_(tmp_path, src)
    assert code == 0, err
    (run,) = (tmp_path / "t").iterdir()
    copy = run / "raw" / "mine.sqlite"
    before = copy.read_bytes()
    assert copy.stat().st_ino != src.stat().st_ino and copy.stat().st_nlink == 1
    with open(src, "r+b") as fh:  # in place, as an editor or a new export over the old file would
        fh.write(b"\0" * 4096)
    assert copy.read_bytes() == before == CPU.read_bytes()
