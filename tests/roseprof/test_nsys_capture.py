"""Real captures with Nsight Systems (CI installs it with scripts/install-nsys.sh), checked against `nsys stats`."""

import csv
import io
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from roseprof.drivers.nsys.capture import find_nsys
from tests.helpers import assert_one_line_error, engine_command, roseprof, stderr_lines, unwrapped

pytestmark = pytest.mark.nsys

ENGINE = engine_command()


def only_run(traces):
    (run,) = [p for p in traces.iterdir() if not p.name.startswith(".")]
    return run, json.loads((run / "manifest.json").read_text())


@pytest.fixture(scope="module")
def engine_capture(tmp_path_factory):
    traces = tmp_path_factory.mktemp("traces")
    proc = roseprof(
        "nsys",
        "--name",
        "engine",
        "--traces-dir",
        traces,
        "--dashboards-dir",
        tmp_path_factory.mktemp("dash"),
        "--",
        *ENGINE,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc, *only_run(traces)


def test_capture_of_the_engine_agrees_with_nsys_stats(engine_capture):
    proc, run, manifest = engine_capture
    assert manifest["status"] == "complete" and manifest["tool"]["name"] == "nsys"
    assert "time per region" in proc.stdout
    sqlite_path = run / "raw" / "trace.sqlite"
    stats = subprocess.run(
        [find_nsys(), "stats", "-q", "-r", "nvtxsum", "-f", "csv", "--force-export=false", str(sqlite_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    text = stats.stdout[stats.stdout.index("Time") :]
    expected = list(csv.DictReader(io.StringIO(text.split("\n\n")[0])))
    summary = json.loads((run / "summary.json").read_text())
    ours = {r["name"]: r for r in summary["regions"]}
    assert len(expected) == len(ours)
    for row in expected:
        name = row["Range"].split(":", 1)[-1] if row["Range"].startswith(":") else row["Range"]
        assert ours[name]["count"] == int(row["Instances"])
        assert abs(ours[name]["total_ns"] - int(row["Total Time (ns)"])) <= 1e-3 * int(row["Total Time (ns)"])
    for name in (
        "roseinfer.decode_step",
        "roseinfer.model.forward",
        "roseinfer.kv.append_token",
        "roseinfer.prefill",
        "roseinfer.decode_step_sessions.build_block_tables",
        "roseinfer.decode_step_sessions.h2d_block_tables",
        "roseinfer.sample",
        "roseinfer.scheduler.step",
    ):
        assert name in ours, name


def test_capture_joins_the_step_log(engine_capture):
    _, run, _ = engine_capture
    summary = json.loads((run / "summary.json").read_text())
    steps = [
        json.loads(line)
        for line in (run / "steplog.jsonl").read_text().splitlines()
        if '"type":"step"' in line
    ]
    assert summary["warnings"] == []
    assert summary["steps"]["count"] == len(steps) == 69  # 70 tokens: one from prefill, 69 decode steps
    # The prompt is 45 bytes, so every request crosses the 64-token block boundary once, in the same step.
    assert summary["steps"]["rollover"]["count"] == 1
    assert summary["itl"]["at_rollover"]["count"] == 4
    assert summary["requests"]["completion_tokens"] == 4 * 70


def test_failing_command_keeps_a_failed_run(tmp_path):
    proc = roseprof("nsys", "--traces-dir", tmp_path / "t", "--dashboards-dir", tmp_path / "d", "--", sys.executable, "-c",
                    "import sys; sys.exit(3)")  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    _, manifest = only_run(tmp_path / "t")
    assert manifest["status"] == "failed" and manifest["command_exit_code"] == 3


def test_ctrl_c_in_a_terminal_keeps_what_nsys_collected(tmp_path):
    """A terminal's Ctrl-C (SIGINT to the whole foreground group) stops the program and keeps the capture."""
    loop = (
        "import time, nvtx\nprint('started', flush=True)\nwhile True:\n"
        "    with nvtx.annotate('roseinfer.decode_step'):\n        time.sleep(0.01)\n"
    )
    cmd = [sys.executable, "-m", "roseprof", "nsys", "--traces-dir", str(tmp_path / "t"),
           "--dashboards-dir", str(tmp_path / "d"), "--", sys.executable, "-c", loop]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    assert proc.stdout.readline() == b"started\n"  # the program runs (and its output passes through)
    time.sleep(3)
    os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does: roseprof's whole process group
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 130, err.decode()
    run, manifest = only_run(tmp_path / "t")
    assert manifest["status"] == "incomplete"
    summary = json.loads((run / "summary.json").read_text())  # nsys finalised its report: it was analysed
    assert any(r["name"] == "roseinfer.decode_step" and r["count"] > 10 for r in summary["regions"])
    assert b"stopping the program; nsys is saving what it collected" in err


def test_program_without_nvtx_is_one_line_and_stores_nothing(tmp_path):
    proc = roseprof("nsys", "--traces-dir", tmp_path / "t", "--dashboards-dir", tmp_path / "d", "--",
                    sys.executable, "-c", "import sys; print('hello'); print('to stderr', file=sys.stderr)")  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout.splitlines() == [
        "hello"
    ]  # the program's output passes through, nsys' own lines do not
    lines = stderr_lines(proc)
    assert lines[0] == "to stderr" and len(lines) == 2, proc.stderr
    assert lines[1].startswith("roseprof: error: ") and "recorded no range, mark or GPU op" in lines[1]
    assert not (tmp_path / "t").exists() or list((tmp_path / "t").iterdir()) == []


def test_second_capture_waits_for_the_first(tmp_path):
    import fcntl

    lock = tmp_path / "nsys.lock"
    with open(lock, "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        held.write("4242\n")
        held.flush()
        proc = subprocess.Popen(
            [sys.executable, "-m", "roseprof", "nsys", "--traces-dir", str(tmp_path / "t"), "--dashboards-dir",
             str(tmp_path / "d"), "--", sys.executable, "-c", "import nvtx\nwith nvtx.annotate('r'): pass"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "ROSEPROF_NSYS_LOCK": str(lock)},
        )  # fmt: skip
        time.sleep(4)
        assert proc.poll() is None  # still waiting
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    assert "roseprof: waiting for another nsys capture (pid 4242) to finish" in err
    assert only_run(tmp_path / "t")[1]["status"] == "complete"


def test_command_not_found_is_one_line_before_nsys_starts(tmp_path):
    for prog in ("no-such-program-xyz", str(tmp_path / "missing.sh"), str(tmp_path)):
        proc = roseprof(
            "nsys", "--traces-dir", tmp_path / "t", "--dashboards-dir", tmp_path / "d", "--", prog
        )
        assert_one_line_error(proc, 2, prog)
        assert not (tmp_path / "t").exists()


def test_missing_importer_is_explained(tmp_path, monkeypatch):
    from roseprof.drivers.nsys.capture import importer_problem

    fake = tmp_path / "target-linux-x64" / "nsys"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    assert "importer is missing" in importer_problem(str(fake))
    assert "host-linux-x64/QdstrmImporter" in importer_problem(str(fake))


def test_import_of_an_nsys_rep(engine_capture, tmp_path):
    _, run, _ = engine_capture
    proc = roseprof(
        "import",
        run / "raw" / "trace.nsys-rep",
        "--steplog",
        run / "steplog.jsonl",
        "--name",
        "rep",
        "--traces-dir",
        tmp_path / "t",
        "--dashboards-dir",
        tmp_path / "d",
    )
    assert proc.returncode == 0, proc.stderr
    imported, _ = only_run(tmp_path / "t")
    again = json.loads((imported / "summary.json").read_text())
    original = json.loads((run / "summary.json").read_text())
    assert again["regions"] == original["regions"] and again["steps"]["count"] == original["steps"]["count"]


def test_a_programs_lines_that_read_like_nsys_losing_its_agent_still_reach_the_terminal(tmp_path):
    # nsys' "End of file" is held, not hidden: shown where the program prints after it (session 38's review)
    program = "for line in ('a', 'End of file', 'Connection reset by peer', 'b'): print(line)"
    proc = roseprof("nsys", "--traces-dir", tmp_path / "t", "--dashboards-dir", tmp_path / "d", "--",
                    sys.executable, "-c", program)  # fmt: skip
    assert proc.returncode == 2, proc.stderr  # no NVTX: nothing stored
    assert proc.stdout.splitlines() == ["a", "End of file", "Connection reset by peer", "b"]


def test_report_from_a_newer_nsys_is_explained(tmp_path):
    from roseprof.drivers.nsys.capture import nsys_version
    from tests.helpers import DATA, assert_one_line_error

    if not nsys_version(find_nsys()).startswith("2022"):
        pytest.skip("only an older nsys refuses the 2025.3 report")
    proc = roseprof(
        "import",
        DATA / "nsys" / "h100-nsys2025.3-matmul-nvtx.nsys-rep",
        "--traces-dir",
        tmp_path / "t",
        "--dashboards-dir",
        tmp_path / "d",
    )
    line = proc.stderr.strip()
    assert_one_line_error(
        proc, 2, "h100-nsys2025.3-matmul-nvtx.nsys-rep: written by Nsight Systems 2025.3.1.0"
    )
    assert "newer than the installed nsys 2022.4" in line and "nsys export --type sqlite" in line
    assert not (tmp_path / "t").exists()  # no run, and not the traces folder it would have been the first of


# What nsys 2022.4 printed, and nothing else, when it failed on its agent and wrote no report: "Local Endpoint is
# not available" (its whole C++ exception dump, as a clean-clone CI run beside two CPU burners printed it, session
# 37) while another nsys on the machine held its agent or had not let it go; "End of file", "Connection to the Agent
# lost." and "Connection reset by peer" as the whole of its output in clean-clone CI runs under load.
ENDPOINT_DUMP = (
    "/build/agent/work/323cb361ab84164c/QuadD/Common/ProtobufComm/Client/ClientProxy.cpp(381): Throw in function "
    "QuadDProtobufComm::Endpoint QuadDProtobufComm::Client::ClientProxy::GetLocalEndpoint() const",
    "Dynamic exception type: boost::wrapexcept<QuadDCommon::RuntimeException>",
    "std::exception::what: RuntimeException",
    "[QuadDCommon::tag_message*] = Local Endpoint is not available.",
)
AGENT_LOST_LINES = ("End of file", "Connection to the Agent lost.", "Connection reset by peer")
# nsys 2022.4's dump where its ProcessWaiter's semaphore was gone (another nsys ending beside it: a clean-clone CI
# run, session 42), as it wrote it into raw/nsys.log
SEMAPHORE_DUMP = (
    "/build/agent/work/323cb361ab84164c/QuadD/Common/ProcessWaiter/Src/POSIX/ProcessWaiterImpl.cpp(166): Throw in "
    "function QuadDCommon::ProcessWaiter::ProcessWaiterImpl::ProcessWaiterImpl(QuadDCommon::ProcessId, bool)",
    "Dynamic exception type: boost::wrapexcept<QuadDCommon::SystemException>",
    "std::exception::what: SystemException",
    "[QuadDCommon::tag_errno_text*] = No such file or directory",
    '[boost::errinfo_errno_*] = 2, "No such file or directory"',
    "[boost::errinfo_api_function_*] = sem_open",
)
AGENT_FAILURES = {
    "endpoint": "".join(f"echo '{line}' >&2\n  " for line in ENDPOINT_DUMP),
    "semaphore": "".join(f"echo '{line}' >&2\n  " for line in SEMAPHORE_DUMP),
    "end of file": "echo 'End of file' >&2\n",
    "agent lost": "echo 'Connection to the Agent lost.' >&2\n  echo 'Connection to the Agent lost.' >&2\n",
    "connection reset": "echo 'Connection reset by peer' >&2\n",
}


@pytest.mark.parametrize("failure", sorted(AGENT_FAILURES))
def test_nsys_that_cannot_reach_its_agent_is_started_again(tmp_path, failure):
    """A wrapper fails the first `nsys profile` as nsys did, before the program runs: started again."""
    marker = tmp_path / "failed-once"
    fake = tmp_path / "nsys"
    fake.write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = profile ] && [ ! -e {marker} ]; then\n'
        f"  touch {marker}\n"
        f"  {AGENT_FAILURES[failure]}"
        "  exit 1\n"
        "fi\n"
        f'exec {find_nsys()} "$@"\n'
    )
    fake.chmod(0o755)
    proc = roseprof("nsys", "--traces-dir", tmp_path / "t", "--dashboards-dir", tmp_path / "d", "--",
                    sys.executable, "-c", "import nvtx\nwith nvtx.annotate('r'): pass",
                    env={"NSYS": str(fake)})  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    said = unwrapped(proc.stderr)  # (wrapped at 80 columns)
    assert "failed on its own agent" in said and "(2 of 3)" in said
    # nsys' exception dump, or its line saying it lost its agent, stays in its log: the restart's one line says
    # what happened, quoting it (session 38's clean-clone CI run printed "End of file" above that line)
    assert not set(proc.stderr.splitlines()) & set(ENDPOINT_DUMP + SEMAPHORE_DUMP + AGENT_LOST_LINES), (
        proc.stderr
    )
    assert 'nsys said "' in said, proc.stderr
    if failure == "semaphore":  # the failed call and nsys' words for it
        assert 'nsys said "sem_open: No such file or directory"' in said, proc.stderr
    run, manifest = only_run(tmp_path / "t")
    assert manifest["status"] == "complete"
    first = (run / "raw" / "nsys.start1.log").read_bytes()
    expected = {"endpoint": b"Local Endpoint", "semaphore": b"sem_open"}
    assert expected[failure] in first if failure in expected else first.strip().startswith((b"End", b"Conn"))


def test_nsys_that_never_reaches_its_agent_is_one_error_quoting_its_message(tmp_path):
    """Refused three times: no exception dump on the terminal, one error with nsys' own message, exit 3 (the
    profiler failed), the run kept with the three starts' logs."""
    fake = tmp_path / "nsys"
    fake.write_text(
        '#!/bin/sh\nif [ "$1" = profile ]; then\n  ' + AGENT_FAILURES["endpoint"] + "exit 1\nfi\n"
        f'exec {find_nsys()} "$@"\n'
    )
    fake.chmod(0o755)
    proc = roseprof("nsys", "--traces-dir", tmp_path / "t", "--dashboards-dir", tmp_path / "d", "--",
                    sys.executable, "-c", "pass", env={"NSYS": str(fake)})  # fmt: skip
    assert proc.returncode == 3, proc.stderr
    assert "Traceback" not in proc.stderr
    assert not any(line in proc.stderr for line in ENDPOINT_DUMP), proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("roseprof: error:")]
    assert len(errors) == 1, proc.stderr
    assert 'nsys said "Local Endpoint is not available."' in errors[0], errors[0]
    assert "started 3 times, refused each time" in errors[0], errors[0]
    assert unwrapped(proc.stderr).count("starting it again") == 2, proc.stderr  # (2 of 3), (3 of 3)
    run, manifest = only_run(tmp_path / "t")
    assert manifest["status"] == "failed"
    logs = {p.name for p in (run / "raw").glob("nsys*.log")}
    assert logs == {"nsys.start1.log", "nsys.start2.log", "nsys.log"}, logs


def test_a_program_that_printed_and_then_nsys_said_end_of_file_is_not_started_again(tmp_path):
    """'End of file' after the program's own output: the program ran, so it is not run twice; the failure is
    said once."""
    fake = tmp_path / "nsys"
    fake.write_text(
        "#!/bin/sh\nif [ \"$1\" = profile ]; then echo 'step 1 done'; echo 'End of file' >&2; exit 1; fi\n"
    )
    fake.chmod(0o755)
    proc = roseprof("nsys", "--traces-dir", tmp_path / "t", "--dashboards-dir", tmp_path / "d", "--",
                    sys.executable, "-c", "pass", env={"NSYS": str(fake)})  # fmt: skip
    assert proc.returncode != 0 and "starting it again" not in unwrapped(proc.stderr), proc.stderr
    assert proc.stderr.count("roseprof: error:") == 1, proc.stderr
    # nsys' line stays off the terminal (in its log) and the error quotes it
    said = "nsys wrote no report: End of file"
    assert unwrapped(proc.stderr).count("End of file") == 1 and said in unwrapped(proc.stderr), proc.stderr
