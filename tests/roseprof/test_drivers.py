"""The driver contract: every trace file in tests/data goes through the registry (suffix, then content) and
comes out as a sound model, or is refused with one line naming the file."""

from pathlib import Path

import numpy as np
import pytest

from roseprof.drivers import pick_reader
from roseprof.errors import EmptyTrace, RoseprofError
from roseprof.model import KERNEL, check

DATA = Path(__file__).parent.parent / "data"
# Oracles and programs beside the traces are not traces.
NOT_TRACES = (".csv", ".py", ".jsonl", ".md", ".txt")
TRACES = sorted(p for p in DATA.rglob("*") if p.is_file() and not p.name.endswith(NOT_TRACES))
# Readers still to come (torch/Kineto, ncu): until they land their files must be refused cleanly.
NO_READER_YET = {".json"}


def test_fixtures_found():
    assert len(TRACES) >= 5


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.name)
def test_every_fixture_reads_into_a_sound_model(path, tmp_path):
    if path.suffix in NO_READER_YET:
        with pytest.raises(RoseprofError, match="not a file roseprof can read"):
            pick_reader(path)
        return
    reader = pick_reader(path)
    try:
        trace = reader.read(path, tmp_path, str(path))
    except EmptyTrace as e:
        # A capture with nothing to analyse (public/JACC: no range, mark or GPU op): one line, naming it.
        assert str(path) in str(e) and "nothing to analyse" in str(e) and "\n" not in str(e)
        return
    except RoseprofError as e:
        # An .nsys-rep from a newer Nsight Systems than the one installed (or no nsys): one line, naming it.
        assert path.suffix in (".nsys-rep", ".qdrep") and str(path) in str(e) and "\n" not in str(e)
        return
    assert check(trace) == []
    assert trace.tool.name == reader.tool and trace.tool.version
    assert len(trace.ranges) or len(trace.ops)
    ops = trace.ops
    launched = ops.api_start >= 0
    # A GPU op starts after the API call that launched it began (one clock for both).
    assert (ops.start[launched] >= ops.api_start[launched]).all()
    assert (ops.api_end[launched] >= ops.api_start[launched]).all()
    kernels = ops.kind == KERNEL
    if kernels.any():
        assert (ops.device[kernels] >= 0).all() and (ops.stream[kernels] >= 0).all()
        assert np.all(ops.api_name[launched] >= 0)
        launch_calls = {trace.names[i] for i in np.unique(ops.api_name[launched & kernels])}
        assert all(name.startswith(("cuda", "cu")) for name in launch_calls), launch_calls


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
