"""The run store under damage and pressure: damaged runs, names that try to leave the traces folder or take over
the terminal, dashboards that cannot be written, a full disk. `ls`, `show`, `open` and `diff` never traceback."""

import errno
import json
import shutil
import subprocess

import numpy as np
import pytest

from tests.helpers import DATA, one_line_error, roseprof, run_cli
from tests.roseprof.mutate import edit_sqlite

DECODE = DATA / "nsys" / "h100-nsys2025.3-roseinfer-decode.sqlite"
DECODE_LOG = DATA / "nsys" / "h100-nsys2025.3-roseinfer-decode.steplog.jsonl"
CPU = DATA / "nsys" / "cpu-nsys2022.4-nvtx.sqlite"


@pytest.fixture(scope="module")
def good_store(tmp_path_factory):
    """Two good runs of the same capture, a and b."""
    root = tmp_path_factory.mktemp("store")
    for name in ("a", "b"):
        code, _, err = run_cli(
            "import", DECODE, "--steplog", DECODE_LOG, "--name", name, "--traces-dir", root / "t",
            "--dashboards-dir", root / "d",
        )  # fmt: skip
        assert code == 0, err
    return root / "t"


def run_folder(traces, name):
    return next(p for p in traces.iterdir() if json.loads((p / "manifest.json").read_text())["name"] == name)


def _write(path, text):
    path.write_text(text)


DAMAGE = {
    "summary truncated": lambda r: _write(r / "summary.json", (r / "summary.json").read_text()[:200]),
    "summary is a list": lambda r: _write(r / "summary.json", "[1, 2]"),
    "summary count is text": lambda r: _write(
        r / "summary.json", (r / "summary.json").read_text().replace('"count": 71', '"count": "71"', 1)
    ),
    "summary has NaN": lambda r: _write(
        r / "summary.json", (r / "summary.json").read_text().replace('"p50_ns": ', '"p50_ns": NaN, "x": ', 1)
    ),
    "steps of mismatched length": lambda r: _write(
        r / "steps.json",
        json.dumps(
            {**(s := json.loads((r / "steps.json").read_text())), "rows": {**s["rows"], "dur_ns": [1, 2]}}
        ),
    ),
    "itl of mismatched length": lambda r: _write(
        r / "itl.json",
        json.dumps(
            [{**row, "itl_ms": row["itl_ms"][:3]} for row in json.loads((r / "itl.json").read_text())]
        ),
    ),
    "short names table": lambda r: _write(
        r / "names.json", json.dumps({**json.loads((r / "names.json").read_text()), "names": ["x"]})
    ),
    "garbage npz": lambda r: (r / "ranges.npz").write_bytes(b"PK\x03\x04 garbage" * 50),
    "npz of mismatched columns": lambda r: np.savez(r / "gpu_ops.npz", start=np.arange(3), end=np.arange(5)),
    "manifest status not text": lambda r: _write(
        r / "manifest.json", json.dumps({**json.loads((r / "manifest.json").read_text()), "status": [1]})
    ),
    "manifest not JSON": lambda r: _write(r / "manifest.json", "{"),
    "manifest tool not an object": lambda r: _write(
        r / "manifest.json", json.dumps({**json.loads((r / "manifest.json").read_text()), "tool": 5})
    ),
    "summary.json missing": lambda r: (r / "summary.json").unlink(),
    "names.json binary": lambda r: (r / "names.json").write_bytes(b"\xff\xfe\x00garbage"),
}


@pytest.mark.parametrize("damage", DAMAGE)
def test_a_damaged_run_never_tracebacks(good_store, tmp_path, damage):
    traces = tmp_path / "t"
    shutil.copytree(good_store, traces)
    damaged, intact = run_folder(traces, "b"), run_folder(traces, "a")
    DAMAGE[damage](damaged)
    dirs = ("--traces-dir", traces, "--dashboards-dir", tmp_path / "d")
    # ls lists every run, the damaged one included: one bad folder never hides the others.
    code, out, err = run_cli("ls", *dirs)
    assert code == 0 and damaged.name[:20] in out and intact.name[:20] in out, err
    code, out, err = run_cli("ls", "--json", *dirs)
    assert code == 0 and len(json.loads(out)) == 2
    for args in (
        ("show", damaged.name),
        ("show", damaged.name, "--json"),
        ("open", damaged.name),
        ("diff", intact.name, damaged.name),
        ("diff", damaged.name, intact.name, "--allow-incomplete"),
    ):
        code, out, err = run_cli(*args, *dirs, env={"ROSEPROF_NO_BROWSER": "1", "DISPLAY": ""})
        if code not in (0, 1):
            one_line_error(code, out, err)
        assert "internal error" not in err and "Traceback" not in err
    # The intact run is untouched and still works.
    assert run_cli("show", intact.name, *dirs)[0] == 0


@pytest.mark.parametrize("value", ["nan", "inf", "-1", "abc"])
def test_fail_on_regression_must_be_a_finite_percentage(good_store, tmp_path, value):
    proc = roseprof("diff", "a", "b", "--fail-on-regression", value, "--traces-dir", good_store,
                    "--dashboards-dir", tmp_path / "d")  # fmt: skip
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and "--fail-on-regression" in proc.stderr


