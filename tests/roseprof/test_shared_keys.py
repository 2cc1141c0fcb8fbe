"""The analyses share their keys (issue 43): each per-op key (the kernels' name/region/capture rows, the ranges'
(domain, name) keys, the kernel-to-range pairs) is computed once per run on the Context and handed to every
section. These tests count the np.unique calls while analysing real captures, so that a section that factorises
what it could have taken from the Context fails here instead of quietly costing seconds on a 1M-kernel import."""

import hashlib
import traceback

import numpy as np
import pytest

from roseprof.analysis.summary import analyse
from roseprof.drivers.nsys.reader import read_nsys_sqlite
from roseprof.model import KERNEL
from roseprof.workload.steplog import read_steplog
from tests.helpers import DATA

CAPTURES = ["h100-nsys2025.3-roseinfer-graphs", "h100-nsys2025.3-roseinfer-decode"]
# Below this many values a factorisation costs microseconds: not counted.
SMALL = 256
# The functions allowed to factorise an array as long as half the kernels: the keys shared on the Context
# (sections/base.py) and the per-thread split of the GPU ops' attribution (done once, cached on the Context).
PER_OP_ALLOWED = {
    "base.py:of",  # KernelKeys.of: the kernels' (name, region, capture) rows, once per run
    "ranges.py:innermost_range",  # the ops by launching thread, once per run (Context.gpu)
}


def factorisations(monkeypatch, base: str) -> tuple[list[tuple[str, int, str]], int]:
    """(site, size, content hash) of every np.unique call while analysing one capture, and its kernel count."""
    trace = read_nsys_sqlite(str(DATA / "nsys" / f"{base}.sqlite"))
    log = read_steplog(str(DATA / "nsys" / f"{base}.steplog.jsonl"))
    calls = []
    real = np.unique

    def spy(ar, *args, **kwargs):
        arr = np.ascontiguousarray(ar)
        # the nearest roseprof function that asked (stats.py's helpers name their caller)
        frames = [
            f
            for f in traceback.extract_stack()[:-1]
            if "/roseprof/" in f.filename and not f.filename.endswith("analysis/stats.py")
        ]
        site = f"{frames[-1].filename.rsplit('/', 1)[-1]}:{frames[-1].name}" if frames else "?"
        calls.append((site, arr.size, hashlib.sha1(arr.tobytes() + str(arr.dtype).encode()).hexdigest()))
        return real(ar, *args, **kwargs)

    monkeypatch.setattr(np, "unique", spy)
    analyse(trace, log)
    monkeypatch.setattr(np, "unique", real)
    return calls, int((trace.ops.kind == KERNEL).sum())


@pytest.mark.parametrize("base", CAPTURES)
def test_no_analysis_factorises_the_same_values_twice(monkeypatch, base):
    calls, _ = factorisations(monkeypatch, base)
    seen: dict[str, str] = {}
    repeated = []
    for site, size, digest in calls:
        if size < SMALL:
            continue
        if digest in seen:
            repeated.append(f"{site} factorises {size} values that {seen[digest]} factorised already")
        seen.setdefault(digest, site)
    assert not repeated, "share the key on the Context (sections/base.py) instead:\n" + "\n".join(repeated)


@pytest.mark.parametrize("base", CAPTURES)
def test_per_op_keys_are_factorised_only_where_they_are_shared(monkeypatch, base):
    calls, n_kernels = factorisations(monkeypatch, base)
    big = [(site, size) for site, size, _ in calls if size >= max(SMALL, n_kernels // 2)]
    assert any(site == "base.py:of" for site, _ in big)  # the spy sees the shared factorisation itself
    stray = [f"{site}: np.unique of {size} values" for site, size in big if site not in PER_OP_ALLOWED]
    assert not stray, (
        "a per-op key factorised outside the Context: take it from Context.kernel_keys / region_keys / "
        "kernel_pairs (sections/base.py), or factorise interned ids with stats.dense_ids:\n"
        + "\n".join(stray)
    )
