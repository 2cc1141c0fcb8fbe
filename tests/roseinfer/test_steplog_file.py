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


def test_a_ctrl_c_as_the_process_exits_leaves_the_log_whole(tmp_path):
    # the run is over and its atexit callback writes the log out when a Ctrl-C lands (a user's, or the SIGINT a
    # profiler forwards as it stops): no KeyboardInterrupt from the callback, and no line lost
    import signal

    path = tmp_path / "steps.jsonl"
    writer = StepLogWriter(str(path))
    for i in range(10):
        writer.write({"type": "step", "index": i})
    flush = writer._flush_locked

    def interrupted_flush():
        os.kill(os.getpid(), signal.SIGINT)  # delivered to this (the main) thread before the write below
        flush()

    writer._flush_locked = interrupted_flush
    handler = signal.getsignal(signal.SIGINT)
    try:
        writer._close_at_exit()
    finally:
        signal.signal(signal.SIGINT, handler)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["type"] for r in lines] == ["meta"] + ["step"] * 10
