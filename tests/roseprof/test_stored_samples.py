"""The diff's samples stored at import (run/sample_tables.py, issue 43): a diff reads them instead of rebuilding them
from the run's trace, and gets what the trace gives, array for array; a run without them (stored before them, of
other builders, or with the file damaged) falls back to the trace, and its diff is byte-identical."""

import json
import shutil

import numpy as np
import pytest

from roseprof import api
from roseprof.analysis.run_data import RunData
from roseprof.analysis.samples import SAMPLES_VERSION
from roseprof.api.compare import samples_from_trace
from roseprof.run import sample_tables
from roseprof.run.store import RunStore
from tests.helpers import DATA, roseprof

NSYS = DATA / "nsys"
DECODE = NSYS / "h100-nsys2025.3-roseinfer-decode"
# (name, files to import, step log): engine captures with their step log, one of two ranks, a torch trace, a trace
# without steps, an ncu report (whose own samples are its trace: not stored)
FIXTURES = {
    "nsys-decode": (f"{DECODE}.sqlite", f"{DECODE}.steplog.jsonl"),
    # a step on two streams at once (its GPU busy time less than its kernels' own times)
    "nsys-halves": (
        f"{NSYS}/h200-nsys2025.3-roseinfer-halves.sqlite",
        f"{NSYS}/h200-nsys2025.3-roseinfer-halves.steplog.jsonl",
    ),
    "nsys-tp2": (
        f"{NSYS}/cpu-nsys2022.4-roseinfer-tp2.sqlite",
        f"{NSYS}/cpu-nsys2022.4-roseinfer-tp2.steplog.jsonl",
    ),
    "torch-graphs": (
        f"{DATA}/torch/h100-torch2.11-roseinfer-graphs.json.gz",
        f"{DATA}/torch/h100-torch2.11-roseinfer-graphs.steplog.jsonl",
    ),
    "nsys-nvtx": (f"{NSYS}/cpu-nsys2022.4-nvtx.sqlite", None),
    "ncu": (f"{DATA}/ncu/h100-ncu2025.3-roseinfer-attn-raw.csv", None),
}


def assert_same(x, y, path="RunData"):
    """Equal to the bit, the same types and dtypes, dicts in the same key order."""
    if isinstance(x, RunData):
        assert isinstance(y, RunData)
        x, y = vars(x), vars(y)
    if isinstance(x, dict):
        assert isinstance(y, dict) and list(x) == list(y), path
        for k in x:
            assert_same(x[k], y[k], f"{path}.{k}")
    elif isinstance(x, tuple):
        assert isinstance(y, tuple) and len(x) == len(y), path
        for i, (a, b) in enumerate(zip(x, y)):
            assert_same(a, b, f"{path}[{i}]")
    elif isinstance(x, np.ndarray):
        assert isinstance(y, np.ndarray) and x.dtype == y.dtype and x.shape == y.shape, path
        assert np.array_equal(x, y, equal_nan=x.dtype.kind == "f"), path
    elif x is not None and not isinstance(x, (str, int, float, bool, list)):  # ncu's own samples: its trace
        assert type(x) is type(y), path
    else:
        assert type(x) is type(y) and (x == y or (x != x and y != y)), (path, x, y)


@pytest.mark.parametrize("name", FIXTURES)
def test_the_stored_samples_are_what_the_trace_gives(tmp_path, name):
    path, log = FIXTURES[name]
    run = api.import_path(RunStore(tmp_path / "t"), path, name, log)
    stored = sample_tables.read(run.path, SAMPLES_VERSION)
    assert stored is not None
    if name == "ncu":
        assert "ncu" not in stored  # its own samples are the trace, read when a diff needs them
    else:
        assert {"regions", "kernels", "steps", "itl"} <= set(stored) and stored["ncu"] is None
    got = api.load_run(run)
    assert_same(samples_from_trace(run), got)
    if name in ("nsys-decode", "torch-graphs"):
        assert got.kernel_steps and got.step_self and got.step_dur is not None  # not an empty comparison


