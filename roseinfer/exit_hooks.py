"""Exit hooks that write a run's last data out: the step log's last lines (`roseinfer.steplog`), the torch.profiler
trace of a window the run ended inside (`roseinfer.torch_profile`) and the kernel stamps' last steps
(`roseinfer.cuda_ext.recorder`).

The run is over when they run, and a Ctrl-C then (a user's, or the SIGINT a profiler forwards as it stops the
program) used to cut that write off with a KeyboardInterrupt traceback from the hook, under exit status 0. Here the
first Ctrl-C during a hook's write waits for it; a second one interrupts it (a write that does not end: a full pipe,
a hung disk); SIGINT's handler is then put back, for the hooks after it.
"""

from __future__ import annotations

import atexit
import functools
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager


def register(close: Callable[[], None]) -> Callable[[], None]:
    """Run `close` at the process's exit under `guarded`; returns the hook (for `atexit.unregister`)."""
    hook = functools.partial(guarded, close)
    atexit.register(hook)
    return hook


def guarded(close: Callable[[], None]) -> None:
    """`close()` with the first SIGINT during it waiting for it and a second one raising KeyboardInterrupt. Only the
    main thread can set a signal handler; elsewhere `close()` runs as it is."""
    with sigint_held():
        close()


@contextmanager
def sigint_held(raise_after: bool = False) -> Iterator[None]:
    """The block with the first SIGINT during it held (the interrupted call resumes, PEP 475) and a second one
    raising KeyboardInterrupt; SIGINT's handler is then put back, and with `raise_after` a held SIGINT is raised
    through it once the block is over (`roseinfer.frozen_heap`: a Ctrl-C in a garbage collection would otherwise run
    its handler inside a collector callback, where the KeyboardInterrupt is dropped). Only the main thread can set
    a signal handler; elsewhere the block runs as it is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    seen = []

    def first_waits(signum, frame):
        if seen:
            raise KeyboardInterrupt
        seen.append(signum)

    previous = signal.signal(signal.SIGINT, first_waits)
    try:
        yield
    finally:
        # None: a handler set outside Python, which Python cannot put back; the default's is the nearest
        signal.signal(signal.SIGINT, previous if previous is not None else signal.SIG_DFL)
    if raise_after and seen:
        signal.raise_signal(signal.SIGINT)
