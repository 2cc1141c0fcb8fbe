"""The start-up's objects frozen once the engine is built (roseinfer.frozen_heap), in the processes whose engine
lives as long as they do: the server's engine core asked to (its own process's `main` does), and nowhere else. Each
case runs in a process of its own (the freeze lasts for the process's life: this one's heap stays as it is)."""

from __future__ import annotations

import subprocess
import sys

import pytest

# An engine core on a thread, with the automatic collector off: a reference cycle made before the core starts is
# collected only by the core's own collection, and the frozen count says whether the heap was frozen.
CORE = """
import gc, threading, weakref
from multiprocessing import Pipe
from roseinfer.config import EngineConfig
from roseinfer.serve.engine_core import EngineCore

class Node:
    pass

def cycle():
    a, b = Node(), Node()
    a.other, b.other = b, a
    return weakref.ref(a)

gc.disable()
ref = cycle()
server, end = Pipe()
core = EngineCore(end, "gpt2-tiny", EngineConfig(max_batch_size=2), metrics=False, freeze_heap={freeze})
thread = threading.Thread(target=core.run, daemon=True)
thread.start()
events = []
while ("ready",) not in events:
    assert server.poll(120), "the engine core went silent"
    events += server.recv()
print(gc.get_freeze_count(), ref() is None)
server.send(("stop",))
thread.join(60)
assert not thread.is_alive()
"""


@pytest.mark.parametrize("freeze", [True, False])
def test_the_core_freezes_its_processs_heap_once_built_only_when_asked(freeze):
    proc = subprocess.run(
        [sys.executable, "-c", CORE.format(freeze=freeze)], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    frozen, collected = proc.stdout.split()
    if freeze:
        assert int(frozen) > 10_000  # the model's and the libraries' objects
        assert collected == "True"  # the garbage of before was collected first, not frozen with the rest
    else:
        assert int(frozen) == 0 and collected == "False"
