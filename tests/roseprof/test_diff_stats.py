"""The diff's statistics on synthetic samples: no capture needed, every number known in advance."""

import numpy as np
import pytest

from roseprof.analysis import bootstrap, stats
from roseprof.analysis.diff import compare, gate, kernel_changes, rank
from roseprof.analysis.noise_floor import NoiseFloor
from roseprof.analysis.samples import prepare
from roseprof.analysis.sections import SECTIONS
from roseprof.analysis.verdict import verdict
from roseprof.model import Names, Tool, Trace


def run_data(step_ns, rollovers=None, itl_ms=None, regions=None):
    """A run whose decode steps took step_ns (and whose tokens came at itl_ms, one request per step)."""
    n = len(step_ns)
    rows = {
        "start_ns": np.cumsum([0, *step_ns[:-1]]).tolist(),
        "dur_ns": list(step_ns),
        "rollovers": list(rollovers if rollovers is not None else [0] * n),
        "index": list(range(n)),
    }
    for name, values in (regions or {}).items():
        rows[f"region:{name}"] = list(values)
    steps = {"regions": list(regions or {}), "rows": rows}
    itl = None
    if itl_ms is not None:
        itl = [
            {
                "id": 0,
                "itl_ms": list(itl_ms),
                "rollover": [False] * len(itl_ms),
                "step": list(range(len(itl_ms))),
            }
        ]
    return prepare({"regions": []}, steps, itl, Trace(Tool("test", "0"), names=Names()), SECTIONS)


def by_name(metrics):
    return {m["name"]: m for m in metrics}


# These synthetic runs test the intervals and the gate, not the floors: one run a side is judged against the CPU
# group floors (10% for step time). The floors one run a side gets by default are tested in test_diff_trust.py.
GROUP_FLOOR = NoiseFloor("cpu")


def test_identical_runs_change_nothing():
    rng = np.random.default_rng(1)
    steps = (1e6 + rng.normal(0, 2e4, 200)).tolist()
    m = by_name(compare(run_data(steps), run_data(steps)))
    assert m["steps.p50_ns"]["delta_pct"] == 0
    assert not any(x["significant"] for x in m.values())
    assert gate(list(m.values()), 0.0, None) == []


def test_a_doubled_step_time_is_significant_and_gated():
    rng = np.random.default_rng(2)
    a = (1e6 + rng.normal(0, 2e4, 100)).tolist()
    b = (2e6 + rng.normal(0, 2e4, 100)).tolist()
    metrics = compare(run_data(a), run_data(b), floor=GROUP_FLOOR)
    m = by_name(metrics)["steps.p50_ns"]
    assert m["delta_pct"] == pytest.approx(100, abs=5)
    assert m["significant"] and m["ci_low_pct"] > 50 and m["ci_high_pct"] < 150
    assert "steps.p50_ns" in [r["name"] for r in gate(metrics, 10.0, None)]
    # Over the threshold only: +100% does not trip a 150% gate; no threshold never gates.
    assert gate(metrics, 150.0, None) == []
    assert gate(metrics, None, None) == []
    # A faster run is no regression.
    assert gate(compare(run_data(b), run_data(a)), 10.0, None) == []


def test_the_gate_looks_only_at_the_named_metrics():
    a = [1e6] * 50 + [1.1e6] * 50
    b = [2e6] * 50 + [2.1e6] * 50
    metrics = compare(run_data(a), run_data(b), floor=GROUP_FLOOR)
    assert [r["name"] for r in gate(metrics, 10.0, ["steps.mean_ns"])] == ["steps.mean_ns"]
    assert gate(metrics, 10.0, ["itl.*"]) == []


def test_too_few_steps_get_no_interval():
    m = by_name(compare(run_data([1e6] * 4), run_data([3e6] * 4)))["steps.p50_ns"]
    assert m["delta_pct"] == pytest.approx(200)
    assert m["ci_low_pct"] is None and not m["significant"]


def test_per_step_region_metric_and_ranking():
    a = run_data([1e6] * 20, regions={"r": [1e5] * 10 + [1.2e5] * 10})
    b = run_data([1e6] * 20, regions={"r": [3e5] * 10 + [3.2e5] * 10})
    metrics = rank(compare(a, b))
    first = metrics[0]
    assert first["significant"] and first["name"].startswith("steps.normal.regions")
    assert all(not m["significant"] for m in metrics if m["name"].startswith("steps.p"))


