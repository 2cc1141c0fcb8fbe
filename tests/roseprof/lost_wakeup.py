"""A program that loses a wakeup on purpose, as Nsight Systems 2022.4's injection library does at exit.

Modes (the first argument):
- `futex` (the default): the main thread waits on a futex word that another thread then changes without waking
  it (no FUTEX_WAKE), so it sleeps until a signal restarts its wait, which finds the word changed; then it prints
  "woke" and exits 0.
- `forever`: no thread changes the word, so a restarted wait sleeps again.
- `poll`: the main thread waits in poll() on a pipe that never gets a byte (an idle server's wait), the word
  changed all the same; a signal does not end that wait.

It prints "waiting <pid>" as it goes to sleep, and "changed" once the word has (all modes but `forever`). The wait is an NVTX range (`lost_wakeup.wait`), so that a capture
of it has something to show.
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
FUTEX_WAIT = 0

libc = ctypes.CDLL(None, use_errno=True)
word = ctypes.c_int(0)


def change_without_waking() -> None:
    time.sleep(0.2)  # the main thread is asleep by then
    word.value = 1
    print("changed", flush=True)


mode = sys.argv[1] if len(sys.argv) > 1 else "futex"
if mode != "forever":
    threading.Thread(target=change_without_waking).start()
print("waiting", os.getpid(), flush=True)
with nvtx.annotate("lost_wakeup.wait"):
    if mode == "poll":
        read_end, _ = os.pipe()
        poll = select.poll()
        poll.register(read_end, select.POLLIN)
        poll.poll()
    else:
        while word.value == 0:
            libc.syscall(SYS_FUTEX, ctypes.byref(word), FUTEX_WAIT, 0, None)
print("woke", flush=True)
