"""Running a profiler (nsys, ncu, or the program itself under torch.profiler) around the user's program.

Ctrl-C. A terminal sends SIGINT to its whole foreground process group: roseprof, the profiler and the program.
A profiler hit by that signal while its program is also dying loses the capture (nsys 2022.4: exit 130, no
report). So `run_tool` starts the tool in its own session (no controlling terminal, not in the terminal's
foreground group): only roseprof receives the terminal's Ctrl-C, and forwards ONE SIGINT to the tool alone,
which stops the program and writes what it collected, as a single SIGINT to nsys does. A second Ctrl-C
abandons the capture: SIGKILL to the tool's whole session. SIGTERM and SIGHUP to roseprof count as Ctrl-C.
If roseprof itself is killed with SIGKILL the tool's session is left running (nothing can forward that).

Output. The tool's stdout and stderr are read line by line (a line ends at \\n or \\r): every line goes to the
run's log; lines for which `own_line(line)` is true (the tool's own progress and status lines) stay out of the
terminal; the rest (the program's output, which the tool passes through on the same pipes) goes to roseprof's
stdout and stderr as it arrives. A line without an end yet is held until it ends or the pipe closes; blank
lines, and lines for which `held_line(line)` is true, are shown only when a shown line follows them on that pipe
(tools print blank lines around their own; nsys' "End of file" is the whole output of a start that lost its agent,
or else may be the program's own line).

With `one_stream` the tool's stdout and stderr are one pipe, shown on roseprof's stderr (a tool that interleaves
its own lines with the program's, ncu).

Stalls. A program that the tool's injection library leaves asleep (Nsight Systems 2022.4 in exit()) is stopped and
continued to wake it (capture/stall.py, for tools that name their injection library).

Every capture runs its tool through `run_tool`, by way of capture/tool.py (the one path, under the tool's lock:
capture/lock.py); drivers say only what to run (drivers/__init__.py: Launch).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

from roseprof.capture.stall import FUTEX, STALL_WHY, WOKE, StallWatch
from roseprof.errors import CaptureFailed, RoseprofError
from roseprof.render.wrap import wrap_words

FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@dataclass
class ToolResult:
    returncode: int
    interrupted: bool


def say(line: str, *details: str, paths: tuple[str, ...] = ()) -> None:
    """One status message of roseprof's own on stderr (never mixed into a line of the program's): `line`, then each
    of `details` indented below it. Wrapped at the terminal's width (COLUMNS where set, else the terminal's, else
    80 columns), at spaces only, so that a command's words stay whole; each of `paths` (which may hold spaces) is
    never broken: whole on the line, or alone on a line of its own, as long as it is."""
    width = terminal_width()
    lines = wrap_words(f"roseprof: {line}", width, "", "  ", keep=paths)
    for detail in details:
        lines += wrap_words(detail, width, "  ", "    ", keep=paths)
    try:
        sys.stderr.write("".join(f"{shown}\n" for shown in lines))  # one write: the message is never split
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def terminal_width() -> int:
    """The width roseprof's own lines on stderr keep to: COLUMNS where set, else the terminal's, else 80."""
    return max(shutil.get_terminal_size((80, 24)).columns, 40)


def check_command(cmd: list[str], env: dict[str, str] | None = None) -> None:
    """Refuse, before any profiler starts, a program that cannot be run: one line, exit 2, nothing stored."""
    if not cmd:
        raise RoseprofError("no command given after --")
    prog = cmd[0]
    if os.sep in prog:
        if not os.path.exists(prog):
            raise RoseprofError(f"{prog}: no such file")
        if os.path.isdir(prog):
            raise RoseprofError(f"{prog}: is a folder, not a program")
        if not os.access(prog, os.X_OK):
            raise RoseprofError(f"{prog}: not executable (chmod +x, or run it through its interpreter)")
        return
    path = (env or os.environ).get("PATH", os.defpath)
    if shutil.which(prog, path=path) is None:
        raise RoseprofError(f"{prog}: command not found (not on PATH)")


_LINE_END = re.compile(rb"(?<=[\r\n])")


class _Lines:
    """Splits a byte stream into lines ending at \\n or \\r (kept), holding an unfinished one."""

    def __init__(self) -> None:
        self.rest = b""

    def feed(self, chunk: bytes) -> list[bytes]:
        *out, self.rest = _LINE_END.split(self.rest + chunk)
        return out

    def flush(self) -> list[bytes]:
        rest, self.rest = self.rest, b""
        return [rest] if rest else []


def _pump(
    pipe,
    fd_out: int,
    log,
    log_lock: threading.Lock,
    own_line: Callable[[bytes], bool],
    held_line: Callable[[bytes], bool],
) -> None:
    """Drain one of the tool's pipes to the log and the terminal; never stops early (the tool would block)."""
    lines = _Lines()
    state = {"log": True, "show": True}
    held: list[bytes] = []  # blank and held lines, shown only when a shown line follows

    def show(line: bytes) -> None:
        if state["show"]:
            try:
                os.write(fd_out, line)
            except OSError:  # our own output closed (a pipe to `head`): keep draining the tool
                state["show"] = False

    def emit(line: bytes) -> None:
        if state["log"]:
            try:
                with log_lock:
                    log.write(line)
            except (OSError, ValueError):  # a full disk: the terminal still gets the program's output
                state["log"] = False
        if not line.strip() or held_line(line):
            held.append(line)
        elif own_line(line):
            held.clear()
        else:
            for before in held:
                show(before)
            held.clear()
            show(line)

    for chunk in iter(lambda: pipe.read1(65536), b""):
        for line in lines.feed(chunk):
            emit(line)
    for line in lines.flush():
        emit(line)