def test_metrics_are_ranked_by_evidence_then_size():
    # A change first; then a move whose interval excludes 0 inside the floor, however small; then intervals
    # that hold 0 (even -93%); figures with no interval last.
    def m(name, delta, lo=None, hi=None, significant=False):
        return {
            "name": name,
            "delta_pct": delta,
            "ci_low_pct": lo,
            "ci_high_pct": hi,
            "significant": significant,
        }

    metrics = [
        m("per-run total", -95.0),
        m("wide", -93.2, -99.8, 157.0),
        m("itl", -5.2, -8.5, -1.7),
        m("step", 30.0, 20.0, 40.0, significant=True),
        m("small wide", 2.0, -5.0, 9.0),
        m("kernel", -11.6, -14.0, -9.2),
    ]
    assert [x["name"] for x in rank(metrics)] == [
        "step",
        "kernel",
        "itl",
        "wide",
        "small wide",
        "per-run total",
    ]


def test_kernel_changes_name_new_and_vanished():
    a, b = run_data([1e6] * 5), run_data([1e6] * 5)
    a.kernel_durations = {"gemm": np.array([10.0]), "old": np.array([5.0, 5.0])}
    b.kernel_durations = {"gemm": np.array([10.0]), "new": np.array([20.0])}
    a.kernel_own, b.kernel_own = (
        a.kernel_durations,
        b.kernel_durations,
    )  # nothing overlaps: own time = duration
    changes = kernel_changes(a, b)
    assert changes["new"] == [("new", 4.0)] and changes["vanished"] == [("old", 2.0)]


def test_resampled_is_seeded_and_bounded():
    values = np.arange(100, dtype=float)
    r1 = bootstrap.resampled(values, np.mean, np.random.default_rng(0))
    r2 = bootstrap.resampled(values, np.mean, np.random.default_rng(0))
    assert len(r1) == bootstrap.RESAMPLES and np.array_equal(r1, r2)
    assert values.min() <= r1.min() and r1.max() <= values.max()
    assert len(bootstrap.resampled(np.ones(20_001), np.mean, np.random.default_rng(0))) == 200


def test_clustered_resampling_keeps_clusters_together():
    # Two clusters of identical values: any resample's mean is one of three values.
    values = np.array([1.0, 1.0, 1.0, 3.0, 3.0, 3.0])
    clusters = np.array([0, 0, 0, 1, 1, 1])
    out = bootstrap.clustered(values, clusters, np.mean, np.random.default_rng(0))
    assert set(np.round(out, 6)) <= {1.0, 2.0, 3.0}


def test_interval_of_relative_change():
    ra = np.full(1000, 100.0)
    rb = np.linspace(110, 130, 1000)
    lo, hi = bootstrap.interval(ra, rb)
    assert 10 < lo < 11 and 29 < hi < 30
    assert bootstrap.interval(np.zeros(10), np.ones(10)) is None


def test_group_percentiles_match_numpy():
    keys = np.array([2, 1, 2, 1, 2])
    values = np.array([5.0, 1.0, 7.0, 3.0, 6.0])
    out = stats.group_percentiles(keys, values)
    assert out[1] == [np.percentile([1, 3], 50), np.percentile([1, 3], 99)]
    assert out[2][0] == 6.0


def drifting_group(means, seed, n=150, noise=0.01):
    """Runs of identical code on a machine whose speed drifts between runs: each run's steps scatter by
    `noise` around its own mean."""
    rng = np.random.default_rng(seed)
    return [run_data((m * 1e6 * (1 + rng.normal(0, noise, n))).tolist()) for m in means]


def test_one_run_a_side_is_the_within_run_method():
    from roseprof.analysis.diff import method

    rng = np.random.default_rng(3)
    a = run_data((1e6 + rng.normal(0, 2e4, 80)).tolist(), itl_ms=rng.normal(1, 0.02, 80).tolist())
    b = run_data((1.1e6 + rng.normal(0, 2e4, 80)).tolist(), itl_ms=rng.normal(1.1, 0.02, 80).tolist())
    assert compare([a], [b]) == compare(a, b)
    assert "one run a side" in method(1, 1) and "hierarchical" in method(3, 3)


