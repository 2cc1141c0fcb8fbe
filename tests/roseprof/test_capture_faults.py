"""Faults around a capture (issue 23): a traces folder whose path nsys mangles (quotes, spaces), a disk that
fills up under nsys (a real tmpfs; skipped where it cannot be mounted), and a second Ctrl-C while the report is
exported. Each ends in a message that says what happened, and leaves no `.tmp-` folder."""

import contextlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from roseprof.capture import pipeline
from roseprof.drivers import Launch
from roseprof.errors import NothingRecorded, NothingWritten
from roseprof.model import Trace
from roseprof.run.store import RunStore
from tests.helpers import roseprof, unwrapped
from tests.roseprof.test_store_damage import _mount_tmpfs

NVTX_PROGRAM = [sys.executable, "-c", "import nvtx\nwith nvtx.annotate('r'): pass"]


def nsys_capture(traces: Path, dashboards: Path) -> subprocess.CompletedProcess:
    return roseprof("nsys", "--traces-dir", traces, "--dashboards-dir", dashboards, "--", *NVTX_PROGRAM)


def leftovers(traces: Path) -> list[str]:
    return [p.name for p in traces.iterdir() if p.name.startswith(".tmp-")] if traces.exists() else []


@pytest.mark.nsys
def test_a_traces_folder_with_quotes_and_spaces_captures_without_nsys_errors(tmp_path):
    traces = tmp_path / 'it\'s a "quoted" folder' / "t"
    proc = nsys_capture(traces, tmp_path / "d")
    assert proc.returncode == 0, proc.stderr
    assert "FATAL ERROR" not in proc.stderr and "RenameOutputFile" not in proc.stderr, proc.stderr
    (run,) = [p for p in traces.iterdir()]
    assert json.loads((run / "manifest.json").read_text())["status"] == "complete"
    assert (run / "raw" / "trace.nsys-rep").is_file()


@pytest.fixture
def small_disk(tmp_path):
    disk = tmp_path / "disk"
    _mount_tmpfs(disk, "600k")
    yield disk
    subprocess.run(["umount", str(disk)], check=False)


def fill(disk: Path, leave_kib: int) -> None:
    """Fill the tmpfs up to `leave_kib` KiB free."""
    import os

    st = os.statvfs(disk)
    free = st.f_bavail * st.f_frsize
    (disk / "filler").write_bytes(b"\0" * max(free - leave_kib * 1024, 0))


@pytest.mark.nsys
@pytest.mark.parametrize("leave_kib", [300, 0])
def test_a_full_disk_under_nsys_is_said_to_be_the_disk(small_disk, tmp_path, leave_kib):
    fill(small_disk, leave_kib)
    traces = small_disk / "t"
    proc = nsys_capture(traces, tmp_path / "d")
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    said = unwrapped(proc.stderr + proc.stdout)  # (its error wrapped at 80 columns)
    # The cause first (not "trace.sqlite is empty (0 bytes)", nor nsys' exception text alone).
    assert f"the disk holding {traces} is full" in said or f"{traces}: could not write the capture" in said, (
        said
    )
    # (A capture by someone else on the machine adds "roseprof: waiting for another nsys capture".)
    ours = [
        line for line in proc.stderr.splitlines() if line.startswith("roseprof:") and "waiting" not in line
    ]
    assert len(ours) <= 1, proc.stderr
    assert leftovers(traces) == []


class InterruptedExport:
    """A capturer whose profiler wrote its report and was then interrupted (a second Ctrl-C) while exporting."""

    tool = "nsys"
    kernel_stamps = True
    injection_library = None

    def engine_env(self) -> dict:
        return {}

    def describe(self) -> dict:
        return {}

    @contextlib.contextmanager
    def launch(self, cmd, env, raw: Path):
        yield Launch([sys.executable, "-c", "pass"], env, raw / "nsys.log")
        (raw / "trace.nsys-rep").write_bytes(b"\0" * 2_000_000)

    def own_line(self, line: bytes) -> bool:
        return False

    def held_line(self, line: bytes) -> bool:
        return False

    def settle(self) -> None:
        return None

    def refused(self, launch) -> None:
        return None

    def check(self, result, raw: Path) -> None:
        raise KeyboardInterrupt  # the first Ctrl-C: nsys stopped the program and saved its report

    def collect(self, raw: Path) -> Trace:
        raise KeyboardInterrupt  # the second Ctrl-C, during `nsys export`


