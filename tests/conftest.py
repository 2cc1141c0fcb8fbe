import os
import shutil
from pathlib import Path

import pytest
import torch

from tests.helpers import save_checkpoint

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


REPO = Path(__file__).resolve().parent.parent
# roseprof's default output folders: a test that forgets --traces-dir or --dashboards-dir writes here.
DEFAULT_OUTPUTS = ("traces", "dashboards")


def _entries(roots) -> set[Path]:
    return {
        p
        for root in roots
        for name in DEFAULT_OUTPUTS
        if (root / name).is_dir()
        for p in (root / name).iterdir()
    }


@pytest.fixture(scope="session", autouse=True)
def tests_write_only_in_their_temp_folders():
    """Fail the session if ./traces or ./dashboards (of the checkout, or of the folder pytest runs in) gained
    entries: every test passes --traces-dir and --dashboards-dir under its tmp_path. (A `make demo` run in the
    same checkout while the tests run would trip this too.)"""
    roots = {REPO, Path.cwd().resolve()}
    before = _entries(roots)
    yield
    new = sorted(str(p) for p in _entries(roots) - before)
    if new:
        pytest.fail(
            f"tests wrote outside their temporary folders: {', '.join(new[:5])}"
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
