"""The nsys agents a capture leaves behind (`nsys --start-agent`, re-parented to init): stopped by their capture's
marker, and only theirs (drivers/nsys/agents.py)."""

import subprocess
import sys
import time

import pytest

from roseprof.drivers.nsys.agents import CAPTURE_ENV, stop_left_agents

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def _agent(tmp_path, marker: str | None) -> subprocess.Popen:
    """A stand-in agent: a process whose command line has `--start-agent`, with the capture's marker or not."""
    env = {"PATH": "/usr/bin:/bin", **({CAPTURE_ENV: marker} if marker else {})}
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", "--start-agent"], env=env)


def test_the_agents_of_this_capture_are_stopped_and_no_other(tmp_path):
    mine, other = _agent(tmp_path, str(tmp_path / "raw")), _agent(tmp_path, "/elsewhere/raw")
    unmarked = _agent(tmp_path, None)
    try:
        time.sleep(0.2)  # their environment in /proc
        assert stop_left_agents(CAPTURE_ENV, str(tmp_path / "raw")) == 1
        assert mine.wait(timeout=10) == -9
        assert other.poll() is None and unmarked.poll() is None
    finally:
        for p in (mine, other, unmarked):
            p.kill()
            p.wait()


def test_a_start_refused_by_its_agent_stops_that_agent(tmp_path):
    # nsys exited after losing its agent ("End of file", the whole of its output, no report): `refused` says so, and
    # the agent that start left (carrying the capture's marker) is stopped, where a healthy one would be left be.
    from roseprof.drivers import Launch
    from roseprof.drivers.nsys.capture import NsysCapture

    raw = tmp_path / "raw"
    raw.mkdir()
    log = raw / "nsys.log"
    log.write_bytes(b"End of file\n")
    agent = _agent(tmp_path, str(raw))
    try:
        time.sleep(0.2)
        capture = object.__new__(NsysCapture)  # no nsys needed to judge a log
        launch = Launch(["nsys", "profile", f"--output={raw / 'trace'}"], {CAPTURE_ENV: str(raw)}, log)
        assert "nsys failed on its own agent" in capture.refused(launch)
        assert agent.wait(timeout=10) == -9
    finally:
        agent.kill()
        agent.wait()


def test_a_capture_waits_for_an_earlier_captures_agent_to_end(tmp_path):
    """Holding the lock, a capture first waits for the agents earlier captures left finishing their exit (the next
    nsys failed on its semaphore while one did, session 42); bounded, for an agent that lives on. A key of the
    test's own: real captures of other tests may run beside it."""
    from roseprof.drivers.nsys.agents import agents, wait_for_agents

    key = f"ROSEPROF_TEST_AGENT_{tmp_path.name}"
    env = {"PATH": "/usr/bin:/bin", key: "earlier/raw"}
    ending = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1)", "--start-agent"], env=env)
    lives_on = None
    try:
        time.sleep(0.2)  # its environment in /proc
        assert agents(key) == [ending.pid] and agents(key, "earlier/raw") == [ending.pid]
        assert agents(key, "other/raw") == []
        assert wait_for_agents(key, timeout_s=60) and ending.poll() is not None
        lives_on = subprocess.Popen(
            [sys.executable, "-c", "import time; time.sleep(120)", "--start-agent"], env=env
        )
        time.sleep(0.2)
        assert not wait_for_agents(key, timeout_s=0.3) and lives_on.poll() is None
    finally:
        for p in (ending, lives_on):
            if p is not None:
                p.kill()
                p.wait()


def test_an_agent_that_no_longer_reads_as_one_is_waited_for_until_it_has_exited(tmp_path, monkeypatch):
    """An exiting agent's command line reads empty before it has exited, and `agents` no longer finds it: the wait
    keeps the pid it found until the process is gone (it returned at once, and the next nsys met the agent still
    ending; the test above failed on it now and then, `ending.poll()` None after the wait)."""
    from roseprof.drivers.nsys import agents as module

    agent = _agent(tmp_path, "x")
    found = iter([[agent.pid]])
    monkeypatch.setattr(module, "agents", lambda key: next(found, []))  # found once, then unreadable
    try:
        assert not module.wait_for_agents("KEY", timeout_s=0.3)  # still running: waited for
        agent.kill()
        agent.wait()
        found = iter([[agent.pid]])
        assert module.wait_for_agents("KEY", timeout_s=60)  # gone: done
    finally:
        agent.kill()
        agent.wait()
