"""Dashboards opened in headless Chromium: every plot drew, no JavaScript error, hostile names stay text."""

import json
import sys

import pytest

from roseprof.drivers.nsys.capture import find_nsys
from roseprof.render.headless import find_chromium
from tests.helpers import DATA, engine_command, roseprof

pytestmark = pytest.mark.browser

HOSTILE = [
    "<img src=x onerror=\"window.__pwned='img'\">",
    "</script><script>window.__pwned='script'</script>",
    "a&b <b>bold</b> \"quoted\" 'single' <!--",
]
HOSTILE_PROGRAM = f"""
import time, nvtx
names = {HOSTILE!r}
for step in range(20):
    with nvtx.annotate("roseinfer.decode_step"):
        for name in names:
            with nvtx.annotate(name):
                time.sleep(0.001)
"""


def _render(tmp_path, name, args):
    traces, dashboards = tmp_path / "traces", tmp_path / "dashboards"
    # options go before the arguments: after `roseprof nsys --` everything belongs to the profiled command
    proc = roseprof(
        args[0], "--name", name, "--traces-dir", traces, "--dashboards-dir", dashboards, *args[1:]
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (path,) = [line.split(": ", 1)[1] for line in proc.stdout.splitlines() if line.startswith("dashboard: ")]
    return path


SOURCES = {
    "cpu-2022.4": ["import", DATA / "nsys" / "cpu-nsys2022.4-nvtx.sqlite"],
    "h100-matmul": ["import", DATA / "nsys" / "h100-nsys2025.3-matmul-nvtx.sqlite"],
    "h100-decode": [
        "import",
        DATA / "nsys" / "h100-nsys2025.3-roseinfer-decode.sqlite",
        "--steplog",
        DATA / "nsys" / "h100-nsys2025.3-roseinfer-decode.steplog.jsonl",
    ],
    # a CUDA-graph program that is not the engine: the steady state per hf.step, graph replays where captured
    "h100-hf-graph": ["import", DATA / "nsys" / "h100-nsys2025.3-hf-graph.sqlite", "--step-range", "hf.step"],
    "ncu-raw": ["import", DATA / "ncu" / "tn-raw.csv"],
    "ncu-public": ["import", DATA / "ncu" / "brycelelbach__nsightful__copy_blocked.csv"],
}


@pytest.fixture(scope="module")
def page():
    if find_chromium() is None:
        pytest.skip("needs Chromium (scripts/install-chromium.sh)")
    from roseprof.render.headless import chromium_page

    with chromium_page() as p:
        yield p


def check_drawn(result, expect_at_least):
    assert result["errors"] == []
    assert result["declared"] >= expect_at_least
    assert len(result["figures"]) == result["declared"]
    for fig in result["figures"]:
        assert fig["drawn"] and fig["traces"] > 0 and fig["points"] > 0, fig


@pytest.mark.parametrize("name", list(SOURCES))
def test_fixture_dashboards_draw(page, tmp_path, name):
    from roseprof.render.headless import load_dashboard

    path = _render(tmp_path, name, SOURCES[name])
    result = load_dashboard(page, path)
    # regions for all; steps, ITL and ITL-spike panels for the decode runs; kernels for the GPU ones; for ncu
    # runs only the kernel views (timeline figures would show the profiler's replays): speed of light and (with
    # the raw page's FLOP rates and peaks) the roofline
    expected = {
        "cpu-2022.4": 3,
        "h100-matmul": 2,
        "h100-decode": 8,
        "h100-hf-graph": 6,
        "ncu-raw": 2,
        "ncu-public": 1,
    }
    check_drawn(result, expected[name])
    if name not in ("ncu-public", "h100-hf-graph"):
        assert "roseinfer" in result["text"]
    if name == "h100-hf-graph":
        assert "Steady state, per hf.step (60 of 63 steps)" in result["text"]
    if name.startswith("ncu"):
        assert "Speed of light" in result["text"] and ("Roofline (DRAM)" in result["text"]) == (
            name == "ncu-raw"
        )
    if name == "ncu-raw":
        # template kernel names are markup-looking text from a real report: shown literally
        assert "vectorized_elementwise_kernel<4, CUDAFunctorOnSelf_add<float>" in result["text"]
    if name == "h100-decode":  # its first decode step is 14x the median: a spike, listed with its regions
        assert "ITL spikes" in result["text"] and "Largest spikes" in result["text"]


@pytest.mark.nsys
def test_fresh_capture_dashboard_draws(page, tmp_path):
    if find_nsys() is None:
        pytest.skip("needs nsys")
    from roseprof.render.headless import load_dashboard

    cmd = engine_command("roseinfer.benchmark_streaming", 3)
    path = _render(tmp_path, "fresh", ["nsys", "--", *cmd])
    result = load_dashboard(page, path)
    check_drawn(result, 5)  # regions, step breakdown, ITL over time, ITL distribution, step distribution
    assert "ITL p50/p95/p99" in result["text"]


@pytest.mark.nsys
def test_hostile_names_are_text_and_never_run(page, tmp_path):
    if find_nsys() is None:
        pytest.skip("needs nsys")
    from roseprof.render.headless import load_dashboard

    prog = tmp_path / "hostile.py"
    prog.write_text(HOSTILE_PROGRAM)
    path = _render(tmp_path, "hostile", ["nsys", "--", sys.executable, str(prog), HOSTILE[0]])
    result = load_dashboard(page, path)
    assert result["errors"] == []
    assert result["pwned"] is None
    assert result["img_x"] == 0
    for name in HOSTILE:
        assert name in result["text"], name  # shown literally (region table)
    summary_names = {
        r["name"]
        for r in json.loads(
            roseprof("show", "hostile", "--json", "--traces-dir", tmp_path / "traces").stdout
        )["regions"]
    }
    assert set(HOSTILE) <= summary_names


def test_telemetry_lane_draws(page, tmp_path):
    """A run with telemetry (as written on a GPU machine) gets the telemetry panel; CPU runs have none."""
    import shutil

    from roseprof.api import open_store, run_view
    from roseprof.render.headless import load_dashboard
    from roseprof.render.run_dashboard import RunDashboard
    from roseprof.run.store import write_json

    traces = tmp_path / "traces"
    assert (
        roseprof(
            "import",
            *SOURCES["h100-decode"][1:],
            "--name",
            "gpu",
            "--traces-dir",
            traces,
            "--dashboards-dir",
            tmp_path / "dashboards",
        ).returncode
        == 0
    )
    run = open_store(traces).resolve("gpu")
    # Samples in the shape TelemetrySampler writes; the values are made up here, only the drawing is tested.
    samples = [
        {
            "t_ns": i * 100_000_000,
            "gpu": 0,
            "sm_clock_mhz": 1980,
            "mem_clock_mhz": 2619,
            "util_pct": 40 + i % 50,
            "mem_util_pct": 10,
            "mem_used_mib": 2000.0 + i,
            "power_w": 150.0 + i,
        }
        for i in range(50)
    ]
    write_json(run.path / "telemetry.json", {"clock": "monotonic_ns", "interval_s": 0.1, "samples": samples})
    out = RunDashboard().render(run_view(run), tmp_path / "gpu.html")
    result = load_dashboard(page, str(out))
    check_drawn(result, 8)
    assert "GPU telemetry" in page.content()
    shutil.rmtree(traces)
