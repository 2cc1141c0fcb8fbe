"""`ls`, `show` and `diff` as a person runs them: piped with COLUMNS set (80, 100, 120) and in a real terminal of
80x24 (a pseudo-terminal with that window size, no COLUMNS). Every line fits, run ids stay whole, and the other
columns give way."""

import fcntl
import json
import os
import pty
import re
import struct
import subprocess
import sys
import termios

import pytest

from tests.helpers import DATA, assert_fits, roseprof

WIDTHS = (80, 100, 120)
GRAPHS = DATA / "nsys" / "h100-nsys2025.3-roseinfer-graphs.sqlite"
GRAPHS_LOG = DATA / "nsys" / "h100-nsys2025.3-roseinfer-graphs.steplog.jsonl"
DECODE = DATA / "nsys" / "h100-nsys2025.3-roseinfer-decode.sqlite"
DECODE_LOG = DATA / "nsys" / "h100-nsys2025.3-roseinfer-decode.steplog.jsonl"
CLOVER = DATA / "nsys" / "public" / "hpcgroup__pipit__perlmutter-cloverleaf-cuda.sqlite"
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("width")
    opts = ["--traces-dir", root / "traces", "--dashboards-dir", root / "dash"]
    for name in ("before", "after"):
        proc = roseprof("import", GRAPHS, "--steplog", GRAPHS_LOG, "--name", name, *opts)
        assert proc.returncode == 0, proc.stderr
    # the eager decode fixture against the fast path: a diff in which most metrics changed significantly
    proc = roseprof("import", DECODE, "--steplog", DECODE_LOG, "--name", "eager", *opts)
    assert proc.returncode == 0, proc.stderr
    proc = roseprof("import", CLOVER, *opts)  # its id is ~70 characters: the file's name is the run's
    assert proc.returncode == 0, proc.stderr
    ids = sorted(p.name for p in (root / "traces").iterdir() if p.is_dir() and not p.name.startswith("."))
    return opts, ids


def commands(ids):
    clover = next(i for i in ids if "cloverleaf" in i)
    return {
        "ls": ["ls"],
        "show": ["show", "after"],
        "show-long-id": ["show", clover],
        "diff": ["diff", "before", "after"],
        "diff-changed": ["diff", "eager", "after"],
    }


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("verb", ["ls", "show", "show-long-id", "diff", "diff-changed"])
def test_piped_output_honours_columns(store, verb, width):
    opts, ids = store
    proc = roseprof(*commands(ids)[verb], *opts, env={"COLUMNS": str(width)})
    assert proc.returncode == 0, proc.stderr
    assert_fits(proc.stdout, width)
    if verb == "ls":
        for run_id in ids:  # whole, on one line
            assert any(run_id in line for line in proc.stdout.splitlines()), run_id
        assert proc.stdout.count("complete") == len(ids)  # the status is never cut
    if verb == "show-long-id":
        assert proc.stdout.splitlines()[0].startswith(commands(ids)[verb][1])  # whole, never folded
    if verb == "diff":
        # region names keep their distinguishing part: the shared `roseinfer.` prefix is left out and said
        assert "regions without roseinfer." in " ".join(proc.stdout.split())


# `roseprof live URL`'s default names: a server on the local network (run ids of 44 characters), on this machine
# (41 characters: the shortest a live capture's id is) and on a five-digit port.
LIVES = ("live-192.168.1.20-8000", "live-127.0.0.1-8000", "live-127.0.0.1-18777")


def test_ls_keeps_the_names_beside_a_live_capture_id(tmp_path):
    """Beside a live capture's long id the name stays whole: the other columns give way first (at 80 columns
    the command, the tool and the creation time go), and a command that is left is never cut to its first word."""
    opts = ["--traces-dir", tmp_path / "traces", "--dashboards-dir", tmp_path / "dash"]
    for name in ("before", "before", *LIVES):
        proc = roseprof("import", DATA / "nsys" / "cpu-nsys2022.4-nvtx.sqlite", "--name", name, *opts)
        assert proc.returncode == 0, proc.stderr
    ids = {p.name for p in (tmp_path / "traces").iterdir() if p.is_dir() and not p.name.startswith(".")}
    names = {
        run_id: json.loads((tmp_path / "traces" / run_id / "manifest.json").read_text())["name"]
        for run_id in ids
    }
    for width in (80, 100):
        proc = roseprof("ls", *opts, env={"COLUMNS": str(width)})
        assert proc.returncode == 0, proc.stderr
        assert_fits(proc.stdout, width)
        rows = [
            line.split() for line in proc.stdout.splitlines() if line.split()[:1] and line.split()[0] in ids
        ]
        assert len(rows) == len(ids), proc.stdout
        for row in rows:  # each run: its id, its name whole beside it, its status
            assert row[1] == names[row[0]] and "complete" in row, (width, row)
        if width == 80:
            assert {tuple(row) for row in rows} == {(i, names[i], "complete") for i in ids}, proc.stdout
        assert "import…" not in proc.stdout, proc.stdout  # a command cut to its first word tells nothing


