"""What roseprof says beside its tables, at 80 columns as a user's terminal is (a subprocess, piped, COLUMNS=80):
the capture lock's waiting message, what to do after a capture, a failed capture's error, the baselines. Every line
fits but a path alone on its line, and nothing is lost on the way: commands paste whole, ids and paths are uncut.
(`ls`, `show` and `diff`: test_views_width.py.)"""

import fcntl
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import DATA, assert_fits, roseprof

HERE = Path(__file__).parent
COLUMNS = {"COLUMNS": "80"}
CPU = DATA / "nsys" / "cpu-nsys2022.4-nvtx.sqlite"
LIVE = "live-127.0.0.1-8000"  # `roseprof live`'s default name for a server on 127.0.0.1:8000: ids of 41 characters
# What a capture of the engine's benchmark writes into the lock for whoever waits (capture/tool.py: its command,
# its traces folder): 196 characters of command and a folder of 90.
HOLDER_COMMAND = (
    "python -m roseinfer.benchmark_streaming --hf-model-id gpt2-tiny --device cpu --num-requests 16 "
    "--max-batch-size 16 --prefill-max-batch-size 16 --max-new-tokens 70 --prompt abcdefghijklmnop --no-stop-on-eos"
)
HOLDER_TRACES = "/home/someone/checkouts/another-branch-of-roseinfer/experiments/kv-append-rollover/traces"


def stub_nsys(tmp_path: Path) -> dict:
    """Nsight Systems' stand-in (stub_tool/tool.py: it runs the program and reports a real SQLite export, the
    cpu-nsys2022.4-nvtx fixture), behind a lock of this test's own."""
    stub = tmp_path / "bin" / "nsys"
    stub.parent.mkdir(exist_ok=True)
    stub.write_text(f'#!/bin/sh\nexec {sys.executable} {HERE / "stub_tool" / "tool.py"} nsys "$@"\n')
    stub.chmod(0o755)
    return {"NSYS": str(stub), "ROSEPROF_NSYS_LOCK": str(tmp_path / "nsys.lock")}


def dirs(tmp_path: Path) -> list[str]:
    return ["--traces-dir", str(tmp_path / "traces"), "--dashboards-dir", str(tmp_path / "dash")]


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    """Three imports of a real nsys capture named `before`, and one under a live capture's name."""
    root = tmp_path_factory.mktemp("messages")
    for name in ("before", "before", "before", LIVE):
        proc = roseprof("import", CPU, "--name", name, *dirs(root), env=COLUMNS)
        assert proc.returncode == 0, proc.stderr
    return root


def run_ids(root: Path) -> list[str]:
    return sorted(p.name for p in (root / "traces").iterdir() if p.is_dir() and not p.name.startswith("."))


def test_baselines_list_their_runs_an_id_a_line(store):
    proc = roseprof("baseline", "set", "main", "before", LIVE, *dirs(store), env=COLUMNS)
    assert proc.returncode == 0, proc.stderr
    assert_fits(proc.stdout, 80)
    ids = json.loads(roseprof("baseline", "ls", "--json", *dirs(store)).stdout)["main"]["runs"]
    assert sorted(ids) == run_ids(store)  # every run, in the baseline's order
    assert proc.stdout.splitlines() == ["baseline main: 4 run(s):", *(f"  {i}" for i in ids)]
    proc = roseprof("baseline", "ls", *dirs(store), env=COLUMNS)
    assert proc.returncode == 0, proc.stderr
    assert_fits(proc.stdout, 80)
    head, *listed = proc.stdout.splitlines()
    assert head.startswith("main  ") and head.endswith("  4 run(s):") and listed == [f"  {i}" for i in ids]


