"""The diff's verdict: the headline figures, their words and how many samples a figure needs to be tested."""

import numpy as np

from roseprof.analysis.bootstrap import MIN_SAMPLES, min_samples
from roseprof.analysis.diff import compare
from roseprof.analysis.noise_floor import NoiseFloor
from roseprof.analysis.verdict import verdict, word
from tests.roseprof.test_diff_stats import run_data

RUNS = {"id": "r1", "name": "before"}, {"id": "r2", "name": "after"}
# The words against the CPU group floors (10% for step time): these tests are about the words and the samples a
# figure needs, not the floors (one run a side's own floors: test_diff_trust.py).
GROUP_FLOOR = NoiseFloor("cpu")


def steps(mean, n, seed):
    return (mean + np.random.default_rng(seed).normal(0, mean / 50, n)).tolist()


def test_the_minimum_samples_leave_a_tail():
    assert min_samples() == min_samples(50) == MIN_SAMPLES
    assert min_samples(95) == 40 and min_samples(99) == 200


def test_a_slower_run_is_called_slower_and_p99_needs_200_steps():
    a, b = (
        run_data(steps(1e6, 100, 1), itl_ms=steps(1.0, 100, 2)),
        run_data(steps(2e6, 100, 3), itl_ms=steps(2.0, 100, 4)),
    )
    v = verdict(compare(a, b, floor=GROUP_FLOOR), *RUNS)
    rows = {r["label"]: r for r in v["headline"]}
    assert v["overall"] == "slower"
    assert rows["step p50"]["word"] == "slower" and rows["ITL p50"]["word"] == "slower"
    assert rows["step p50"]["n_before"] == 100 and rows["step p50"]["samples"] == "steps"
    # 100 steps: the p99 is the slowest one or two of them, so it is not tested however large the change.
    assert rows["step p99"]["word"] == "too few samples" and rows["step p99"]["ci_low_pct"] is None
    assert rows["ITL p99"]["word"] == "too few samples" and rows["ITL p99"]["steps_before"] == 100
    # With 250 steps a run the p99 is tested.
    a, b = run_data(steps(1e6, 250, 5)), run_data(steps(2e6, 250, 6))
    rows = {r["label"]: r for r in verdict(compare(a, b, floor=GROUP_FLOOR), *RUNS)["headline"]}
    assert rows["step p99"]["word"] == "slower"


def test_faster_and_no_clear_change():
    a, b = run_data(steps(2e6, 50, 1)), run_data(steps(1e6, 50, 2))
    assert verdict(compare(a, b, floor=GROUP_FLOOR), *RUNS)["overall"] == "faster"
    same = steps(1e6, 50, 3)
    v = verdict(compare(run_data(same), run_data(same), floor=GROUP_FLOOR), *RUNS)
    assert v["overall"] == "no clear change"
    assert v["before"]["name"] == "before" and v["after"]["name"] == "after"


def test_words_for_figures_without_an_interval():
    plain = {"name": "requests.throughput_tok_s", "delta_pct": 10.0, "ci_low_pct": None, "significant": False}
    assert word(plain) == ("not tested", "one figure per run: nothing to resample")
    few = {**plain, "name": "steps.p99_ns", "min_samples": 200, "n_a": 8, "n_b": 8}
    assert word(few) == ("too few samples", "needs 200 per run")
    # Higher throughput is faster.
    up = {**plain, "ci_low_pct": 5.0, "ci_high_pct": 15.0, "significant": True, "lower_is_better": False}
    assert word(up)[0] == "faster"