def test_drift_between_runs_is_not_a_regression_for_groups():
    # Same code: the runs' means differ by a few percent (the machine), both groups alike.
    ga = drifting_group([1.00, 1.06, 0.97], seed=4)
    gb = drifting_group([1.05, 0.98, 1.07], seed=5)
    # The within-run method alone (no noise floor) calls the drift a change...
    no_floor = NoiseFloor("cpu", min_effect_pct=0)
    first = by_name(compare(ga[0], gb[0], floor=no_floor))["steps.p50_ns"]
    assert first["significant"] and first["delta_pct"] > 3
    assert gate(compare(ga[0], gb[0], floor=no_floor), 0.0, ["steps.p50_ns"])
    # ... the default noise floor does not (issue 21: a change must matter to be called one).
    first = by_name(compare(ga[0], gb[0]))["steps.p50_ns"]
    assert first["excludes_zero"] and not first["significant"]
    groups = by_name(compare(ga, gb))["steps.p50_ns"]
    assert not groups["significant"]  # the hierarchical interval has the drift in it
    assert groups["ci_low_pct"] < 0 < groups["ci_high_pct"]
    assert gate(compare(ga, gb), 0.0, None) == []


def test_a_real_change_is_still_significant_with_three_runs_a_side():
    ga = drifting_group([1.00, 1.06, 0.97], seed=6)
    gb = drifting_group([2.05, 1.96, 2.10], seed=7)
    metrics = compare(ga, gb)
    m = by_name(metrics)["steps.p50_ns"]
    assert m["significant"] and 90 < m["delta_pct"] < 115
    assert "steps.p50_ns" in [r["name"] for r in gate(metrics, 10.0, None)]


def test_group_totals_are_per_step_over_all_runs_and_time_outside_the_steps_per_run():
    # Region time per step: the time inside the steps over the steps, pooled over the runs. What a region spent
    # outside the steps (warm-up, graph capture) is once a run: a figure per run of its own, not spread over them.
    def runs(outside):
        out = [
            run_data([1e6] * 10, regions={"r": [100.0] * 10}),
            run_data([1e6] * 30, regions={"r": [300.0] * 30}),
        ]
        for r in out:
            r.region_durations = {"r": np.concatenate([r.step_regions["r"], [outside]])}
        return out

    by = by_name(compare(runs(1000.0), runs(5e6)))
    m = by["regions.r.total_ns"]
    assert m["a"] == m["b"] == pytest.approx((10 * 100 + 30 * 300) / 40) and m["per_step"]
    assert m["delta_pct"] == 0 and not m["significant"]
    out = by["regions.r.outside_ns"]
    assert (out["a"], out["b"]) == (1000.0, 5e6) and not out["per_step"] and not out["significant"]


def test_a_start_up_cost_that_moved_is_not_where_the_step_time_moved():
    # The per-step time of every region is the same on both sides; one region's start-up (outside the steps) grew
    # 100x, as cuBLAS's initialisation moved into the lm_head's warm-up (docs/BENCHMARKS.md, session 12).
    rng = np.random.default_rng(0)

    def side(startup):
        out = []
        for _ in range(3):
            per_step = {
                n: rng.normal(us, us * 0.02, 200) * 1e3 for n, us in (("a", 50), ("b", 30), ("c", 20))
            }
            r = run_data([1e6] * 200, regions=per_step)
            r.region_durations = {
                n: np.concatenate([v, [startup if n == "c" else 1e6]]) for n, v in per_step.items()
            }
            out.append(r)
        return out

    metrics = compare(side(1e6), side(1e8))
    v = verdict(metrics, {"id": "a", "runs": ["1", "2", "3"]}, {"id": "b", "runs": ["4", "5", "6"]})
    assert v["moved_most"] is None and not v["regions"]
    assert by_name(metrics)["regions.c.outside_ns"]["delta_pct"] == pytest.approx(9900.0)


def test_hierarchical_resampling_draws_runs_then_clusters():
    # Two runs of constant values: every resample's mean is a mix of whole runs.
    out = bootstrap.hierarchical([np.full(4, 1.0), np.full(6, 3.0)], np.mean, np.random.default_rng(0))
    assert len(out) == bootstrap.RESAMPLES and set(np.round(out, 6)) <= {1.0, 3.0, 2.2}
    # Clusters stay whole inside a run; offsets and scales are summed over the drawn runs.
    values, clusters = np.array([1.0, 1.0, 5.0, 5.0]), np.array([0, 0, 1, 1])
    out = bootstrap.hierarchical(
        [values], np.sum, np.random.default_rng(0), clusters=[clusters], offsets=[2.0], scales=[2.0]
    )
    assert set(np.round(out, 6)) <= {(4 + 2) / 2, (12 + 2) / 2, (20 + 2) / 2}


