"""The one path every tool's capture takes: the driver says what differs (its `launch`: argv, environment, log;
which output lines are the tool's own; whether a failed start may be tried again; what its log says went wrong;
what to collect afterwards) and this runs it the same way for nsys, ncu and torch:

- under the tool's lock (capture/lock.py: one capture per tool at a time, saying whose it waits for);
- in the tool's own session, Ctrl-C forwarded once so the tool keeps what it collected, a second one
  abandoning it; the tool's own lines kept in raw/<tool>.log and out of the terminal (capture/process.py).

A driver's capture class (drivers/<tool>/capture.py) implements `Capturer`; it imports nothing from here.
"""

from __future__ import annotations

import os
import time
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from roseprof.capture.lock import FOLDER, exclusive, lock_path
from roseprof.capture.process import ToolResult, run_tool, say
from roseprof.errors import CaptureFailed
from roseprof.model import Trace

if TYPE_CHECKING:
    from roseprof.drivers import Launch

START_ATTEMPTS = 3  # a tool that refused to start (nothing ran) is started at most this many times
START_RETRY_S = 3.0  # times the attempt number, between attempts


class Capturer(Protocol):
    """What a driver's capture provides (e.g. drivers/nsys/capture.py: NsysCapture)."""

    tool: str
    # Whether the engine's fused kernels stamp their phases under this tool (roseinfer/cuda_ext/stamps.py): where
    # the tool times each launch itself, a stamped build would be what it measures (ncu), not the engine's.
    kernel_stamps: bool
    # The library the tool injects into its programs, by a part of its file name, where a program it leaves asleep
    # is to be woken (capture/stall.py: nsys' libToolsInjection); else None.
    injection_library: str | None

    def engine_env(self) -> dict[str, str]: ...  # switches the engine needs for this tool (e.g. NVTX on)

    def describe(self) -> dict: ...  # the manifest's record of the tool and its options

    # The tool's command line around `cmd` and its environment (`env` plus the tool's own), writing into `raw`;
    # a context so that a driver can stage the tool's output elsewhere and move it into `raw` afterwards.
    def launch(self, cmd: list[str], env: dict[str, str], raw: Path) -> AbstractContextManager[Launch]: ...

    def own_line(self, line: bytes) -> bool: ...  # a line of the tool's own output (kept out of the terminal)

    # Holding the capture lock, before the tool starts: wait for what an earlier capture of the tool left still
    # ending (nsys' agents, drivers/nsys/agents.py).
    def settle(self) -> None: ...

    # A line shown only where a shown line follows it on its pipe (nsys' "End of file": the tool's when it is all
    # a failed start printed, else possibly the program's).
    def held_line(self, line: bytes) -> bool: ...

    # Why a run that failed did so on the tool's own account, leaving nothing to keep, so that it may be started
    # again (nsys' agent), else None.
    def refused(self, launch: Launch) -> str | None: ...

    def check(self, result: ToolResult, raw: Path) -> None: ...  # raise what the tool's log says went wrong

    def collect(self, raw: Path) -> Trace: ...  # the finished capture's file(s), read into the model


def run_capture(capturer: Capturer, cmd: list[str], env: dict[str, str], raw: Path) -> ToolResult:
    """Run `capturer`'s tool around `cmd`; the result (exit code, interrupted) once its output is in `raw`."""
    tool = capturer.tool
    about = f"{_shown(cmd)}\n{FOLDER}{raw.parent.parent}"
    with capturer.launch(cmd, env, raw) as launch:
        for attempt in range(1, START_ATTEMPTS + 1):
            with exclusive(lock_path(tool), f"{tool} capture", about):
                capturer.settle()
                result = run_tool(
                    launch.argv,
                    launch.env,
                    launch.log,
                    capturer.own_line,
                    tool,
                    held_line=capturer.held_line,
                    one_stream=launch.one_stream,
                    injection_library=capturer.injection_library,
                )
            why = None if result.returncode == 0 or result.interrupted else capturer.refused(launch)
            if why is None or attempt == START_ATTEMPTS:
                break
            # Keep the failed start's log beside the run's, then start the tool again.
            log = launch.log
            log.replace(log.with_name(f"{log.stem}.start{attempt}{log.suffix}"))
            say(f"{why}; starting it again ({attempt + 1} of {START_ATTEMPTS})")
            time.sleep(START_RETRY_S * attempt)
    if why is not None:  # refused every time: the program never ran, and the tool's own words are in `why`
        raise CaptureFailed(f"{why}; started {START_ATTEMPTS} times, refused each time")
    capturer.check(result, raw)
    return result


def _shown(cmd: list[str]) -> str:
    """The command as the lock's holder record shows it: one line, the program's name without its folder."""
    words = [os.path.basename(cmd[0]) if cmd else "?", *cmd[1:]]
    line = " ".join(words).replace("\n", " ")
    return line if len(line) <= 200 else line[:199] + "…"
