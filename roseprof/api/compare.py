"""The verb that compares runs: `roseprof diff` (one run or a group a side, or a named baseline), as the
`DiffView` every diff renderer takes, and the baselines CI diffs against."""

from __future__ import annotations

import fnmatch
from dataclasses import replace

import numpy as np

from roseprof.analysis import decision, machine_speed, noise_floor, run_pairs
from roseprof.analysis.diff import compare, compare_own, floor_for, kernel_changes, method, rank
from roseprof.analysis.run_data import RunData
from roseprof.analysis.samples import SAMPLES_VERSION, prepare, prepare_stored
from roseprof.analysis.sections import SECTIONS, loads, serving
from roseprof.analysis.verdict import verdict
from roseprof.errors import RoseprofError
from roseprof.render.view import DiffView
from roseprof.run import alike, baselines, sample_tables, tables
from roseprof.run.store import Run, RunStore, created_order


def load_run(run: Run) -> RunData:
    """A stored run as the samples every analysis section makes of it (its `diff_prepare`). A load (roseprof load)
    has no trace, steps or ITL table: its samples are its requests and tokens (sections/serving.py)."""
    if tables.is_load(run.manifest):
        summary = run.summary()
        tokens = tables.read_load_tokens(run.path)
        sweep = loads.sweep_points(summary, tokens)
        if sweep is not None:
            return RunData(summary, sections={"sweep": sweep})
        single = serving.samples(summary, tokens)  # None for a repeat: its loads are load_samples'
        return RunData(summary, sections={"serving": single} if single is not None else {})
    stored = sample_tables.read(run.path, SAMPLES_VERSION)  # None: a run stored before them, or damaged
    if stored is None:
        return samples_from_trace(run)
    # The samples the import stored; the step, ITL and trace tables only for a section they lack (ncu's launches).
    return prepare_stored(run.summary(), stored, lambda: _tables(run), SECTIONS)


def samples_from_trace(run: Run) -> RunData:
    """A (non-load) run's samples made from its step, ITL and trace tables, as a diff made them before the import
    stored them: the fallback for runs without stored samples."""
    return prepare(run.summary(), *_tables(run), SECTIONS)


def _tables(run: Run) -> tuple:
    return tables.read_steps(run.path), tables.read_itl(run.path), tables.read_trace(run.path)


def load_samples(run: Run) -> list[RunData]:
    """What a run is to a diff's side: itself, or a repeated load's (`roseprof load --repeat K`) K loads, each as
    a run of the group, so that the diff's hierarchical bootstrap sees the drift between them (as between runs
    of `roseprof nsys --repeat`)."""
    if tables.is_load(run.manifest):
        summary = run.summary()
        repeated = summary.get("loads")
        if repeated and repeated["kind"] == "repeat":
            tokens = tables.read_load_tokens(run.path)
            return [loads.part_runs(p, tokens, k) for k, p in enumerate(repeated["parts"])]
    return [load_run(run)]


def _runs(side: list[RunData]) -> int:
    """How many runs a side's figures rest on: a sweep whose rates were measured K times each (--repeat K) is K."""
    return sum(max((len(v) for v in d.sections.get("sweep", {}).values()), default=1) for d in side)


def _check(run: Run, allow_incomplete: bool) -> None:
    status = run.manifest.get("status")
    if status == "damaged":
        raise RoseprofError(f"run {run.id} is damaged ({run.manifest.get('damaged')}): nothing to compare")
    if not run.has_summary():  # nothing was analysed: --allow-incomplete would find nothing either
        why = run.manifest.get("message")
        raise RoseprofError(
            f"run {run.id} is {status} and holds nothing to compare (no {tables.SUMMARY}"
            + (f"; {why}" if why else "")
            + "): capture it again"
        )
    if status != "complete" and not allow_incomplete:
        raise RoseprofError(f"run {run.id} is {status}: compare what it has with --allow-incomplete")
    tables.check_stored_run(run.path, run.manifest)


def _describe(runs: list[Run], mixed: str | None = None) -> dict:
    """One side of a diff: its latest run's name, tool and command, every run's id, every name its runs have (a side
    of several references can pool runs of several names), and what a side pooled with --pool-mixed mixes."""
    m = runs[-1].manifest
    out = {
        "id": runs[-1].id,
        "name": m.get("name"),
        "names": list(dict.fromkeys(r.manifest.get("name") for r in runs)),
        "tool": m.get("tool"),
        "status": m.get("status"),
        "command": m.get("command"),
        "runs": [r.id for r in runs],
    }
    if mixed:
        out["mixed"] = mixed
    return out


def resolve_side(store: RunStore, refs: list[str], latest: bool) -> list[Run]:
    """Run references -> runs, oldest first, each once: a name stands for all its complete runs unless latest."""
    found: dict[str, Run] = {}
    for ref in refs:
        try:
            group = store.resolve_group(ref, latest)
        except RoseprofError as e:
            # a baseline's name where a run is asked for: say how a baseline is named
            try:
                named = ref in baselines.read_all(store)
            except RoseprofError:  # a damaged baselines file: the missing run is the answer here
                named = False
            if named:
                raise RoseprofError(
                    f"{e}; {ref!r} is a baseline: roseprof diff --baseline {ref} RUN"
                ) from None
            raise
        for run in group:
            found.setdefault(run.id, run)
    return sorted(found.values(), key=created_order)


