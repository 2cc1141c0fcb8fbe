"""Loops made array operations for the 1M-kernel run (issue 43), each against the loop it replaced as the oracle:
the range tree (pointer jumping, analysis/ranges.build_tree), the GPU's idle time per step (busy time before each
window bound, sections/steps.gpu_idle_per_step) and per-key percentiles (stats.group_percentiles), to the bit."""

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from roseprof.analysis.gpu_time import union_by_group
from roseprof.analysis.ranges import build_tree, innermost_range
from roseprof.analysis.sections.operators import CPU_OP, _nest
from roseprof.analysis.sections.steps import gpu_idle_per_step
from roseprof.analysis.stats import by_key_then_value, group_percentiles, stable_order, unique_rows
from roseprof.render.step_figures import _binned, _bins
from tests.roseprof.test_stream_time import union_ns

TORCH = Path(__file__).parent.parent / "data" / "torch"


def _stack_tree(start, end, tid):
    """The range tree as a stack of open ranges finds it (build_tree before it jumped pointers): the oracle."""
    parent = np.full(len(start), -1, dtype=np.int64)
    depth = np.zeros(len(start), dtype=np.int64)
    stack, cur = [], None
    for i in range(len(start)):
        if tid[i] != cur:
            stack, cur = [], tid[i]
        while stack and end[stack[-1]] < end[i]:
            stack.pop()
        if stack:
            parent[i], depth[i] = stack[-1], len(stack)
        stack.append(i)
    return parent, depth


@pytest.mark.parametrize("seed", range(40))
def test_the_range_tree_is_the_stacks(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 80))
    tid = rng.integers(0, 3, n)
    start = rng.integers(0, 60, n)
    end = start + rng.integers(0, 40, n)  # nested, overlapping, equal and empty ranges alike
    order = np.lexsort((-end, start, tid))  # NsysTrace's order: (tid, start, end descending)
    tid, start, end = tid[order], start[order], end[order]
    tree = build_tree(start, end, tid)
    parent, depth = _stack_tree(start, end, tid)
    assert np.array_equal(tree.parent, parent)
    assert np.array_equal(tree.depth, depth)
    children = np.zeros(n, dtype=np.int64)
    np.add.at(children, parent[parent >= 0], (end - start)[parent >= 0])
    assert np.array_equal(tree.self_ns, end - start - children)


def _idle_loop(rows, start, end):
    """GPU idle time per step window as the loop over windows found it: the oracle."""
    starts = np.asarray(rows["start_ns"], dtype=np.int64)
    bounds = np.append(starts, starts[-1] + np.asarray(rows["dur_ns"])[-1])
    order = np.argsort(start)
    s, e = start[order], np.maximum.accumulate(end[order])
    new = np.ones(len(s), dtype=bool)
    new[1:] = s[1:] > e[:-1]
    grp = np.cumsum(new) - 1
    bs, be = s[new], np.zeros(new.sum(), dtype=np.int64)
    np.maximum.at(be, grp, e)
    idle = []
    for i in range(len(starts)):
        lo, hi = bounds[i], bounds[i + 1]
        a, b = np.searchsorted(be, lo, side="right"), np.searchsorted(bs, hi, side="left")
        idle.append(int(hi - lo - np.clip(np.minimum(be[a:b], hi) - np.maximum(bs[a:b], lo), 0, None).sum()))
    return idle


@pytest.mark.parametrize("seed", range(30))
def test_gpu_idle_per_step_is_the_loops(seed):
    rng = np.random.default_rng(seed)
    n_steps, n_ops = int(rng.integers(2, 30)), int(rng.integers(1, 200))
    starts = np.cumsum(rng.integers(0, 100, n_steps))  # steps that touch, gaps and empty ones alike
    rows = {"start_ns": starts.tolist(), "dur_ns": rng.integers(0, 100, n_steps).tolist()}
    start = rng.integers(-50, int(starts[-1]) + 150, n_ops)  # ops before, across and after the windows
    end = start + rng.integers(0, 60, n_ops)
    trace = SimpleNamespace(ops=SimpleNamespace(start=start, end=end))
    assert gpu_idle_per_step(rows, trace) == _idle_loop(rows, start, end)


