"""A Ctrl-C that lands in a garbage collection while a GcWatch is on (roseinfer.gc_interrupts): delivered after the
collection, not printed as ignored by the collector. Each case runs in a process of its own (signal handlers are
the process's)."""

from __future__ import annotations

import signal
import subprocess
import sys

# A Ctrl-C during a collection, planted: a gc callback ahead of GcWatch's asks for SIGINT's handler at the
# collection's start, and Python runs the handler at its next bytecode boundary, inside the collector's callbacks.
# `watch` says whether a GcWatch is on.
PLANTED = """
import _thread, gc, time
from roseinfer.steplog import GcWatch

watch = GcWatch() if {watch} else None
planted = []

def plant(phase, info):
    if phase == "start" and not planted:
        planted.append(1)
        _thread.interrupt_main()

gc.callbacks.insert(0, plant)
try:
    gc.collect()
    time.sleep(60)  # the deferred Ctrl-C wakes this up
    print("ran on")
except KeyboardInterrupt:
    print("interrupted after the collection", bool(planted))
"""


def run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def test_a_ctrl_c_inside_a_collection_reaches_the_program_after_it():
    proc = run(PLANTED.format(watch=True))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[0] == "interrupted after the collection True"
    assert "ignored" not in proc.stderr


def test_without_the_watch_the_collector_drops_it():
    # Python's own behaviour, which the watch's hold exists for (and the proof that PLANTED lands its Ctrl-C in a
    # callback): the KeyboardInterrupt is printed as ignored, and the program runs on past a short sleep.
    proc = run(PLANTED.format(watch=False).replace("time.sleep(60)", "time.sleep(0.2)"))
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
