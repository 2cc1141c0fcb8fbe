"""A program that loses a wakeup on purpose, as Nsight Systems 2022.4's injection library does at exit.

A worker thread waits, without a timeout, on a futex word that the main thread then changes without waking it (no
FUTEX_WAKE), so the worker sleeps on; the main thread polls the worker's done flag in futex waits with a timeout,
as the stalled library's main thread polls. A signal that stops and continues the process restarts the worker's
wait, which finds its word changed: the worker sets its flag and wakes the main thread, which prints "woke" and
exits 0.

Modes (the first argument):
- `futex` (the default): as above.
- `forever`: the main thread does not change the word, so a restarted wait sleeps again.
- `untimed`: as `futex`, but the main thread waits for the flag without a timeout (as a thread join does).
- `poll`: the word changed all the same, but the main thread waits in poll() on a pipe that never gets a byte (an
  idle server's wait) instead of polling the flag.

It prints "waiting <pid>" once the worker sleeps, and "changed" once the word has (all modes but `forever`). The
wait is an NVTX range (`lost_wakeup.wait`), so that a capture of it has something to show.
"""

import ctypes
import os
import platform
import select
import sys
import threading
import time

import nvtx

SYS_FUTEX = {"x86_64": 202, "aarch64": 98}[platform.machine()]
FUTEX_WAIT, FUTEX_WAKE = 0, 1

libc = ctypes.CDLL(None, use_errno=True)


class Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


lost = ctypes.c_int(0)  # the word whose wakeup is lost
done = ctypes.c_int(0)  # the worker's flag, which the main thread polls
worker_tid = []


def futex_wait(word: ctypes.c_int, timeout: Timespec | None = None) -> None:
    libc.syscall(
        SYS_FUTEX, ctypes.byref(word), FUTEX_WAIT, 0, ctypes.byref(timeout) if timeout else None, None, 0
    )


def worker() -> None:
    worker_tid.append(threading.get_native_id())
    while lost.value == 0:
        futex_wait(lost)  # no timeout: it sleeps through the lost wakeup
    done.value = 1
    libc.syscall(SYS_FUTEX, ctypes.byref(done), FUTEX_WAKE, 1, None, None, 0)


def asleep_on(tid: int, word: ctypes.c_int) -> bool:
    """Whether thread `tid` of this process is in a futex wait on `word` (/proc's "<number> <address> ...")."""
    with open(f"/proc/self/task/{tid}/syscall") as f:
        return f.read().split()[:2] == [str(SYS_FUTEX), hex(ctypes.addressof(word))]


mode = sys.argv[1] if len(sys.argv) > 1 else "futex"
threading.Thread(target=worker, daemon=True).start()
while not worker_tid or not asleep_on(worker_tid[0], lost):  # a change before it sleeps would be seen
    time.sleep(0.001)
print("waiting", os.getpid(), flush=True)
with nvtx.annotate("lost_wakeup.wait"):
    if mode != "forever":
        lost.value = 1  # no FUTEX_WAKE: the wakeup is lost
        print("changed", flush=True)
    if mode == "poll":
        read_end, _ = os.pipe()
        poll = select.poll()
        poll.register(read_end, select.POLLIN)
        poll.poll()
    else:
        # The worker's FUTEX_WAKE ends the wait: the timeout makes it a poll. Short, as the library's (1 s): a wait
        # that a signal interrupts resumes as restart_syscall, not a futex call, until its timeout.
        while done.value == 0:
            futex_wait(done, None if mode == "untimed" else Timespec(2, 0))
print("woke", flush=True)
