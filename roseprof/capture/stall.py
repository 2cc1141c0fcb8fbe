"""Waking a program that a profiler's injection library left asleep.

Nsight Systems 2022.4 now and then leaves the program it profiles asleep in `exit()`, inside its injection library:
the main thread polls a futex with one-second timeouts, the other threads wait without one, and nothing changes
for as long as anyone waits (19 minutes in one CI run; docs/BENCHMARKS.md, session 61). Stopping the program and
continuing it (SIGSTOP, then SIGCONT) ended it at once each time it was tried, the capture intact: a futex wait that
a signal interrupts is restarted, and a restarted wait returns at once when its word has changed, which is what a
wakeup the library lost leaves behind.

So while a capture runs, `StallWatch` looks at the tool's programs once a second and stops and continues one that
- descends from the tool's process and maps its injection library (a program it profiles, not the tool's own
  processes);
- has its main thread in a futex wait with a timeout (the stall's poll; a server idles in epoll or poll: uvicorn's
  loop, the engine core's pipe; a thread join or an untimed Event.wait() waits without one);
- and whose threads together used under 1% of a CPU,
for STILL_S seconds on end. One that stays asleep is woken again after twice as long each time, up to MAX_STILL_S;
one that ran in between starts again from STILL_S.

What a wrong guess costs a program that was only waiting: the moment it was stopped, and its waits interrupted. The
kernel restarts an interrupted futex wait, and Python retries its other calls (PEP 475); C code that waits in epoll,
a semaphore or a socket with a timeout sees EINTR (signal(7)), as it does for any signal. If roseprof is killed
(SIGKILL) in the second between the stop and the continue, the program stays stopped: `kill -CONT <pid>` resumes it.
Reading another process' /proc/<pid>/syscall takes ptrace access: where Yama's ptrace_scope is 2 or 3 (or the
program is not the user's), nothing matches and nothing is woken.
"""

from __future__ import annotations

import contextlib
import os
import platform
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

STILL_S = 20.0  # seconds asleep before the first wake-up
MAX_STILL_S = 320.0  # the longest wait between wake-ups of a program that stays asleep
POLL_S = 1.0
CPU_SHARE = 0.01  # "asleep": its threads used under this share of one CPU since it went still
# What a wake-up is called where roseprof says it did one (on stderr and in the tool's log)
WOKE = "stopped and continued it to wake it"
STALL_WHY = "Nsight Systems 2022.4 can leave a program so in exit(): docs/RELIABILITY.md"
STOP_WAIT_S = 1.0  # how long a stopped program may take to stop before it is continued anyway
# A process that has not mapped the library after this many looks is looked at once in as many looks after that
# (its map: nsys preloads the library at exec, so a program it profiles has it from the start)
MAP_LOOKS = 10

# The futex system call's number (the first field of /proc/<pid>/syscall while a thread is in it), and the waits
# among its operations (the second argument, less the private and clock flags): FUTEX_WAIT, FUTEX_WAIT_BITSET.
FUTEX = {"x86_64": 202, "aarch64": 98}.get(platform.machine())
FUTEX_WAITS = (0, 9)
_FUTEX_CMD_MASK = 0x7F

_TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")


@dataclass
class _Stat:
    state: str  # R, S, D, T, ...
    ppid: int
    cpu_s: float  # user and system time of all its threads
    start: int  # start time in clock ticks after boot: with the pid, a process (pids are reused)


def read_stat(pid: int) -> _Stat | None:
    """/proc/<pid>/stat, or None for a process that is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            text = f.read()
    except OSError:
        return None
    fields = text[text.rfind(b")") + 2 :].split()  # after the command's name, which may hold spaces and ")"
    try:
        return _Stat(
            fields[0].decode(), int(fields[1]), (int(fields[11]) + int(fields[12])) * _TICK_S, int(fields[19])
        )
    except (IndexError, ValueError):
        return None


def _children(pid: int) -> list[int] | None:
    """`pid`'s children from its threads' /proc/<pid>/task/<tid>/children, or None where the kernel has no such
    file (CONFIG_PROC_CHILDREN)."""
    found = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []  # gone
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as f:
                found += [int(c) for c in f.read().split()]
        except FileNotFoundError:
            if not os.path.exists(f"/proc/{pid}/task/{tid}"):
                continue  # that thread ended
            return None
        except OSError:
            continue
    return found


def descendants(root: int) -> list[int]:
    """Every process below `root` (children, their children, ...): from the children files where the kernel has
    them, else from one pass over every /proc/<pid>/stat."""
    by_scan: dict[int, list[int]] | None = None  # parent -> children, where a children file is missing
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        children = _children(pid) if by_scan is None else None
        if children is None:
            by_scan = by_scan if by_scan is not None else _children_by_scan()
            children = by_scan.get(pid, [])
        found += children
        todo += children
    return found


def _children_by_scan() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit() and (stat := read_stat(int(name))) is not None:
            children.setdefault(stat.ppid, []).append(int(name))
    return children


def maps_library(pid: int, library: str) -> bool:
    """Whether a file whose name holds `library` is mapped into `pid`."""
    try:
        with open(f"/proc/{pid}/maps", "rb") as f:
            return any(library.encode() in line for line in f)
    except OSError:
        return False


def main_thread_in_timed_futex(pid: int) -> bool:
    """Whether `pid`'s main thread is in a futex wait with a timeout now (False where that cannot be read)."""
    try:
        with open(f"/proc/{pid}/syscall", "rb") as f:
            fields = f.read().split()
    except OSError:  # gone, or not ours to read (ptrace rules)
        return False
    # "<number> <six arguments> <sp> <pc>" in a call; "running", or "-1 <sp> <pc>" out of one
    if FUTEX is None or len(fields) < 7 or fields[0] != str(FUTEX).encode():
        return False
    try:
        op, timeout = int(fields[2], 16), int(fields[4], 16)
    except ValueError:
        return False
    return op & _FUTEX_CMD_MASK in FUTEX_WAITS and timeout != 0


