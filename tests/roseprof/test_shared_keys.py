"""The analyses share their keys (issue 43): each per-op key (the kernels' name/region/capture rows, the ranges'
(domain, name) keys, the kernel-to-range pairs) is computed once per run on the Context and handed to every
section. These tests count the np.unique calls while analysing real captures, so that a section that factorises
what it could have taken from the Context fails here instead of quietly costing seconds on a 1M-kernel import."""

import hashlib
import sys
import traceback
from pathlib import Path

import numpy as np
import pytest

from roseprof.analysis import stats
from roseprof.analysis.sections import SECTIONS
from roseprof.analysis.summary import analyse
from roseprof.drivers import pick_reader
from roseprof.model import KERNEL
from roseprof.workload.steplog import rank_log_paths, read_steplog
from tests.helpers import DATA, packed

NSYS = DATA / "nsys"
# Real captures that between them run every section that reads a trace (test_the_captures_run_every_section): a
# CUDA-graph decode run, a plain decode run, two GPU ranks (ranks, collectives, gpu_time), a torch trace (operators),
# an ncu report (its kernel views).
CAPTURES = [
    "h100-nsys2025.3-roseinfer-graphs",
    "h100-nsys2025.3-roseinfer-decode",
    "h200x2-nsys2025.3-roseinfer-tp2",
    "h100-torch2.11-roseinfer-graphs",
    "h100-ncu2025.3-roseinfer-attn-raw",
]
# Repeats found and not yet shared, by capture and the site that repeats: each must still be found (so that the list
# shrinks when one is shared), and nothing else may repeat.
KNOWN_REPEATS = {
    # the GPU ops' launching threads, which ranges.innermost_range factorised for the ops' launching ranges
    ("h100-torch2.11-roseinfer-graphs", "operators.py:_nest"),
}
# Sections that never read a trace: a load's and a live capture's (their runs have none).
NO_TRACE = {"live", "serving", "loads"}


def capture(base: str, raw_dir):
    """(trace, rank 0's step log, the other ranks' logs) of a fixture, as an import reads them."""
    if base.startswith("h100-torch"):
        path, log = DATA / "torch" / f"{base}.json.gz", DATA / "torch" / f"{base}.steplog.jsonl"
    elif "-ncu" in base:
        path, log = DATA / "ncu" / f"{base}.csv", None
    else:
        path, log = Path(packed(NSYS / f"{base}.sqlite")), NSYS / f"{base}.steplog.jsonl"
    trace = pick_reader(path).read(path, raw_dir, base, None)
    rank_logs = (
        {rank: read_steplog(p) for rank, p in rank_log_paths(str(log)).items() if rank}
        if log is not None
        else {}
    )
    return trace, (read_steplog(str(log)) if log is not None else None), rank_logs


# Below this many values a factorisation costs microseconds: not counted.
SMALL = 256
# The functions allowed to factorise an array as long as half the kernels: the keys shared on the Context
# (sections/base.py) and the per-thread split of the GPU ops' attribution (done once, cached on the Context).
PER_OP_ALLOWED = {
    "base.py:of",  # KernelKeys.of: the kernels' (name, region, capture) rows, once per run
    "ranges.py:innermost_range",  # the ops by launching thread, once per run (Context.gpu)
}


def factorisations(
    monkeypatch, base: str, raw_dir, counts: bool = False
) -> tuple[list[tuple[str, int, str]], int]:
    """(site, size, content hash) of every np.unique call while analysing one capture, and its kernel count; with
    `counts`, of every stats.unique_rows call too (its columns stacked), which factorises rows of ids by
    counting where it can, without np.unique: a per-op one outside the Context is still a key not shared."""
    trace, log, rank_logs = capture(base, raw_dir)
    calls = []

    def spied(real):
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

        return spy

    monkeypatch.setattr(np, "unique", spied(np.unique))
    if counts:
        real = stats.unique_rows
        spy = spied(real)
        for module in [m for name, m in sys.modules.items() if name.startswith("roseprof.")]:
            if getattr(module, "unique_rows", None) is real and module is not stats:
                monkeypatch.setattr(module, "unique_rows", spy)
    analyse(trace, log, rank_logs=rank_logs)
    monkeypatch.undo()
    return calls, int((trace.ops.kind == KERNEL).sum())


def test_the_captures_run_every_section(tmp_path):
    """Every section that reads a trace runs on one of CAPTURES at least, so that the tests below see what it
    factorises: a new section that none of them runs is a capture to add here."""
    ran = set()
    for base in CAPTURES:
        trace = capture(base, tmp_path)[0]
        ran |= {s.name for s in SECTIONS if s.applies(trace)}
    assert {s.name for s in SECTIONS} - NO_TRACE <= ran
    assert not ran & NO_TRACE


@pytest.mark.parametrize("base", CAPTURES)
def test_no_analysis_factorises_the_same_values_twice(monkeypatch, tmp_path, base):
    calls, _ = factorisations(monkeypatch, base, tmp_path)
    seen: dict[str, str] = {}
    repeated, known = [], set()
    for site, size, digest in calls:
        if size < SMALL:
            continue
        if digest in seen:
            if (base, site) in KNOWN_REPEATS:
                known.add((base, site))
            else:
                repeated.append(f"{site} factorises {size} values that {seen[digest]} factorised already")
        seen.setdefault(digest, site)
    assert not repeated, "share the key on the Context (sections/base.py) instead:\n" + "\n".join(repeated)
    assert known == {k for k in KNOWN_REPEATS if k[0] == base}, (
        "a known repeat is gone: take it off KNOWN_REPEATS"
    )


@pytest.mark.parametrize("base", CAPTURES)
def test_per_op_keys_are_factorised_only_where_they_are_shared(monkeypatch, tmp_path, base):
    calls, n_kernels = factorisations(monkeypatch, base, tmp_path, counts=True)
    big = [(site, size) for site, size, _ in calls if size >= max(SMALL, n_kernels // 2)]
    if "-ncu" not in base:  # ncu's kernel views read each launch's metrics, not the kernels' keys
        assert any(site == "base.py:of" for site, _ in big)  # the spy sees the shared factorisation itself
    stray = [
        f"{site}: a factorisation of {size} values (np.unique, stats.unique_rows)"
        for site, size in big
        if site not in PER_OP_ALLOWED and (base, site) not in KNOWN_REPEATS
    ]
    assert not stray, (
        "a per-op key factorised outside the Context: take it from Context.kernel_keys / region_keys / "
        "kernel_pairs (sections/base.py), or factorise interned ids with stats.dense_ids:\n"
        + "\n".join(stray)
    )
