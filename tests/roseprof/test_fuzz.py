"""Property-based fuzzing (hypothesis, derandomized: the same cases on every run) of every reader (nsys SQLite,
Kineto JSON, ncu CSV; step logs and stored runs in test_fuzz_logs_and_runs.py), through the CLI's error handling (`roseprof.cli.main`, in-process; a few in a real subprocess).

Every case is a real fixture damaged one way. The property, whatever the damage:
- the file is read (exit 0, one new complete run), or refused in ONE line naming the user's file (exit 2);
- never a traceback (an exception escaping `main` fails the test), never an "internal error" warning;
- never a hang: each case runs under an alarm (CASE_SECONDS) and SQLite under its own time limit;
- no run folder (nor a .tmp- one) is left for a refused file, and the earlier run in the store is unchanged.

How many cases: ROSEPROF_FUZZ_EXAMPLES per test (default 12: the whole file takes about a minute here); the long
run in docs/RELIABILITY.md sets it to 150 (more cases find more; any number works). A reader joins by one entry
in READERS: its fixtures and the mutations that fit its format (mutate.py, mutate_text.py).
"""

from __future__ import annotations

import hashlib
import os
import random
import shutil
import signal
import sqlite3
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.helpers import DATA, run_cli
from tests.roseprof.mutate import loosen
from tests.roseprof.mutate_text import csv_encoding, csv_rows, kineto_structure, kineto_values

EXAMPLES = int(os.environ.get("ROSEPROF_FUZZ_EXAMPLES", "12"))
CASE_SECONDS = 60
# SQLite's bounds for a case: its time, and its work (ROSEPROF_SQLITE_STEP_LIMIT). A view that never ends ("endless
# view") runs to the work bound, 250-450 million steps by default for these files (~10 s of CPU a case here).
# That bound only applies to a file with a view (the row-wise reader), and every fixture here with all its tables
# made views reads in under 5 million steps: 50 million still reads each one and stops an endless view 5x sooner.
# The default bound stops one in test_endless_reads.py.
CASE_ENV = {"ROSEPROF_SQLITE_TIME_LIMIT_S": "20", "ROSEPROF_SQLITE_STEP_LIMIT": "50000000"}
FUZZ = settings(
    max_examples=EXAMPLES,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
    ],
)
NSYS = DATA / "nsys"
PUBLIC = NSYS / "public"
SQLITE_FIXTURES = [
    NSYS / "cpu-nsys2022.4-nvtx.sqlite",
    NSYS / "h100-nsys2025.3-matmul-nvtx.sqlite",
    PUBLIC / "NVIDIA__Fuser__report2.sqlite",
    PUBLIC / "hpcgroup__pipit__saxpy-mpi-cuda_nsys_perlmutter0.sqlite",
]
STEPLOG = NSYS / "h100-nsys2025.3-roseinfer-decode.steplog.jsonl"
DECODE = NSYS / "h100-nsys2025.3-roseinfer-decode.sqlite"

# What the nsys reader reads: (table, columns).
NSYS_COLUMNS = {
    "NVTX_EVENTS": ["start", "end", "eventType", "text", "textId", "globalTid", "domainId"],
    "StringIds": ["id", "value"],
    "CUPTI_ACTIVITY_KIND_KERNEL": [
        "start",
        "end",
        "demangledName",
        "correlationId",
        "globalPid",
        "deviceId",
        "streamId",
    ],
    "CUPTI_ACTIVITY_KIND_MEMCPY": ["start", "end", "correlationId", "globalPid"],
    "CUPTI_ACTIVITY_KIND_RUNTIME": ["start", "end", "correlationId", "globalTid", "nameId"],
    "ThreadNames": ["nameId", "globalTid"],
    "TARGET_INFO_GPU": ["id", "name", "totalMemory", "smCount"],
    "TARGET_INFO_SESSION_START_TIME": ["utcEpochNs"],
    "META_DATA_EXPORT": ["name", "value"],
    "EXPORT_META_DATA": ["name", "value"],
}
WRONG_VALUES = [
    "NULL", "'text'", "''", "x'00ff'", "9e999", "-9e999", "1.5", "9223372036854775807", "-9223372036854775808",
    "-1", "0", "CAST(x'c328ff' AS TEXT)", "'" + "y" * 5000 + "'",
]  # fmt: skip