@pytest.mark.parametrize("seed", range(30))
def test_group_percentiles_are_numpys_per_group(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 300))
    keys = rng.integers(-1, int(rng.integers(1, 25)), n)
    values = rng.integers(0, 1000, n) if seed % 2 else rng.lognormal(5.0, 2.0, n)
    qs = (5, 50, 95, 99, 0, 100)
    got = group_percentiles(keys, values, qs)
    expected = {int(k): [float(np.percentile(values[keys == k], q)) for q in qs] for k in np.unique(keys)}
    assert got == expected and list(got) == list(expected)


@pytest.mark.parametrize("seed", range(20))
def test_group_percentiles_of_ns_by_group_index_are_numpys(seed):
    # The import's case: group indices 0.. and integer ns (sorted as one code a pair), timestamps' sizes included.
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 400))
    keys = rng.integers(0, int(rng.integers(1, 40)), n)
    values = rng.integers(0, [1000, 1 << 40][seed % 2], n, dtype=np.int64)
    qs = (50, 99, 0, 100, 37.5)
    got = group_percentiles(keys, values, qs)
    expected = {int(k): [float(np.percentile(values[keys == k], q)) for q in qs] for k in np.unique(keys)}
    assert got == expected and list(got) == list(expected)


@pytest.mark.parametrize("seed", range(24))
def test_sortingby_key_then_value_is_lexsorts(seed):
    # codes where they fit (small, timestamp-sized values), lexsort where they would not (2^61) or cannot (a key of
    # -1, a float value)
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 300))
    keys = rng.integers(-1 if seed % 4 == 3 else 0, int(rng.integers(1, 40)), n)
    values = rng.integers(0, [1000, 1 << 40, 1 << 61][seed % 3], n, dtype=np.int64)
    if seed % 8 == 5:
        values = values.astype(np.float64) / 3
    order = np.lexsort((values, keys))
    k, v = by_key_then_value(keys, values)
    assert np.array_equal(k, keys[order]) and np.array_equal(v, values[order].astype(np.float64))
    assert v.dtype == np.float64


@pytest.mark.parametrize("n", [1, 7, 9, 1500, 1501, 12_780, 40_000])
def test_step_bins_are_a_call_a_bin(n):
    # the dashboard's per-step bars (render/step_figures._binned): the same floats, byte for byte, as np.mean / np.max of
    # each bin's slice, which the page's JSON holds
    rng = np.random.default_rng(n)
    edges = _bins(n)
    for values in (rng.lognormal(10.0, 3.0, n), rng.integers(0, 10**9, n), rng.random(n) > 0.5):
        for how in (np.mean, np.max):
            v = np.asarray(values, dtype=np.float64)
            expected = np.array([how(v[a:b]) if b > a else 0.0 for a, b in zip(edges[:-1], edges[1:])])
            assert _binned(values, edges, how).tobytes() == expected.tobytes()


def _innermost_by_masks(start, end, tid, tree, q_start, q_end, q_tid):
    """innermost_range as it was (every call climbed each round, by masks): the oracle."""
    out = np.full(len(q_start), -1, dtype=np.int64)
    for t in np.unique(q_tid):
        qi = np.flatnonzero(q_tid == t)
        ri = np.flatnonzero(tid == t)
        if len(ri) == 0:
            continue
        pos = np.searchsorted(start[ri], q_start[qi], side="right") - 1
        cand = np.where(pos >= 0, pos + ri[0], -1)
        for _ in range(int(tree.depth[ri].max()) + 1):
            bad = cand >= 0
            bad[bad] = end[cand[bad]] < q_end[qi][bad]
            if not bad.any():
                break
            cand[bad] = tree.parent[cand[bad]]
        out[qi] = cand
    return out


