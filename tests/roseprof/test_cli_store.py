"""`roseprof import / ls / show` over the run store, as a user runs them."""

import json
import os
import shutil
import sqlite3
import threading

import pytest

from roseprof.api.intake import previous_run
from roseprof.run import store as store_module
from roseprof.run.store import RunStore
from tests.helpers import DATA, assert_one_line_error, roseprof, run_cli

MATMUL = DATA / "nsys" / "h100-nsys2025.3-matmul-nvtx.sqlite"
DECODE = DATA / "nsys" / "h100-nsys2025.3-roseinfer-decode.sqlite"
DECODE_LOG = DATA / "nsys" / "h100-nsys2025.3-roseinfer-decode.steplog.jsonl"


def dashboards(tmp_path):
    """Every command that can render a dashboard writes it under the test's own folder."""
    return ["--dashboards-dir", tmp_path / "dashboards"]


def run_dirs(traces):
    return sorted(p for p in traces.iterdir()) if traces.exists() else []


def test_import_show_ls(tmp_path):
    traces = tmp_path / "traces"
    proc = roseprof(
        "import",
        DECODE,
        "--name",
        "gpu",
        "--steplog",
        DECODE_LOG,
        "--traces-dir",
        traces,
        *dashboards(tmp_path),
    )
    assert proc.returncode == 0, proc.stderr
    assert "roseinfer.decode_step" in proc.stdout and "run folder:" in proc.stdout
    (run,) = run_dirs(traces)
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "complete" and manifest["tool"]["version"].startswith("2025.3")
    for name in (
        "summary.json",
        "steps.json",
        "itl.json",
        "ranges.npz",
        "gpu_ops.npz",
        "raw",
        "steplog.jsonl",
    ):
        assert (run / name).exists(), name

    shown = roseprof(
        "show", "gpu", "--json", "--traces-dir", traces, "--dashboards-dir", tmp_path / "d"
    )  # by name
    assert shown.returncode == 0, shown.stderr
    summary = json.loads(shown.stdout)
    assert summary == json.loads((run / "summary.json").read_text())
    assert summary["steps"]["count"] == 71
    assert (
        roseprof("show", run.name[:20], "--traces-dir", traces, "--dashboards-dir", tmp_path / "d").returncode
        == 0
    )  # by unique prefix

    listed = roseprof("ls", "--json", env={"ROSEPROF_TRACES_DIR": str(traces)})  # the environment variable
    assert [r["id"] for r in json.loads(listed.stdout)] == [run.name]


def test_name_means_the_latest_run(tmp_path):
    traces = tmp_path / "t"
    for _ in range(2):
        assert (
            roseprof(
                "import", MATMUL, "--name", "mm", "--traces-dir", traces, *dashboards(tmp_path)
            ).returncode
            == 0
        )
    runs = json.loads(roseprof("ls", "--json", "--traces-dir", traces).stdout)
    shown = json.loads(roseprof("show", "mm", "--json", "--traces-dir", traces).stdout)
    assert shown["run_id"] == runs[-1]["id"]


def test_runs_created_within_one_second_keep_their_order(tmp_path, monkeypatch):
    """Three runs of one name stored within one second (a quick command captured three times): oldest first and
    the name the last one, whatever the random part of their ids says (here: the reverse of their order)."""
    monkeypatch.setattr(store_module, "utc_now", lambda: "2026-11-30T09:15:12Z")
    parts = iter(["ffff", "eeee", "dddd"])
    monkeypatch.setattr(store_module.secrets, "token_hex", lambda n: next(parts))
    store = RunStore(tmp_path / "t")
    made = [store.new_run("quick", "nsys").finish("complete").id for _ in range(3)]
    assert [r.id for r in store.runs()] == made
    assert store.resolve("quick").id == made[-1]
    assert previous_run(store, store.resolve(made[-1])).id == made[1]


def test_a_bad_creation_order_is_dropped_not_a_damaged_run(tmp_path):
    """created_ns only orders runs of one second: one that is not a count is left out, the run still whole."""
    store = RunStore(tmp_path / "t")
    run = store.new_run("quick", "nsys").finish("complete")
    manifest = json.loads((run.path / "manifest.json").read_text())
    (run.path / "manifest.json").write_text(json.dumps({**manifest, "created_ns": "soon"}))
    (listed,) = store.runs()
    assert listed.manifest["status"] == "complete" and listed.manifest["created_ns"] is None


