"""A Ctrl-C that lands in a garbage collection while a GcWatch is on (roseinfer.gc_interrupts): delivered after the
collection, not printed as ignored by the collector. Each case runs in a process of its own (signal handlers are
the process's)."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

# A Ctrl-C during a collection, planted: a gc callback ahead of GcWatch's asks for SIGINT's handler at the
# collection's start, and Python runs the handler at its next bytecode boundary, inside the collector's callbacks.
# `watch` says whether a GcWatch is on.
PLANTED = """
import _thread, gc, time, weakref
from roseinfer.steplog import GcWatch

watch = GcWatch() if {watch} else None
planted = []

class Node:
    def __del__(self):  # a finalizer: Python code the collection runs between its callbacks
        pass

def garbage():
    a, b = Node(), Node()
    a.other, b.other = b, a
    keep.append(weakref.ref(a, lambda ref: None))  # and a weakref callback

class Plant:  # a callable object as gc callback, not a plain function
    def __call__(self, phase, info):
        if len(planted) < {ctrl_cs}:  # a Ctrl-C at the start, and a second one at the end where asked
            planted.append(phase)
            _thread.interrupt_main()

keep = []
garbage()
gc.callbacks.insert(0, Plant())
try:
    gc.collect()
    time.sleep(60)  # the deferred Ctrl-C wakes this up
    print("ran on")
except KeyboardInterrupt:
    print("interrupted after the collection", planted)
    time.sleep(1)  # a second KeyboardInterrupt would end the program here, with a traceback
print("one")
"""


def run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("ctrl_cs", [1, 2])
def test_a_ctrl_c_inside_a_collection_reaches_the_program_after_it_once(ctrl_cs):
    # past a finalizer and a weakref callback that the collection runs after it, as one KeyboardInterrupt
    proc = run(PLANTED.format(watch=True, ctrl_cs=ctrl_cs))
    assert proc.returncode == 0, proc.stderr
    phases = ["'start'", "'stop'"][:ctrl_cs]
    assert proc.stdout.split("\n")[:2] == [f"interrupted after the collection [{', '.join(phases)}]", "one"]
    assert "ignored" not in proc.stderr


def test_without_the_watch_the_collector_drops_it():
    # Python's own behaviour, which the watch's hold exists for (and the proof that PLANTED lands its Ctrl-C in a
    # callback): the KeyboardInterrupt is printed as ignored, and the program runs on past a short sleep.
    proc = run(PLANTED.format(watch=False, ctrl_cs=1).replace("time.sleep(60)", "time.sleep(0.2)"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[0] == "ran on"
    assert "KeyboardInterrupt" in proc.stderr and "ignored" in proc.stderr


def test_closing_the_watch_puts_the_handler_back_unless_it_was_changed():
    from roseinfer.steplog import GcWatch

    before = signal.getsignal(signal.SIGINT)
    watch = GcWatch()
    assert signal.getsignal(signal.SIGINT) is not before  # wrapped
    watch.close()
    assert signal.getsignal(signal.SIGINT) is before

    def mine(signum, frame):
        pass

    watch = GcWatch()
    try:
        signal.signal(signal.SIGINT, mine)  # a server's own handler, set after the engine's watch
        watch.close()
        assert signal.getsignal(signal.SIGINT) is mine
    finally:
        signal.signal(signal.SIGINT, before)


def test_a_watch_off_the_main_thread_or_with_sigint_ignored_wraps_nothing():
    import threading

    from roseinfer.steplog import GcWatch

    before = signal.getsignal(signal.SIGINT)
    seen = []
    thread = threading.Thread(target=lambda: seen.append(GcWatch()))
    thread.start()
    thread.join()
    assert signal.getsignal(signal.SIGINT) is before
    seen[0].close()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        GcWatch().close()
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, before)
