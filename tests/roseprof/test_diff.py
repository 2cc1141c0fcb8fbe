"""`roseprof diff` on the engine's own history: CPU captures of before/after pairs, and a same-code pair."""

import json
import sys

import pytest

from tests.helpers import assert_one_line_error, roseprof

pytestmark = pytest.mark.nsys

# Equal prompts (16 bytes), so all 64 requests cross a 64-token block boundary in the same step: 6 rollover
# steps in 400 tokens, each with 64 rows x 4 layers that the earlier design sends down the per-request path.
WORKLOAD = [
    sys.executable,
    "-m",
    "roseinfer.benchmark_streaming",
    "--hf-model-id",
    "gpt2-tiny",
    "--num-requests",
    "64",
    "--max-batch-size",
    "64",
    "--prefill-max-batch-size",
    "64",
    "--max-new-tokens",
    "400",
    "--prompt",
    "abcdefghijklmnop",
    "--warmup-runs",
    "0",
    "--repeat-runs",
    "1",
    "--no-stop-on-eos",
]
CAPTURES = {
    "default": [],
    "default-again": [],
    "no-batched-kv-append": ["--no-batched-kv-append"],
    "no-batched-rollover": ["--no-batched-rollover"],
    "no-block-table-cache": ["--no-block-table-cache"],
}


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    from roseprof.drivers.nsys.capture import find_nsys

    if find_nsys() is None:
        pytest.skip("needs nsys")
    root = tmp_path_factory.mktemp("diff")
    for name, flags in CAPTURES.items():
        proc = roseprof(
            "nsys",
            "--name",
            name,
            "--traces-dir",
            root / "traces",
            "--dashboards-dir",
            root / "dashboards",
            "--",
            *WORKLOAD,
            *flags,
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
    return root


def diff(store, a, b, *args):
    return roseprof(
        "diff", a, b, "--traces-dir", store / "traces", "--dashboards-dir", store / "dashboards", *args
    )


def metrics(store, a, b):
    proc = diff(store, a, b, "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert set(out) >= {"a", "b", "metrics", "method"}
    return {m["name"]: m for m in out["metrics"]}


def assert_dropped(m, pct):
    assert m["significant"] and m["delta_pct"] < -pct and m["ci_high_pct"] < 0, m


def test_batched_kv_append_drops_append_time(store):
    m = metrics(store, "no-batched-kv-append", "default")
    assert_dropped(m["regions.roseinfer.kv.append_token.total_ns"], 30)
    # The same change read the other way is a regression the gate catches.
    gate = diff(
        store,
        "default",
        "no-batched-kv-append",
        "--fail-on-regression",
        "20",
        "--metric",
        "regions.roseinfer.kv.*",
    )
    assert gate.returncode == 1, gate.stdout
    assert "REGRESSION" in gate.stdout


def test_batched_rollover_drops_rollover_step_append_time(store):
    m = metrics(store, "no-batched-rollover", "default")
    rollover = m["steps.rollover.regions_p50.roseinfer.kv.append_token"]
    assert_dropped(rollover, 30)
    # Normal steps take the same path in both designs: the change there is smaller.
    normal = m["steps.normal.regions_p50.roseinfer.kv.append_token"]
    assert abs(normal["delta_pct"]) < abs(rollover["delta_pct"])


def test_block_table_cache_drops_build_time(store):
    m = metrics(store, "no-block-table-cache", "default")
    assert_dropped(m["regions.roseinfer.decode_step_sessions.build_block_tables.total_ns"], 20)


def test_same_code_twice_is_not_a_regression(store):
    proc = diff(store, "default", "default-again", "--fail-on-regression", "30")
    assert proc.returncode == 0, proc.stdout
    assert "no regression" in proc.stdout and "dashboard:" in proc.stdout


def test_bad_input(store, tmp_path):
    assert_one_line_error(diff(store, "default", "nope"), 2, "no run 'nope'")
    # A failed run is refused unless asked for.
    failed = roseprof(
        "nsys",
        "--name",
        "broken",
        "--traces-dir",
        store / "traces",
        "--dashboards-dir",
        store / "dashboards",
        "--",
        sys.executable,
        "-c",
        "import sys; sys.exit(1)",
    )
    assert failed.returncode == 1
    assert_one_line_error(diff(store, "default", "broken"), 2, "--allow-incomplete")
    assert_one_line_error(diff(store, "default", "broken", "--allow-incomplete"), 2, "no summary.json")
    # Runs with nothing in common.
    program = "import nvtx, time\nfor _ in range(10):\n    with nvtx.annotate('unrelated.work'):\n        time.sleep(0.001)\n"
    other = roseprof(
        "nsys",
        "--name",
        "other",
        "--traces-dir",
        store / "traces",
        "--dashboards-dir",
        store / "dashboards",
        "--",
        sys.executable,
        "-c",
        program,
    )
    assert other.returncode == 0, other.stderr
    assert_one_line_error(diff(store, "default", "other"), 2, "nothing in common")
