"""The exit hooks that write a run's last data (`roseinfer.exit_hooks`): a Ctrl-C during the write waits for it,
a second one interrupts it, and SIGINT's handler is put back either way. The step log's own hook is tested in
test_steplog_file.py; the torch.profiler trace's here, with a real profiler on the CPU."""

import gzip
import json
import os
import signal
import threading

import pytest

from roseinfer import env, exit_hooks


def _unguarded(signum, frame):
    raise AssertionError("the hook's write ran under the handler before it")


def _guarded_with(signals: int, close):
    """`exit_hooks.guarded(close)` with `signals` SIGINTs landing at close's start, under a handler that fails the
    test if the hook does not put its own in place; returns what it raised (the handler before is back)."""

    def interrupted():
        for _ in range(signals):  # each delivered to this (the main) thread before close's work
            os.kill(os.getpid(), signal.SIGINT)
        close()

    before = signal.signal(signal.SIGINT, _unguarded)
    raised = None
    try:
        exit_hooks.guarded(interrupted)
    except KeyboardInterrupt as e:
        raised = e
    finally:
        after = signal.signal(signal.SIGINT, before)
    assert after is _unguarded  # put back for the hooks after it
    return raised


def test_one_ctrl_c_waits_for_the_write_and_two_interrupt_it():
    done = []
    assert _guarded_with(1, lambda: done.append("written")) is None
    assert done == ["written"]
    assert isinstance(_guarded_with(2, lambda: done.append("again")), KeyboardInterrupt)
    assert done == ["written"]  # interrupted before its work


def test_off_the_main_thread_the_hook_runs_as_it_is():
    # only the main thread may set a handler: elsewhere close runs, and the handler stays what it was
    before = signal.getsignal(signal.SIGINT)
    seen = []
    worker = threading.Thread(
        target=exit_hooks.guarded, args=(lambda: seen.append(signal.getsignal(signal.SIGINT)),)
    )
    worker.start()
    worker.join()
    assert seen == [before] and signal.getsignal(signal.SIGINT) is before


def test_register_hands_back_the_hook_it_registered(monkeypatch):
    registered = []
    monkeypatch.setattr(exit_hooks.atexit, "register", registered.append)
    done = []
    hook = exit_hooks.register(lambda: done.append(1))
    assert registered == [hook]
    hook()
    assert done == [1]


def test_a_ctrl_c_while_the_torch_profile_is_written_at_exit_leaves_the_trace_whole(tmp_path, monkeypatch):
    # a run that ends inside the profiler's window writes the trace from its exit hook: a Ctrl-C landing as the
    # trace is exported waits for it (the file is a whole gzip of JSON), where it used to cut it off
    torch = pytest.importorskip("torch")
    from roseinfer import torch_profile

    monkeypatch.setenv("ROSEINFER_TORCH_PROFILE", str(tmp_path / "prof"))
    monkeypatch.setenv("ROSEINFER_TORCH_PROFILE_SCHEDULE", "0,1,5")
    monkeypatch.setenv("ROSEINFER_TORCH_PROFILE_CPU_ONLY", "1")
    hooks = []
    monkeypatch.setattr(exit_hooks, "register", hooks.append)  # this process's exit is pytest's: run it here
    profile = torch_profile.TorchProfile(env.read())
    profile.start()
    save = profile._save

    def interrupted_save(prof):
        os.kill(os.getpid(), signal.SIGINT)  # lands before the export below
        save(prof)

    profile._save = interrupted_save
    profile.prof.on_trace_ready = interrupted_save
    try:
        for _ in range(3):  # a warm-up step, then two of the five-step window
            torch.ones(64, 64) @ torch.ones(64, 64)
            profile.step()
        assert hooks == [profile.close] and not profile.done
        before = signal.signal(signal.SIGINT, _unguarded)
        try:
            exit_hooks.guarded(hooks[0])
        finally:
            after = signal.signal(signal.SIGINT, before)
    finally:
        if profile.prof is not None:
            profile.prof.stop()
        torch_profile._PROFILER = None
    assert after is _unguarded
    with gzip.open(tmp_path / "prof" / "trace.json.gz", "rt") as f:
        trace = json.load(f)
    assert trace["traceEvents"]
