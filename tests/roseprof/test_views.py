"""What `show` and the dashboard say, on real fixtures: CUDA-graph replays in the region they were captured in
(issue 22 point 1), the steady state first (2), a program's steps in its own words (4), distinct kernels kept
distinct (5), and the profiler's own flush left out of the ITL figures (3)."""

import json
import re

import pytest

from tests.helpers import DATA, engine_command, roseprof

GRAPHS = DATA / "nsys" / "h100-nsys2025.3-roseinfer-graphs.sqlite"
GRAPHS_LOG = DATA / "nsys" / "h100-nsys2025.3-roseinfer-graphs.steplog.jsonl"
HTA = DATA / "torch" / "facebookresearch__HolisticTraceAnalysis__rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"
MATMUL = DATA / "nsys" / "h100-nsys2025.3-matmul-nvtx.sqlite"
CLOVER = DATA / "nsys" / "public" / "hpcgroup__pipit__perlmutter-cloverleaf-cuda.sqlite"
NCU_CSV = DATA / "ncu" / "tn-raw.csv"


class Store:
    def __init__(self, root):
        self.opts = ["--traces-dir", root / "traces", "--dashboards-dir", root / "dash"]
        self.root = root

    def run(self, verb, *args, columns=120):
        # options before the arguments: after `--` everything belongs to the profiled command
        proc = roseprof(verb, *self.opts, *args, env={"COLUMNS": str(columns)})
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return proc.stdout

    def summary(self, name):
        (folder,) = [p for p in (self.root / "traces").iterdir() if p.name.split("-", 1)[-1].startswith(name)]
        return json.loads((folder / "summary.json").read_text())

    def dashboard(self, out: str) -> str:
        (path,) = [line.split(": ", 1)[1] for line in out.splitlines() if line.startswith("dashboard: ")]
        with open(path, encoding="utf-8") as f:
            return f.read()


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    s = Store(tmp_path_factory.mktemp("views"))
    s.graphs_out = s.run("import", GRAPHS, "--steplog", GRAPHS_LOG, "--name", "fastpath")
    return s


def test_graph_replays_count_where_captured_in_every_table(store):
    summary = store.summary("fastpath")
    regions = {r["name"]: r for r in summary["regions"]}
    att = regions["roseinfer.layer.attention"]
    # nsys stats' launch rule is kept as it is; gpu_ns adds the replays captured inside the region.
    assert att["gpu_ns"] == att["gpu_kernel_ns"] + att["gpu_graph_ns"]
    assert att["gpu_graph_ns"] > 5 * att["gpu_kernel_ns"]
    # Nothing counted twice: the forward around the capture and around the replay launch holds each kernel once.
    fwd = regions["roseinfer.model.forward"]
    assert fwd["gpu_ns"] == fwd["gpu_kernel_ns"]
    # The top kernels are listed under the region they were captured in, not under the replay's launch.
    top = summary["kernel_regions"][:5]
    assert {k["region"] for k in top} <= {
        "roseinfer.layer.attention",
        "roseinfer.layer.mlp",
        "roseinfer.layer.layernorm",
    }
    out = store.graphs_out
    lines = out[out.index("top kernels") :].splitlines()
    rule = next(i for i, line in enumerate(lines) if "───" in line)
    rows = lines[rule + 1 : next(i for i in range(rule + 1, len(lines)) if not lines[i].strip())]
    assert len(rows) == 8 and not any("roseinfer.model.forward" in row for row in rows)
    assert sum("roseinfer.layer.attention" in row for row in rows) >= 2
    assert "GPU ms w/ graphs" in out and "nsys stats' rule" in out
    page = store.dashboard(out)
    assert (
        "GPU kernel ms (graph replays where captured)" in page
        and "GPU kernel time (CUDA-graph replays where captured)" in page
    )