def test_concurrent_imports_do_not_collide(tmp_path):
    traces = tmp_path / "t"
    results = []
    threads = [
        threading.Thread(
            target=lambda: results.append(
                roseprof("import", MATMUL, "--name", "same", "--traces-dir", traces, *dashboards(tmp_path))
            )
        )
        for _ in range(3)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(r.returncode == 0 for r in results)
    assert len(run_dirs(traces)) == 3


def test_unknown_and_ambiguous_runs(tmp_path):
    traces = tmp_path / "t"
    assert_one_line_error(
        roseprof("show", "nope", "--traces-dir", traces, "--dashboards-dir", tmp_path / "d"),
        2,
        "no run 'nope'",
    )
    for _ in range(2):
        roseprof("import", MATMUL, "--name", "x", "--traces-dir", traces, *dashboards(tmp_path))
    assert_one_line_error(roseprof("show", "2", "--traces-dir", traces), 2, "ambiguous")


def _bad_files(tmp_path):
    not_sqlite = tmp_path / "notes.sqlite"
    not_sqlite.write_text("hello, not a database\n" * 10)
    empty = tmp_path / "empty.sqlite"
    empty.write_bytes(b"")
    truncated = tmp_path / "truncated.sqlite"
    truncated.write_bytes(MATMUL.read_bytes()[: MATMUL.stat().st_size // 3])
    no_tables = tmp_path / "plain.sqlite"
    with sqlite3.connect(no_tables) as c:
        c.execute("CREATE TABLE t (x)")
    future = tmp_path / "future.sqlite"
    shutil.copyfile(MATMUL, future)
    with sqlite3.connect(future) as c:
        c.execute("UPDATE META_DATA_EXPORT SET value = '9' WHERE name = 'EXPORT_SCHEMA_VERSION_MAJOR'")
        c.execute("UPDATE META_DATA_EXPORT SET value = '9.0.0' WHERE name = 'EXPORT_SCHEMA_VERSION'")
    missing = tmp_path / "missing-tables.sqlite"
    shutil.copyfile(MATMUL, missing)
    with sqlite3.connect(missing) as c:
        c.execute("DROP TABLE NVTX_EVENTS")
        c.execute("DROP TABLE CUPTI_ACTIVITY_KIND_KERNEL")
    return [
        (not_sqlite, "is not an SQLite database"),
        (empty, "is empty"),
        (truncated, "truncated"),
        (no_tables, "not an nsys export"),
        (future, "schema 9.0.0 is not supported"),
        (missing, "has neither NVTX_EVENTS nor CUPTI_ACTIVITY_KIND_KERNEL"),
        (tmp_path / "does-not-exist.sqlite", "no such file"),
        (tmp_path, "is a folder"),
    ]


def test_bad_input_is_one_line_exit_2_and_leaves_nothing(tmp_path):
    traces = tmp_path / "traces"
    for path, message in _bad_files(tmp_path):
        proc = roseprof("import", path, "--traces-dir", traces, *dashboards(tmp_path))
        assert_one_line_error(proc, 2, message)
        assert run_dirs(traces) == [], f"{path.name} left a run folder behind"
    # The first run into a folder that does not exist yet: the folders the import made go with the run; one that
    # held a run before stays.
    nested = tmp_path / "new" / "nested" / "traces"
    bad = tmp_path / "config.json"
    bad.write_text('{"model": "gpt2"}')
    into_nested = ["--traces-dir", nested, *dashboards(tmp_path)]
    assert_one_line_error(roseprof("import", bad, *into_nested), 2, "not a trace")
    assert not (tmp_path / "new").exists()
    assert roseprof("import", MATMUL, *into_nested).returncode == 0
    assert_one_line_error(roseprof("import", bad, *into_nested), 2, "not a trace")
    assert len(run_dirs(nested)) == 1


def test_a_run_whose_folder_cannot_be_made_whole_leaves_nothing(tmp_path, monkeypatch):
    # The run's raw/ folder fails (a full disk): its .tmp folder goes, and so do the traces folders made for it.
    import errno
    from pathlib import Path

    from roseprof.errors import RoseprofError

    real_mkdir = Path.mkdir

    def mkdir(self, *args, **kwargs):
        if self.name == "raw":
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self))
        return real_mkdir(self, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", mkdir)
    with pytest.raises(
        RoseprofError, match="cannot create a run in the traces folder .*: No space left on device"
    ):
        RunStore(tmp_path / "new" / "traces").new_run("quick", "nsys")
    assert not (tmp_path / "new").exists()
    kept = tmp_path / "kept"  # a traces folder that was there before keeps what it held, and gains nothing
    (kept / "notes").mkdir(parents=True)
    with pytest.raises(RoseprofError):
        RunStore(kept).new_run("quick", "nsys")
    assert sorted(p.name for p in kept.iterdir()) == ["notes"]


@pytest.mark.parametrize("args", [["show"], ["import"], ["nope"]])
def test_usage_errors_exit_2(args):
    proc = roseprof(*args)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr


def test_the_suites_default_folders_are_its_own(tmp_path_factory):
    """A test that forgets --traces-dir lands in the session's own folder, where the session's guard looks; a user's
    `make demo` into the checkout's traces/ and dashboards/ while the suite runs is not the suite's business (the
    guard once failed the whole suite for dashboards a user wrote from the same checkout)."""
    from pathlib import Path

    base = Path(tmp_path_factory.getbasetemp()).resolve()
    for key in ("ROSEPROF_TRACES_DIR", "ROSEPROF_DASHBOARDS_DIR"):
        assert base in Path(os.environ[key]).resolve().parents
    listed = roseprof("ls", "--json")  # no --traces-dir: the default, from the environment
    assert listed.returncode == 0, listed.stderr


def test_ls_of_a_folder_without_runs_says_which_folder(tmp_path):
    """An empty table would not say whether the folder looked in was the one meant; nothing is created."""
    for traces in (tmp_path / "none", tmp_path):
        code, out, err = run_cli("ls", "--traces-dir", traces, "--dashboards-dir", tmp_path / "d")
        assert (code, out, err) == (0, f"no runs in {traces}\n", "")
    assert not (tmp_path / "none").exists() and not (tmp_path / "d").exists()


def test_an_empty_run_reference_is_refused_not_matched_as_every_ids_prefix(tmp_path):
    dirs = ("--traces-dir", tmp_path / "t", "--dashboards-dir", tmp_path / "d")
    code, out, err = run_cli("import", DATA / "nsys" / "cpu-nsys2022.4-nvtx.sqlite", "--name", "x", *dirs)
    assert code == 0, err
    for args in (("show", ""), ("show", " "), ("diff", "", "x"), ("export", "", "-o", tmp_path / "e.json")):
        code, out, err = run_cli(*args, *dirs)
        assert code == 2 and err.startswith("roseprof: error: an empty run reference: give a run id"), (
            args,
            err,
        )
