"""The answer a diff leads with: is `after` faster or slower than `before`?

Data only (renderers word and lay it out). A fixed set of headline figures, each with before -> after, the
change and its interval, how many samples back it and one word:

    faster / slower     the interval lies wholly beyond the metric's noise floor (noise_floor.py; for
                        throughput, higher is faster)
    no clear change     the interval reaches inside the floor (or has zero width: no variation seen)
    too few samples     fewer per run than the statistic needs (bootstrap.min_samples: p50 5, p99 200)
    not tested          one figure per run (throughput), so there is nothing to resample

then where the time moved: the region and kernel changes that clear the floor, ranked by how much time per
decode step moved (a region's own time, so that a slower child does not list every enclosing region above it).
A kernel launched more or fewer times a step is worded so (`more launches` / `fewer launches`, with the counts),
not faster or slower.
With one run a side the verdict says that its intervals see only the noise inside each run.
"""

from __future__ import annotations

from roseprof.analysis.bootstrap import min_samples
from roseprof.analysis.decision import clears, decide, word
from roseprof.analysis.diff_metric import CPU_OWN_LOW, CPU_OWN_LOW_RAW, LOW_OWN

# (metric, label, what one sample is, unit of the value)
HEADLINE = (
    ("steps.p50_ns", "step p50", "steps", "ns"),
    ("steps.p99_ns", "step p99", "steps", "ns"),
    ("itl.p50_ms", "ITL p50", "tokens", "ms"),
    ("itl.p99_ms", "ITL p99", "tokens", "ms"),
    # a GPU run's kernels (sections/kernels.GPU_KERNEL_P50): the GPU's work, which a host-bound step hides
    ("gpu.kernel_p50_ns", "GPU work p50", "steps", "ns"),
    ("requests.ttft.p50_ms", "TTFT p50", "requests", "ms"),
    ("requests.throughput_tok_s", "throughput", None, "tok/s"),
    # a load (roseprof load: sections/serving.py)
    ("serving.ttft.p50_ms", "TTFT p50", "requests", "ms"),
    ("serving.ttft.p99_ms", "TTFT p99", "requests", "ms"),
    ("serving.tpot.p50_ms", "TPOT p50", "requests", "ms"),
    ("serving.itl.p99_ms", "ITL p99", "tokens", "ms"),
    ("serving.e2e.p50_ms", "E2E p50", "requests", "ms"),
    ("serving.throughput.output_tok_s", "throughput", None, "tok/s"),
)
# A load's metrics (roseprof load: sections/serving.py, sections/loads.py): ITL is resampled by request, not step.
SERVING_PREFIXES = ("serving.", "sweep.")
TOP_CHANGES = 5
# A kernel whose launches per decode step moved by at least this many (the sides' means) took more or fewer
# launches, not a faster or slower kernel: the engine gave the same kernel other work (25 add + LayerNorm kernels a
# step folded into GEMV prologues leave one, 97.7% less time a step; the lm_head moved onto the GEMV kernel)
LAUNCHES_MOVED = 0.5
# (judged by CPU time, by a p5 over the steps) -> which statistic of a region's own time a row was judged by
OWN_STAT = {
    (True, True): "CPU time, p5 of the steps",
    (False, True): "p5 of the steps",
    (False, False): "mean",
}
# A region's time in the rollover steps (its median there) and in the other steps (sections/steps.py's metrics).
AT_ROLLOVER = "steps.rollover.regions_p50."
AT_NORMAL = "steps.normal.regions_p50."
AT_ROLLOVER_CPU = (
    "steps.rollover.regions_cpu_p50."  # sections/steps.AT_ROLLOVER_CPU (a section is not imported here)
)


def _row(m: dict, label: str, sample: str | None, unit: str) -> dict:
    w, why = word(m)
    row = {
        "metric": m["name"],
        "label": label,
        "unit": unit,
        "before": m["a"],
        "after": m["b"],
        "delta_pct": m["delta_pct"],
        "ci_low_pct": m["ci_low_pct"],
        "ci_high_pct": m["ci_high_pct"],
        "word": w,
        "why": why,
        "samples": sample,
        "n_before": m.get("n_a"),
        "n_after": m.get("n_b"),
        "min_samples": m.get("min_samples"),
    }
    if (
        "units_a" in m
    ):  # ITL: tokens, resampled by the decode steps (a load's: the requests) that produced them
        row["steps_before"], row["steps_after"] = m["units_a"], m["units_b"]
        row["units"] = "requests" if m["name"].startswith(SERVING_PREFIXES) else "steps"
    return row


