"""The agents nsys leaves running: `nsys --start-agent`, re-parented to init once nsys has exited, deaf to SIGTERM.

nsys 2022.4 leaves one after every repeating capture of a server seen here (windows.py), and after a start that
failed on its agent ("End of file", capture.py starts it again): a newcomer's run of the README found two such
agents still running minutes later, one per failed start. Each capture gives nsys (and so its agent, which inherits
nsys' environment) a marker of its own; those two cases stop the agents that carry it once nsys has exited. A
healthy agent is left to finish its own exit, a few seconds after nsys': killed then, it left its session folder
(/tmp/nvidia/nsight_systems/quadd_session_*, the program's output in it) behind (an independent review, session
41). While it finishes, the next capture's nsys can fail as it sets up (a named semaphore gone: "sem_open", two of a
clean-clone CI run's captures, session 42), so a capture, holding the lock, first waits for the agents an earlier
capture left ending (`wait_for_agents`).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

CAPTURE_ENV = "ROSEPROF_NSYS_CAPTURE"  # the marker of one capture in nsys' environment: the run's raw folder


def agents(key: str, value: str | None = None) -> list[int]:
    """The pids of this user's `nsys --start-agent` processes whose environment holds key=value (None: key, any
    value)."""
    mark = os.fsencode(f"{key}={value}" if value is not None else f"{key}=")
    found = []
    try:
        procs = list(Path("/proc").iterdir())
    except OSError:  # no /proc (not Linux): nothing to look through
        return []
    for proc in procs:
        if not proc.name.isdigit():
            continue
        try:
            if b"--start-agent" not in (proc / "cmdline").read_bytes().split(b"\0"):
                continue
            environ = (proc / "environ").read_bytes().split(b"\0")
        except OSError:  # gone meanwhile, or another user's
            continue
        if any(v == mark if value is not None else v.startswith(mark) for v in environ):
            found.append(int(proc.name))
    return found


def stop_left_agents(key: str, value: str) -> int:
    """SIGKILL every `nsys --start-agent` of this user whose environment holds key=value; how many. Called once nsys
    has exited (its agent serves nothing then)."""
    stopped = 0
    for pid in agents(key, value):
        try:
            os.kill(pid, signal.SIGKILL)
            stopped += 1
        except OSError:  # gone meanwhile
            continue
    return stopped


def wait_for_agents(key: str, timeout_s: float) -> bool:
    """Wait until no agent of an earlier capture (its environment holding `key`) is left, at most timeout_s: whether
    none is. Called holding the capture lock, so an agent found is one whose capture has ended."""
    deadline = time.monotonic() + timeout_s
    ending: dict[int, str] = {}  # pid -> its start time, as first seen
    while True:
        # An agent found is waited for until it has exited: its command line reads empty while it exits (its
        # memory released before the rest), when `agents` no longer knows it for one. Its start time tells it
        # from another process given the same pid since.
        now = {pid: _start_time(pid) for pid in {*ending, *agents(key)}}
        ending = {pid: t for pid, t in now.items() if t is not None and ending.get(pid, t) == t}
        if not ending:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


def _start_time(pid: int) -> str | None:
    """The process's start time (field 22 of /proc/PID/stat) while it has not exited; None once it has (gone, or a
    zombie waiting for its parent)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rpartition(")")[2].split()  # after `(command name)`: state, ppid, ...
    if not fields or fields[0] in ("Z", "X") or len(fields) < 20:
        return None
    return fields[19]  # field 22 of the whole line
