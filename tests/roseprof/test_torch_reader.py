"""The Kineto reader against the files themselves and against torch.profiler's own numbers."""

import gzip
import json
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from roseprof.analysis.ranges import attribute_gpu_ops, build_tree
from roseprof.analysis.summary import analyse
from roseprof.drivers.demangle import demangle
from roseprof.drivers.torch.events import us_to_ns
from roseprof.drivers.torch.reader import read_kineto
from roseprof.model import KERNEL
from tests.helpers import DATA, assert_one_line_error, roseprof

KINETO = sorted(p for p in (DATA / "torch").glob("*.json*") if not p.name.endswith(".jsonl"))  # not step logs
KINETO = [p for p in KINETO if not p.name.endswith(".origin.txt")]
H100 = DATA / "torch" / "h100-torch2.11-matmul-trace.json"


def load(path: Path) -> dict:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rb") as fh:
        return json.load(fh)


def kernel_totals(summary: dict) -> tuple[dict, dict]:
    """(count, total ns) per kernel name in a summary's kernel table (a name may have a row per region)."""
    count, ns = defaultdict(int), defaultdict(int)
    for k in summary["kernels"]:
        count[k["name"]] += k["count"]
        ns[k["name"]] += k["total_ns"]
    return dict(count), dict(ns)


@pytest.mark.parametrize("path", KINETO, ids=lambda p: p.name[:40])
def test_kernel_totals_equal_a_direct_sum_over_the_file(path):
    events = load(path)["traceEvents"]
    want_count, want_ns = defaultdict(int), defaultdict(int)
    for e in events:
        if e.get("ph") == "X" and e.get("cat") in ("kernel", "Kernel"):
            want_count[e["name"]] += 1
            want_ns[e["name"]] += int(round(e["dur"] * 1000))
    # the names Kineto left mangled (the CUTLASS GEMMs' in h200-torch2.11-roseinfer-cutlass) are read demangled
    names = list(want_count)
    read_as = dict(zip(names, demangle(names)[0]))
    trace = read_kineto(path)
    summary, _ = analyse(trace, None)
    got_count, got_ns = kernel_totals(summary)
    assert dict(got_count) == {read_as[n]: c for n, c in want_count.items()}
    assert dict(got_ns) == {read_as[n]: ns for n, ns in want_ns.items()}
    assert summary["gpu_ops"]["kernels"] == sum(want_count.values())


def test_gpu_user_annotations_equal_the_projection():
    """Kineto's gpu_user_annotation spans are what the projection rule computes for the same annotations."""
    raw = load(H100)["traceEvents"]
    gpu = sorted(
        (us_to_ns(np.array([e["ts"]]))[0], us_to_ns(np.array([e["dur"]]))[0])
        for e in raw
        if e.get("cat") == "gpu_user_annotation"
    )
    t = read_kineto(H100)
    r, o = t.ranges, t.ops
    tree = build_tree(r.start, r.end, r.tid)
    att = attribute_gpu_ops(
        r.start, r.end, r.tid, tree, o.kind, o.start, o.end, o.api_start, o.api_end, o.api_tid
    )
    has = att.op_count > 0
    ours = sorted(zip(att.proj_start[has].tolist(), (att.proj_end - att.proj_start)[has].tolist()))
    assert len(ours) == len(gpu) == 5
    # Kineto rounds each span's start and end to the ns it prints; ours come from the kernels' own.
    assert all(abs(a[0] - b[0]) <= 1 and abs(a[1] - b[1]) <= 2 for a, b in zip(ours, gpu))


def test_old_spellings_and_string_tids():
    old = DATA / "torch" / "pytorch__kineto__worker0.1623143089861.pt.trace.json.gz"
    t = read_kineto(old)
    assert (t.ops.kind == KERNEL).sum() == 8772
    assert (t.ops.api_tid >= 0).all() and set(t.ops.stream.tolist()) == {7}
    assert "ProfilerStep" in {t.names[i] for i in t.ranges.name.tolist()}
    summary, tables = analyse(t, None)
    assert summary["steps"]["count"] == tables["steps"]["dur_ns"].__len__() > 0  # ProfilerStep#N as steps


def test_processes_stay_apart():
    hta = (
        DATA
        / "torch"
        / "facebookresearch__HolisticTraceAnalysis__rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"
    )
    t = read_kineto(hta)
    tids = np.unique(t.ranges.tid)
    assert len(tids) == 2 and set((tids >> 32).tolist()) == {1102}
    assert all("rank 0" in t.threads[int(x)] for x in tids)
    assert any("precision" in w or "0.25 us" in w for w in t.warnings)


def test_us_to_ns_rounds_exactly():
    us = np.array([4461862502882.307, 1.0005, 0.0015, 56.864, 4461862629125.53])
    assert us_to_ns(us).tolist() == [4461862502882307, 1000, 2, 56864, 4461862629125530]