def _changes(
    metrics: dict[str, dict], prefix: str, own_time: bool = False, judged: dict | None = None
) -> list[dict]:
    """The per-step time changes under `prefix` that clear the noise floor, the most time moved first. A region
    is judged and ranked on its own (self) time where that has an interval, else on its total, ranked by the move
    of its own time: a slower child makes every enclosing region's total slower, not their own time. Its own time
    is judged in the steps no wait for a core landed in (diff_metric.LOW_OWN: the 5th percentile over the steps) where
    that has an interval: the mean carries the waits, which move more between runs than the planted change does.
    Where every run has its regions' CPU times (step log version 3), the p5 of its own CPU time instead
    (diff_metric.CPU_OWN_LOW): no wait is in it at all; and it is a change only where the same at the runs' own
    speed (CPU_OWN_LOW_RAW) is one too, the same way: the machine's speed does not slow every region alike.
    `judged` (where given) gets each name's statistic it was judged by (the diff dashboard's region chart)."""
    totals = {
        name: m for name, m in metrics.items() if name.startswith(prefix) and name.endswith(".total_ns")
    }
    # Where the runs have decode steps, the time per step: a region or kernel that runs only outside the steps
    # (warm-up, graph capture) is compared per run in the metrics, not ranked beside time per step.
    per_step = any(m.get("per_step") for m in totals.values())
    rows = []
    for name, m in totals.items():
        if per_step and not m.get("per_step"):
            continue
        short = name[len(prefix) : -len(".total_ns")]
        own = metrics.get(f"{prefix}{short}.self_ns") if own_time else None
        low = metrics.get(LOW_OWN.format(short)) if own_time else None
        cpu = metrics.get(CPU_OWN_LOW.format(short)) if own_time else None
        if cpu is not None and cpu.get("ci_low_pct") is not None:
            # Its CPU time, where no wait for a core is: the wall time's p5 only avoids most of them.
            low = cpu
        if low is not None and low.get("ci_low_pct") is not None:
            own = low
        tested = own if own is not None and own.get("ci_low_pct") is not None else m
        if judged is not None:
            judged[short] = tested["name"]
        if tested is cpu and clears(cpu) and not _agrees(cpu, metrics.get(CPU_OWN_LOW_RAW.format(short))):
            continue  # at the before side's machine speed and at the runs' own: a change only where both moved the same way
        if tested is m and own is not None and abs(own["b"] - own["a"]) < 0.5 * abs(m["b"] - m["a"]):
            # Judged on its total (its own time has no interval: e.g. the step itself, the scheduler's step
            # around it), but most of that move is its children's: they are listed, not it.
            continue
        if not clears(tested):
            continue
        row = _row(tested, short, None, "ns")
        row["per_step"] = bool(m.get("per_step"))
        row["own_time"] = tested is own
        row["own_stat"] = OWN_STAT[tested is cpu, tested is low]
        row["total_before"], row["total_after"] = m["a"], m["b"]
        moved = m["b"] - m["a"]
        if own is not None:
            row["self_before"], row["self_after"] = own["a"], own["b"]
            moved = own["b"] - own["a"]
        row["moved_ns"] = moved
        launches = m.get("launches_a"), m.get("launches_b")
        if None not in launches and abs(launches[1] - launches[0]) >= LAUNCHES_MOVED:
            row["word"] = "more launches" if launches[1] > launches[0] else "fewer launches"
            row["why"] = f"{launches[0]:.2g} → {launches[1]:.2g} a step"
            row["launches_before"], row["launches_after"] = launches
        rows.append(row)
    rows.sort(key=lambda r: -abs(r["moved_ns"]))
    if rows:
        # Drop regions whose own time barely moved (they only enclose the one that did).
        largest = abs(rows[0]["moved_ns"])
        rows = [r for r in rows if abs(r["moved_ns"]) >= 0.05 * largest]
    return rows


