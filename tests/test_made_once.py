"""tests/helpers.made_once: a session's costly folder (a capture several modules read) made once a run, also across
pytest-xdist's workers, and a failed make not made again by every worker."""

from types import SimpleNamespace

import pytest

from tests.helpers import made_once


def _worker(tmp_path, name):
    """A worker's tmp_path_factory as xdist gives it: its own basetemp under the run's shared one."""
    base = tmp_path / "pytest-1" / name
    base.mkdir(parents=True, exist_ok=True)
    return SimpleNamespace(getbasetemp=lambda: base, mktemp=None)


def test_workers_share_one_make_and_a_failure_fails_the_others_at_once(tmp_path, monkeypatch):
    makes = []

    def make(root):
        makes.append(root)
        (root / "capture").write_text("one")

    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw0")
    first = made_once(_worker(tmp_path, "popen-gw0"), "captures", make)
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw1")
    second = made_once(_worker(tmp_path, "popen-gw1"), "captures", make)
    assert first == second == tmp_path / "pytest-1" / "captures" and len(makes) == 1
    assert (second / "capture").read_text() == "one"

    def broken(root):
        makes.append(root)
        raise AssertionError("nsys exited 1")

    with pytest.raises(AssertionError, match="nsys exited 1"):
        made_once(_worker(tmp_path, "popen-gw0"), "broken", broken)
    with pytest.raises(
        pytest.fail.Exception, match="broken: made by another worker, which failed: AssertionError: nsys"
    ):
        made_once(_worker(tmp_path, "popen-gw1"), "broken", broken)
    assert len(makes) == 2  # the second worker did not make it again


def test_one_process_makes_it_in_its_own_folder(tmp_path_factory, monkeypatch):
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    root = made_once(tmp_path_factory, "alone", lambda root: (root / "x").write_text("1"))
    assert (root / "x").read_text() == "1" and root.parent == tmp_path_factory.getbasetemp()