def test_the_steady_state_comes_first(store):
    steady = store.summary("fastpath")["steady"]
    assert (steady["unit"], steady["steps"], steady["counted"]) == ("decode step", 72, 70)
    assert steady["excluded"]["warmup"]["steps"] == 1
    # the overlapped decode's last step launched nothing (step log `launched: false`): no GPU time to average in
    assert steady["excluded"]["drain"]["steps"] == 1
    # the four buckets' captures (each inside roseinfer.model.forward at start-up) and the prefill, apart
    assert steady["excluded"]["capture"]["ranges"] == 4
    assert steady["excluded"]["capture"]["range_names"] == ["roseinfer.model.forward"]
    assert steady["excluded"]["prefill"]["ranges"] == 1
    rows = {r["name"]: r for r in steady["regions"]}
    # attention runs only inside the graph: no host time per step, its kernels' GPU time per step
    att = rows["roseinfer.layer.attention"]
    assert att["host_mean_ns"] == 0 and att["gpu_mean_ns"] > 100_000 and att["graph"]
    assert "roseinfer.scheduler.step" not in rows  # a range around the steps is no part of one
    out = store.graphs_out
    assert out.index("steady state, per decode step (70 of 72 steps)") < out.index(
        "time per region, whole run"
    )
    said = " ".join(out.split())
    assert "CUDA graph capture 4 range(s) outside the steps (roseinfer.model.forward)" in said
    assert "drain 1 step(s) that launched nothing" in said
    page = store.dashboard(out)
    assert page.index('id="steady"') < page.index("Regions, whole run")


def test_a_program_speaks_of_its_own_steps(store):
    out = store.run("import", HTA, "--name", "training")
    steps = store.summary("training")["steps"]
    assert steps["kind"] == "profiler" and steps["count"] == 5
    assert "steps (ProfilerStep): 5" in out and "per ProfilerStep" in out
    assert not re.search("rollover|decode step", out)
    assert "torch (version not recorded)" in out and "torch ?" not in out
    page = store.dashboard(out)
    assert "rollover" not in page.lower() and "per decode step" not in page
    out = store.run("import", MATMUL, "--name", "matmul", "--step-range", "roseinfer.model.forward")
    steps = store.summary("matmul")["steps"]
    assert (steps["kind"], steps["name"], steps["count"]) == ("range", "roseinfer.model.forward", 30)
    assert "steps (roseinfer.model.forward): 30" in out and "rollover" not in out
    out = store.run("import", MATMUL, "--name", "plain")
    assert store.summary("plain")["steps"] is None and "step" not in out.lower()
    assert "ncu (version not recorded)" in store.run("import", NCU_CSV, "--name", "ncucsv")
    listing = store.run("ls")
    assert (
        "?" not in listing and " torch " in listing and " ncu " in listing
    )  # a version not known: none shown


def test_distinct_kernels_stay_distinct(store):
    out = store.run("import", CLOVER, "--name", "clover", columns=80)
    rows = [line for line in out.splitlines() if "par_ranged2d_kernel" in line]
    tags = [re.search(r"#([0-9a-f]{4})", line).group(1) for line in rows]
    assert len(rows) >= 6 and len(set(tags)) == len(tags)  # six instantiations: six rows, six tags
    page = store.dashboard(out)
    assert len(set(re.findall(r"par_ranged2d_kernel #([0-9a-f]{4})", page))) >= 6


def test_the_profilers_flush_is_left_out_of_itl(store, tmp_path):
    # The profiler's window ends after 23 of 69 decode steps: the engine stops it and writes the trace.
    cmd = engine_command("roseinfer.benchmark_streaming", 4)
    out = store.run("torch", "--name", "flush", "--wait", "2", "--warmup", "1", "--active", "20", "--", *cmd)
    summary = store.summary("flush")
    left = summary["spikes"]["left_out"]["profiler"]
    assert left["tokens"] >= 4  # one a request, at the window's start or end
    assert summary["itl"]["left_out"] == summary["spikes"]["left_out"]
    # the ITL figures are those of the other tokens
    assert summary["itl"]["count"] == summary["spikes"]["tokens"]
    assert summary["itl"]["p99_ms"] < left["max_ms"]
    assert "ITL figures leave out" in " ".join(out.split())
