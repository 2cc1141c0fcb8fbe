"""Reads that would never end: an nsys export whose table is replaced by a view that never ends is stopped by a
bound on SQLite's work (not only on wall time, which a busy machine stretches), for every table the reader reads
and every base fixture of the fuzz suite; a SIGTERM to an import in progress leaves no `.tmp-` folder."""

import os
import signal
import subprocess
import sys
import time

import pytest

from tests.helpers import one_line_error
from tests.roseprof.test_fuzz import NSYS_COLUMNS, SQLITE_FIXTURES
from tests.roseprof.test_hostile_files import damaged, import_, stored


def endless_view(table: str, columns: list[str]) -> list[str]:
    """SQL replacing `table` by a view with its columns whose rows never end (the robustness run's attack)."""
    cols = ", ".join(f'x AS "{c}"' for c in columns)
    return [
        f'DROP TABLE "{table}"',
        f'CREATE VIEW "{table}" AS WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n) '
        f"SELECT {cols} FROM n",
    ]


CASES = [(src, table) for src in SQLITE_FIXTURES for table in ("NVTX_EVENTS", "StringIds")] + [
    (SQLITE_FIXTURES[1], "CUPTI_ACTIVITY_KIND_KERNEL"),
    (SQLITE_FIXTURES[1], "CUPTI_ACTIVITY_KIND_RUNTIME"),
]


# The first case runs to the default work bound (250-450 million steps for these files, ~10 s of CPU a case here);
# the others, which differ in the table and the file read, not in the bound, to a lower one of 20 million steps
# (ROSEPROF_SQLITE_STEP_LIMIT): still 4x what any of these files needs with all its tables views (test_fuzz.py).
LOWER_BOUND = {"ROSEPROF_SQLITE_STEP_LIMIT": "20000000"}


@pytest.mark.parametrize("src, table", CASES, ids=[f"{s.stem[:24]}-{t}" for s, t in CASES])
def test_a_view_that_never_ends_is_stopped_by_the_work_bound(tmp_path, src, table):
    path = damaged(tmp_path, src, *endless_view(table, NSYS_COLUMNS[table]))
    # The wall-time bound out of the way: the work bound alone must stop it.
    bound = {} if (src, table) == CASES[0] else LOWER_BOUND
    code, out, err = import_(tmp_path, path, env={"ROSEPROF_SQLITE_TIME_LIMIT_S": "100000", **bound})
    if code == 0:  # a table the reader needs only part of (a view that ends where the reader stops): fine
        assert len(stored(tmp_path)) == 1
        return
    line = one_line_error(code, out, err, naming=path)
    assert "million SQLite steps" in line or "could not be read" in line, line
    assert stored(tmp_path) == []


def test_the_work_bound_leaves_real_exports_alone():
    """Every real export of the suite reads within a tenth of its bound (under 1 step a byte, 100 allowed)."""
    from roseprof.drivers.nsys.sqlite import Export

    for src in SQLITE_FIXTURES:
        from roseprof.drivers.nsys.reader import _read

        db = Export(str(src), str(src))
        try:
            _read(db)
        finally:
            db.close()
        assert db.steps < db.step_limit / 10, (src, db.steps)


def test_sigterm_during_an_import_leaves_no_temporary_folder(tmp_path):
    path = damaged(tmp_path, SQLITE_FIXTURES[0], *endless_view("StringIds", NSYS_COLUMNS["StringIds"]))
    traces = tmp_path / "t"
    proc = subprocess.Popen(
        [sys.executable, "-m", "roseprof", "import", str(path), "--traces-dir", str(traces),
         "--dashboards-dir", str(tmp_path / "d")],
        stderr=subprocess.PIPE, text=True,
        env={**os.environ, "ROSEPROF_SQLITE_STEP_LIMIT": "1e15", "ROSEPROF_SQLITE_TIME_LIMIT_S": "1e6"},
    )  # fmt: skip
    try:
        for _ in range(600):  # the import has begun once its temporary folder exists
            if traces.exists() and any(p.name.startswith(".tmp-") for p in traces.iterdir()):
                break
            time.sleep(0.1)
        else:
            pytest.fail("the import never started")
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130 and "Traceback" not in err, err
    assert not traces.exists()  # the import made the folder; its run's abort took it away
