import os
import shutil
import tempfile

import pytest
import torch
from hypothesis import settings
from hypothesis.configuration import set_hypothesis_home_dir

from tests.helpers import UNPACKED_DIR, save_checkpoint

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Every CLI a test runs prints to an 80-column terminal, as a user's: piped with no terminal roseprof would take 160
# columns, and pytest-xdist's workers (make test) export COLUMNS=80 themselves, so a suite run alone or across
# workers reads the same lines. A test of the width itself sets or removes COLUMNS in its subprocess's env.
os.environ["COLUMNS"], os.environ["LINES"] = "80", "24"
# Hypothesis keeps the examples it found in a database, and caches, under ./.hypothesis: the checkout. Tests write
# only inside their temporary folders: no database (a failing example is printed with its test), and its home in
# a temporary folder (pytest_configure below).
settings.register_profile("tests", database=None)
settings.load_profile("tests")


def pytest_configure(config):
    # Hypothesis writes its caches as it collects the test modules, before any fixture: its home is a temporary
    # folder of this process (each pytest-xdist worker its own), removed at the end
    config.hypothesis_home = tempfile.mkdtemp(prefix="tests-hypothesis-")
    set_hypothesis_home_dir(config.hypothesis_home)
    # ... and the fixtures kept xz-compressed in tests/data, unpacked where a test asks (tests/helpers.packed)
    config.unpacked_dir = os.environ[UNPACKED_DIR] = tempfile.mkdtemp(prefix="tests-unpacked-")


def pytest_unconfigure(config):
    set_hypothesis_home_dir(None)
    shutil.rmtree(config.hypothesis_home, ignore_errors=True)
    shutil.rmtree(config.unpacked_dir, ignore_errors=True)


# roseprof's default output folders, which a test that forgets --traces-dir or --dashboards-dir would write into.
DEFAULT_DIRS = {"ROSEPROF_TRACES_DIR": "default-traces", "ROSEPROF_DASHBOARDS_DIR": "default-dashboards"}


@pytest.fixture(scope="session", autouse=True)
def tests_write_only_in_their_temp_folders(tmp_path_factory):
    """Fail the session if a test wrote into roseprof's default folders: every test passes --traces-dir and
    --dashboards-dir under its tmp_path. The defaults point (through roseprof's environment variables, which
    subprocesses inherit) into this session's own temporary folder, so a test that forgets is caught there, and a
    user's `make demo` into the checkout's traces/ and dashboards/ while the suite runs is neither blamed nor
    touched."""
    root = tmp_path_factory.mktemp("roseprof-defaults")
    saved = {key: os.environ.get(key) for key in DEFAULT_DIRS}
    for key, name in DEFAULT_DIRS.items():
        os.environ[key] = str(root / name)
    yield
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    new = sorted(
        str(p) for name in DEFAULT_DIRS.values() if (root / name).is_dir() for p in (root / name).iterdir()
    )
    if new:
        pytest.fail(
            f"tests wrote into roseprof's default folders: {', '.join(new[:5])}"
            + (f" and {len(new) - 5} more" if len(new) > 5 else "")
            + " (pass --traces-dir and --dashboards-dir under tmp_path)",
            pytrace=False,
        )


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory):
    """A small GPT-2 checkpoint saved by Hugging Face itself, with weights wide enough that greedy argmax
    has clear winners (GPT-2's 0.02 init gives near-ties that fp32 summation order can flip)."""
    return save_checkpoint(tmp_path_factory.mktemp("ckpt") / "tiny-gpt2", n_head=4, n_embd=64)


def has_cuda() -> bool:
    return torch.cuda.is_available()


def has_nsys() -> bool:
    from roseprof.drivers.nsys.capture import find_nsys

    return find_nsys() is not None


def pytest_collection_modifyitems(config, items):
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords and not has_cuda():
            item.add_marker(skip_gpu)
        if "nsys" in item.keywords and shutil.which("nsys") is None and not has_nsys():
            item.add_marker(pytest.mark.skip(reason="needs Nsight Systems (scripts/install-nsys.sh)"))
