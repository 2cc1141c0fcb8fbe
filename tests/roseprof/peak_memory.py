"""`roseprof import` in a child process that reports its own peak RSS: how the streaming readers are tested
(the memory a file costs, beside the same import of a small file, against the file's size)."""

import subprocess
import sys
from pathlib import Path

# The child reports its own peak RSS as its last stderr line (RUSAGE_CHILDREN would be the largest child so far).
# scripts/reliability_attacks.py runs its attacks through it too.
CHILD = """
import resource, sys
from roseprof.cli import main
try:
    main()
    code = 0
except SystemExit as e:
    code = e.code
print("PEAK", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, file=sys.stderr)
sys.exit(code)
"""


def import_peak_rss(tmp_path: Path, path: Path) -> tuple[subprocess.CompletedProcess, int]:
    """(the finished child, its peak resident memory in bytes) of `roseprof import PATH`."""
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, "import", str(path), "--traces-dir", str(tmp_path / "t"),
         "--dashboards-dir", str(tmp_path / "d")],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    peak = int(proc.stderr.rsplit("PEAK", 1)[1].split()[0])
    return proc, peak
