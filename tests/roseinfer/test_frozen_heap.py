"""The start-up's objects frozen once the engine is built (roseinfer.frozen_heap), in the processes whose engine
lives as long as they do: the server's engine core asked to (its own process's `main` does) and a benchmark run as
`python -m`, not a caller of either in its own process. Each freeze runs in a process of its own (it lasts for the
process's life: this one's heap stays as it is)."""

from __future__ import annotations

import gc
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
    frozen, collected = proc.stdout.split()[-2:]
    if freeze:
        assert int(frozen) > 10_000  # the model's and the libraries' objects
        assert collected == "True"  # the garbage of before was collected first, not frozen with the rest
    else:
        assert int(frozen) == 0 and collected == "False"


# `python -m roseinfer.benchmark_streaming` as the shell runs it, the frozen count said at the process's exit
BENCHMARK = """
import atexit, gc, runpy, sys
atexit.register(lambda: print("frozen", gc.get_freeze_count()))
sys.argv = ["benchmark_streaming", "--hf-model-id", "gpt2-tiny", "--device", "cpu", "--num-requests", "2",
            "--max-new-tokens", "3", "--warmup-runs", "0", "--repeat-runs", "1"]
runpy.run_module("roseinfer.benchmark_streaming", run_name="__main__")
"""


def test_the_benchmark_freezes_its_own_process_but_not_a_caller_of_its_main():
    proc = subprocess.run([sys.executable, "-c", BENCHMARK], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert int(proc.stdout.split()[-1]) > 10_000
    from roseinfer import benchmark_streaming

    argv = ["--hf-model-id", "gpt2-tiny", "--device", "cpu", "--num-requests", "2", "--max-new-tokens", "3"]
    assert benchmark_streaming.main([*argv, "--warmup-runs", "0", "--repeat-runs", "1"]) == 0
    assert gc.get_freeze_count() == 0  # this process (a test's) is the caller's: nothing frozen


# A Ctrl-C that arrives while the start-up's collection runs: sent by a collector callback (as the step log's hook
# is one), whose own KeyboardInterrupt the collector would print and drop
CTRL_C = """
import gc, os, signal
from roseinfer.frozen_heap import freeze_startup_heap

def ctrl_c(phase, info):
    if phase == "start" and info["generation"] == 2:
        gc.callbacks.remove(ctrl_c)
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(1000):  # bytecode in the callback, where the handler would run
            pass

gc.callbacks.append(ctrl_c)
try:
    freeze_startup_heap()
except KeyboardInterrupt:
    print("interrupted", signal.getsignal(signal.SIGINT) is signal.default_int_handler, gc.get_freeze_count() > 0)
"""


def test_a_ctrl_c_during_the_collection_is_raised_after_it():
    proc = subprocess.run([sys.executable, "-c", CTRL_C], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    # raised once the collection is over, with Python's own handler back; the freeze itself did not happen
    assert proc.stdout.split() == ["interrupted", "True", "False"], proc.stdout + proc.stderr
