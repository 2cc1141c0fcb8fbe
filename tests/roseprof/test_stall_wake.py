"""A program a profiler's injection library left asleep is woken (roseprof/capture/stall.py), and only such a one.

The program (lost_wakeup.py) loses a futex wakeup on purpose. Its looks at the watch are given their times, so
that "asleep for 20 s" is a fact of the test, not a race against a busy machine; the program itself sleeps until
something wakes it.
"""

import contextlib
import json
import os
import platform
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from roseprof.capture import stall
from roseprof.capture.process import run_tool
from tests.helpers import roseprof

PROGRAM = Path(__file__).with_name("lost_wakeup.py")
LIBRARY = "_ctypes"  # a library the program loads (ctypes), standing for the profiler's injection library
# the system calls of the poll mode's wait: poll(), and ppoll() where the C library makes poll() of it
POLL = {"x86_64": {7, 271}, "aarch64": {73}}.get(platform.machine(), set())
pytestmark = pytest.mark.skipif(
    stall.FUTEX is None, reason="the futex call's number is known for x86-64 and arm64"
)


@pytest.fixture
def asleep(request):
    """The program in `request.param`'s mode, asleep in its wait, under a parent of its own (the watch's root,
    so that nothing else this test process started is looked at): (parent, pid)."""
    parent = subprocess.Popen(
        [sys.executable, "-c", "import subprocess, sys; sys.exit(subprocess.call(sys.argv[1:]))",
         sys.executable, str(PROGRAM), request.param],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    pid = None
    try:
        line = parent.stdout.readline()
        assert line.startswith("waiting "), line
        pid = int(line.split()[1])
        if (
            request.param != "forever"
        ):  # a wake-up before the word changed would find it unchanged, and sleep on
            assert parent.stdout.readline() == "changed\n"
        until_asleep(pid, request.param)
        yield parent, pid
    finally:
        for p in (pid, parent.pid):
            with contextlib.suppress(ProcessLookupError, TypeError):
                os.kill(p, signal.SIGKILL)
        parent.wait()


def until_asleep(pid, mode="futex"):
    """Until the program's main thread sleeps in its wait (poll(), or a futex wait with a timeout): it prints its
    lines just before, and after a wake-up its wait resumes as restart_syscall until its timeout (2 s)."""
    for _ in range(6000):
        with open(f"/proc/{pid}/syscall") as f:
            call = f.read().split()[0]
        if mode == "poll":
            in_wait = call.isdigit() and int(call) in POLL
        elif mode == "untimed":
            in_wait = call == str(stall.FUTEX) and not stall.main_thread_in_timed_futex(pid)
        else:
            in_wait = stall.main_thread_in_timed_futex(pid)
        if stall.read_stat(pid).state == "S" and in_wait:
            return
        time.sleep(0.01)
    raise AssertionError(f"pid {pid} never went to sleep in its wait")


def watch(parent, library=LIBRARY):
    woken = []
    return stall.StallWatch(parent.pid, library, lambda *told: woken.append(told)), woken


@pytest.mark.parametrize("asleep", ["futex"], indirect=True)
def test_a_program_asleep_in_a_futex_wait_is_woken_after_20_s_and_goes_on(asleep):
    parent, pid = asleep
    w, told = watch(parent)
    assert w.look(0.0) == [] and w.look(stall.STILL_S - 1) == []  # not asleep long enough yet
    assert w.look(stall.STILL_S + 1) == [pid]
    assert [(p, wakes) for p, _, wakes in told] == [(pid, 1)]
    assert parent.wait(timeout=120) == 0
    assert parent.stdout.read() == "woke\n"


@pytest.mark.parametrize("asleep", ["forever"], indirect=True)
def test_one_that_stays_asleep_is_woken_again_after_twice_as_long(asleep):
    parent, pid = asleep
    w, told = watch(parent)
    assert w.look(0.0) == []
    assert w.look(20.0) == [pid]
    until_asleep(pid)
    assert w.look(59.0) == []  # 40 s after the first wake-up
    assert w.look(61.0) == [pid]
    until_asleep(pid)
    assert w.look(140.0) == [] and w.look(141.0) == [pid]  # 80 s after the second
    assert [wakes for _, _, wakes in told] == [1, 2, 3]
    assert parent.poll() is None  # still asleep: nothing ends a wait whose word never changes


def assert_left_alone(parent, library=LIBRARY):
    """Asleep far past STILL_S, and never woken: still asleep."""
    w, told = watch(parent, library)
    assert w.look(0.0) == [] and w.look(1000.0) == [] and told == []
    assert parent.poll() is None


@pytest.mark.parametrize("asleep", ["poll"], indirect=True)
def test_one_waiting_in_poll_as_an_idle_server_does_is_left_alone(asleep):
    assert_left_alone(asleep[0])


@pytest.mark.parametrize("asleep", ["untimed"], indirect=True)
def test_one_whose_main_thread_waits_without_a_timeout_is_left_alone(asleep):
    """As a thread join or an untimed Event.wait() waits: the stall's main thread polls, with a timeout."""
    assert_left_alone(asleep[0])


@pytest.mark.parametrize("asleep", ["futex"], indirect=True)
def test_one_without_the_library_is_left_alone(asleep):
    assert_left_alone(asleep[0], library="libToolsInjection")


@pytest.mark.parametrize("asleep", ["futex"], indirect=True)
def test_what_is_looked_at_is_below_the_tool_not_the_tool(asleep):
    """The watch's root is the tool (nsys), which maps libraries of its own: only what it runs is looked at."""
    parent, pid = asleep
    assert stall.descendants(parent.pid) == [pid]


def test_a_tools_run_wakes_its_program_and_says_so_once(tmp_path, monkeypatch, capfd):
    """run_tool with an injection library (here one the program loads): the program below the tool is woken, the
    run ends, the wake-up is in the tool's log and said once on stderr."""
    monkeypatch.setattr(stall, "STILL_S", 1.0)
    monkeypatch.setattr(stall, "POLL_S", 0.1)
    tool = [sys.executable, "-c", "import subprocess, sys; sys.exit(subprocess.call(sys.argv[1:]))"]
    log = tmp_path / "tool.log"
    result = run_tool([*tool, sys.executable, str(PROGRAM)], dict(os.environ), log, tool="the stub",
                      injection_library=LIBRARY)  # fmt: skip
    assert result.returncode == 0 and not result.interrupted
    out, err = capfd.readouterr()
    assert out.endswith("changed\nwoke\n")
    said = " ".join(err.split())
    assert said.count(stall.WOKE) == 1 and "asleep in a futex wait under the stub" in said, err
    assert f"{stall.WOKE} (1)" in log.read_text()


def test_a_watch_that_fails_says_so_and_stops(monkeypatch):
    def broken(root):
        raise PermissionError("not ours")

    monkeypatch.setattr(stall, "descendants", broken)
    errors = []
    with stall.StallWatch(os.getpid(), LIBRARY, lambda *told: None, errors.append, poll_s=0.01) as w:
        w._thread.join(timeout=60)  # it ends on its own after the error
        assert not w._thread.is_alive()
    assert errors == ["the stall watch stopped: PermissionError: not ours"]


@pytest.mark.nsys
def test_a_capture_wakes_the_program_nsys_left_asleep_and_keeps_it(tmp_path):
    """Under nsys the program maps the injection library; roseprof wakes it once it has slept STILL_S, says so on
    stderr and in nsys' log, and the capture is kept whole with the program's wait in it."""
    traces = tmp_path / "t"
    proc = roseprof("nsys", "--traces-dir", traces, "--dashboards-dir", tmp_path / "d", "--",
                    sys.executable, PROGRAM)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    pid = proc.stdout.split()[1]
    assert proc.stdout.startswith(f"waiting {pid}\nchanged\nwoke\n")  # then roseprof's report of the run
    said = " ".join(proc.stderr.split())
    assert f"the program (pid {pid}) sat" in said and stall.WOKE in said
    (run,) = [p for p in traces.iterdir() if not p.name.startswith(".")]
    assert json.loads((run / "manifest.json").read_text())["status"] == "complete"
    log = (run / "raw" / "nsys.log").read_text()
    assert f"roseprof: the program (pid {pid}) sat" in log and f"{stall.WOKE} (1)" in log
    regions = {r["name"]: r for r in json.loads((run / "summary.json").read_text())["regions"]}
    assert regions["lost_wakeup.wait"]["total_ns"] >= stall.STILL_S * 1e9