@pytest.mark.parametrize(
    "name",
    ["../../escape", "/etc/passwd", "..", ".", "a/../../b", "x" * 300, "名前\n\x1b[31m", "-", "~root", ""],
)
def test_run_names_stay_inside_the_traces_folder(tmp_path, name):
    traces = tmp_path / "deep" / "t"
    code, _, err = run_cli(
        "import", CPU, "--name", name, "--traces-dir", traces, "--dashboards-dir", tmp_path / "d"
    )
    assert code == 0, err
    (run,) = traces.iterdir()
    assert run.parent == traces and run.resolve().parent == traces.resolve() and "/" not in run.name
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d", "deep"]


def test_markup_and_escape_sequences_in_names_are_printed_as_text(tmp_path):
    path = tmp_path / "hostile.sqlite"
    shutil.copyfile(CPU, path)
    hostile = "[/][bold]x\x1b[31mred\x1b]0;title\x07\u202e"
    edit_sqlite(path, f"UPDATE StringIds SET value = '{hostile}' WHERE value = 'roseinfer.kv.append_token'")
    dirs = ("--traces-dir", tmp_path / "t", "--dashboards-dir", tmp_path / "d")
    for env in ({}, {"FORCE_COLOR": "1", "COLUMNS": "300"}):  # a pipe, and a colour terminal
        code, out, err = run_cli("import", path, "--name", "[bold]n", *dirs, env=env)
        assert code == 0, err
        assert "[/][bold]x\\x1b[31mred\\x1b]0;title\\x07\\u202e" in out
        assert "\x1b[31mred" not in out and "\x07" not in out and "\u202e" not in out
        code, out, err = run_cli("show", "[bold]n", *dirs, env=env)
        assert code == 0 and "\\x1b[31mred" in out and "\x1b]0;" not in out, err
        assert run_cli("ls", *dirs, env=env)[0] == 0


def test_unwritable_dashboards_folder_is_a_warning_and_the_run_stays_complete(tmp_path, good_store):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    dirs = ("--traces-dir", tmp_path / "t", "--dashboards-dir", blocker / "sub")
    code, out, err = run_cli("import", CPU, "--name", "w", *dirs)
    lines = err.strip().splitlines()
    assert (
        code == 0 and len(lines) == 1 and lines[0].startswith("roseprof: warning: dashboard not written")
    ), err
    (run,) = (tmp_path / "t").iterdir()
    assert json.loads((run / "manifest.json").read_text())["status"] == "complete"
    one_line_error(*run_cli("open", "w", *dirs), naming=blocker / "sub")  # open's whole job is the dashboard
    # diff: the verdict (exit code) is the product; the dashboard is a warning.
    code, out, err = run_cli(
        "diff", "a", "b", "--traces-dir", good_store, "--dashboards-dir", blocker / "sub"
    )
    assert code == 0 and "warning: diff dashboard not written" in err and "Traceback" not in err


def test_full_disk_while_importing_is_one_line_and_leaves_nothing(tmp_path, monkeypatch):
    """ENOSPC at the OS boundary, in-process: every write of the run store's files fails as a full disk would."""
    import roseprof.run.store as store
    import roseprof.run.tables as tables

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", str(args[0]))

    for where, attr in ((tables.np, "savez"), (store, "write_json")):
        with monkeypatch.context() as m:
            m.setattr(where, attr, full)
            code, out, err = run_cli(
                "import", CPU, "--traces-dir", tmp_path / "t", "--dashboards-dir", tmp_path / "d"
            )
        line = one_line_error(code, out, err, naming=CPU)
        assert "No space left on device" in line
        assert not (tmp_path / "t").exists()  # nor the traces folder the import made


def _mount_tmpfs(path, size):
    path.mkdir()
    if shutil.which("mount") is None:
        pytest.skip("no mount")
    proc = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True
    )
    if proc.returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root)")


@pytest.fixture
def tiny_disk(tmp_path):
    disk = tmp_path / "disk"
    _mount_tmpfs(disk, "256k")
    yield disk
    subprocess.run(["umount", str(disk)], check=False)


def test_full_disk_on_a_real_tiny_tmpfs(tmp_path, tiny_disk):
    """ENOSPC for real: a 256 KiB tmpfs holds neither the run (a 470 KB export) nor a dashboard (4.6 MB)."""
    proc = roseprof("import", CPU, "--traces-dir", tiny_disk / "t", "--dashboards-dir", tmp_path / "d")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "No space left on device" in proc.stderr
    assert not (tiny_disk / "t").exists()
    proc = roseprof("import", CPU, "--traces-dir", tmp_path / "t", "--dashboards-dir", tiny_disk / "d")
    assert proc.returncode == 0 and "warning: dashboard not written" in proc.stderr, proc.stderr
    assert "No space left on device" in proc.stderr and "Traceback" not in proc.stderr