def set_baseline(store: RunStore, name: str, refs: list[str], latest: bool) -> tuple[dict, list[Run]]:
    """`roseprof baseline set`: the runs the references stand for, kept under a name."""
    runs = resolve_side(store, refs, latest)
    return baselines.set_baseline(store, name, runs), runs


def diff_runs(
    store: RunStore,
    refs_a: list[str],
    refs_b: list[str],
    threshold,
    patterns,
    allow_incomplete: bool,
    latest: bool = False,
    baseline: str | None = None,
    min_effect: float | None = None,
    pool_mixed: bool = False,
    force: bool = False,
) -> DiffView:
    """`roseprof diff`: group A (the refs, or a named baseline) against group B, as the view every diff renderer
    takes: the result (what --json prints), the sides' pooled samples (the diff dashboard's distributions) and
    both sides' runs. A side pools only alike runs (run/alike.py) unless pool_mixed; min_effect replaces the
    calibrated noise floors. Different programs are refused unless force (run/alike.check_same_program)."""
    runs_a = baselines.baseline_runs(store, baseline) if baseline else resolve_side(store, refs_a, latest)
    runs_b = resolve_side(store, refs_b, latest)
    alike.check_not_self(runs_a, runs_b)
    mixed_a = alike.check_side("before", refs_a, runs_a, pool_mixed)
    mixed_b = alike.check_side("after", refs_b, runs_b, pool_mixed)
    for run in runs_a + runs_b:
        _check(run, allow_incomplete)
    a = [d for r in runs_a for d in load_samples(r)]
    b = [d for r in runs_b for d in load_samples(r)]
    loads.check_comparable(a, b)
    if not force:
        engine_a, engine_b = (all(d.step_dur is not None for d in g) for g in (a, b))
        alike.check_same_program(runs_a, runs_b, engine_a, engine_b)
    # one run a side, or not, by the samples the intervals see: a repeated load's K loads are K runs
    floor = replace(floor_for(a, b, min_effect), one_run=_runs(a) == 1 and _runs(b) == 1)
    all_loads = all(tables.is_load(r.manifest) for r in runs_a + runs_b)
    metrics, method_text = compare(a, b, floor=floor), method(_runs(a), _runs(b), floor, all_loads)
    # A section may compare such runs in a way of its own (ncu: launch by launch); then a kernel new or gone is
    # something to say even where no metric is shared.
    metrics, method_text, own = compare_own(a, b, metrics, method_text, floor)
    changes = kernel_changes(a, b)
    if not metrics and not (own and (changes["new"] or changes["vanished"])):
        raise RoseprofError(
            f"runs {runs_a[-1].id} and {runs_b[-1].id} have nothing in common to compare "
            "(no shared regions, kernels or steps)"
        )
    side_a, side_b = _describe(runs_a, mixed_a), _describe(runs_b, mixed_b)
    # the options only one side's command has: the A/B the diff is about, named in its first line
    side_a["options"], side_b["options"] = alike.options_apart(runs_a, runs_b)
    for side, g, runs in ((side_a, a, runs_a), (side_b, b, runs_b)):
        if _runs(g) != len(runs):  # a repeated load (--repeat K): its K loads are the side's samples
            side["loads"] = _runs(g)
    # A group is never less decisive than its run pairs, one run a side (run_pairs.py); not for loads and sweeps,
    # nor where a section compares in a way of its own (ncu).
    paired = not (all_loads or own or _runs(a) != len(a) or _runs(b) != len(b))
    v = verdict(
        metrics,
        side_a,
        side_b,
        changes,
        floor.describe(),
        noise_floor.ONE_RUN_FALSE_ALARMS[floor.device],
        machine_speed.slowdown(a, b),
        run_pairs.agreed(a, b, min_effect) if paired else None,
        # every kernel of every run, one in some runs of a side only too (a changed kernel's twin may be one)
        sorted(set().union(*(r.kernel_durations for r in a + b))),
    )
    # One decision (analysis/decision.py): the stars and the gate read the verdict's, as the headline does.
    decision.mark(metrics, v["decision"])
    _check_patterns(patterns, metrics)
    regressions = decision.gate(metrics, v["decision"], threshold, patterns)
    result = {
        "a": side_a,
        "b": side_b,
        "verdict": v,
        "method": method_text,
        "metrics": rank(metrics),
        "kernels": changes,
        "regressions": [m["name"] for m in regressions],
        "threshold_pct": threshold,
    }
    samples = {
        k: {"step_ns": _pooled([d.step_dur for d in g]), "itl_ms": _pooled([d.itl for d in g])}
        for k, g in (("a", a), ("b", b))
    }
    return DiffView(result, samples, runs_a, runs_b)


def _check_patterns(patterns, metrics: list[dict]) -> None:
    """Each --metric glob must name a metric the runs share: one that names none (a typo, a region renamed) would
    leave the gate looking at nothing, and a CI job would pass forever."""
    names = [m["name"] for m in metrics]
    for p in patterns or ():
        if not any(fnmatch.fnmatchcase(n, p) for n in names):
            raise RoseprofError(
                f"--metric {p!r} matches none of the {len(names)} metrics these runs share "
                "(`roseprof diff --json` lists them under metrics[].name)"
            )


def _pooled(arrays: list) -> np.ndarray | None:
    return None if any(x is None for x in arrays) else np.concatenate(arrays)
