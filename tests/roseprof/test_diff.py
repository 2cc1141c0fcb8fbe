"""`roseprof diff` on the engine's own history: CPU captures of before/after pairs, and a same-code pair."""

import json
import os
import sys

import pytest

from tests.helpers import assert_one_line_error, roseprof, stderr_lines
from tests.roseprof.engine_captures import CAPTURES, capture, copy_store

pytestmark = pytest.mark.nsys


@pytest.fixture(scope="module")
def store(engine_captures, tmp_path_factory):
    """The session's default and slow-append captures (checked as a user sees them where they are made), in this
    module's own store: its tests add captures and dashboards there."""
    return copy_store(engine_captures, tmp_path_factory.mktemp("diff"))


def diff(store, a, b, *args):
    return roseprof(
        "diff", a, b, "--traces-dir", store / "traces", "--dashboards-dir", store / "dashboards", *args
    )


def diff_json(store, a, b):
    proc = diff(store, a, b, "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def _slower_or_inside_floor(row, word):
    """A headline figure reads `word`, or "no clear change" where its interval stays inside its noise floor."""
    return row["word"] == word or (row["word"] == "no clear change" and "noise floor" in row["why"])


def test_an_injected_slowdown_is_found_named_and_gated(store):
    out = diff_json(store, "default", "slow-append")
    # Scripts read these keys: they stay, and the verdict is added.
    assert set(out) >= {"a", "b", "verdict", "method", "metrics", "kernels", "regressions"}
    assert set(out["metrics"][0]) >= {
        "name",
        "a",
        "b",
        "delta_pct",
        "ci_low_pct",
        "ci_high_pct",
        "significant",
    }
    v = out["verdict"]
    # The steps carry the region's +60 ms of CPU beside what the machine's load did to each capture: slower, unless a
    # busier default capture kept the change inside the one-run floor (43 ms steps at load 13: +106% against 110%),
    # which the figure then says. The region is named and gated either way (below).
    rows = {r["label"]: r for r in v["headline"]}
    for label in ("step p50", "ITL p50"):
        assert _slower_or_inside_floor(rows[label], "slower"), rows[label]
    # Figures the sleep does not touch (TTFT, the p99s of a busy machine) may move either way: "mixed" is honest.
    assert v["overall"] in ("slower", "mixed")
    # The region that sleeps is named: first among all metrics (largest significant change) and where time moved.
    assert "roseinfer.kv.append_token" in out["metrics"][0]["name"], out["metrics"][0]
    assert "roseinfer.kv.append_token" in [r["label"] for r in v["regions"]], v["regions"]
    # The gate catches it, on the default metrics and on the region by name.
    for args in ([], ["--metric", "regions.roseinfer.kv.*"]):
        gate = diff(store, "default", "slow-append", "--fail-on-regression", "20", *args)
        assert gate.returncode == 1, gate.stdout
        assert "REGRESSION" in gate.stdout
    # A glob that names no metric (a typo) would gate nothing and pass forever: it is refused, with or beside a
    # glob that does match.
    for args in (
        ["--metric", "regions.roseinfer.kv_*"],
        ["--metric", "regions.roseinfer.kv.*", "--metric", "x"],
    ):
        typo = diff(store, "default", "slow-append", "--fail-on-regression", "20", *args)
        assert typo.returncode == 2 and typo.stdout == "", typo.stdout
        (line,) = typo.stderr.splitlines()
        assert line.startswith(f"roseprof: error: --metric '{args[-1]}' matches none of the "), line
    terminal = diff(store, "default", "slow-append").stdout.splitlines()
    # One run a side: the warning comes first (issue 21), then the answer, which names the region that grew most.
    assert terminal[2].startswith("one run a side:")
    answer = next(line for line in terminal if line.startswith("after is "))
    steps_said = "step p50 +" if rows["step p50"]["word"] == "slower" else "steps: no clear change"
    assert answer.startswith("after is slower ") and steps_said in answer, answer
    # the region the decision names, with its word (issue 44: one decision)
    assert "roseinfer.kv.append_token +" in " ".join(terminal) and "slower (+" in " ".join(terminal)
    # --min-effect replaces the calibrated floors: at 100,000% (1000x) nothing here is a change, nothing is gated.
    high = diff(
        store, "default", "slow-append", "--min-effect", "100000", "--json", "--fail-on-regression", "20"
    )
    assert high.returncode == 0, high.stdout
    floored = json.loads(high.stdout)["verdict"]
    assert {r["label"]: r["word"] for r in floored["headline"]}["step p50"] == "no clear change"
    assert floored["regions"] == [] and "100000% for every metric" in floored["noise_floor"]
    # Read the other way it is faster, and no regression.
    back = diff_json(store, "slow-append", "default")["verdict"]
    assert _slower_or_inside_floor({r["label"]: r for r in back["headline"]}["step p50"], "faster")
    assert diff(store, "slow-append", "default", "--fail-on-regression", "20").returncode == 0


def test_regions_are_judged_by_their_cpu_time(store):
    # Captured under nsys, the regions are on: every decode step of the stored run has each region's CPU time.
    for name in CAPTURES:
        (run,) = [
            p
            for p in (store / "traces").iterdir()
            if p.name.startswith(tuple("0123456789")) and f"-{name}-" in p.name
        ]
        rows = json.loads((run / "steps.json").read_text())["rows"]
        assert rows["cpu_ns"] and all(v > 0 for v in rows["cpu_ns"])
        assert all(v >= 0 for v in rows["cpu:roseinfer.kv.append_token"])
    out = diff_json(store, "default", "slow-append")
    v = out["verdict"]
    assert v["regions"][0]["label"] == "roseinfer.kv.append_token"
    assert v["regions"][0]["own_stat"] == "CPU time, p5 of the steps"
    # +15 ms of CPU time at each of the 4 layers' appends a step. The plant is CPU time, so at the runs' own speed
    # all of it is there; the row's figure is at the before side's speed (diff_metric.CPU_OWN_LOW), which scales it
    # by how much less a CPU second of the after side did: about half, once, beside two burners.
    raw = {m["name"]: m for m in out["metrics"]}["regions.roseinfer.kv.append_token.cpu_own_p5_raw_ns"]
    assert raw["b"] - raw["a"] > 45e6
    assert v["regions"][0]["moved_ns"] > 15e6


def test_a_run_against_itself_is_refused(store):
    # Issue 21: a run diffed against itself shows no change by construction, so it is refused (exit 2), not
    # reported as "no clear change" (this test asserted exit 0 and "no regression" before).
    proc = diff(store, "default", "default", "--fail-on-regression", "0")
    assert_one_line_error(proc, 2, "before and after are the same run")


def test_each_benchmark_run_start_is_marked(store):
    (run,) = [
        p
        for p in (store / "traces").iterdir()
        if p.name.startswith(tuple("0123456789")) and "default" in p.name
    ]
    steps = json.loads((run / "steps.json").read_text())
    starts = steps["run_starts"]
    n = len(steps["rows"]["dur_ns"])
    assert [s["run"] for s in starts] == [0, 1]
    assert starts[0]["step"] == 0 and starts[1]["step"] == n // 2
    assert starts[0]["t_ms"] < starts[1]["t_ms"]


def test_bad_input(store, tmp_path):
    assert_one_line_error(diff(store, "default", "nope"), 2, "no run 'nope'")
    # A failed run is refused unless asked for.
    failed = capture(store, "broken", sys.executable, "-c", "import sys; sys.exit(1)")
    assert failed.returncode == 1
    # The story is the command's, not the trace file's (nor a temporary path), on stderr.
    message = [line for line in failed.stderr.splitlines() if "exited" in line]
    assert message and "the command exited with code 1" in message[0] and ".tmp-" not in failed.stderr
    # It holds nothing: --allow-incomplete would not help, and is not suggested.
    for extra in ((), ("--allow-incomplete",)):
        proc = diff(store, "default", "broken", *extra)
        assert_one_line_error(proc, 2, "holds nothing to compare")
        assert "--allow-incomplete" not in proc.stderr
    # Runs with nothing in common ("other": engine_captures.OTHER, captured with the session's engine runs).
    # An engine run against another program is refused as such (issue 44); forced, nothing is in common.
    assert_one_line_error(diff(store, "default", "other"), 2, "different programs")
    assert_one_line_error(diff(store, "default", "other", "--force"), 2, "nothing in common")


def test_without_plotly_the_diff_gives_its_verdict_and_one_warning(store, tmp_path):
    # The GPU machine has no plotly (it travels as a wheel only when needed): the verdict is the product, the
    # dashboard a warning. It was a traceback.
    hidden = tmp_path / "hide" / "plotly"
    hidden.mkdir(parents=True)
    (hidden / "__init__.py").write_text('raise ImportError("plotly hidden by the test", name="plotly")\n')
    env = {"PYTHONPATH": os.pathsep.join([str(tmp_path / "hide"), os.environ.get("PYTHONPATH", "")])}
    proc = roseprof(
        "diff", "default", "slow-append", "--json", "--traces-dir", store / "traces",
        "--dashboards-dir", tmp_path / "dashboards", env=env,
    )  # fmt: skip
    assert proc.returncode in (0, 1) and "Traceback" not in proc.stderr, proc.stderr
    assert json.loads(proc.stdout)["verdict"]["overall"]
    assert stderr_lines(proc) == ["roseprof: warning: diff dashboard not written (plotly is not installed)"]
