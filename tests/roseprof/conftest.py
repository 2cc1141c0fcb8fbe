import pytest

from tests.helpers import made_once
from tests.roseprof.engine_captures import capture_all, capture_small_blocks


@pytest.fixture(scope="session")
def engine_captures(tmp_path_factory):
    """The engine's default and slow-append CPU captures (engine_captures.CAPTURES), made once a session; a module
    reads them through engine_captures.copy_store, never here."""
    from roseprof.drivers.nsys.capture import find_nsys

    if find_nsys() is None:
        pytest.skip("needs nsys")
    return made_once(tmp_path_factory, "engine-captures", capture_all)


@pytest.fixture(scope="session")
def small_blocks_capture(tmp_path_factory):
    """The engine with 8-token KV blocks (engine_captures.SMALL_BLOCKS), made once a session: test_diff_decision.py
    and test_diff_machine_sides.py each captured it alike; each now copies it with engine_captures.copy_store."""
    from roseprof.drivers.nsys.capture import find_nsys

    if find_nsys() is None:
        pytest.skip("needs nsys")
    return made_once(tmp_path_factory, "small-blocks-capture", capture_small_blocks)
