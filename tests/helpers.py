"""Running the CLI as a user would: a subprocess with real files."""

import os
import subprocess
import sys
from pathlib import Path

DATA = Path(__file__).parent / "data"


def roseprof(*args, env=None, timeout=600, cwd=None):
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "roseprof", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=full_env,
        cwd=cwd,
    )


def assert_one_line_error(proc, code, text):
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert text in lines[0], lines[0]
