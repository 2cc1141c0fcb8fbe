"""The capture contract, once for every tool (capture/tool.py runs them all one way), with a stub of each tool
(tests/roseprof/stub_tool/tool.py; torch's tool is the program itself): Ctrl-C exits 130 with the run kept, one
capture per tool at a time (the second says whose it waits for), the tool's own lines kept out of the terminal
and in raw/<tool>.log."""

import fcntl
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import DATA, roseprof

HERE = Path(__file__).parent
TOOLS = ("nsys", "ncu", "torch")
OWN_LINE = {"nsys": "Collecting data...", "ncu": "==PROF== Connected to process"}
# The program: says hello on both pipes, loops until Ctrl-C when asked, and leaves a torch.profiler trace where
# `roseprof torch` asks a program that is not the engine to write one.
PROGRAM = f"""
import os, shutil, signal, sys, time
def done(*_):
    folder = os.environ.get("ROSEPROF_TORCH_TRACE_DIR")
    if folder:
        shutil.copyfile({str(DATA / "torch" / "h100-torch2.11-matmul-trace.json")!r}, folder + "/trace.json")
    sys.exit(0)
signal.signal(signal.SIGINT, done)
print("hello from the program", flush=True)
print("started", file=sys.stderr, flush=True)
while os.environ.get("STUB_LOOP"):
    time.sleep(0.05)
done()
"""


def setup(tool: str, tmp_path: Path, **extra) -> tuple[list[str], dict]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    env = {f"ROSEPROF_{tool.upper()}_LOCK": str(tmp_path / f"{tool}.lock"), **extra}
    if tool != "torch":
        stub = bin_dir / tool
        stub.write_text(f'#!/bin/sh\nexec {sys.executable} {HERE / "stub_tool" / "tool.py"} {tool} "$@"\n')
        stub.chmod(0o755)
        env[tool.upper()] = str(stub)
    if tool == "ncu":
        env.update(
            FAKE_NCU_RAW=str(DATA / "ncu" / "tn-raw.csv"),
            FAKE_NCU_DETAILS=str(DATA / "ncu" / "tn-details.csv"),
        )
    args = [tool, "--traces-dir", str(tmp_path / "t"), "--dashboards-dir", str(tmp_path / "d"), "--name", "c"]
    return [*args, "--", sys.executable, "-c", PROGRAM], env


def the_run(tmp_path: Path) -> tuple[Path, dict]:
    (run,) = [p for p in (tmp_path / "t").iterdir() if not p.name.startswith(".") and p.is_dir()]
    return run, json.loads((run / "manifest.json").read_text())


@pytest.mark.parametrize("tool", TOOLS)
def test_ctrl_c_exits_130_and_keeps_the_run(tool, tmp_path):
    args, env = setup(tool, tmp_path, STUB_LOOP="1")
    proc = subprocess.Popen([sys.executable, "-m", "roseprof", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env={**os.environ, **env}, start_new_session=True)  # fmt: skip
    for line in proc.stderr:  # the program runs (its stderr passes through, whichever tool)
        if line == b"started\n":
            break
    os.killpg(proc.pid, signal.SIGINT)  # a terminal's Ctrl-C: roseprof's whole process group
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 130, err.decode()
    assert f"stopping the program; {tool} is saving what it collected".encode() in err
    run, manifest = the_run(tmp_path)
    assert manifest["status"] == "incomplete" and (run / "summary.json").is_file()


@pytest.mark.parametrize("tool", TOOLS)
def test_one_capture_per_tool_at_a_time(tool, tmp_path):
    args, env = setup(tool, tmp_path)
    with open(tmp_path / f"{tool}.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        held.write("4242\npython bench.py\ntraces in /elsewhere/traces\n")
        held.flush()
        proc = subprocess.Popen([sys.executable, "-m", "roseprof", *args], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env={**os.environ, **env})  # fmt: skip
        # Held until the capture has reached the lock and said it waits (or has ended): a fixed 3 s raced the
        # capture's start-up, which on a busy machine (three test workers beside other work) took longer, found
        # the lock free and never waited.
        said = []
        for line in proc.stderr:  # up to the waiting message's last line, which names the holder's traces
            said.append(line)
            if line.startswith("  traces in "):
                break
        assert proc.poll() is None  # still waiting
    out, err = proc.communicate(timeout=300)
    err = "".join(said) + err
    assert proc.returncode == 0, err
    waiting = f"roseprof: waiting for another {tool} capture (pid 4242) to finish:"
    assert f"{waiting}\n  python bench.py\n  traces in /elsewhere/traces\n" in err  # whose, a line each
    assert the_run(tmp_path)[1]["status"] == "complete"


@pytest.mark.parametrize("tool", TOOLS)
def test_the_tools_own_lines_stay_out_of_the_terminal(tool, tmp_path):
    args, env = setup(tool, tmp_path)
    proc = roseprof(*args, env=env)
    assert proc.returncode == 0, proc.stderr
    shown = proc.stdout + proc.stderr
    assert "hello from the program" in shown and "started" in proc.stderr
    run, _ = the_run(tmp_path)
    log = (run / "raw" / f"{tool}.log").read_text()
    assert "hello from the program" in log
    if tool in OWN_LINE:
        assert OWN_LINE[tool] in log and OWN_LINE[tool] not in shown
