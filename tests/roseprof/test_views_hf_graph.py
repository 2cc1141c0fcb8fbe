"""A CUDA-graph program that is not the engine, captured on an H100 (scripts/hf_graph_program.py through
`bash scripts/gpu_check.sh fixture-views`): Hugging Face GPT-2 with NVTX ranges from forward hooks, 3 eager forwards, one
capture, 60 replays. Its replayed kernels must land in their capture-time regions in `show`, the dashboard and
the steady state, and a replay's region time must match what an eager forward ran inside it."""

import json

import pytest

from tests.helpers import DATA, roseprof

NSYS = DATA / "nsys" / "h100-nsys2025.3-hf-graph.sqlite"
TORCH = DATA / "torch" / "h100-torch2.11-hf-graph.json.gz"
ENGINE_TORCH = DATA / "torch" / "h100-torch2.11-roseinfer-graphs.json.gz"
ENGINE_TORCH_LOG = DATA / "torch" / "h100-torch2.11-roseinfer-graphs.steplog.jsonl"
EAGER, REPLAYS = 3, 60  # the program's defaults: --eager 3 --replays 60


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("hf")
    opts = ["--traces-dir", root / "traces", "--dashboards-dir", root / "dash"]
    out = {}
    for name, args in (
        ("nsys", [NSYS, "--step-range", "hf.step"]),
        ("torch", [TORCH]),
        ("engine", [ENGINE_TORCH, "--steplog", ENGINE_TORCH_LOG]),
    ):
        proc = roseprof("import", *opts, "--name", name, *args, env={"COLUMNS": "80"})
        assert proc.returncode == 0, proc.stdout + proc.stderr
        (folder,) = [
            p for p in (root / "traces").iterdir() if p.name.split("-", 1)[-1].startswith(name + "-")
        ]
        (page,) = [
            line.split(": ", 1)[1] for line in proc.stdout.splitlines() if line.startswith("dashboard: ")
        ]
        with open(page, encoding="utf-8") as f:
            html = f.read()
        out[name] = (proc.stdout, json.loads((folder / "summary.json").read_text()), html)
    return out


def test_every_replayed_kernel_is_in_its_capture_region(runs):
    _, summary, _ = runs["nsys"]
    attribution = summary["kernel_attribution"]
    assert attribution["graph_replayed_ns"] > 0
    assert attribution["graph_by_capture_ns"] == attribution["graph_replayed_ns"]  # 100% placed
    regions = {r["name"]: r for r in summary["regions"]}
    head = regions["hf.lm_head"]
    # nsys stats' rule keeps only the eager launches; the views add the 60 replays captured inside it
    assert head["gpu_ns"] == head["gpu_kernel_ns"] + head["gpu_graph_ns"]
    assert head["gpu_ns"] > 15 * head["gpu_kernel_ns"]


def test_a_replay_matches_an_eager_forward_region_by_region(runs):
    _, summary, _ = runs["nsys"]
    steady = summary["steady"]
    assert (steady["unit"], steady["steps"], steady["counted"]) == ("hf.step", EAGER + REPLAYS, REPLAYS)
    assert steady["excluded"]["warmup"]["steps"] == EAGER  # the eager steps before the first replay
    assert steady["excluded"]["capture"]["range_names"] == ["hf.capture"]
    per_step = {r["name"]: r for r in steady["regions"]}
    assert "hf.capture" not in per_step  # it only wraps the capture: on the capture's own line
    eager = {r["name"]: r["gpu_kernel_ns"] / EAGER for r in summary["regions"]}  # launch rule: eager only
    for name in ("hf.lm_head", "hf.block.0.attn", "hf.block.5.mlp", "hf.forward"):
        assert (
            per_step[name]["host_mean_ns"] == 0
            and per_step[name]["graph"]
            and per_step[name]["gpu_mean_ns"] > 0
        )
    # lm_head's GEMM: 419 µs a replay, 422 µs an eager forward (the mean of the three, the first one cold)
    assert per_step["hf.lm_head"]["gpu_mean_ns"] == pytest.approx(eager["hf.lm_head"], rel=0.03)
    assert per_step["hf.forward"]["gpu_mean_ns"] == pytest.approx(eager["hf.forward"], rel=0.10)
    # Every replayed kernel lands in a part: the forward's parts hold (nearly) all of its GPU time per step.
    parts = ["hf.wte", "hf.wpe", "hf.ln_f", "hf.lm_head"] + [f"hf.block.{i}" for i in range(12)]
    held = sum(per_step[p]["gpu_mean_ns"] for p in parts if p in per_step)
    assert 0.95 * per_step["hf.forward"]["gpu_mean_ns"] <= held <= per_step["hf.forward"]["gpu_mean_ns"]


def test_show_and_the_dashboard_say_so(runs):
    out, _, html = runs["nsys"]
    lines = out.splitlines()
    assert lines[2].startswith("steady state, per hf.step (60 of 63 steps)")
    top = lines[lines.index(next(line for line in lines if line.startswith("top kernels"))) + 4]
    assert "cutlass::Kernel2" in top and "hf.lm_head" in top  # the GEMM under lm_head, not under hf.step
    assert "GPU ms w/ graphs" in out
    assert "GPU kernel time (CUDA-graph replays where captured)" in html and 'id="steady"' in html


def test_torch_profiler_steps_and_capture(runs):
    out, summary, _ = runs["torch"]
    steps, steady = summary["steps"], summary["steady"]
    assert (steps["kind"], steps["count"]) == ("profiler", EAGER + REPLAYS)
    # the ProfilerStep holding the capture (found by its runtime calls) and the eager warm-up are left out
    assert steady["excluded"]["capture"]["steps"] == 1 and steady["excluded"]["warmup"]["steps"] == EAGER
    assert steady["counted"] == REPLAYS - 1
    assert "rollover" not in out and "decode step" not in out
    assert any("torch does not record where graph nodes were captured" in w for w in summary["warnings"])


def test_the_engine_profilers_start_is_left_out_of_itl(runs):
    out, summary, _ = runs["engine"]
    left = summary["spikes"]["left_out"]["profiler"]
    assert left["tokens"] == 8  # the batch's tokens whose gap holds the profiler's first recorded instant
    assert summary["itl"]["count"] == summary["spikes"]["tokens"] == 568 - 8
    assert "ITL figures leave out 8 token(s)" in " ".join(out.split())
    for cause in summary["spikes"]["causes"]:
        assert cause["added_total_ms"] > 0 and cause["evidence"]  # each cause with what took the time
