"""Issue 45, as a new user met it: the built-in demo with one more flag, what a capture prints at its end and on
failure (a subprocess, piped stderr, 80 columns)."""

import json
import sys

import pytest

from roseprof.workload.roseinfer import default_command
from tests.helpers import assert_fits, roseprof, stderr_lines

COLUMNS = {"COLUMNS": "80"}
# The built-in command's flags made small for a test (a later flag wins in argparse, as it does for the user).
SMALL = ["--num-requests", "2", "--max-batch-size", "2", "--max-new-tokens", "8"]


def only_run(traces):
    (run,) = [p for p in traces.iterdir() if not p.name.startswith(".")]
    return run, json.loads((run / "manifest.json").read_text())


@pytest.mark.nsys
def test_a_command_of_flags_extends_the_built_in_demo(tmp_path):
    traces = tmp_path / "traces"
    proc = roseprof(
        "nsys", "--traces-dir", traces, "--dashboards-dir", tmp_path / "dash",
        "--", "--no-batched-kv-append", *SMALL, env=COLUMNS,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    _, manifest = only_run(traces)
    assert manifest["command"] == default_command("cpu") + ["--no-batched-kv-append", *SMALL]
    assert manifest["name"] == "nsys-demo"
    assert manifest["environment"]  # the engine ran with its switches recorded


def test_capture_help_says_flags_extend_the_built_in_command():
    for verb in ("nsys", "torch", "ncu"):
        proc = roseprof(verb, "--help", env=COLUMNS)
        assert proc.returncode == 0
        assert "starts with `-` extends" in " ".join(proc.stdout.split()), verb


def stub_nsys(tmp_path):
    """Nsight Systems' stand-in (tests/roseprof/stub_tool): it runs the program and reports a real SQLite export."""
    from pathlib import Path

    stub = tmp_path / "bin" / "nsys"
    stub.parent.mkdir()
    tool = Path(__file__).parent / "stub_tool" / "tool.py"
    stub.write_text(f'#!/bin/sh\nexec {sys.executable} {tool} nsys "$@"\n')
    stub.chmod(0o755)
    return {"NSYS": str(stub), "ROSEPROF_NSYS_LOCK": str(tmp_path / "nsys.lock")}


def test_next_lines_can_be_pasted_where_roseprof_is_not_on_path(tmp_path):
    import os
    import shlex
    import shutil

    path = "/usr/bin:/bin"
    assert shutil.which("roseprof", path=path) is None
    env = {**COLUMNS, **stub_nsys(tmp_path), "PATH": path}
    proc = roseprof(
        "nsys", "--traces-dir", tmp_path / "t", "--dashboards-dir", tmp_path / "d",
        "--", sys.executable, "-c", "pass", env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert_fits(proc.stdout, 80)
    next_lines = proc.stdout[proc.stdout.index("next: ") :].removeprefix("next: ")
    # Two commands, each on its line or, past 80 columns, continued over lines with ` \`, as a shell joins them.
    open_line, diff_line = [" ".join(c.split()) for c in next_lines.replace(" \\\n", " ").splitlines()]
    prog, verb, run = shlex.split(open_line)
    assert verb == "open" and prog != "roseprof"
    assert os.access(prog, os.X_OK), open_line
    assert diff_line == f"{prog} diff <earlier run> {run}", diff_line


@pytest.mark.nsys
def test_a_failed_capture_is_its_error_on_stderr_then_the_run(tmp_path):
    args = ("--traces-dir", tmp_path / "t", "--dashboards-dir", tmp_path / "d")
    failing = (sys.executable, "-c", "import sys; sys.exit(3)")
    proc = roseprof("nsys", *args, "--name", "broken", "--", *failing, env=COLUMNS)
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout == ""  # no block on stdout
    assert_fits(proc.stderr, 80)
    *error, where = stderr_lines(proc)  # the error, wrapped at 80 columns, then the run's folder
    error = " ".join(line.strip() for line in error)
    assert error.startswith("roseprof: error: the command exited with code 3") and "output above" in error
    run, manifest = only_run(tmp_path / "t")
    assert where == f"run folder: {run}"
    # nsys ran: its version is the run's.
    show = roseprof("show", *args, run.name, env=COLUMNS)
    assert "version not recorded" not in show.stdout and manifest["tool"]["version"].startswith("20")
    # It holds nothing to compare: no --allow-incomplete to suggest.
    again = roseprof("nsys", *args, "--name", "broken", "--", *failing, env=COLUMNS)
    assert again.returncode == 1
    other = stderr_lines(again)[-1].rsplit("/", 1)[-1]
    for extra in ((), ("--allow-incomplete",)):
        proc = roseprof("diff", *args, other, run.name, *extra, env=COLUMNS)
        assert proc.returncode == 2 and "holds nothing to compare" in proc.stderr, proc.stderr
        assert "--allow-incomplete" not in proc.stderr


def test_capture_help_documents_the_exit_codes():
    for verb in ("nsys", "torch", "ncu"):
        words = " ".join(roseprof(verb, "--help", env=COLUMNS).stdout.split())
        for code in ("0 ok", "1 the profiled command failed", "2 bad input", "recorded nothing", "3 the profiler",
                     "130 interrupted"):  # fmt: skip
            assert code in words, (verb, code)


def test_ls_at_80_columns_tells_runs_of_one_flag_apart(tmp_path):
    """Runs of one long command that differ by one flag: `ls` keeps the name and shows the flag."""
    env = {**COLUMNS, **stub_nsys(tmp_path)}
    args = ("--traces-dir", tmp_path / "t", "--dashboards-dir", tmp_path / "d")
    base = [sys.executable, "-c", "pass", *default_command("cpu")[3:]]  # the demo's 15 flags, ignored
    flags = ([], ["--no-batched-kv-append"], ["--no-batched-rollover"])
    for extra in flags:
        proc = roseprof("nsys", *args, "--name", "demo", "--", *base, *extra, env=env)
        assert proc.returncode == 0, proc.stderr
    proc = roseprof("ls", *args, env=env)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert all(len(line.rstrip()) <= 80 for line in lines), proc.stdout
    header = next(line for line in lines if line.strip().startswith("run "))
    assert "name" in header.split() and "command" in header.split()
    rows = [line for line in lines if "-demo-" in line]
    assert len(rows) == 3 and all(" demo " in row for row in rows)
    commands = [row[header.index("command") :].strip() for row in rows]
    assert len(set(commands)) == 3, commands
    assert commands[1].startswith("--no-batched-kv") and commands[2].startswith("--no-batched-roll"), commands


def test_a_failed_torch_capture_names_its_torch_and_what_to_do(tmp_path):
    args = ("--traces-dir", tmp_path / "t", "--dashboards-dir", tmp_path / "d")
    proc = roseprof("torch", *args, "--", sys.executable, "-c", "import sys; sys.exit(3)", env=COLUMNS)
    assert proc.returncode == 1 and proc.stdout == "", proc.stderr
    assert_fits(proc.stderr, 80)
    *error, where = stderr_lines(proc)
    error = " ".join(line.strip() for line in error)
    assert "exited with code 3" in error and "capture again" in error and where.startswith("run folder: ")
    run, manifest = only_run(tmp_path / "t")
    assert manifest["tool"].get("version")  # the installed torch, not "version not recorded"
    assert "version not recorded" not in roseprof("show", *args, run.name, env=COLUMNS).stdout