def test_where_the_time_moved_is_led_by_own_time():
    """A slower child makes every enclosing region slower too; the region whose own time moved comes first."""

    def total(name, a, b):
        return {
            "name": f"regions.{name}.total_ns",
            "a": a,
            "b": b,
            "delta_pct": 100 * (b - a) / a,
            "ci_low_pct": 1.0,
            "ci_high_pct": 2.0,
            "significant": True,
            "lower_is_better": True,
            "per_step": True,
        }

    def own(name, a, b):
        return {"name": f"regions.{name}.self_ns", "a": a, "b": b, "delta_pct": 0, "significant": False}

    metrics = [
        total("outer", 10e6, 22e6),
        own("outer", 1e6, 1e6),
        total("inner", 2e6, 14e6),
        own("inner", 2e6, 14e6),
    ]
    v = verdict(metrics, *RUNS)
    assert [r["label"] for r in v["regions"]] == ["inner"]
    assert v["regions"][0]["word"] == "slower"


def _region(name, kind, a, b, ci=True):
    m = {"name": f"regions.{name}.{kind}", "a": a, "b": b, "delta_pct": 100 * (b - a) / a, "per_step": True}
    if ci:
        m.update(ci_low_pct=50.0, ci_high_pct=150.0, significant=True, lower_is_better=True)
    else:
        m.update(ci_low_pct=None, ci_high_pct=None, significant=False)
    return m


def test_a_region_around_the_step_is_not_listed_for_its_childrens_time():
    """The step and the scheduler's step around it have no per-step own-time interval; their totals grow with
    everything inside them. Listed as "own time" they misled a newcomer: only the child whose own time moved is."""
    metrics = [
        _region("step", "total_ns", 8.3e6, 11.9e6),
        _region("step", "self_ns", 29e3, 42e3, ci=False),  # own time moved 13 us: 20% of the child's move
        _region("child", "total_ns", 132e3, 243e3),
        _region("child", "self_ns", 132e3, 243e3),
    ]
    v = verdict(metrics, *RUNS)
    assert [r["label"] for r in v["regions"]] == ["child"] and v["regions"][0]["own_time"]


def test_the_words_around_the_verdict():
    from roseprof.render import text, verdict_text

    metrics = [_region("child", "total_ns", 132e3, 243e3), _region("child", "self_ns", 132e3, 243e3)]
    single = {"id": "r1", "name": "a", "runs": ["r1"]}
    group = {"id": "r3", "name": "b", "runs": ["r2", "r3"]}
    v = verdict(metrics, single, group)
    # No headline figure here: the region the decision names is the verdict (issue 44: one decision).
    assert v["overall"] == "slower"
    assert verdict_text.headline_sentence(v).startswith("after is slower — child +84.1% slower (+111.0 µs")
    assert verdict_text.one_run_note(v).startswith(
        "before is one run: the interval sees the drift between runs"
    )
    assert text.value("tok/s", 31360.8) == "31,361 tok/s" and text.value("tok/s", 12.34) == "12.3 tok/s"
    assert text.change(258.0, -99.7, 462780.0) == "+258.0% [-99.7, +462,780]"


def test_the_next_step_compares_the_new_run_as_after():
    from rich.console import Console

    from roseprof.render.progress import print_next

    console = Console(record=True, width=120)
    print_next(console, "new-run", None)
    print_next(console, "new-run", "old-run")
    out = console.export_text()
    assert "roseprof diff <earlier run> new-run" in out and "roseprof diff old-run new-run" in out


def test_a_table_title_names_every_statistic_its_rows_use():
    # A region judged by its wall p5 (one run lacks its CPU times) beside one judged by CPU time: the table says
    # both, not only the first row's.
    from roseprof.render import verdict_text

    cpu = {"own_time": True, "own_stat": "CPU time, p5 of the steps"}
    wall = {"own_time": True, "own_stat": "p5 of the steps"}
    assert verdict_text.what_moved_in([cpu, cpu]) == "p5 own CPU time"
    assert verdict_text.what_moved_in([cpu, wall, cpu]) == "p5 own CPU time / p5 own time"
    assert verdict_text.what_moved_in([{"own_time": False}]) == "time"