@pytest.mark.parametrize("spaced", [False, True], ids=["folder", "folder-with-spaces"])
def test_the_lock_says_whose_capture_it_waits_for_in_80_columns(tmp_path, spaced):
    """The holder's command wrapped at its words; its traces folder whole, on its own line, spaces and all."""
    env = {**os.environ, **COLUMNS, **stub_nsys(tmp_path)}
    args = ["nsys", *dirs(tmp_path), "--", sys.executable, "-c", "pass"]
    traces = str(tmp_path / "my checkouts" / "a branch of roseinfer" / "traces") if spaced else HOLDER_TRACES
    with open(env["ROSEPROF_NSYS_LOCK"], "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        held.write(f"4242\n{HOLDER_COMMAND}\ntraces in {traces}\n")
        held.flush()
        proc = subprocess.Popen(
            [sys.executable, "-m", "roseprof", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env=env,
        )  # fmt: skip
        said = []
        for line in proc.stderr:  # the waiting message, up to its last line: the holder's traces folder
            said.append(line)
            if traces.split()[-1] in line:
                break
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, "".join(said) + err
    message = "".join(said)
    assert_fits(message, 80, paths=(traces,))
    lines = message.splitlines()
    assert lines[0] == "roseprof: waiting for another nsys capture (pid 4242) to finish:"
    # the command's words all there, in order, on lines of their own below; the folder whole on its line
    assert " ".join(" ".join(lines[1:-1]).split()) == f"{HOLDER_COMMAND} traces in"
    assert lines[-1].strip() == traces


def shell_lines(text: str) -> list[str]:
    """`text`'s lines as a shell reads them: a line that ends in ` \\` goes on in the next."""
    return [" ".join(line.split()) for line in text.replace(" \\\n", " ").splitlines()]


def next_commands(out: str) -> list[str]:
    """The commands after `next: `."""
    return shell_lines(out[out.index("next: ") :].removeprefix("next: "))


def test_what_to_do_next_fits_and_pastes(tmp_path):
    """Two captures of one name: the second's `next:` names both runs, past 80 columns with a long name, and the
    diff it suggests runs as pasted into a shell."""
    env = {**COLUMNS, **stub_nsys(tmp_path)}
    capture = ["nsys", *dirs(tmp_path), "--name", "kv-append-rollover", "--", sys.executable, "-c", "pass"]
    first = roseprof(*capture, env=env)
    assert first.returncode == 0, first.stderr
    before = next_commands(first.stdout)[0].split()[-1]  # `... open RUN`: the first run's id
    proc = roseprof(*capture, env=env)
    assert proc.returncode == 0, proc.stderr
    assert_fits(proc.stdout, 80)
    (after,) = set(run_ids(tmp_path)) - {before}
    open_command, diff_command = next_commands(proc.stdout)
    assert open_command.endswith(f" open {after}") and diff_command.endswith(f" diff {before} {after}")
    # The diff's lines as the user selects them, pasted into a shell, run the diff (in this test's store).
    lines = proc.stdout.splitlines()
    first = next(i for i, line in enumerate(lines) if " diff " in line)
    pasted = "\n".join(lines[first : lines.index(f"        {after}", first) + 1])
    stores = {
        "ROSEPROF_TRACES_DIR": str(tmp_path / "traces"),
        "ROSEPROF_DASHBOARDS_DIR": str(tmp_path / "dash"),
    }
    ran = subprocess.run(
        ["bash", "-c", pasted], capture_output=True, text=True, timeout=300, env={**os.environ, **stores}
    )
    assert ran.returncode in (0, 1), ran.stderr  # 1: a regression, which two captures of a stub may show
    assert ran.stdout.startswith(f"before  {before}") and f"after   {after}" in ran.stdout, ran.stdout


def test_what_to_do_after_a_series_fits_and_names_it(tmp_path):
    name = "kv-append-rollover-with-batched-appends"
    proc = roseprof(
        "nsys", *dirs(tmp_path), "--name", name, "--repeat", "2", "--", sys.executable, "-c", "pass",
        env={**COLUMNS, **stub_nsys(tmp_path)},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert_fits(proc.stdout, 80)
    (command,) = next_commands(proc.stdout.split("\n      (compares")[0])
    assert command.endswith(f" diff {name} <other name>")
    assert "(compares the 2 runs as a group)" in proc.stdout


def test_a_failed_capture_says_what_to_do_in_80_columns(tmp_path):
    """The program failed after recording ranges: the error, then the command that shows what was kept."""
    failing = [sys.executable, "-c", "import sys; sys.exit(3)"]
    name = "kv-append-rollover-with-batched-appends"
    proc = roseprof(
        "nsys", *dirs(tmp_path), "--name", name, "--", *failing, env={**COLUMNS, **stub_nsys(tmp_path)}
    )
    assert proc.returncode == 1, proc.stderr
    assert_fits(proc.stderr, 80)
    (run_id,) = run_ids(tmp_path)
    error = proc.stderr[proc.stderr.index("roseprof: error: ") :]
    assert " ".join(error.split()).startswith(
        "roseprof: error: the command exited with code 3; what it recorded"
    )
    assert shell_lines(error)[-1].endswith(f" show {run_id}")  # the command to paste, last


def test_a_failed_capture_keeps_a_folder_with_spaces_whole(tmp_path):
    """A profiler whose report cannot be read, under a traces folder whose path holds spaces: the error names the
    folder the report and the tool's log are kept in, whole on a line of its own (wrapping at its spaces would
    leave a path no one can paste)."""
    stub = tmp_path / "bin" / "nsys"  # writes a report that is not one; its export fails
    stub.parent.mkdir()
    stub.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = "--version" ]; then echo "NVIDIA Nsight Systems version 2022.4.2.1-stub"; exit 0; fi\n'
        'if [ "$1" = "export" ]; then echo "export: not a report" >&2; exit 1; fi\n'
        'for a in "$@"; do case "$a" in --output=*) out="${a#--output=}";; esac; done\n'
        'printf junk > "$out.nsys-rep"\n'
    )
    stub.chmod(0o755)
    env = {**COLUMNS, "NSYS": str(stub), "ROSEPROF_NSYS_LOCK": str(tmp_path / "nsys.lock")}
    traces = tmp_path / "my runs" / "traces"
    opts = ["--traces-dir", traces, "--dashboards-dir", tmp_path / "my runs" / "dash"]
    proc = roseprof("nsys", *opts, "--", sys.executable, "-c", "pass", env=env)
    assert proc.returncode not in (0, 1), proc.stderr  # the profiler's failure, not the program's
    (run,) = [p for p in traces.iterdir() if p.is_dir() and not p.name.startswith(".")]
    error = proc.stderr[proc.stderr.index("roseprof: error: ") :].split("\nrun folder: ")[0]
    assert_fits(error, 80, paths=(f"{run}/raw",))  # each line but the path's
    assert f"{run}/raw" in [line.strip() for line in error.splitlines()], proc.stderr  # the path whole, alone
    assert " ".join(error.split()).endswith(f"and its own log, are kept in {run}/raw"), proc.stderr


def _verbs(group, prefix=()) -> list[tuple[str, ...]]:
    """Every verb of the command line, a group's subcommands included (`baseline set`)."""
    import click

    out = []
    for name, command in sorted(group.commands.items()):
        out.append((*prefix, name))
        if isinstance(command, click.Group):
            out += _verbs(command, (*prefix, name))
    return out


def test_every_verbs_help_fits_80_columns_and_states_its_exit_codes():
    """The README sends a user to each verb's `--help`, "exit codes included"."""
    from roseprof.cli import cli

    verbs = _verbs(cli)
    assert ("baseline", "set") in verbs and ("show",) in verbs
    for verb in verbs:
        proc = roseprof(*verb, "--help", env=COLUMNS)
        assert proc.returncode == 0, (verb, proc.stderr)
        assert_fits(proc.stdout, 80)
        words = " ".join(proc.stdout.split())
        assert "Exit codes: 0 " in words and "130 interrupted" in words, verb
