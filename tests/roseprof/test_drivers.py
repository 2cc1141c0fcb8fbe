"""The driver contract: every trace file in tests/data goes through the registry (suffix, then content) and
comes out as a sound model, or is refused with one line naming the file."""

from pathlib import Path

import numpy as np
import pytest

from roseprof.drivers import pick_reader
from roseprof.errors import NothingRecorded, RoseprofError
from roseprof.model import KERNEL
from roseprof.model_check import check
from tests.helpers import DATA, trace_folder_files, unpacked

# Oracles, programs, origin notes, tool logs and a fused kernel's phase stamps (tests/roseinfer/test_stamp_recorder.py) beside
# the traces are not traces; ncu's CSV exports are (its trace format).
NOT_TRACES = (".csv", ".py", ".jsonl", ".md", ".txt", ".log", ".stamps.json")
TRACES = [
    p
    for p in trace_folder_files()
    if not p.name.endswith(NOT_TRACES) or (p.parent.name == "ncu" and p.suffix == ".csv")
]


def test_fixtures_found():
    assert len(TRACES) >= 5
    # Every kind of file a reader takes is exercised, the gzipped Kineto traces included.
    assert any(p.name.endswith(".json") for p in TRACES) and any(p.name.endswith(".json.gz") for p in TRACES)


@pytest.mark.parametrize("path", TRACES, ids=lambda p: str(p.relative_to(DATA)))
def test_every_fixture_reads_into_a_sound_model(path, tmp_path):
    if path.name.endswith(".xz"):  # kept compressed (tests/data/README.md): read what it unpacks to
        path = Path(unpacked(path, tmp_path))
    reader = pick_reader(path)
    try:
        trace = reader.read(path, tmp_path, str(path))
    except NothingRecorded as e:
        # A capture with nothing to analyse (public/JACC: no range, mark or GPU op): one line, naming it.
        assert str(path) in str(e) and "nothing to analyse" in str(e) and "\n" not in str(e)
        return
    except RoseprofError as e:
        # A report from a newer Nsight Systems / Compute than the one installed (or none installed): one line,
        # naming the file.
        assert (
            path.suffix in (".nsys-rep", ".qdrep", ".ncu-rep") and str(path) in str(e) and "\n" not in str(e)
        )
        return
    assert check(trace) == []
    assert trace.tool.name == reader.tool and trace.tool.version
    assert len(trace.ranges) or len(trace.ops)
    ops = trace.ops
    if trace.kernel_metrics is not None:
        # ncu replays kernels alone and records no API calls: no launching call to check, but every op is a
        # profiled launch with its metrics and a real duration.
        assert len(trace.kernel_metrics) == len(ops) and (ops.api_start == -1).all()
        assert np.array_equal(np.sort(trace.kernel_metrics.op), np.arange(len(ops)))
        assert (ops.end > ops.start).all()
    launched = ops.api_start >= 0
    # A GPU op starts after the API call that launched it began (one clock for both).
    assert (ops.start[launched] >= ops.api_start[launched]).all()
    assert (ops.api_end[launched] >= ops.api_start[launched]).all()
    kernels = ops.kind == KERNEL
    if kernels.any():
        assert (ops.device[kernels] >= 0).all() and (ops.stream[kernels] >= 0).all()
        assert np.all(ops.api_name[launched] >= 0)
        launch_calls = {trace.names[i] for i in np.unique(ops.api_name[launched & kernels])}
        assert all(name.startswith(("cuda", "cu", "hip")) for name in launch_calls), launch_calls


def test_unknown_file_gets_one_line(tmp_path):
    odd = tmp_path / "notes.txt"
    odd.write_text("hello\n")
    with pytest.raises(RoseprofError) as e:
        pick_reader(odd)
    assert str(odd) in str(e.value) and "not a file roseprof can read" in str(e.value)


def test_content_wins_when_the_suffix_is_unknown(tmp_path):
    src = DATA / "nsys" / "cpu-nsys2022.4-nvtx.sqlite"
    renamed = tmp_path / "capture.bin"
    renamed.write_bytes(src.read_bytes())
    assert pick_reader(renamed).description == "nsys .sqlite exports"