def test_the_headline_names_kernels_by_their_base_names_and_keeps_twins_apart():
    """The first line names a kernel as the kernels table does: its base name, not a template's whole signature
    (four lines at 80 columns), with its tag where two instantiations share that name."""
    from roseprof.render import kernel_labels, verdict_text

    def kernel(name, a, b):
        m = _region("x", "total_ns", a, b)
        return {**m, "name": f"kernels.{name}.total_ns"}

    twins = [f"void gemv_kernel<(int){k}>(const __half *, float *, int)" for k in (64, 128)]
    alone = "void at::native::<unnamed>::indexSelectSmallIndex<c10::Half, long>(at::cuda::detail::TensorInfo<T1, T3>)"
    v = verdict([kernel(twins[0], 10e3, 20e3), kernel(twins[1], 10e3, 19e3), kernel(alone, 8e3, 4e3)], *RUNS)
    line = verdict_text.headline_sentence(v)
    assert f"gemv_kernel{kernel_labels.TAG}{kernel_labels.kernel_tag(twins[0])} +100.0% slower" in line
    assert f"gemv_kernel{kernel_labels.TAG}{kernel_labels.kernel_tag(twins[1])} +90.0% slower" in line
    assert "at::native::indexSelectSmallIndex -50.0% faster" in line and "TensorInfo" not in line


def test_a_changed_kernel_whose_base_name_an_unchanged_one_shares_is_tagged_in_every_view():
    """Only one of two instantiations changed: by its base name alone the first line, the kernels table and the new
    and vanished lists could mean either, so each names it with its tag (the unchanged twin is in the runs, not in
    the changed rows)."""
    from roseprof.render import kernel_labels, terminal_diff, verdict_text

    def kernel(name, a, b):
        m = _region("x", "total_ns", a, b)
        return {**m, "name": f"kernels.{name}.total_ns"}

    changed, same = (f"void gemv_kernel<(int){k}>(const __half *, float *, int)" for k in (64, 128))
    came = "void fused_attn_kernel<float, (int)768, true>(const __half *)"
    twin_of_new = "void fused_attn_kernel<__half, (int)768, false>(const __half *)"
    metrics = [kernel(changed, 10e3, 20e3), kernel(same, 10e3, 10e3), kernel(twin_of_new, 5e3, 5e3)]
    v = verdict(metrics, *RUNS, kernels={"new": [(came, 1e3)], "vanished": []})
    assert v["kernel_names"] == sorted([changed, same, came, twin_of_new])
    assert [r["label"] for r in v["kernels"]] == [changed]
    tag = f"gemv_kernel{kernel_labels.TAG}{kernel_labels.kernel_tag(changed)}"
    assert f"{tag} +100.0% slower" in verdict_text.headline_sentence(v)
    assert terminal_diff.kernel_change_lines(v) == [
        f"new kernels: fused_attn_kernel{kernel_labels.TAG}{kernel_labels.kernel_tag(came)}"
    ]
    # Without the runs' other kernels (a verdict of before this field): the changed rows alone, as before.
    old = {k: val for k, val in v.items() if k != "kernel_names"}
    assert "gemv_kernel +100.0% slower" in verdict_text.headline_sentence(old)


def test_sides_captured_with_two_tools_say_so_first():
    """nsys against torch.profiler: each tool's own cost is in its run's times (a CPU demo's forward read +87.9%),
    so the diff says the tools differ before its answer; one tool, or a side without one (an old run), says
    nothing."""
    from roseprof.render import verdict_text

    def v(a, b):
        return {"before": {"tool": a}, "after": {"tool": b}}

    note = verdict_text.tools_note(v({"name": "nsys"}, {"name": "torch"}))
    assert note.startswith(
        "before and after come from different tools (nsys and torch): each tool's own cost"
    )
    assert verdict_text.tools_note(v({"name": "nsys"}, {"name": "nsys"})) is None
    assert verdict_text.tools_note(v(None, {"name": "torch"})) is None
