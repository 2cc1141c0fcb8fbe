"""The step log's file: rw-r--r-- whatever the umask the program was started with (nsys 2022.4 starts it with 0)."""

import json
import os
import stat

from roseinfer.steplog import StepLogWriter


def test_the_step_log_is_not_writable_by_others_under_umask_0(tmp_path):
    path = tmp_path / "steplog.jsonl"
    old = os.umask(0)
    try:
        StepLogWriter(str(path)).close()
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert json.loads(path.read_text().splitlines()[0])["type"] == "meta"  # written through the fd opened so


def _sigint_during_the_last_write(tmp_path, signals: int):
    """A step log of 10 steps whose exit hook runs with `signals` SIGINTs landing in its last write, under a SIGINT
    handler that fails the test if the hook does not put its own in place. Returns (what the hook raised, the log's
    records); the handler before is back either way."""
    import atexit
    import signal

    path = tmp_path / "steps.jsonl"
    writer = StepLogWriter(str(path))
    atexit.unregister(writer._exit_hook)  # this process's exit is pytest's: the hook runs here, once
    for i in range(10):
        writer.write({"type": "step", "index": i})
    flush = writer._flush_locked

    def interrupted_flush():
        for _ in range(signals):  # each delivered to this (the main) thread before the write below
            os.kill(os.getpid(), signal.SIGINT)
        flush()

    def unguarded(signum, frame):
        raise AssertionError("the exit hook's write ran under the handler before it")

    writer._flush_locked = interrupted_flush
    before = signal.signal(signal.SIGINT, unguarded)
    raised = None
    try:
        writer._exit_hook()
    except KeyboardInterrupt as e:
        raised = e
    finally:
        after = signal.signal(signal.SIGINT, before)
    assert after is unguarded  # put back for the exit hooks after it
    return raised, [json.loads(line) for line in path.read_text().splitlines()]


def test_a_ctrl_c_as_the_process_exits_leaves_the_log_whole(tmp_path):
    # the run is over and its exit hook writes the log out when a Ctrl-C lands (a user's, or the SIGINT a profiler
    # forwards as it stops): no KeyboardInterrupt from the hook, and no line lost
    raised, records = _sigint_during_the_last_write(tmp_path, signals=1)
    assert raised is None
    assert [r["type"] for r in records] == ["meta"] + ["step"] * 10


def test_a_second_ctrl_c_interrupts_the_last_write(tmp_path):
    # a write that does not end (a full pipe, a hung disk) can still be interrupted: the second Ctrl-C raises
    raised, _ = _sigint_during_the_last_write(tmp_path, signals=2)
    assert isinstance(raised, KeyboardInterrupt)