def run_tool(
    argv: list[str],
    env: dict[str, str],
    log_path: Path,
    own_line: Callable[[bytes], bool] = lambda line: False,
    tool: str = "the profiler",
    held_line: Callable[[bytes], bool] = lambda line: False,
    one_stream: bool = False,
    injection_library: str | None = None,
) -> ToolResult:
    """Run `argv` in its own session, its output filtered to the terminal and kept whole in `log_path`.
    injection_library: the library the tool injects into the programs it profiles; a program that sits asleep
    with it is woken (capture/stall.py), and said so once on stderr and at each wake-up in the log."""
    interrupted = []

    def on_signal(signum, frame) -> None:
        if not interrupted:
            interrupted.append(signum)
            say(f"stopping the program; {tool} is saving what it collected (Ctrl-C again to abandon it)")
            try:
                proc.send_signal(signal.SIGINT)  # the tool alone: it stops the program and writes its file
            except OSError:
                pass
        else:
            say(f"abandoning the capture: stopping {tool} and the program")
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                pass

    sys.stdout.flush()
    sys.stderr.flush()
    with open(log_path, "wb") as log:
        try:
            proc = subprocess.Popen(
                argv,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT if one_stream else subprocess.PIPE,
                start_new_session=True,
            )
        except OSError as e:
            raise CaptureFailed(f"cannot run {argv[0]}: {e.strerror}") from None
        in_main = threading.current_thread() is threading.main_thread()
        previous = {s: signal.signal(s, on_signal) for s in FORWARDED_SIGNALS} if in_main else {}
        log_lock = threading.Lock()
        pumps = [
            threading.Thread(target=_pump, args=(pipe, fd, log, log_lock, own_line, held_line), daemon=True)
            for pipe, fd in (((proc.stdout, 2),) if one_stream else ((proc.stdout, 1), (proc.stderr, 2)))
        ]

        watch = _stall_watch(proc.pid, injection_library, tool, log, log_lock)
        try:
            for t in pumps:
                t.start()
            with watch:
                rc = proc.wait()
            for t in pumps:  # a program the tool left behind may still hold the pipes: do not wait forever
                t.join(timeout=30)
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)
    return ToolResult(rc, bool(interrupted))


def _stall_watch(root: int, injection_library: str | None, tool: str, log, log_lock: threading.Lock):
    """The watch that wakes a program the tool's injection library left asleep (capture/stall.py), each wake-up
    in the tool's log and the first of each program on stderr; a null context where there is nothing to watch."""
    if not injection_library or FUTEX is None:
        return nullcontext()

    def log_line(line: str) -> None:
        try:
            with log_lock:
                log.write(f"roseprof: {line}\n".encode())
        except (OSError, ValueError):  # a full disk: the terminal still hears of it
            pass

    def on_wake(pid: int, still_s: float, wakes: int) -> None:
        line = f"the program (pid {pid}) sat {still_s:.0f} s asleep in a futex wait under {tool}; {WOKE}"
        log_line(f"{line} ({wakes})")
        if wakes == 1:
            say(f"{line} ({STALL_WHY})")

    def on_error(message: str) -> None:
        log_line(message)
        say(f"{message} (the capture goes on)")

    return StallWatch(root, injection_library, on_wake, on_error)
