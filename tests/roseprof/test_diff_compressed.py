"""What makes a diff of a large batch's runs take seconds instead of minutes, without changing a figure: the ITL
bootstrap over steps on (latency, count) pairs instead of every token (`bootstrap.compress`), and the one-pass check
of a stored file's long lists of numbers (`run.checks`)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from roseprof.analysis import bootstrap, stats
from roseprof.analysis.diff_metric import metric, sample
from roseprof.run.checks import NUM, Damaged, check

PROPERTY = settings(max_examples=200, derandomize=True, deadline=None, database=None)


@PROPERTY
@given(
    values=st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=1, max_size=30),
    data=st.data(),
    q=st.sampled_from([0, 1, 5, 25, 50, 75, 95, 99, 99.9, 100]),
)
def test_weighted_percentile_is_numpys_on_the_repeated_values_to_the_bit(values, data, q):
    counts = data.draw(st.lists(st.integers(1, 600), min_size=len(values), max_size=len(values)))
    v, c = np.array(values), np.array(counts)
    assert stats.pct(q).weighted(v, c) == np.percentile(np.repeat(v, c), q)


def lock_step_runs(seed: int, n_runs: int = 3, steps: int = 40, batch: int = 64):
    """Token latencies of lock-step decoding: a step's tokens share its latency, a few (new sequences) differ."""
    rng = np.random.default_rng(seed)
    runs, clusters = [], []
    for r in range(n_runs):
        step_ms = rng.normal(1.0 + 0.05 * r, 0.1, size=steps)  # [S]
        values = np.repeat(step_ms, batch)  # [S * B]
        odd = rng.random(len(values)) < 0.02
        values[odd] = rng.normal(2.0, 0.3, size=odd.sum())
        order = rng.permutation(len(values))  # tokens come in request order, not step order
        runs.append(values[order])
        clusters.append(np.repeat(np.arange(steps), batch)[order])
    return runs, clusters


@pytest.mark.parametrize("q", [50, 95, 99])
def test_compressed_steps_draw_the_same_resamples_as_every_token(q):
    runs, clusters = lock_step_runs(seed=q)
    packed = [bootstrap.compress(v, c) for v, c in zip(runs, clusters)]
    assert sum(len(p[0]) for p in packed) < sum(len(v) for v in runs) / 10
    stat = stats.pct(q)
    for runs_fixed in (False, True):
        full = bootstrap.hierarchical(runs, stat, np.random.default_rng(7), clusters, runs_fixed=runs_fixed)
        small = bootstrap.hierarchical(
            [p[0] for p in packed], stat, np.random.default_rng(7), [p[1] for p in packed],
            runs_fixed=runs_fixed, counts=[p[2] for p in packed],
        )  # fmt: skip
        assert np.array_equal(full, small)
    one = bootstrap.clustered(runs[0], clusters[0], stat, np.random.default_rng(3))
    assert np.array_equal(
        one, bootstrap.clustered(*packed[0][:2], stat, np.random.default_rng(3), packed[0][2])
    )


@pytest.mark.parametrize("n_runs", [1, 3])
def test_a_compressed_itl_metric_is_the_token_metric(n_runs):
    a, ca = lock_step_runs(seed=1, n_runs=n_runs)
    b, cb = lock_step_runs(seed=2, n_runs=n_runs)
    b = [v * 1.2 for v in b]
    plain = metric("itl.p50_ms", sample(a, ca), sample(b, cb), stats.pct(50), np.random.default_rng(0), q=50)
    packed = metric(
        "itl.p50_ms", sample(a, ca, compress=True), sample(b, cb, compress=True), stats.pct(50),
        np.random.default_rng(0), q=50,
    )  # fmt: skip
    assert packed == plain and packed["n_a"] == sum(len(v) for v in a) and packed["significant"]


def test_a_compressed_sample_takes_a_statistic_with_no_weighted_form():
    # A mean of compressed values is the mean of the tokens they stand for (to rounding: the sum's order differs).
    a, ca = lock_step_runs(seed=3)
    b, cb = lock_step_runs(seed=4)
    plain = metric("itl.mean_ms", sample(a, ca), sample(b, cb), np.mean, np.random.default_rng(0))
    packed = metric(
        "itl.mean_ms",
        sample(a, ca, compress=True),
        sample(b, cb, compress=True),
        np.mean,
        np.random.default_rng(0),
    )
    for key in ("a", "b", "delta_pct", "ci_low_pct", "ci_high_pct"):
        assert packed[key] == pytest.approx(plain[key], rel=1e-9)
    assert packed["n_a"] == plain["n_a"] == sum(len(v) for v in a)


SCALARS = st.one_of(
    st.integers(-(2**70), 2**70),
    st.integers(2**62 - 600, 2**62 + 600),  # either side of the limit, where a float rounds
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.text(max_size=3),
    st.none(),
)


@PROPERTY
@given(items=st.lists(SCALARS, max_size=12), spec=st.sampled_from([NUM, int, bool, str]))
def test_a_list_is_damaged_where_and_only_where_an_item_is(items, spec):
    # The one-pass check of a list agrees with the item-by-item one, and names the same first bad item.
    first_bad = None
    for i, item in enumerate(items):
        try:
            check(item, spec, f"x[{i}]")
        except Damaged as e:
            first_bad = str(e)
            break
    if first_bad is None:
        check(items, [spec], "x")
    else:
        with pytest.raises(Damaged) as e:
            check(items, [spec], "x")
        assert str(e.value) == first_bad


def test_numbers_beyond_the_limit_are_damage_not_a_crash():
    with pytest.raises(Damaged, match="an integer beyond any float"):
        check([1.5, 10**400], [NUM], "itl_ms")
    with pytest.raises(Damaged, match="step\\[1\\] is 9.22337e\\+18, beyond"):  # a step index beyond int64
        check([1, 2**63 + 5], [int], "step")
    with pytest.raises(Damaged, match="is 1.5e\\+308"):
        check(1.5e308, NUM, "x")
