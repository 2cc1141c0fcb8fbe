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