def test_hierarchical_runs_of_one_length_take_the_vectorised_path():
    out = bootstrap.hierarchical([np.full(5, 1.0), np.full(5, 3.0)], np.mean, np.random.default_rng(0))
    assert set(np.round(out, 6)) == {1.0, 2.0, 3.0}
    out = bootstrap.hierarchical(
        [np.full(5, 1.0), np.full(5, 3.0)],
        np.sum,
        np.random.default_rng(0),
        offsets=[1.0, 1.0],
        scales=[5, 5],
    )
    assert set(np.round(out, 6)) == {1.2, 2.2, 3.2}


def test_three_runs_a_side_keep_false_alarms_under_the_nominal_level():
    # 100 same-code pairs of groups, 3 runs a side, 5% drift between runs: the widened (expanded) hierarchical
    # interval calls at most 5% of them significant (the plain percentile bootstrap over 3 runs: ~19%).
    from roseprof.analysis.diff import Sample, _metric

    rng = np.random.default_rng(11)
    significant = 0
    for trial in range(100):
        a, b = (
            Sample([(1 + rng.normal(0, 0.05)) * (1 + rng.normal(0, 0.05, 64)) for _ in range(3)])
            for _ in range(2)
        )
        significant += _metric("x", a, b, np.mean, rng=np.random.default_rng(trial))["significant"]
    assert significant <= 5


def test_a_large_run_draws_fewer_resamples_and_still_compares():
    """One run of over bootstrap.LARGE_SAMPLE values (a long GPU run's tokens) draws LARGE_RESAMPLES, clustered or not;
    a side under it still compares with it, and a clear change is found. Groups of runs keep RESAMPLES."""
    from roseprof.analysis.diff import Sample, _metric

    rng = np.random.default_rng(3)
    n = bootstrap.LARGE_SAMPLE + 64
    big = Sample([rng.normal(100, 5, n)], clusters=[np.arange(n) // 64])  # 64 tokens a decode step
    small = Sample([rng.normal(130, 5, 640)], clusters=[np.arange(640) // 64])
    assert len(big.resampled(np.median, np.random.default_rng(0))) == bootstrap.LARGE_RESAMPLES
    assert len(small.resampled(np.median, np.random.default_rng(0))) == bootstrap.RESAMPLES
    m = _metric("itl.p50_ms", big, small, np.median, rng=np.random.default_rng(1))
    assert (
        m["significant"] and 25 < m["delta_pct"] < 35 and m["ci_low_pct"] < m["delta_pct"] < m["ci_high_pct"]
    )
    group = Sample([rng.normal(100, 5, n) for _ in range(3)], clusters=[np.arange(n) // 64] * 3)
    assert len(group.resampled(np.median, np.random.default_rng(0))) == bootstrap.RESAMPLES


def test_a_kernels_launches_outside_the_steps_are_a_figure_per_run():
    # The same in-step time on both sides; the kernel's warm-up launches (outside the steps) took 100x longer.
    rng = np.random.default_rng(1)

    def side(warm_up):
        out = []
        for _ in range(3):
            r = run_data([1e6] * 200)
            per_step = rng.normal(40e3, 800, 200)  # [S] ns
            r.kernel_durations = r.kernel_own = {"gemm": np.concatenate([per_step, [warm_up]])}
            r.kernel_steps = {"gemm": (per_step, warm_up)}
            r.kernel_launches = {"gemm": np.ones(200)}
            out.append(r)
        return out

    metrics = compare(side(1e5), side(1e7))
    v = verdict(metrics, {"id": "a", "runs": ["1", "2", "3"]}, {"id": "b", "runs": ["4", "5", "6"]})
    assert not v["kernels"]
    by = by_name(metrics)
    assert by["kernels.gemm.total_ns"]["per_step"] and abs(by["kernels.gemm.total_ns"]["delta_pct"]) < 2
    assert by["kernels.gemm.outside_ns"]["a"] == 1e5 and by["kernels.gemm.outside_ns"]["b"] == 1e7
    # a kernel only one side has is ranked by its time in the steps
    b = side(1e7)[0]
    b.kernel_steps["warm_only"] = (np.zeros(200), 5e8)
    b.kernel_durations["warm_only"] = b.kernel_own["warm_only"] = np.array([5e8])
    assert kernel_changes(side(1e5)[0], b)["new"] == [("warm_only", 0.0)]
