"""The agents nsys leaves running: `nsys --start-agent`, re-parented to init once nsys has exited, deaf to SIGTERM.

nsys 2022.4 leaves one after every repeating capture of a server seen here (windows.py), and after a start that
failed on its agent ("End of file", capture.py starts it again): a newcomer's run of the README found two such
agents still running minutes later, one per failed start. Each capture gives nsys (and so its agent, which inherits
nsys' environment) a marker of its own; those two cases stop the agents that carry it once nsys has exited. A
healthy agent is left to finish its own exit, a few seconds after nsys': killed then, it left its session folder
(/tmp/nvidia/nsight_systems/quadd_session_*, the program's output in it) behind (an independent review, session
41).
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

CAPTURE_ENV = "ROSEPROF_NSYS_CAPTURE"  # the marker of one capture in nsys' environment: the run's raw folder


def stop_left_agents(key: str, value: str) -> int:
    """SIGKILL every `nsys --start-agent` of this user whose environment holds key=value; how many. Called once nsys
    has exited (its agent serves nothing then)."""
    mark = os.fsencode(f"{key}={value}")
    stopped = 0
    try:
        procs = list(Path("/proc").iterdir())
    except OSError:  # no /proc (not Linux): nothing to look through
        return 0
    for proc in procs:
        if not proc.name.isdigit():
            continue
        try:
            if b"--start-agent" not in (proc / "cmdline").read_bytes().split(b"\0"):
                continue
            if mark not in (proc / "environ").read_bytes().split(b"\0"):
                continue
            os.kill(int(proc.name), signal.SIGKILL)
            stopped += 1
        except OSError:  # gone meanwhile, or another user's
            continue
    return stopped
