"""The diff's within-run bootstrap drawn once a side (analysis/shared_draws.py): each metric's resamples are a
bootstrap of its own values (sums and means off the counts, percentiles through ranks, to the bit against numpy on
the same draws), its interval agrees with the one-metric-at-a-time bootstrap, and a diff's metrics all get theirs."""

import numpy as np
import pytest

from roseprof.analysis import shared_draws
from roseprof.analysis.diff_metric import Sample, Sides, metric
from roseprof.analysis.run_data import RunData
from roseprof.analysis.stats import pct


def test_sums_and_means_are_those_of_the_drawn_resamples():
    rng = np.random.default_rng(3)
    v = rng.gamma(2.0, 50.0, size=101)
    got = shared_draws.statistics([v, v], ["sum", "mean"], np.random.default_rng(7), 300)
    counts = shared_draws.draw_counts(np.random.default_rng(7), 300, 101)  # the same draws
    resamples = [np.repeat(v, c) for c in counts]  # each resample's values, by how often each was drawn
    assert all(len(r) == 101 for r in resamples)
    np.testing.assert_allclose(got[:, 0], [r.sum() for r in resamples], rtol=1e-12)
    np.testing.assert_allclose(got[:, 1], [r.mean() for r in resamples], rtol=1e-12)


@pytest.mark.parametrize("q", [5, 50, 95, 99])
@pytest.mark.parametrize("n", [7, 100, 257])
def test_a_percentile_is_numpys_on_the_resample_drawn_by_rank(q, n):
    rng = np.random.default_rng(n)
    v = np.round(rng.lognormal(3.0, 1.0, size=n), 1)  # rounded: ties among the values too
    got = shared_draws.statistics([v], [float(q)], np.random.default_rng(11), 200)[:, 0]
    counts = shared_draws.draw_counts(np.random.default_rng(11), 200, n)
    ranked = np.sort(v)
    # unit i drawn c times stands for the i-th smallest value drawn c times
    expected = [np.percentile(np.repeat(ranked, c), q) for c in counts]
    assert np.array_equal(got, expected)


def test_the_median_is_the_50th_percentile():
    v = np.random.default_rng(0).normal(10.0, 2.0, size=64)
    a, b = (shared_draws.statistics([v], [k], np.random.default_rng(1), 100)[:, 0] for k in (50.0, 50.0))
    assert shared_draws.kind_of(np.median) == shared_draws.kind_of(pct(50)) == 50.0
    assert np.array_equal(a, b)


@pytest.mark.parametrize("stat", [np.mean, np.sum, np.median, pct(95)], ids=["mean", "sum", "median", "p95"])
def test_a_shared_interval_agrees_with_the_metric_alone(stat):
    """The same bootstrap, other draws: the interval's ends agree within the resampling's own error."""
    rng = np.random.default_rng(5)
    before = rng.gamma(4.0, 25.0, size=3000)
    after = rng.gamma(4.0, 25.0, size=3000) * 1.03
    alone = metric("m", Sample([before]), Sample([after]), stat, rng=np.random.default_rng(9))
    runs = [RunData({}), RunData({})]
    sides = Sides(runs[:1], runs[1:], np.random.default_rng(9))
    shared = sides.metric("m", Sample([before]), Sample([after]), stat)
    assert shared["ci_low_pct"] is None  # drawn once every family has asked
    sides.intervals()
    width = alone["ci_high_pct"] - alone["ci_low_pct"]
    assert width > 0
    for end in ("ci_low_pct", "ci_high_pct"):
        assert abs(shared[end] - alone[end]) < 0.15 * width
    assert shared["significant"] == alone["significant"]
    assert shared["a"] == alone["a"] and shared["b"] == alone["b"]


def test_every_metric_of_a_side_gets_its_interval_and_offsets_and_scales_apply():
    rng = np.random.default_rng(2)
    steps_a, steps_b = rng.normal(100, 5, size=2400), rng.normal(100, 5, size=2280)
    runs = [RunData({}), RunData({})]
    sides = Sides(runs[:1], runs[1:], np.random.default_rng(0))
    plain = sides.metric("plain", Sample([steps_a]), Sample([steps_b]), np.sum)
    # a total per step: (sum + outside) / steps, as the regions and kernels compare theirs
    per_step = sides.metric(
        "per_step", Sample([steps_a], None, [1e3], [2400.0]), Sample([steps_b], None, [1e3], [2280.0]), np.sum
    )
    p99 = sides.metric("p99", Sample([steps_a]), Sample([steps_b]), pct(99), q=99)
    few = sides.metric("few", Sample([steps_a[:3]]), Sample([steps_b[:3]]), np.mean)  # under MIN_SAMPLES
    assert len(sides.pending) == 3  # `few` has no interval to draw
    sides.intervals()
    assert few["ci_low_pct"] is None and not sides.pending
    for m in (plain, per_step, p99):
        assert m["ci_low_pct"] is not None and m["ci_low_pct"] <= m["ci_high_pct"]
    # the per-step total: about 0 change, its interval around it; the plain sum: the 20 fewer steps, -5%
    assert per_step["ci_low_pct"] < per_step["delta_pct"] < per_step["ci_high_pct"]
    assert plain["significant"] and plain["ci_high_pct"] < 0


def test_below_the_shared_draws_a_metric_draws_its_own_as_before():
    """Runs of the usual size keep their intervals to the bit: each metric draws its own, in the order asked."""
    rng = np.random.default_rng(4)
    n = shared_draws.FROM_UNITS - 1
    a, b = rng.normal(50, 4, size=n), rng.normal(51, 4, size=n)
    gen = np.random.default_rng(21)
    alone = [metric(f"m{i}", Sample([a]), Sample([b]), s, rng=gen) for i, s in enumerate((np.mean, pct(50)))]
    sides = Sides([RunData({})], [RunData({})], np.random.default_rng(21))
    asked = [sides.metric(f"m{i}", Sample([a]), Sample([b]), s) for i, s in enumerate((np.mean, pct(50)))]
    assert not sides.pending
    assert asked == alone
