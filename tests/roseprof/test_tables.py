"""The run folder's normalised files: what is written is read back as the same model, and runs stored by the
earlier layout (version 1: fewer columns) still read."""

import json
from pathlib import Path

import numpy as np

from roseprof.drivers.nsys.reader import read_nsys_sqlite
from roseprof.model import GpuOps
from roseprof.model_check import check
from roseprof.run import tables

DATA = Path(__file__).parent.parent / "data" / "nsys"


def test_round_trip(tmp_path):
    trace = read_nsys_sqlite(str(DATA / "h100-nsys2025.3-roseinfer-decode.sqlite"))
    tables.write_trace(tmp_path, trace)
    back = tables.read_trace(tmp_path)
    assert back.names.values == trace.names.values and back.domains == trace.domains
    assert back.threads == trace.threads
    assert back.tool.name == "nsys" and back.tool.version == trace.tool.version
    for part in ("ranges", "marks", "ops"):
        a, b = getattr(trace, part), getattr(back, part)
        for col in a.__dataclass_fields__:
            assert np.array_equal(getattr(a, col), getattr(b, col)), (part, col)
    assert check(back) == []


def test_version_1_run_reads(tmp_path):
    trace = read_nsys_sqlite(str(DATA / "h100-nsys2025.3-matmul-nvtx.sqlite"))
    # The layout before the tool-neutral model: fewer columns, no marks file, names without version or threads.
    r, o = trace.ranges, trace.ops
    np.savez(tmp_path / "ranges.npz", start=r.start, end=r.end, name=r.name, domain=r.domain, tid=r.tid)
    np.savez(
        tmp_path / "gpu_ops.npz",
        kind=o.kind,
        start=o.start,
        end=o.end,
        name=o.name,
        api_start=o.api_start,
        api_tid=o.api_tid,
    )
    (tmp_path / "names.json").write_text(json.dumps({"names": trace.names.values, "domains": trace.domains}))
    back = tables.read_trace(tmp_path)
    assert np.array_equal(back.ops.start, o.start) and np.array_equal(back.ranges.name, r.name)
    assert len(back.marks) == 0 and back.threads == {}
    for col in GpuOps.COLUMNS:
        assert len(getattr(back.ops, col)) == len(o)
    assert (back.ops.device == -1).all()
    assert check(back) == []
