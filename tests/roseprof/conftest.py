import pytest

from tests.roseprof.engine_captures import capture_all


@pytest.fixture(scope="session")
def engine_captures(tmp_path_factory):
    """The engine's default and slow-append CPU captures (engine_captures.CAPTURES), made once a session; a module
    reads them through engine_captures.copy_store, never here."""
    from roseprof.drivers.nsys.capture import find_nsys

    if find_nsys() is None:
        pytest.skip("needs nsys")
    root = tmp_path_factory.mktemp("engine-captures")
    capture_all(root)
    return root
