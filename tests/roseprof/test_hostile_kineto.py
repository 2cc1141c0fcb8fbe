"""Kineto files that broke the reader in the robustness run (issue 23), each derived at test time from a real
trace: deep nesting (a traceback), two traceEvents arrays (one dropped in silence), huge names (minutes and
gigabytes), a ROCm trace's text streams (refused). Each is read, or refused in one line naming the file."""

import collections
import gzip
import json
from collections import defaultdict

import pytest

from roseprof.analysis.summary import analyse
from roseprof.drivers.torch.reader import read_kineto
from roseprof.model import KERNEL, MAX_NAME_CHARS
from tests.helpers import DATA, one_line_error, run_cli
from tests.roseprof.peak_memory import import_peak_rss
from tests.roseprof.test_torch_reader import kernel_totals

H100 = DATA / "torch" / "h100-torch2.11-matmul-trace.json"
V100 = (
    DATA / "torch" / "facebookresearch__HolisticTraceAnalysis__rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"
)
DEEP = 100_000


def import_(tmp_path, path):
    return run_cli("import", path, "--traces-dir", tmp_path / "t", "--dashboards-dir", tmp_path / "d")


def stored(tmp_path) -> list:
    traces = tmp_path / "t"
    return sorted(traces.iterdir()) if traces.exists() else []


def h100_text() -> str:
    return H100.read_text()


def with_first_kernel(text: str, change) -> str:
    """The trace with its first kernel event's JSON text passed through `change`."""
    doc = json.loads(text)
    k = next(i for i, e in enumerate(doc["traceEvents"]) if e.get("cat") == "kernel")
    event = json.dumps(doc["traceEvents"][k])
    doc["traceEvents"][k] = "@@EVENT@@"
    return json.dumps(doc).replace('"@@EVENT@@"', change(event))


NESTED = {
    "arrays in args": lambda t: with_first_kernel(
        t, lambda e: e[:-2] + ', "deep": ' + "[" * DEEP + "]" * DEEP + "}}"
    ),
    "objects in args": lambda t: with_first_kernel(
        t, lambda e: e[:-2] + ', "deep": ' + '{"a":' * DEEP + "1" + "}" * DEEP + "}}"
    ),
    "header after traceEvents": lambda t: t.rstrip()[:-1] + ', "deep": ' + "[" * DEEP + "]" * DEEP + "}",
}


@pytest.mark.parametrize("case", NESTED)
def test_deep_nesting_is_refused_in_one_line(tmp_path, case):
    path = tmp_path / "deep.json"
    path.write_text(NESTED[case](h100_text()))
    line = one_line_error(*import_(tmp_path, path), naming=path)
    assert "nested too deeply" in line and stored(tmp_path) == []


def test_two_trace_events_arrays_are_refused_not_half_read(tmp_path):
    text = h100_text().rstrip()
    doc = json.loads(text)
    second = json.dumps(doc["traceEvents"][:50])
    path = tmp_path / "two.json"
    path.write_text(text[:-1] + f', "traceEvents": {second}}}')
    line = one_line_error(*import_(tmp_path, path), naming=path)
    assert "two traceEvents arrays" in line and stored(tmp_path) == []


def test_a_traceevents_key_inside_a_string_or_nested_object_is_not_a_second_array(tmp_path):
    text = h100_text().rstrip()
    path = tmp_path / "fine.json"
    path.write_text(text[:-1] + ', "note": "\\"traceEvents\\": [", "nested": {"traceEvents": [1]}}')
    code, out, err = import_(tmp_path, path)
    assert code == 0, err