@pytest.mark.parametrize("seed", range(30))
def test_the_innermost_range_is_the_masks(seed):
    rng = np.random.default_rng(seed)
    n, q = int(rng.integers(0, 60)), int(rng.integers(1, 80))
    tid = rng.integers(0, 3, n)
    start = rng.integers(0, 60, n)
    end = start + rng.integers(0, 40, n)
    order = np.lexsort((-end, start, tid))
    tid, start, end = tid[order], start[order], end[order]
    tree = build_tree(start, end, tid)
    q_start = rng.integers(-5, 100, q)
    q_end = q_start + rng.integers(0, 20, q)
    q_tid = (
        rng.integers(0, 4, q) if seed % 2 else np.full(q, int(rng.integers(0, 3)))
    )  # one thread or several
    got = innermost_range(start, end, tid, tree, q_start, q_end, q_tid)
    assert np.array_equal(got, _innermost_by_masks(start, end, tid, tree, q_start, q_end, q_tid))


@pytest.mark.parametrize("seed", range(30))
def test_unique_rows_are_numpys(seed):
    # columns of ids in [-1, n): few distinct values (counted) and many over a large n (the codes sorted)
    rng = np.random.default_rng(seed)
    n_rows, n_values = int(rng.integers(1, 500)), [5, 300, 1 << 19][seed % 3]
    columns = [
        rng.integers(-1, int(rng.integers(0, n_values)) + 1, n_rows) for _ in range(int(rng.integers(1, 4)))
    ]
    rows, inverse = unique_rows(columns, n_values)
    expected, expected_inverse = np.unique(np.stack(columns, axis=1), axis=0, return_inverse=True)
    assert np.array_equal(rows, expected) and rows.dtype == expected.dtype
    assert np.array_equal(inverse, expected_inverse.ravel())


@pytest.mark.parametrize("n", [1, 300, 1 << 16, (1 << 16) + 1, 1 << 20, -1])
def test_stable_order_is_argsorts(n):
    rng = np.random.default_rng(abs(n))
    ids = rng.integers(0, n, 5000) if n > 0 else rng.integers(-3, 3, 5000)  # 16 bits, over, negative
    assert np.array_equal(stable_order(ids), np.argsort(ids, kind="stable"))


