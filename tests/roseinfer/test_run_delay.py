"""A thread's waits for a core as the kernel counts them (roseinfer/run_delay.py): what a step log's `wait_ns` is,
and what tells a busier machine from a sleep or a lock in the code (analysis/decision.machine_slower). Each case
runs in a process of its own pinned to one core, beside a CPU burner pinned there too where it needs one."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from roseinfer import run_delay

pytestmark = pytest.mark.skipif(
    not Path("/proc/thread-self/schedstat").exists(), reason="the kernel keeps no run delay here (not Linux)"
)

# Runs pinned to one core (taskset): `burn` seconds of CPU work beside a CPU burner on that core, then a 0.2 s sleep
# alone, then a forked child's first reading. Prints the figures as JSON.
PROBE = """
import json, os, subprocess, sys, time
from roseinfer import run_delay

def work(seconds):
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass

burner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
try:
    time.sleep(0.1)  # the burner is running
    d0, t0, c0 = run_delay.run_delay_ns(), time.perf_counter_ns(), time.thread_time_ns()
    work(0.2)
    d1, t1, c1 = run_delay.run_delay_ns(), time.perf_counter_ns(), time.thread_time_ns()
finally:
    burner.kill()
    burner.wait()
s0 = run_delay.run_delay_ns()
time.sleep(0.2)
s1 = run_delay.run_delay_ns()
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    os.write(w, str(run_delay.run_delay_ns()).encode())
    os._exit(0)
os.waitpid(pid, 0)
child = int(os.read(r, 64))
print(json.dumps({"crowded_wait": d1 - d0, "crowded_off_cpu": (t1 - t0) - (c1 - c0), "sleep_wait": s1 - s0,
                  "parent": run_delay.run_delay_ns(), "child": child}))
"""


def test_a_thread_beside_a_burner_waits_and_a_sleep_is_no_wait():
    proc = subprocess.run(
        ["taskset", "-c", "0", sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    # 0.2 s of CPU work sharing the core with a burner: the thread waited for it, and every such wait is off-CPU
    # time (the clocks' grain aside)
    assert got["crowded_wait"] > 0, got
    assert got["crowded_wait"] <= got["crowded_off_cpu"] + 1_000_000, got
    # a 0.2 s sleep with the core free is not a wait for a core (waking may wait a little on a busy machine)
    assert 0 <= got["sleep_wait"] < 100_000_000, got
    # a forked child reads its own thread, not the parent's: it has not waited the parent's waits
    assert 0 <= got["child"] < got["parent"], got


def test_a_thread_reads_its_own_delay_that_only_grows():
    first = run_delay.run_delay_ns()
    sum(range(100_000))
    assert 0 <= first <= run_delay.run_delay_ns()


def test_no_such_file_is_minus_one_and_nothing_printed(monkeypatch):
    """A kernel without the file (not Linux, no CONFIG_SCHED_INFO): -1, on every read of the thread, and no
    complaint from the half-made reader as it goes (sys.unraisablehook would get one)."""
    import gc
    import threading

    monkeypatch.setattr(run_delay, "_PATH", "/proc/thread-self/no-such-schedstat")
    complaints, got = [], []
    monkeypatch.setattr(sys, "unraisablehook", complaints.append)
    thread = threading.Thread(target=lambda: got.extend([run_delay.run_delay_ns(), run_delay.run_delay_ns()]))
    thread.start()
    thread.join()
    gc.collect()
    assert got == [-1, -1] and complaints == []