def test_a_huge_name_is_cut_as_it_is_read_and_costs_no_more_than_its_bytes(tmp_path):
    """8 MB of name (the robustness run: 40 s and 930 MB to import, minutes to show): cut to MAX_NAME_CHARS."""
    huge = "k" * (8 << 20)
    path = tmp_path / "huge.json"
    path.write_text(with_first_kernel(h100_text(), lambda e: e.replace('"name": "', f'"name": "{huge}', 1)))
    baseline, base_peak = import_peak_rss(tmp_path / "small", H100)
    proc, peak = import_peak_rss(tmp_path, path)
    assert proc.returncode == 0 and baseline.returncode == 0, proc.stderr
    # The name's 8 MB is read once (the file's bytes, its decoded text): a few times its size at most.
    assert peak - base_peak < 8 * len(huge), (peak, base_peak)
    (run,) = stored(tmp_path)
    names = json.loads((run / "names.json").read_text())
    longest = max(len(n) for n in (names if isinstance(names, list) else names.get("names", [])))
    assert MAX_NAME_CHARS < longest < MAX_NAME_CHARS + 64
    for extra in ([], ["--json"]):
        code, out, err = run_cli(
            "show", run.name, *extra, "--traces-dir", tmp_path / "t", "--dashboards-dir", tmp_path / "d"
        )
        assert code == 0 and len(out) < 200_000, err
    assert "more characters" in out


def test_an_event_over_64_mib_is_refused_in_one_line(tmp_path):
    path = tmp_path / "giant.json"
    giant = "g" * (72 << 20)  # the bound is checked a 4 MiB chunk at a time
    path.write_text(with_first_kernel(h100_text(), lambda e: e.replace('"name": "', f'"name": "{giant}', 1)))
    line = one_line_error(*import_(tmp_path, path), naming=path)
    assert "over 64 MiB" in line and stored(tmp_path) == []


def rocm_spelling(doc: dict) -> dict:
    """A CUDA trace spelled as Kineto writes ROCm traces: hip* runtime calls, HIP streams as pointer text."""
    for e in doc["traceEvents"]:
        args = e.get("args")
        if e.get("cat") == "cuda_runtime":
            e["name"] = e["name"].replace("cuda", "hip", 1)
            if isinstance(args, dict):
                args["stream"] = "0x55d1c0a3e2f0"
        elif e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and isinstance(args, dict):
            args["stream"] = f"0x7f3a{int(args.get('stream', 0)):08x}"
    return doc


def test_a_rocm_trace_with_text_streams_is_read_with_exact_kernel_totals(tmp_path):
    with gzip.open(V100, "rt") as fh:
        doc = rocm_spelling(json.load(fh))
    path = tmp_path / "rocm.json.gz"
    with gzip.open(path, "wt") as fh:
        json.dump(doc, fh)
    want_count, want_ns, streams, per_stream = defaultdict(int), defaultdict(int), set(), defaultdict(int)
    for e in doc["traceEvents"]:
        if e.get("ph") == "X" and e.get("cat") == "kernel":
            want_count[e["name"]] += 1
            want_ns[e["name"]] += int(round(e["dur"] * 1000))
            streams.add(e["args"]["stream"])
            per_stream[e["args"]["stream"]] += 1
    trace = read_kineto(path)
    summary, _ = analyse(trace, None)
    got_count, got_ns = kernel_totals(summary)
    assert dict(got_count) == dict(want_count) and dict(got_ns) == dict(want_ns)
    # Each HIP stream's text is one stream of the model, and its kernels are all there.
    kernel_streams = trace.ops.stream[trace.ops.kind == KERNEL]
    assert len(set(kernel_streams.tolist())) == len(streams)
    assert sorted(collections.Counter(kernel_streams.tolist()).values()) == sorted(per_stream.values())
    code, out, err = import_(tmp_path, path)
    assert code == 0, err


def test_ids_beyond_64_bits_are_numbered_or_refused(tmp_path):
    big = str(2**64 + 5)
    path = tmp_path / "ids.json"
    path.write_text(with_first_kernel(h100_text(), lambda e: e.replace('"stream": 7', f'"stream": {big}')))
    code, out, err = import_(tmp_path, path)
    assert code == 0, err
    path.write_text(
        with_first_kernel(h100_text(), lambda e: e.replace('"correlation": ', f'"correlation": {big}0', 1))
    )
    line = one_line_error(*import_(tmp_path / "b", path), naming=path)
    assert "64 bits" in line
