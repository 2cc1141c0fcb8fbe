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
- has its main thread in a futex wait (the stall's; a server idles in epoll or poll: uvicorn's loop, the engine
  core's pipe);
- and whose threads together used under 1% of a CPU,
for STILL_S seconds on end. One that stays asleep is woken again after twice as long each time, up to MAX_STILL_S.

The rule is narrow, and a wrong guess costs little. A program that was only waiting (on a lock, for a worker) gets
its waits restarted or retried: the kernel restarts an interrupted futex wait, and Python retries other calls (PEP
475). It loses only the moment it was stopped.
"""

from __future__ import annotations

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
STOP_WAIT_S = 1.0  # how long a stopped program may take to stop before it is continued anyway

# The futex system call's number (the first field of /proc/<pid>/syscall while a thread is in it).
FUTEX = {"x86_64": 202, "aarch64": 98}.get(platform.machine())

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


def descendants(root: int) -> list[int]:
    """Every process below `root` (children, their children, ...), from one pass over /proc."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit() and (stat := read_stat(int(name))) is not None:
            children.setdefault(stat.ppid, []).append(int(name))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), ()):
            found.append(child)
            todo.append(child)
    return found


def maps_library(pid: int, library: str) -> bool:
    """Whether a file whose name holds `library` is mapped into `pid`."""
    try:
        with open(f"/proc/{pid}/maps", "rb") as f:
            return any(library.encode() in line for line in f)
    except OSError:
        return False


def main_thread_in_futex(pid: int) -> bool:
    """Whether `pid`'s main thread is in a futex wait now (False where that cannot be read)."""
    try:
        with open(f"/proc/{pid}/syscall", "rb") as f:
            call = f.read().split(maxsplit=1)[0]
    except (OSError, IndexError):  # gone, or not ours to read (ptrace rules)
        return False
    return FUTEX is not None and call == str(FUTEX).encode()


def wake(pid: int) -> None:
    """Stop `pid`, and continue it once it has stopped (or after STOP_WAIT_S): its interrupted waits restart."""
    os.kill(pid, signal.SIGSTOP)
    try:
        deadline = time.monotonic() + STOP_WAIT_S
        while (stat := read_stat(pid)) is not None and stat.state not in "Tt" and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        os.kill(pid, signal.SIGCONT)


@dataclass
class _Watched:
    injected: bool
    still_since: float  # when it went still (monotonic seconds)
    cpu_at_still: float
    wait_s: float  # how long still before the next wake-up
    wakes: int = 0


class StallWatch:
    """While open, wakes each program below `root` that maps `library` and sits asleep (the module's rule);
    `on_wake(pid, still_s, wakes)` is told of each wake-up (`wakes`: this program's count, from 1)."""

    def __init__(
        self,
        root: int,
        library: str,
        on_wake: Callable[[int, float, int], None],
        still_s: float = STILL_S,
        poll_s: float = POLL_S,
    ) -> None:
        self.root, self.library, self.on_wake = root, library, on_wake
        self.still_s, self.poll_s = still_s, poll_s
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
            self.look(time.monotonic())

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
                w = self._watched[key] = _Watched(False, now, stat.cpu_s, self.still_s)
            if (
                not w.injected
            ):  # the library is preloaded at exec: a process may not have it yet at the first look
                w.injected = maps_library(pid, self.library)
                if not w.injected:
                    continue
            busy = stat.cpu_s - w.cpu_at_still > CPU_SHARE * (now - w.still_since) + _TICK_S
            if busy or stat.state != "S" or not main_thread_in_futex(pid):
                w.still_since, w.cpu_at_still = now, stat.cpu_s
                continue
            if now - w.still_since < w.wait_s:
                continue
            if self._stop.is_set():
                break
            try:
                wake(pid)
            except ProcessLookupError:
                continue
            w.wakes += 1
            self.on_wake(pid, now - w.still_since, w.wakes)
            woken.append(pid)
            w.still_since, w.cpu_at_still = now, stat.cpu_s
            w.wait_s = min(w.wait_s * 2, MAX_STILL_S)
        for key in self._watched.keys() - seen:  # gone
            del self._watched[key]
        return woken
