"""`roseprof nsys --capture-range-end`: the nsys command line it makes, and its mistakes in one line (no nsys run
here: the captures themselves are in test_live_nsys.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from roseprof.drivers.nsys.capture import profile_argv
from roseprof.drivers.nsys.windows import last_report, range_reports, serves_windows
from roseprof.errors import CaptureFailed
from roseprof.workload.roseinfer import DECODE_STEP, WINDOW_RANGE
from tests.helpers import run_cli


def _argv(capture_range: str, nvtx_capture: str | None, end: str | None) -> list[str]:
    return profile_argv("nsys", ["prog"], Path("/o/trace"), "nvtx", capture_range, nvtx_capture, end)


def test_repeat_records_the_servers_windows_by_default():
    argv = _argv("nvtx", None, "repeat")
    assert f"--nvtx-capture={WINDOW_RANGE}" in argv and "--capture-range-end=repeat" in argv
    assert argv[-1] == "prog"
    # without repeat, as before: the first decode step, and nothing after its end ignored
    argv = _argv("nvtx", None, None)
    assert f"--nvtx-capture={DECODE_STEP}" in argv and "--capture-range-end=none" in argv
    argv = _argv("cudaProfilerApi", None, "repeat:3")
    assert "--capture-range-end=repeat:3" in argv and not [a for a in argv if a.startswith("--nvtx-capture")]


@pytest.mark.parametrize(
    ("capture_range", "end", "nvtx_capture", "windows"),
    [
        ("nvtx", "repeat", None, True),
        ("nvtx", "repeat:2", WINDOW_RANGE, True),
        ("nvtx", "repeat", "my.range", False),  # another range: the server's windows would record nothing
        ("nvtx", "stop", None, False),
        ("cudaProfilerApi", "repeat", None, False),  # the server's windows open an NVTX range
    ],
)
def test_which_captures_serve_windows(capture_range, end, nvtx_capture, windows):
    assert serves_windows(capture_range, end, nvtx_capture) is windows


def test_range_reports_in_order(tmp_path):
    for k in (10, 2, 1):
        (tmp_path / f"trace.{k}.nsys-rep").write_bytes(b"")
    (tmp_path / "trace.nsys-rep").write_bytes(b"")
    (tmp_path / "trace.x.nsys-rep").write_bytes(b"")
    assert [p.name for p in range_reports(tmp_path / "trace")] == [f"trace.{k}.nsys-rep" for k in (1, 2, 10)]
    assert last_report(tmp_path / "trace").name == "trace.10.nsys-rep"


def test_one_range_is_an_unnumbered_report_and_none_is_one_line(tmp_path):
    """nsys 2022.4 numbers the reports of a repeating range only when it recorded several (seen: a program stopped
    after one window left trace.nsys-rep)."""
    with pytest.raises(CaptureFailed, match="no capture window was opened"):
        last_report(tmp_path / "trace")
    (tmp_path / "trace.nsys-rep").write_bytes(b"")
    assert last_report(tmp_path / "trace").name == "trace.nsys-rep"


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--capture-range-end", "repeat"], "--capture-range-end needs --capture-range"),
        (
            ["--capture-range", "nvtx", "--capture-range-end", "repeat:0"],
            "none of none, stop, repeat, repeat:N",
        ),
        (["--capture-range", "nvtx", "--capture-range-end", "again"], "none of none, stop, repeat, repeat:N"),
    ],
)
def test_bad_range_end_is_one_line(args, said, tmp_path):
    code, out, err = run_cli("nsys", *args, "--traces-dir", str(tmp_path), "--", "true")
    assert code == 2 and said in err and "Traceback" not in err
    assert not any(tmp_path.iterdir())