def run_in_terminal(args: list[str], cols: int = 80, rows: int = 24) -> str:
    """The CLI on a pseudo-terminal of cols x rows (what a user's terminal is), its output without escapes."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env["TERM"] = "xterm-256color"
    proc = subprocess.Popen(
        [sys.executable, "-m", "roseprof", *map(str, args)],
        stdout=slave,
        stderr=slave,
        env=env,
        close_fds=True,
    )
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(timeout=120)
    os.close(master)
    assert proc.returncode == 0, b"".join(chunks).decode(errors="replace")
    return ANSI.sub("", b"".join(chunks).decode("utf-8", errors="replace")).replace("\r\n", "\n")


@pytest.mark.parametrize("verb", ["ls", "show", "show-long-id", "diff", "diff-changed"])
def test_a_real_80x24_terminal(store, verb):
    opts, ids = store
    out = run_in_terminal([*commands(ids)[verb], *opts])
    assert out.strip()
    assert_fits(out, 80)
    if verb == "ls":
        for run_id in ids:
            assert any(run_id in line for line in out.splitlines()), run_id
    if verb == "diff-changed":  # the figures stay whole: no value cut to an ellipsis
        table = out[out.index("all metrics") :].splitlines()
        rows = [line for line in table if line.rstrip().endswith(" *")]
        # a figure cut reads `16.1…` or `[-99.0, …`; a name or its statistic may give way (`…forward · self`)
        assert rows and not any(re.search(r"[\d.,%\[\]]…", line) for line in rows), rows


def test_piped_from_an_80_column_terminal(store):
    """`roseprof show RUN | head` in an 80-column terminal without COLUMNS exported: the terminal's width."""
    opts, ids = store
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "roseprof", "show", "after", *map(str, opts)],
            stdout=subprocess.PIPE, stderr=slave, stdin=slave, env=env, text=True, timeout=120,
        )  # fmt: skip
    finally:
        os.close(slave)
        os.close(master)
    assert proc.returncode == 0
    assert_fits(proc.stdout, 80)
    assert max(len(line.rstrip()) for line in proc.stdout.splitlines()) > 60  # not some narrower default


def test_a_name_cut_in_the_middle_keeps_no_space_beside_the_ellipsis():
    from roseprof.render.text import shorten_middle

    name = "void kernel<(int)4, (int)4>>(T3)"
    for width in range(8, len(name)):
        cut = shorten_middle(name, width)
        assert len(cut) <= width and "… " not in cut and " …" not in cut, (width, cut)


def test_the_steady_states_notes_wrap_indented_with_figures_whole(store):
    """`left out (host time): ...` of a run with a prefill outside the steps is longer than 80 columns: its
    continuation lines are indented under it (the next line began at column 0, reading as a line of its own), and
    no line starts with a unit torn from its figure."""
    opts, _ = store
    proc = roseprof("show", "eager", *opts, env={"COLUMNS": "80"})
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    (first,) = [i for i, line in enumerate(lines) if line.startswith("  left out (host time): ")]
    after = lines[first + 1 :]
    rest = after[: next(i for i, line in enumerate(after) if not line.startswith("    "))]
    assert rest, lines[first : first + 3]  # it wrapped
    note = " ".join(" ".join([lines[first], *rest]).split())
    assert note.endswith("outside the steps, 555.54 ms"), note
    assert not any(line.split()[0] in ("ms", "µs", "s") for line in rest)


def head_one(args: list) -> tuple[int, str]:
    """`roseprof ARGS | head -1` at 80 columns: (exit code, stderr). The pipe holds 4 KiB (F_SETPIPE_SZ), less than
    the output (the callers check), so the writer meets the reader's close."""
    read, write = os.pipe()
    fcntl.fcntl(write, 1031, 4096)
    proc = subprocess.Popen(
        [sys.executable, "-m", "roseprof", *map(str, args)],
        stdout=write,
        stderr=subprocess.PIPE,
        env={**os.environ, "COLUMNS": "80"},
    )
    os.close(write)
    with os.fdopen(read, "rb") as head:
        assert head.readline()  # `head -1`
    err = proc.stderr.read().decode()
    return proc.wait(timeout=120), err


@pytest.mark.parametrize("verb", ["show", "diff"])
def test_output_piped_into_head_ends_quietly_with_exit_0(store, verb):
    """`roseprof diff A B | head`: the reader leaving is no failure. Exit 1 (rich's and click's own answer to a
    broken pipe) is what diff's gate says, and a CI script under `set -o pipefail` read it as a regression."""
    opts, ids = store
    whole = roseprof(*commands(ids)[verb], *opts, env={"COLUMNS": "80"})
    assert whole.returncode == 0 and len(whole.stdout.encode()) > 4096, (
        whole.stderr
    )  # more than the pipe holds
    code, err = head_one([*commands(ids)[verb], *opts])
    assert code == 0, err
    assert err == ""


def test_a_fired_gate_piped_into_head_still_exits_1(store):
    """`roseprof diff A B --fail-on-regression PCT | head`: the gate's answer is the verb's, whoever reads its
    report. Ending every verb with exit 0 once the reader left passed a regression in a CI script."""
    opts, _ = store
    args = ["diff", "after", "eager", "--fail-on-regression", "5", *opts]
    whole = roseprof(*args, env={"COLUMNS": "80"})
    assert whole.returncode == 1 and len(whole.stdout.encode()) > 4096, whole.stderr  # the gate fires
    code, err = head_one(args)
    assert code == 1, err
