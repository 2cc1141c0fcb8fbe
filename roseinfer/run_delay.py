"""A thread's waits for a core, as the kernel counts them: its run delay, the time it was runnable on a run queue but
not running (the second field of /proc/thread-self/schedstat, ns; Linux with CONFIG_SCHED_INFO, which Debian's,
Ubuntu's and Fedora's kernels have).

A step's wall time less its thread CPU time is every wait in it: for a core, but also a sleep, a lock, a read. Only
the first is the machine's, and only the kernel can tell it apart. On a core shared with CPU burners (Linux 6.18's
scheduler) the engine's waits land where its timeslice ends, at the same places step after step, not spread over
the regions as their CPU time is (docs/BENCHMARKS.md, session 33): the step's run delay says the machine made it
wait where the regions' times alone cannot. It is this thread's alone: a wait of another thread it then waited on
(the GIL, a helper thread) is a sleep to it. A read is one pread of a file this thread keeps open (about 1 µs;
opening it each time costs 10).
"""

from __future__ import annotations

import os
import threading

_PATH = "/proc/thread-self/schedstat"  # opened by a thread, the file stays that thread's


class _Schedstat:
    """One thread's schedstat file, open while the thread lives (the thread-local holding it goes with the thread)."""

    __slots__ = ("fd",)

    def __init__(self) -> None:
        self.fd = -1
        self.fd = os.open(_PATH, os.O_RDONLY)

    def __del__(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)


_local = threading.local()


def _forget_the_parents_files() -> None:
    """In a forked child: its thread is another thread than the parent's, whose files it inherited (closed as the
    old thread-local goes)."""
    global _local
    _local = threading.local()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_the_parents_files)


def run_delay_ns() -> int:
    """This thread's run delay so far (ns), or -1 where the kernel does not say: no such file (not Linux, no
    CONFIG_SCHED_INFO), or a kernel that counts nothing there (it then prints zeros, its timeslices too). Never
    raises: the engine's step reads it."""
    stat = getattr(_local, "stat", None)
    if stat is False:  # this thread found no such file before: not again every step
        return -1
    try:
        if stat is None:
            stat = _local.stat = _Schedstat()
        fields = os.pread(stat.fd, 64, 0).split()
        delay, slices = int(fields[1]), int(fields[2])
    except (FileNotFoundError, PermissionError, ValueError, IndexError):
        _local.stat = False
        return -1
    except OSError:  # out of file descriptors, say: this step goes without, the next tries again
        return -1
    return delay if slices > 0 else -1  # a thread that is running has had a timeslice