def test_annotations_agree_with_key_averages(tmp_path):
    """A fresh CPU capture: roseprof's per-annotation counts and totals are torch.profiler's own."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for i in range(20):
            with record_function("outer"):
                x = torch.randn(64, 64)
                for _ in range(3):
                    with record_function("inner"):
                        x = x @ x
                if i % 5 == 0:
                    with record_function("sometimes"):
                        x.sum()
    path = tmp_path / "cpu.pt.trace.json"
    prof.export_chrome_trace(str(path))
    ka = {e.key: e for e in prof.key_averages()}
    summary, _ = analyse(read_kineto(path), None)
    regions = {r["name"]: r for r in summary["regions"]}
    for name in ("outer", "inner", "sometimes"):
        assert regions[name]["count"] == ka[name].count
        want_ns = ka[name].cpu_time_total * 1000  # key_averages reports us
        assert abs(regions[name]["total_ns"] - want_ns) <= max(1e-3 * want_ns, 1000 * ka[name].count)


def _bad(tmp_path, name, data: bytes):
    path = tmp_path / name
    path.write_bytes(data)
    traces = tmp_path / "traces"
    proc = roseprof("import", path, "--traces-dir", traces, "--dashboards-dir", tmp_path / "d")
    assert_one_line_error(proc, 2, str(path))
    assert not traces.exists()  # the import made the folder and took it away with its run
    return proc.stderr


def test_bad_inputs_get_one_line_and_leave_no_run(tmp_path):
    good = H100.read_bytes()
    assert "truncated" in _bad(tmp_path, "cut.json", good[: len(good) // 2])
    packed = gzip.compress(good)
    assert "gzip" in _bad(tmp_path, "cut.json.gz", packed[: len(packed) // 2])
    corrupt = bytearray(gzip.compress(good))
    corrupt[200:260] = b"\x00" * 60
    assert "gzip" in _bad(tmp_path, "corrupt.json.gz", bytes(corrupt))
    assert "not a trace" in _bad(tmp_path, "config.json", b'{"model": "gpt2", "layers": 12}')
    assert "no events" in _bad(tmp_path, "empty.json", b'{"schemaVersion": 1, "traceEvents": []}')
    wrong = b'{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": "soon", "dur": 1}]}'
    assert "traceEvents[0].ts" in _bad(tmp_path, "wrong.json", wrong)
    missing = b'{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 5}]}'
    assert "'dur'" in _bad(tmp_path, "missing.json", missing)
    nothing = b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 5, "dur": 1}]}'
    assert "nothing to analyse" in _bad(tmp_path, "ops.json", nothing)
    assert "not valid JSON" in _bad(tmp_path, "junk.json", b'{"traceEvents": [{"ph": "X",, }]}')


@pytest.mark.parametrize("chunk", [257, 4096])
def test_small_chunks_cut_between_events_anywhere(chunk, monkeypatch):
    """Segments cut at every kind of place (inside strings, escapes, nested args) give the same trace."""
    from roseprof.drivers.torch import scan

    path = DATA / "torch" / "AMD-AGI__TraceLens__Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
    whole = read_kineto(path)
    monkeypatch.setattr(scan, "CHUNK", chunk)
    cut = read_kineto(path)
    for a, b in ((whole.ranges, cut.ranges), (whole.ops, cut.ops)):
        for f in a.__dataclass_fields__:
            assert np.array_equal(getattr(a, f), getattr(b, f)), f
    assert whole.names.values == cut.names.values and whole.gpus == cut.gpus


def test_one_pass_when_every_op_has_a_correlation_id(monkeypatch):
    """User annotations never carry a correlation id; they must not trigger the flow pass (it read the file twice)."""
    from roseprof.drivers.torch import reader

    passes = []
    real = reader.EventStream.segments

    def counted(self):
        passes.append(self.path)
        return real(self)

    monkeypatch.setattr(reader.EventStream, "segments", counted)
    path = next(p for p in KINETO if "HolisticTraceAnalysis" in p.name)  # annotations, flows, correlation ids
    trace = read_kineto(path)
    assert len(passes) == 1
    assert (trace.ops.api_start >= 0).all()  # and every GPU op still found its launching call


def test_reader_warnings_appear_once_in_the_summary():
    path = next(
        p for p in KINETO if "HolisticTraceAnalysis" in p.name
    )  # Unix-epoch timestamps with fractions
    trace = read_kineto(path)
    summary, _ = analyse(trace, None)
    assert trace.warnings and summary["warnings"].count(trace.warnings[0]) == 1


@pytest.mark.parametrize("kernel_corr, launch_corr", [(None, None), (9, 8), (None, 8), (9, None)])
def test_flows_join_a_kernel_its_correlation_id_does_not(tmp_path, kernel_corr, launch_corr):
    """A producer that links launches to kernels by ac2g flow events: end to end through read_kineto, a kernel whose
    correlation id is missing, or names no launch, is joined to its launch by the flows (the second pass over the
    file), and so to the region around the launch."""

    def args(corr):
        return {} if corr is None else {"args": {"correlation": corr}}

    events = [
        {"ph": "X", "cat": "user_annotation", "name": "r", "pid": 5, "tid": 6, "ts": 10.0, "dur": 100.0},
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaLaunchKernel",
            "pid": 5,
            "tid": 6,
            "ts": 20.0,
            "dur": 5.0,
        }
        | args(launch_corr),
        {"ph": "s", "cat": "ac2g", "name": "ac2g", "id": 9, "pid": 5, "tid": 6, "ts": 20.0},
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 30.0, "dur": 2.0}
        | args(kernel_corr),
        {"ph": "f", "cat": "ac2g", "name": "ac2g", "id": 9, "pid": 0, "tid": 7, "ts": 30.0, "bp": "e"},
    ]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    trace = read_kineto(path)
    assert (
        trace.ops.api_start.tolist() == [20000] and trace.names[trace.ops.api_name[0]] == "cudaLaunchKernel"
    )
    summary, _ = analyse(trace, None)
    assert summary["kernels"][0]["region"] == "r"