def _rollover_changes(metrics: dict[str, dict], named: set[str]) -> list[dict]:
    """Regions whose time in the rollover steps changed beyond the floor while their time in the other steps did
    not: a change of the rollover path alone (`--no-batched-rollover`: every rolling-over row takes the
    per-request path, a few steps a run), which the region's figure over all the steps averages away. Judged first
    by its own CPU time there at the run's own pace of it in the normal steps (sections/steps.AT_ROLLOVER_CPU:
    neither the machine's waits nor the drift between runs is in it), else by its median wall time there where its
    median in the other steps did not clear (a wait planted in the rollover path has no CPU time). A region
    already named over all the steps is not named again; the most time moved first."""
    rows = []
    for name, m in metrics.items():
        region = name[len(AT_ROLLOVER) :]
        if not name.startswith(AT_ROLLOVER) or region in named:
            continue
        cpu = metrics.get(AT_ROLLOVER_CPU + region)
        if cpu is not None and clears(cpu):
            m, stat = cpu, "CPU time, median of the rollover steps at the run's pace"
        else:
            normal = metrics.get(AT_NORMAL + region)
            if not clears(m) or (normal is not None and clears(normal)):
                continue  # no change, or one in every step, not at the rollovers
            stat = "median of the rollover steps"
        row = _row(m, region, None, "ns")
        row.update(per_step=True, own_time=m is cpu, own_stat=stat, at_rollover=True)
        row["moved_ns"] = m["b"] - m["a"]
        rows.append(row)
    rows.sort(key=lambda r: -abs(r["moved_ns"]))
    if rows:  # as _changes: the regions that only enclose the one that moved
        largest = abs(rows[0]["moved_ns"])
        rows = [r for r in rows if abs(r["moved_ns"]) >= 0.05 * largest]
    return rows


def _from_pairs(metrics: dict[str, dict], pairs: list[dict], named: list[dict]) -> list[dict]:
    """The rows every run pair decided alike (run_pairs.agreed) that the group's own rows do not name: each with
    the group's figure of the statistic the pairs judged, the pairs' word, and `every_pair`. A region, figure or
    kernel the group names already (with any word) keeps the group's row."""
    seen = {(r.get("kind", "region"), r["label"]) for r in named}
    out = []
    for p in pairs:
        m = metrics.get(p["metric"])
        label = p["label"] if p["kind"] != "figure" else p["metric"]
        if m is None or (p["kind"], label) in seen or m.get("delta_pct") is None:
            continue
        row = _row(m, label, None, "ns")
        row.update(kind=p["kind"], word=p["word"], why="every run pair, one run a side", every_pair=True)
        row.update({k: p[k] for k in ("per_step", "own_time", "own_stat", "at_rollover") if k in p})
        if p["kind"] == "figure":
            row["label"] = p["label"]
        else:
            row["moved_ns"] = m["b"] - m["a"]
        out.append(row)
    return out


def _agrees(normalised: dict, raw: dict | None) -> bool:
    """Whether a region's own CPU time that changed beyond the floor at the before side's machine speed moved the
    same way at the runs' own speed, its interval excluding 0 (diff_metric.CPU_OWN_LOW_RAW says why). Only the
    way is asked of the raw figure: between runs at unlike speeds its interval is wide (+122% [+6, +364] for the
    planted change, docs/BENCHMARKS.md session 8, acc6)."""
    if raw is None or not raw.get("excludes_zero") or raw.get("zero_width"):
        return False
    return (normalised["delta_pct"] > 0) == (raw["delta_pct"] > 0)


def samples_of(side: dict) -> int:
    """How many runs a side's intervals see the drift between: its runs, or a load's K loads (`roseprof load
    --repeat K`: one run, K samples to the diff)."""
    return side.get("loads") or len(side.get("runs") or [1])


# A sweep's headline figures at each rate (sections/loads.py names them sweep.RATE/s.*)
SWEEP_HEADLINE = (("ttft.p50_ms", "TTFT p50", "requests"), ("itl.p50_ms", "ITL p50", "tokens"))


def _sweep_headline(metrics: list[dict]) -> list[dict]:
    """A sweep diff's headline: TTFT p50 and ITL p50 (what the gate looks at) at every rate both sides measured,
    in rate order."""
    rows = []
    for m in sorted((m for m in metrics if "rate" in m), key=lambda m: m["rate"]):
        for suffix, label, sample in SWEEP_HEADLINE:
            if m["name"].endswith("." + suffix):
                rows.append(_row(m, f"{label} @{m['rate']:g}/s", sample, "ms"))
    return rows


