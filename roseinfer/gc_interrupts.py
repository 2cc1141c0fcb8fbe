"""A Ctrl-C that lands in a garbage collection, delivered after it.

Python runs a signal's handler in the main thread at its next bytecode boundary. During a collection with a
callback in `gc.callbacks` (`steplog.GcWatch`), that boundary is inside the callback, and an exception raised
there cannot leave it: the collector prints it as ignored and goes on. So a Ctrl-C whose KeyboardInterrupt is
raised there is lost, and the engine runs on (a 3M-object heap's collection takes 0.4 s on a CPU machine: one
Ctrl-C in a few lands in it).

While a GcWatch is on, SIGINT's handler is wrapped (`hold`): anywhere but a gc callback it calls the handler it
wraps; called from a gc callback's frame, it calls that handler at the main thread's first function call or return
outside the collector's callbacks, through a profile function (`sys.setprofile`, for that thread, until then).

Not a signal sent again from a helper thread: the helper needs the GIL, which the main thread hands over at its
bytecode boundaries, and in a program busy collecting those are the callbacks again (a loop of collections with
5 ms of work between them deferred it to the loop's end). Where a profiler is already set (it cannot be put back
from here if it is cProfile's, set in C), a helper thread re-sends the signal a millisecond later.
"""

from __future__ import annotations

import gc
import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType

REDELIVER_AFTER_S = 0.001


class _Deferring:
    """SIGINT's handler while held: `handler` (the one it replaced) outside gc callbacks."""

    def __init__(self, handler: Callable) -> None:
        self.handler = handler

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        if not in_gc_callback(frame):
            self.handler(signum, frame)
        elif sys.getprofile() is None:
            sys.setprofile(self._at_first_event_outside(signum))
        else:
            main = threading.main_thread().ident
            timer = threading.Timer(REDELIVER_AFTER_S, signal.pthread_kill, (main, signum))
            timer.daemon = True
            timer.start()

    def _at_first_event_outside(self, signum: int) -> Callable:
        def on_event(frame: FrameType, event: str, arg) -> None:
            if in_gc_callback(frame):
                return
            sys.setprofile(None)
            self.handler(signum, frame)  # its exception is raised in `frame`

        return on_event


def in_gc_callback(frame: FrameType | None) -> bool:
    """Whether `frame`, or a frame it was called from, runs a function of `gc.callbacks`."""
    codes = {_code(callback) for callback in gc.callbacks} - {None}
    while frame is not None:
        if frame.f_code in codes:
            return True
        frame = frame.f_back
    return False


def _code(callback):
    return getattr(getattr(callback, "__func__", callback), "__code__", None)


def hold() -> _Deferring | None:
    """Wrap SIGINT's handler; returns the wrapper for `release`, or None where nothing was wrapped: off the main
    thread (only it can set a handler), or SIGINT ignored, at its default or set outside Python (no Python handler
    runs, so none can be lost)."""
    if threading.current_thread() is not threading.main_thread():
        return None
    handler = signal.getsignal(signal.SIGINT)
    if not callable(handler):
        return None
    wrapper = _Deferring(handler)
    signal.signal(signal.SIGINT, wrapper)
    return wrapper


def release(wrapper: _Deferring | None) -> None:
    """Put back the handler `hold` wrapped, unless SIGINT's handler was changed since (that change is kept; a
    wrapper left inside it only forwards)."""
    if wrapper is not None and threading.current_thread() is threading.main_thread():
        if signal.getsignal(signal.SIGINT) is wrapper:
            signal.signal(signal.SIGINT, wrapper.handler)