@pytest.mark.parametrize("seed", range(20))
def test_union_by_group_is_the_covered_ns(seed):
    # summed by bincount in float64 (exact below 2^53 ns in all), else by np.add.at: the union's ns either way
    rng = np.random.default_rng(seed)
    n, groups = int(rng.integers(1, 200)), int(rng.integers(1, 6))
    scale = 1 if seed % 4 else 1 << 52  # the last: sums past 2^53
    group = rng.integers(0, groups, n)
    start = rng.integers(0, 100, n) * scale
    end = start + rng.integers(0, 30, n) * scale
    expected = [
        len(set().union(*[range(s // scale, e // scale) for s, e in zip(start[group == g], end[group == g])]))
        * scale
        for g in range(groups)
    ]
    assert union_by_group(group, start, end, groups).tolist() == expected


# -- edge cases of the replacements (review of issue 43's speed work): each against the code it replaced ----------


@pytest.mark.parametrize(
    "keys,values",
    [
        ([3], [7]),  # one element
        ([0, 0, 0, 0], [5, 5, 5, 5]),  # all tied
        ([2, 1, 2, 1], [0, 0, 0, 0]),  # values all zero: base 1, the code is the key
        # (max key + 1) * (max value + 1) = 2^62: just out of the codes
        ([1, 0, 1], [(1 << 61) - 1, 0, 1 << 60]),
        ([0, 0, 1], [(1 << 61) - 2, 3, 0]),  # 2 * (2^61 - 1) < 2^62: the codes, at their largest
        # unsigned, past int64
        (np.array([1, 0, 1], dtype=np.uint8), np.array([9, 2**63 + 5, 4], dtype=np.uint64)),
        ([1, 0, 1, 0], [np.nan, 2.0, 1.0, np.nan]),  # NaN sorts last, as lexsort puts it
    ],
)
def test_sorting_by_key_then_value_at_the_edges_is_lexsorts(keys, values):
    keys, values = np.asarray(keys), np.asarray(values)
    order = np.lexsort((values, keys))
    k, v = by_key_then_value(keys, values)
    assert np.array_equal(k, keys[order])
    assert np.array_equal(v, values[order].astype(np.float64), equal_nan=True)


def test_percentiles_of_one_value_and_of_none():
    assert group_percentiles(np.array([4]), np.array([10]), (50, 99)) == {4: [10.0, 10.0]}
    assert group_percentiles(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)) == {}


@pytest.mark.parametrize("seed", range(10))
def test_union_by_group_near_the_readers_time_bound_with_many_groups(seed):
    # timestamps up to 2^60 ns (the readers keep times within 2^62 ns of the trace's start) in up to 40 groups:
    # shifting each group by whole spans would pass int64, so the union runs on ranks; the ns are exact
    rng = np.random.default_rng(seed)
    n, groups = int(rng.integers(1, 300)), int(rng.integers(8, 40))
    group = rng.integers(0, groups, n)
    start = rng.integers(0, 1 << 60, n)
    end = start + rng.integers(0, 1 << 40, n) * int(rng.integers(0, 2))  # sometimes every interval empty
    end[::7] = start[::7] - 5  # an end before its start covers nothing
    covered = np.maximum(end, start)
    # the union by hand, in Python ints (sorted and merged)
    expected = [union_ns(start[group == g], covered[group == g]) for g in range(groups)]
    assert union_by_group(group, start, end, groups).tolist() == expected


@pytest.mark.parametrize(
    "group,start,end",
    [
        # five groups of 2^61 ns each: their total passes 2^63 (an int64 sum of them wrapped negative)
        ([0, 1, 2, 3, 4], [-(1 << 60)] * 5, [(1 << 60) - 1] * 5),
        # two groups at the readers' bound, each just below 2^63 ns
        ([0, 1], [-(1 << 62)] * 2, [(1 << 62) - 1] * 2),
    ],
)
def test_union_by_group_whose_groups_add_up_past_int64(group, start, end):
    group, start, end = (np.array(v, dtype=np.int64) for v in (group, start, end))
    expected = [int(e) - int(s) for s, e in zip(start, end)]
    assert union_by_group(group, start, end, len(group)).tolist() == expected


def test_union_by_group_of_int32_group_ids_is_that_of_int64_ones():
    # group ids as int32 (a caller's bincount or searchsorted on a 32-bit build): their product with the span must
    # not wrap in int32
    group = np.array([0, 3, 3], dtype=np.int32)
    start, end = np.array([0, 0, 10**9], dtype=np.int64), np.array([10**9, 10**9, 3 * 10**9], dtype=np.int64)
    assert union_by_group(group, start, end, 4).tolist() == [10**9, 0, 0, 3 * 10**9]


def test_union_by_group_of_one_and_of_touching_intervals():
    # one interval; intervals that touch ([0, 5) and [5, 9)) and one inside another; an empty group; none at all
    assert union_by_group(np.array([0]), np.array([100]), np.array([130]), 1).tolist() == [30]
    group, start, end = np.array([1, 1, 1]), np.array([0, 5, 6]), np.array([5, 9, 7])
    assert union_by_group(group, start, end, 3).tolist() == [0, 9, 0]
    none = np.zeros(0, np.int64)
    assert union_by_group(none, none, none, 2).tolist() == [0, 0]


def test_unique_rows_of_one_row_and_of_one_column():
    for columns in ([np.array([4]), np.array([-1])], [np.array([2, -1, 2, 0])]):
        rows, inverse = unique_rows(columns, 5)
        expected, expected_inverse = np.unique(np.stack(columns, axis=1), axis=0, return_inverse=True)
        assert np.array_equal(rows, expected) and np.array_equal(inverse, expected_inverse.ravel())


def test_stable_order_of_none_and_of_ties():
    assert stable_order(np.zeros(0, dtype=np.int64)).tolist() == []
    ties = np.array([3, 1, 3, 1, 3, (1 << 16) - 1])
    assert np.array_equal(stable_order(ties), np.argsort(ties, kind="stable"))


def _whole_trace_nest(start, end, tid, launch_t, launch_tid, launch_ns):
    """The operators' nesting sweep over the whole trace's lists at once (sections/operators._nest before it made
    each thread's lists for its own sweep): the oracle."""
    n = len(start)
    child_ns, self_dev, dev = [0] * n, [0] * n, [0] * n
    starts, ends = start.tolist(), end.tolist()
    launch_at, launch_dur = launch_t.tolist(), launch_ns.tolist()
    launches = {}
    for t in np.unique(launch_tid).tolist():
        li = np.flatnonzero(launch_tid == t)
        launches[t] = li[np.argsort(launch_t[li], kind="stable")].tolist()
    for t in np.unique(tid).tolist():
        oi = np.flatnonzero(tid == t)
        oi = oi[np.lexsort((-end[oi], start[oi]))].tolist()
        li = launches.get(t, [])
        stack, j = [], 0
        for i in oi + [None]:
            at = starts[i] if i is not None else None
            while j < len(li) and (at is None or launch_at[li[j]] < at):
                lt = launch_at[li[j]]
                while stack and ends[stack[-1]] <= lt:
                    stack.pop()
                if stack:
                    self_dev[stack[-1]] += launch_dur[li[j]]
                    for s in stack:
                        dev[s] += launch_dur[li[j]]
                j += 1
            if i is None:
                break
            while stack and ends[stack[-1]] <= at:
                stack.pop()
            if stack:
                child_ns[stack[-1]] += ends[i] - starts[i]
            stack.append(i)
    return tuple(np.array(v, dtype=np.int64) for v in (child_ns, self_dev, dev))


@pytest.mark.parametrize("seed", range(40))
def test_the_operators_sweep_a_thread_at_a_time_is_the_whole_traces(seed):
    rng = np.random.default_rng(seed)
    n, m = int(rng.integers(0, 80)), int(rng.integers(0, 60))
    tid = rng.integers(0, 4, n)
    start = rng.integers(0, 60, n)
    end = start + rng.integers(0, 40, n)  # nested, overlapping, equal and empty operators alike
    launch_tid = rng.integers(0, 5, m)  # a thread with launches and no operators too
    launch_t = rng.integers(0, 100, m)
    launch_ns = rng.integers(1, 1000, m)
    got = _nest(start, end, tid, launch_t, launch_tid, launch_ns)
    want = _whole_trace_nest(start, end, tid, launch_t, launch_tid, launch_ns)
    for g, w in zip(got, want):
        assert g.dtype == np.int64 and np.array_equal(g, w)


def test_the_operators_sweep_of_a_real_trace_is_the_whole_traces():
    """HTA's V100 trace (Kineto, 2 threads with operators), as the operators section calls it."""
    from roseprof.drivers.torch.reader import read_kineto

    path = TORCH / "facebookresearch__HolisticTraceAnalysis__rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"
    trace = read_kineto(path, path.parent, path.name)
    h, ops = trace.host_events, trace.ops
    sel = np.flatnonzero(h.kind == CPU_OP)
    launched = np.flatnonzero(ops.api_tid >= 0)
    args = (h.start[sel], h.end[sel], h.tid[sel], ops.api_start[launched], ops.api_tid[launched],
            (ops.end - ops.start)[launched])  # fmt: skip
    got, want = _nest(*args), _whole_trace_nest(*args)
    assert len(sel) > 10_000 and got[2].sum() > 0
    for g, w in zip(got, want):
        assert np.array_equal(g, w)