def diff_outputs(tmp_path, a, b, views=True) -> list:
    """`diff --json`, and with views the terminal's table and the diff dashboard, of runs a and b."""
    dirs = ("--traces-dir", tmp_path / "t", "--dashboards-dir", tmp_path / "d")
    outputs = []
    for extra in (["--json"], []) if views else (["--json"],):
        proc = roseprof("diff", a, b, *extra, *dirs, env={"COLUMNS": "80", "PYTHONHASHSEED": "0"})
        assert proc.returncode in (0, 1), proc.stderr
        outputs.append(proc.stdout)
    if views:
        (dashboard,) = (tmp_path / "d").glob("diff-*.html")
        outputs.append(dashboard.read_bytes())
    return outputs


def test_a_run_without_stored_samples_diffs_the_same(tmp_path):
    """Runs stored before the samples were (no file), of other builders (another version) or with the file damaged:
    the diff builds their samples from the trace, and says to the byte what it says with the stored ones."""
    store = RunStore(tmp_path / "t")
    path, log = FIXTURES["nsys-decode"]
    a, b = (api.import_path(store, path, name, log) for name in ("before", "after"))
    stored = diff_outputs(tmp_path, a.id, b.id)
    assert json.loads(stored[0])["metrics"]
    kept = (a.path / sample_tables.FILE).read_bytes()

    for run in (a, b):  # stored before the samples were
        (run.path / sample_tables.FILE).unlink()
    assert diff_outputs(tmp_path, a.id, b.id) == stored

    # other builders' samples (read only at their version), a file cut short, one that is no .npz
    sample_tables.write(a.path, SAMPLES_VERSION + 1, {"steps": None})
    assert sample_tables.read(a.path, SAMPLES_VERSION) is None
    (b.path / sample_tables.FILE).write_bytes(kept[: len(kept) // 2])
    assert sample_tables.read(b.path, SAMPLES_VERSION) is None
    assert diff_outputs(tmp_path, a.id, b.id, views=False) == stored[:1]
    (b.path / sample_tables.FILE).write_bytes(b"not an npz")
    assert sample_tables.read(b.path, SAMPLES_VERSION) is None


def test_samples_round_trip_in_every_shape_they_come_in(tmp_path):
    rng = np.random.default_rng(0)
    shared = {
        "step_dur": rng.random(5),
        "step_roll": rng.random(5) > 0.5,
        "itl": None,
        "kernel_own": {"k1": rng.random(3), 'k·2 "quoted"': rng.random(0), "k3": rng.random(4)},
        "kernel_launches": {"k1": np.arange(5)},
        "kernel_steps": {"k1": (rng.random(5), 1.5), "k3": (rng.random(5), 0.0)},
        "region_self": {"r": 2.25, "s": float("inf")},
        "step_cpu": {},
    }
    own = np.arange(7, dtype=np.float32)
    sample_tables.write(tmp_path, 3, {"a": shared, "b": own, "c": None})
    back = sample_tables.read(tmp_path, 3)
    assert list(back) == ["a", "b", "c"] and back["c"] is None
    assert_same(shared, back["a"])
    assert_same(own, back["b"])
    assert sample_tables.read(tmp_path, 4) is None


def test_samples_of_other_shapes_are_left_out():
    keep = {"steps": None, "arrays": {"x": np.zeros(3)}}
    left_out = {
        "a trace": object(),
        "a 2-D array": np.zeros((2, 2)),
        "a list": {"x": [1.0, 2.0]},
        "mixed types": {"x": {"a": np.zeros(2), "b": np.zeros(2, dtype=np.int64)}},
        "int keys": {"x": {1: np.zeros(2)}},
    }
    assert sample_tables.storable({**keep, **left_out}) == keep


def test_a_run_folder_copied_whole_keeps_its_samples(tmp_path):
    """Stored samples belong to the run folder: a run copied to another store reads them there."""
    path, log = FIXTURES["nsys-nvtx"]
    run = api.import_path(RunStore(tmp_path / "t"), path, "x", log)
    shutil.copytree(run.path, tmp_path / "u" / run.id)
    copied = RunStore(tmp_path / "u").resolve(run.id)
    assert sample_tables.read(copied.path, SAMPLES_VERSION) is not None
    assert_same(api.load_run(run), api.load_run(copied))