def verdict(
    metrics: list[dict],
    before: dict,
    after: dict,
    kernels: dict | None = None,
    floor: str | None = None,
    false_alarms: dict | None = None,
    slowdown: dict | None = None,
    pairs: list[dict] | None = None,
    kernel_names: list[str] | None = None,
) -> dict:
    """The verdict block of a diff: `metrics` as compare() returns them, `before`/`after` the runs' ids and names
    (and `runs`, every run id of a side), `kernels` the kernels only one run has (kernel_changes), `floor` the
    noise floor applied, in words, and `false_alarms` what one run a side called between runs of the same code
    on this device (noise_floor.ONE_RUN_FALSE_ALARMS), `slowdown` how much slower the after side's machine ran
    (machine_speed.slowdown), `pairs` the rows every run pair of a group diff decided alike (run_pairs.agreed):
    the group's decision names them too; `kernel_names` every kernel any run of either side has (default: those
    the metrics and `kernels` name)."""
    by_name = {m["name"]: m for m in metrics}
    headline = [
        _row(by_name[name], label, sample, unit) for name, label, sample, unit in HEADLINE if name in by_name
    ] + _sweep_headline(metrics)
    judged: dict[str, str] = {}
    regions = _changes(by_name, "regions.", own_time=True, judged=judged)
    at_rollover = _rollover_changes(by_name, {r["label"] for r in regions})
    kernel_rows = _changes(by_name, "kernels.")
    # What every run pair decided alike, one run a side (run_pairs.py): the group names it too.
    named = [{**r, "kind": "region"} for r in regions + at_rollover] + [
        {**r, "kind": "kernel"} for r in kernel_rows
    ]
    named += [{"kind": "figure", "label": m["name"]} for m in metrics if clears(m)]
    paired = _from_pairs(by_name, pairs or [], named)
    figures = [r for r in paired if r["kind"] == "figure"]
    for rows, kind in ((regions, "region"), (kernel_rows, "kernel")):
        rows += [r for r in paired if r["kind"] == kind and not r.get("at_rollover")]
        rows.sort(key=lambda r: -abs(r["moved_ns"]))
    at_rollover += [r for r in paired if r.get("at_rollover")]
    by_pairs = {r["metric"]: r for r in figures}
    for r in headline:
        if r["metric"] in by_pairs:
            r["word"], r["why"] = by_pairs[r["metric"]]["word"], by_pairs[r["metric"]]["why"]
    # The one decision every view reads (decision.py): what changed, its overall word, and the machine's part.
    decided = decide(metrics, headline, regions + at_rollover, kernel_rows, slowdown, figures)
    by_machine = {r["metric"] for r in decided["rows"] if r["machine"]}
    for r in headline + regions + at_rollover:
        r["machine"] = r["metric"] in by_machine
    # Each side says how many samples its intervals see (renderers read it, they do not compute it).
    before, after = {**before, "samples": samples_of(before)}, {**after, "samples": samples_of(after)}
    one_run = before["samples"] == 1 and after["samples"] == 1
    return {
        "before": before,
        "after": after,
        # One run a side: the intervals see the variation inside each run only (how often that alone calls a
        # change between two runs of the same code, measured, goes with it).
        "one_run_a_side": one_run,
        "one_run_false_alarms": false_alarms if one_run else None,
        "noise_floor": floor,
        "overall": decided["overall"],
        "decision": decided,
        # the metrics whose interval is clear of 0 (any table's, not the headline's alone): "no clear change" then
        # says no figure it judges by cleared its floor, not that every interval includes 0
        "clear_of_zero": sum(1 for m in metrics if m.get("excludes_zero")),
        "headline": headline,
        "moved_most": regions[0] if regions else None,
        # where the time moved shows the first TOP_CHANGES (the decision has them all)
        "regions": regions[:TOP_CHANGES],
        # regions that changed in the rollover steps alone (their median there)
        "rollover_regions": at_rollover[:TOP_CHANGES],
        # each region per step -> the metric it is judged by (the dashboard's chart shows that statistic)
        "judged_regions": judged,
        "kernels": kernel_rows[:TOP_CHANGES],
        "new_kernels": [name for name, _ in (kernels or {}).get("new", [])[:TOP_CHANGES]],
        # every kernel either side has: a view names a kernel by its base name, tagged where another shares it
        "kernel_names": sorted(
            kernel_names
            if kernel_names is not None
            else {
                m["name"][len("kernels.") :].rpartition(".")[0]
                for m in metrics
                if m["name"].startswith("kernels.")
            }
            | {name for side in ("new", "vanished") for name, _ in (kernels or {}).get(side, [])}
        ),
        "vanished_kernels": [name for name, _ in (kernels or {}).get("vanished", [])[:TOP_CHANGES]],
        "min_samples": {"p50": min_samples(50), "p95": min_samples(95), "p99": min_samples(99)},
    }