def wake(pid: int, start: int) -> bool:
    """Stop the process `pid` that started at `start`, and continue it once it has stopped (or after STOP_WAIT_S):
    its interrupted waits restart. False where it is gone (or another process has its pid)."""
    try:
        fd = os.pidfd_open(pid)  # the signals go to this process, even if it ends and its pid is reused
    except OSError:
        return False
    try:
        if (stat := read_stat(pid)) is None or stat.start != start:
            return False
        signal.pidfd_send_signal(fd, signal.SIGSTOP)
        try:
            deadline = time.monotonic() + STOP_WAIT_S
            while (
                (stat := read_stat(pid)) is not None
                and stat.state not in "Tt"
                and time.monotonic() < deadline
            ):
                time.sleep(0.01)
        finally:
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(fd, signal.SIGCONT)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


@dataclass
class _Watched:
    still_since: float  # when it went still (monotonic seconds)
    cpu_at_still: float
    wait_s: float  # how long still before the next wake-up
    injected: bool = False
    looks: int = 0  # looks without the library
    wakes: int = 0


class StallWatch:
    """While open, wakes each program below `root` that maps `library` and sits asleep (the module's rule);
    `on_wake(pid, still_s, wakes)` is told of each wake-up (`wakes`: this program's count, from 1), and
    `on_error(message)` of a look that failed (the watch then stops; the capture goes on)."""

    def __init__(
        self,
        root: int,
        library: str,
        on_wake: Callable[[int, float, int], None],
        on_error: Callable[[str], None] = lambda message: None,
        still_s: float | None = None,
        poll_s: float | None = None,
    ) -> None:
        self.root, self.library, self.on_wake, self.on_error = root, library, on_wake, on_error
        self.still_s = STILL_S if still_s is None else still_s
        self.poll_s = POLL_S if poll_s is None else poll_s
        self._watched: dict[tuple[int, int], _Watched] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="roseprof stall watch", daemon=True)

    def __enter__(self) -> StallWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.poll_s):
            try:
                self.look(time.monotonic())
            except Exception as e:  # a watch that fails must not fail the capture: it says so and stops
                self.on_error(f"the stall watch stopped: {type(e).__name__}: {e}")
                return

    def look(self, now: float) -> list[int]:
        """One look at the programs (at monotonic time `now`): the pids woken."""
        woken, seen = [], set()
        for pid in descendants(self.root):
            stat = read_stat(pid)
            if stat is None:
                continue
            key = (pid, stat.start)
            seen.add(key)
            w = self._watched.get(key)
            if w is None:
                w = self._watched[key] = _Watched(now, stat.cpu_s, self.still_s)
            if not w.injected:
                w.looks += 1
                if w.looks > MAP_LOOKS and w.looks % MAP_LOOKS:
                    continue
                w.injected = maps_library(pid, self.library)
                if not w.injected:
                    continue
            busy = stat.cpu_s - w.cpu_at_still > CPU_SHARE * (now - w.still_since) + _TICK_S
            if busy or stat.state != "S" or not main_thread_in_timed_futex(pid):
                w.still_since, w.cpu_at_still = now, stat.cpu_s
                if busy:
                    w.wait_s = self.still_s  # it ran: a later stall is a new one
                continue
            if now - w.still_since < w.wait_s or self._stop.is_set():
                continue
            if not wake(pid, stat.start):
                continue
            w.wakes += 1
            self.on_wake(pid, now - w.still_since, w.wakes)
            woken.append(pid)
            w.still_since, w.cpu_at_still = now, stat.cpu_s
            w.wait_s = min(w.wait_s * 2, MAX_STILL_S)
        for key in self._watched.keys() - seen:  # gone
            del self._watched[key]
        return woken