# ---- the property -------------------------------------------------------------------------------------------


class Hang(Exception):
    pass


def _alarm(signum, frame):
    raise Hang(f"a case ran over {CASE_SECONDS} s")


def folder_hash(folder: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(folder.rglob("*")):
        if p.is_file():
            h.update(p.name.encode() + p.read_bytes())
    return h.hexdigest()


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A store holding one earlier, good run that no case may change."""
    root = tmp_path_factory.mktemp("fuzz")
    code, _, err = run_cli("import", DECODE, "--steplog", STEPLOG, "--name", "earlier", "--traces-dir", root / "t",
                           "--dashboards-dir", root / "d")  # fmt: skip
    assert code == 0, err
    (earlier,) = (root / "t").iterdir()
    return root, earlier, folder_hash(earlier)


def check_cli(store, args: list, label, env=None, on_stored=None) -> int:
    """Run `roseprof ARGS`; assert the property; returns the exit code. `on_stored(folder)`: more to assert of the
    run an import stored, before it is removed."""
    root, earlier, earlier_hash = store
    traces = root / "t"
    before = {p.name for p in traces.iterdir()}
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(CASE_SECONDS)
    try:
        code, out, err = run_cli(*args, "--traces-dir", traces, "--dashboards-dir", root / "d",
                                 env={**CASE_ENV, **(env or {})})  # fmt: skip
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    after = {p.name for p in traces.iterdir()}
    assert "internal error" not in err and "Traceback" not in err, err
    if args[0] == "import":
        new = after - before
        if code == 0:
            assert len(new) == 1 and not any(n.startswith(".") for n in new), (new, err)
            if on_stored is not None:
                on_stored(traces / next(iter(new)))
            shutil.rmtree(traces / new.pop())  # keep the store small between cases
        else:
            lines = [line for line in err.splitlines() if line.strip()]
            assert code == 2 and len(lines) == 1, (code, err)
            assert lines[0].startswith("roseprof: error: ") and str(label) in lines[0], lines[0]
            assert ".tmp-" not in lines[0]
            assert new == set(), f"a refused file left {new}"
    else:
        assert code in (0, 1) or (code == 2 and len([x for x in err.splitlines() if x.strip()]) == 1), (
            code,
            err,
        )
    assert folder_hash(earlier) == earlier_hash, "an earlier run changed"
    return code


# ---- mutations of SQLite exports ----------------------------------------------------------------------------


def _tables(conn) -> list[str]:
    return [
        r[0]
        for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")
        if r[0] in NSYS_COLUMNS
    ]


def _columns(conn, table) -> list[str]:
    return [r[1] for r in conn.execute(f'PRAGMA table_info("{table}")') if r[1] in NSYS_COLUMNS[table]]


def mutate_structure(conn, rng: random.Random) -> str:
    table = rng.choice(_tables(conn))
    cols = _columns(conn, table)
    how = rng.choice(
        ["drop table", "rename table", "drop column", "rename column", "empty table", "view", "endless view"]
    )
    if how == "drop table":
        conn.execute(f'DROP TABLE "{table}"')
    elif how == "rename table":
        conn.execute(f'ALTER TABLE "{table}" RENAME TO "{table}_old"')
    elif how == "empty table":
        conn.execute(f'DELETE FROM "{table}"')
    elif how == "view":  # the same rows behind a view
        conn.execute(f'ALTER TABLE "{table}" RENAME TO "{table}_t"')
        conn.execute(f'CREATE VIEW "{table}" AS SELECT * FROM "{table}_t"')
    elif how == "endless view":  # rows that never end (WITH RECURSIVE): stopped by the reader's work bound
        conn.execute(f'DROP TABLE "{table}"')
        names = ", ".join(f'x AS "{c}"' for c in NSYS_COLUMNS[table])
        conn.execute(f'CREATE VIEW "{table}" AS WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n) '
                     f"SELECT {names} FROM n")  # fmt: skip
    elif cols:
        col = rng.choice(cols)
        loosen(conn, table)  # no index or constraint stands in the way
        if how == "drop column":
            conn.execute(f'ALTER TABLE "{table}" DROP COLUMN "{col}"')
        else:
            conn.execute(f'ALTER TABLE "{table}" RENAME COLUMN "{col}" TO "{col}_x"')
    return f"{how} {table}"


def mutate_values(conn, rng: random.Random) -> str:
    table = rng.choice(_tables(conn))
    cols = _columns(conn, table)
    if not cols:
        return "nothing"
    col, value = rng.choice(cols), rng.choice(WRONG_VALUES)
    loosen(conn, table)
    n = conn.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0]
    rows = rng.sample(range(1, n + 1), min(n, rng.choice([1, 3, 50]))) if n else []
    conn.execute(
        f'UPDATE "{table}" SET "{col}" = {value} WHERE rowid IN ({",".join(map(str, rows)) or "NULL"})'
    )
    return f"{table}.{col} = {value[:20]}"


def mutate_ranges_and_ids(conn, rng: random.Random) -> str:
    tables = _tables(conn)
    how = rng.choice(["open ranges", "reversed ranges", "event types", "dangling ids", "duplicated ids",
                      "duplicated rows", "huge name", "invalid utf-8 names", "hostile names"])  # fmt: skip
    if how in ("open ranges", "reversed ranges", "event types") and "NVTX_EVENTS" in tables:
        loosen(conn, "NVTX_EVENTS")
        sql = {
            "open ranges": "UPDATE NVTX_EVENTS SET end = NULL WHERE abs(random()) % 4 = 0",
            "reversed ranges": "UPDATE NVTX_EVENTS SET start = end, end = start WHERE abs(random()) % 7 = 0",
            "event types": "UPDATE NVTX_EVENTS SET eventType = (59, 60, 34, 75, 70, 71, 999)[1] WHERE 0",
        }[how]
        if how == "event types":
            sql = f"UPDATE NVTX_EVENTS SET eventType = {rng.choice([59, 60, 34, 75, 70, 71, 999])} WHERE abs(random()) % 5 = 0"
        conn.execute(sql)
    elif how == "dangling ids" and "CUPTI_ACTIVITY_KIND_KERNEL" in tables:
        conn.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET correlationId = correlationId + 1000000007 "
                     "WHERE abs(random()) % 3 = 0")  # fmt: skip
    elif how == "duplicated ids" and "CUPTI_ACTIVITY_KIND_RUNTIME" in tables:
        loosen(conn, "CUPTI_ACTIVITY_KIND_RUNTIME")
        conn.execute("UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET correlationId = (SELECT min(correlationId) FROM "
                     "CUPTI_ACTIVITY_KIND_KERNEL) WHERE abs(random()) % 4 = 0")  # fmt: skip
    elif how == "duplicated rows":
        table = rng.choice(tables)
        loosen(conn, table)
        conn.execute(f'INSERT INTO "{table}" SELECT * FROM "{table}" WHERE abs(random()) % 3 = 0')
    elif how == "huge name":
        loosen(conn, "StringIds")
        conn.execute(f"UPDATE StringIds SET value = printf('%.{rng.choice([70000, 2000000])}c', 'n') "
                     "WHERE id IN (SELECT id FROM StringIds ORDER BY random() LIMIT 3)")  # fmt: skip
    elif how == "invalid utf-8 names":
        conn.execute("UPDATE StringIds SET value = CAST(randomblob(12) AS TEXT) WHERE abs(random()) % 3 = 0")
    elif how == "hostile names":
        conn.execute("UPDATE StringIds SET value = '[/][bold]' || char(27) || '[2J' || char(0) || value "
                     "WHERE abs(random()) % 2 = 0")  # fmt: skip
    return how


def truncate(path: Path, rng: random.Random) -> str:
    size = path.stat().st_size
    cut = rng.randrange(size)
    with open(path, "r+b") as fh:
        fh.truncate(cut)
    return f"truncated at {cut}"


def flip_bits(path: Path, rng: random.Random) -> str:
    data = bytearray(path.read_bytes())
    n = rng.choice([1, 4, 64])
    for _ in range(n):
        i = rng.randrange(len(data))
        data[i] ^= 1 << rng.randrange(8)
    path.write_bytes(bytes(data))
    return f"{n} bit(s) flipped"


def sql_mutation(fn):
    def apply(path: Path, rng: random.Random) -> str:
        conn = sqlite3.connect(path)
        try:
            what = fn(conn, rng)
            conn.commit()
        except sqlite3.Error as e:  # a mutation SQLite itself refuses: the file stays as it was
            what = f"not applied ({e})"
        finally:
            conn.close()
        return what

    apply.__name__ = fn.__name__
    return apply


@dataclass(frozen=True)
class ReaderCase:
    """One reader in the fuzz suite: real files it reads, and the mutations that fit their format."""

    name: str
    fixtures: tuple[Path, ...]
    mutations: tuple  # (path, rng) -> description


READERS = [
    ReaderCase(
        "nsys-sqlite",
        tuple(SQLITE_FIXTURES),
        (
            truncate,
            flip_bits,
            sql_mutation(mutate_structure),
            sql_mutation(mutate_values),
            sql_mutation(mutate_ranges_and_ids),
        ),
    ),  # fmt: skip
    ReaderCase(
        "kineto-json",
        (
            DATA / "torch" / "h100-torch2.11-matmul-trace.json",
            DATA / "torch" / "pytorch__kineto__worker0.1623143089861.pt.trace.json.gz",
        ),
        (truncate, flip_bits, kineto_values, kineto_structure),
    ),
    ReaderCase(
        "ncu-csv",
        (
            DATA / "ncu" / "tn-details.csv",
            DATA / "ncu" / "tn-raw.csv",
            DATA / "ncu" / "brycelelbach__nsightful__copy_blocked.csv",
        ),
        (truncate, flip_bits, csv_encoding, csv_rows),
    ),  # fmt: skip
]
READER_MUTATIONS = [(r, m) for r in READERS for m in r.mutations]


@pytest.mark.parametrize(
    "reader, mutation", READER_MUTATIONS, ids=lambda v: getattr(v, "name", getattr(v, "__name__", v))
)
@FUZZ
@given(seed=st.integers(0, 2**32 - 1), which=st.integers(0, 100))
def test_damaged_file_is_read_or_refused_in_one_line(store, tmp_path, reader, mutation, seed, which):
    src = reader.fixtures[which % len(reader.fixtures)]
    path = tmp_path / f"case-{seed}{''.join(src.suffixes[-2:]) if src.name.endswith('.gz') else src.suffix}"
    shutil.copyfile(src, path)
    mutation(path, random.Random(seed))
    check_cli(store, ["import", path], label=path)


# ---- a few through a real subprocess, memory bounded --------------------------------------------------------


@pytest.mark.parametrize("mutation", ["huge name", "truncate", "bits"])
def test_real_process_with_bounded_memory(tmp_path, mutation):
    """`python -m roseprof` itself (no in-process shortcut) under a 2 GiB address-space limit."""
    import resource
    import subprocess
    import sys

    src = SQLITE_FIXTURES[1]
    path = tmp_path / "case.sqlite"
    shutil.copyfile(src, path)
    rng = random.Random(7)
    if mutation == "huge name":
        conn = sqlite3.connect(path)
        conn.execute(
            "UPDATE StringIds SET value = printf('%.50000000c', 'n') WHERE id = (SELECT min(id) FROM StringIds)"
        )
        conn.commit()
        conn.close()
    else:
        (truncate if mutation == "truncate" else flip_bits)(path, rng)

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))

    proc = subprocess.run(
        [sys.executable, "-m", "roseprof", "import", str(path), "--traces-dir", str(tmp_path / "t"),
         "--dashboards-dir", str(tmp_path / "d")],
        capture_output=True, text=True, timeout=120, preexec_fn=limit,
        env={**os.environ, "OPENBLAS_NUM_THREADS": "1"},
    )  # fmt: skip
    assert "Traceback" not in proc.stderr and "MemoryError" not in proc.stderr, proc.stderr
    if proc.returncode != 0:
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1 and str(path) in lines[0], proc.stderr
        assert not (tmp_path / "t").exists() or list((tmp_path / "t").iterdir()) == []