def test_a_second_ctrl_c_while_exporting_keeps_and_names_what_was_captured(tmp_path):
    store = RunStore(tmp_path / "t")
    outcome = pipeline.capture(
        store, InterruptedExport(), [sys.executable, "-V"], "x", [], lambda t, s: ({}, {})
    )
    manifest = outcome.run.manifest
    assert manifest["status"] == "incomplete" and outcome.exit_code == 130
    assert "raw/trace.nsys-rep (2.0 MB)" in manifest["message"]
    assert f"roseprof import {outcome.run.path / 'raw' / 'trace.nsys-rep'}" in manifest["message"]
    assert (outcome.run.path / "raw" / "trace.nsys-rep").is_file() and leftovers(tmp_path / "t") == []


class InterruptedBeforeAnyRange(InterruptedExport):
    """A capturer whose program is stopped by Ctrl-C (here: it sends roseprof the SIGINT itself) before it records
    anything; the report holds no range and no kernel."""

    @contextlib.contextmanager
    def launch(self, cmd, env, raw: Path):
        stop = "import os, signal, time; os.kill(os.getppid(), signal.SIGINT); time.sleep(30)"
        yield Launch([sys.executable, "-c", stop], env, raw / "nsys.log")

    def check(self, result, raw: Path) -> None:
        pass

    def collect(self, raw: Path) -> Trace:
        raise NothingRecorded(f"{raw}/trace.sqlite: has neither NVTX_EVENTS nor CUPTI_ACTIVITY_KIND_KERNEL: "
                              "nothing to analyse (capture with -t nvtx or -t cuda)")  # fmt: skip


def interrupted_message(tmp_path, capturer) -> str:
    """The message of a capture by `capturer` that Ctrl-C stopped: an incomplete run, exit code 130."""
    outcome = pipeline.capture(
        RunStore(tmp_path / "t"), capturer, [sys.executable, "-V"], "x", [], lambda t, s: ({}, {})
    )
    assert outcome.run.manifest["status"] == "incomplete" and outcome.exit_code == 130
    return outcome.run.manifest["message"]


def test_ctrl_c_before_the_first_range_says_so_not_how_to_capture_other_tables(tmp_path):
    assert interrupted_message(tmp_path, InterruptedBeforeAnyRange()) == (
        "interrupted (Ctrl-C) before the program recorded any range or GPU kernel; kept what was captured"
    )


class InterruptedBeforeTheTorchTrace(InterruptedBeforeAnyRange):
    """The same Ctrl-C under torch.profiler, whose driver raises NothingWritten where the program had not written
    its trace yet (the engine writes it after its profiler's scheduled steps): its own words stay."""

    def collect(self, raw: Path) -> Trace:
        raise NothingWritten(
            "no torch.profiler trace was written (the engine writes one after 8+2 decode steps)"
        )


def test_ctrl_c_before_the_torch_trace_keeps_the_drivers_words(tmp_path):
    assert interrupted_message(tmp_path, InterruptedBeforeTheTorchTrace()).startswith(
        "interrupted (Ctrl-C); kept what was captured; no torch.profiler trace"
    )


@pytest.mark.nsys
def test_an_api_nsys_does_not_trace_is_refused_before_any_run_folder(tmp_path):
    """nsys itself would fail once the capture had started, read as the program's failure, and leave a failed run;
    the APIs come from this nsys's own `profile --help`."""
    proc = roseprof(
        "nsys", "--trace", "nvtx,bogus", "--traces-dir", tmp_path / "t", "--dashboards-dir", tmp_path / "d",
        "--", *NVTX_PROGRAM,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.splitlines()
    assert line.startswith("roseprof: error: --trace 'nvtx,bogus': this nsys traces no 'bogus' (it takes "), (
        line
    )
    assert "nvtx" in line and "osrt" in line
    assert not (tmp_path / "t").exists() or list((tmp_path / "t").iterdir()) == []
