"""A Ctrl-C that lands in a garbage collection, delivered after it.

Python runs a signal's handler in the main thread at its next bytecode boundary. During a collection with a
callback in `gc.callbacks` (`steplog.GcWatch`), that boundary is inside the callback (or in a finalizer or a
weakref callback the collection runs), and an exception raised there cannot leave it: the collector prints it as
ignored and goes on. So a Ctrl-C whose KeyboardInterrupt is raised there is lost, and the engine runs on (a
3M-object heap's collection takes 0.4 s on a CPU machine: one Ctrl-C in a few lands in it).

While a GcWatch is on, SIGINT's handler is wrapped (`hold`): outside a collection it calls the handler it wraps;
inside one it calls that handler at the main thread's first Python call or return after the collection, through a
profile function (`sys.setprofile`, for that thread, until then). A collection is known by two callbacks that
bracket the others (the first sets a flag at "start", the last clears it at "stop"), and by a frame of any Python
callback of `gc.callbacks` (one put ahead of the first). More Ctrl-Cs before the delivery give one
KeyboardInterrupt.

Not a signal sent again from a helper thread: the helper needs the GIL, which the main thread hands over at its
bytecode boundaries, and in a program busy collecting those are inside the collection again (a loop of
collections with 5 ms of work between them deferred it to the loop's end). Where a profiler is already set (it
cannot be put back from here if it is cProfile's, set in C), a helper thread re-sends the signal a millisecond
later, as often as it lands in a collection.
"""

from __future__ import annotations

import functools
import gc
import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType

REDELIVER_AFTER_S = 0.001

_collecting = False  # between the first callback's "start" and the last one's "stop"
_holds = 0  # the wrappers held: the bracketing callbacks are in gc.callbacks while there are any


def _on_start(phase: str, info: dict) -> None:
    global _collecting
    if phase == "start":
        _collecting = True


def _on_stop(phase: str, info: dict) -> None:
    global _collecting
    if phase == "stop":
        _collecting = False


class _Deferring:
    """SIGINT's handler while held: `handler` (the one it replaced) outside collections."""

    def __init__(self, handler: Callable) -> None:
        self.handler = handler
        self.profile: Callable | None = None  # the profile function set to deliver a deferred Ctrl-C
        self.timer_armed = False  # a re-send by a helper thread is due

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        if not in_collection(frame):
            if self.profile is not None and sys.getprofile() is self.profile:
                sys.setprofile(None)  # this Ctrl-C is the delivery
            self.profile = None
            self.handler(signum, frame)
        elif self.profile is not None or self.timer_armed:
            return  # one is already on its way
        elif sys.getprofile() is None:
            self.profile = self._at_first_event_outside(signum)
            sys.setprofile(self.profile)
        else:
            self.timer_armed = True
            timer = threading.Timer(REDELIVER_AFTER_S, self._resend, (threading.main_thread().ident, signum))
            timer.daemon = True
            timer.start()

    def _resend(self, thread_id: int, signum: int) -> None:
        self.timer_armed = False
        signal.pthread_kill(thread_id, signum)

    def _at_first_event_outside(self, signum: int) -> Callable:
        def on_event(frame: FrameType, event: str, arg) -> None:
            if in_collection(frame):
                return
            sys.setprofile(None)
            self.profile = None
            self.handler(signum, frame)  # its exception is raised in `frame`

        return on_event


def in_collection(frame: FrameType | None) -> bool:
    """Whether the main thread is inside a collection: between the bracketing callbacks, or in a frame (or one
    called from it) of a Python callback of `gc.callbacks`."""
    if _collecting:
        return True
    codes = {_code(callback) for callback in gc.callbacks} - {None}
    while frame is not None:
        if frame.f_code in codes:
            return True
        frame = frame.f_back
    return False


def _code(callback):
    """The code a callback runs: a function's, a bound method's, a partial's function's, a callable object's
    `__call__`'s (None for one written in C, which runs no bytecode)."""
    while isinstance(callback, functools.partial):
        callback = callback.func
    function = getattr(callback, "__func__", callback)
    code = getattr(function, "__code__", None)
    if code is None and callable(callback):
        call = type(callback).__call__
        code = getattr(getattr(call, "__func__", call), "__code__", None)
    return code


def hold() -> _Deferring | None:
    """Wrap SIGINT's handler; returns the wrapper for `release`, or None where nothing was wrapped: off the main
    thread (only it can set a handler), or SIGINT ignored, at its default or set outside Python (no Python handler
    runs, so none can be lost)."""
    global _holds
    if threading.current_thread() is not threading.main_thread():
        return None
    handler = signal.getsignal(signal.SIGINT)
    if not callable(handler):
        return None
    wrapper = _Deferring(handler)
    signal.signal(signal.SIGINT, wrapper)
    if _holds == 0:
        gc.callbacks.insert(0, _on_start)
        gc.callbacks.append(_on_stop)
    _holds += 1
    return wrapper


def release(wrapper: _Deferring | None) -> None:
    """Put back the handler `hold` wrapped, unless SIGINT's handler was changed since (that change is kept; a
    wrapper left inside it only forwards)."""
    global _holds
    if wrapper is None or threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGINT) is wrapper:
        signal.signal(signal.SIGINT, wrapper.handler)
    _holds -= 1
    if _holds == 0:
        for callback in (_on_start, _on_stop):
            if callback in gc.callbacks:
                gc.callbacks.remove(callback)
