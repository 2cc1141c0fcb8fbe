"""Text for people, shared by the terminal and the dashboards: durations in the unit a person reads, names
shortened so that the part that tells them apart survives, metric names in words (commands: render/commands.py)."""

from __future__ import annotations

ELLIPSIS = "…"


def duration(ns) -> str:
    """812 ns, 15.7 µs, 15.75 ms, 1.23 s."""
    if ns is None:
        return "-"
    a = abs(ns)
    if a < 1e3:
        return f"{ns:,.0f} ns"
    if a < 1e6:
        return f"{ns / 1e3:,.1f} µs"
    if a < 1e9:
        return f"{ns / 1e6:,.2f} ms"
    return f"{ns / 1e9:,.2f} s"


def value(unit: str, v) -> str:
    """A figure in its unit: "ns" and "ms" become durations; "tok/s" a rate; "" a plain number."""
    if v is None:
        return "-"
    if unit == "ns":
        return duration(v)
    if unit == "ms":
        return duration(v * 1e6)
    if unit == "tok/s":  # no decimals from 1,000 on: they would only push the verdict out of 80 columns
        return f"{v:,.0f} tok/s" if abs(v) >= 1000 else f"{v:,.1f} tok/s"
    return f"{v:,.2f}"


def change(delta_pct, lo, hi) -> str:
    """+12.3% [+10.1, +14.6]; the interval left out when there is none."""
    if delta_pct is None:
        return "-"
    if lo is None:
        return f"{_pct(delta_pct)}%"
    return f"{_pct(delta_pct)}% [{_pct(lo)}, {_pct(hi)}]"


def _pct(x: float) -> str:
    """+12.3, or from 1,000 on +4,628 (a tenth of a percent means nothing there)."""
    return f"{x:+,.0f}" if abs(x) >= 1000 else f"{x:+.1f}"


SEPARATORS = "./:"
MIN_HEAD = 4


def shorten_middle(name: str, width: int) -> str:
    """Cut a long name in the middle, keeping its head and its distinguishing tail: the longest run of whole
    trailing components that fits, so that `roseinfer.decode_step_sessions.build_block_tables` in 36 columns is
    `roseinfer.decode_…build_block_tables` and its h2d_ sibling stays apart from it."""
    if width <= 0 or len(name) <= width:
        return name
    if width <= MIN_HEAD + 2:
        return name[: width - 1] + ELLIPSIS
    room = width - 1
    # The longest run of whole trailing components that leaves MIN_HEAD characters of head; failing that, the
    # last component alone (no head: it is what tells names apart); failing that, plain characters.
    tail = None
    for head_min in (MIN_HEAD, 0):
        for i in range(len(name) - 1, 0, -1):
            if name[i - 1] in SEPARATORS and name[i] not in SEPARATORS:  # `::` is one separator
                if len(name) - i > room - head_min:
                    break
                tail = name[i:]
        if tail is not None:
            break
    if tail is None:
        tail = name[-(room - MIN_HEAD) :]
    # No space beside the ellipsis: `kern… (int)` would read as a cut figure or two words.
    return name[: room - len(tail)].rstrip() + ELLIPSIS + tail.lstrip()


METRIC_PARTS = {"rollover.": "rollover ", "normal.": "normal "}


def metric_label(name: str, per_step: bool = False) -> str:
    """A diff metric's name in words; the JSON keeps the name itself (scripts depend on it)."""
    for prefix, kind in (("regions.", ""), ("kernels.", "kernel ")):
        if name.startswith(prefix):
            body, _, stat = name[len(prefix) :].rpartition(".")
            per = "step" if per_step else "run"
            what = {"total_ns": f"time/{per}", "self_ns": f"self/{per}", "count": f"calls/{per}"}
            what["self_p5_ns"] = f"self/{per} p5"
            what["cpu_own_ns"] = f"CPU self/{per}"
            what["cpu_own_p5_ns"] = f"CPU self/{per} p5"
            what["cpu_own_p5_raw_ns"] = f"CPU self/{per} p5 raw"
            what["outside_ns"] = "outside/run"  # outside the decode steps, a run's total
            return f"{kind}{body} · {what.get(stat, stat)}"
    if name.startswith("steps."):
        rest = name[len("steps.") :]
        group = ""
        for part, label in METRIC_PARTS.items():
            if rest.startswith(part):
                group, rest = label, rest[len(part) :]
        if rest.startswith(("regions.", "regions_p50.", "regions_cpu_p50.")):
            stat, _, region = rest.partition(".")
            how = {"regions": "mean", "regions_p50": "p50", "regions_cpu_p50": "CPU p50"}[stat]
            return f"{region} · {group}{how}"
        return f"{group}step {rest.removesuffix('_ns')}"
    if name.startswith("itl."):
        rest = name[len("itl.") :].removesuffix("_ms")
        where = ""
        if rest.startswith("at_rollover."):
            where, rest = " at rollover", rest[len("at_rollover.") :]
        elif rest.startswith("elsewhere."):
            where, rest = " elsewhere", rest[len("elsewhere.") :]
        return f"ITL {rest}{where}"
    if name.startswith("gpu.kernel_"):  # sections/kernels.GPU_KERNEL_P50
        return f"GPU work {name.removeprefix('gpu.kernel_').removesuffix('_ns')}"
    if name.startswith("requests."):
        rest = name[len("requests.") :]
        if rest == "throughput_tok_s":
            return "throughput"
        key, _, stat = rest.partition(".")
        return f"{key.upper()} {stat.removesuffix('_ms')}"
    if name.startswith(
        "sweep."
    ):  # a sweep's rate (sections/loads.py): sweep.10/s.itl.p50_ms -> @10/s ITL p50
        rate, _, rest = name[len("sweep.") :].partition("/s.")
        key, _, stat = rest.partition(".")
        if stat.endswith("_ms"):
            return f"@{rate}/s {key.upper()} {stat.removesuffix('_ms')}"
        return f"@{rate}/s {SWEEP_FIGURES.get(rest, rest)}"
    return name


SWEEP_FIGURES = {
    "throughput.requests_s": "req/s",
    "throughput.output_tok_s": "tok/s",
    "goodput_pct": "goodput %",
    "errors": "errors",
}


def shorten_label(label: str, width: int) -> str:
    """A metric label `name · what` shortened in its name part, so `what` stays readable."""
    name, sep, what = label.rpartition(" · ")
    if not sep or len(label) <= width:
        return shorten_middle(label, width)
    return shorten_middle(name, max(8, width - len(sep) - len(what))) + sep + what


def metric_unit(name: str) -> str:
    if name.endswith("_ns") or ".regions." in name or ".regions_p50." in name or ".regions_cpu_p50." in name:
        return "ns"
    if name.endswith("_ms"):
        return "ms"
    if name.endswith("tok_s"):
        return "tok/s"
    return ""


def rollover_sentence(steps: dict | None) -> str | None:
    """What is true of rollover steps against normal ones (mean step time), and where the difference sits."""
    if not steps:
        return None
    roll, norm = steps.get("rollover") or {}, steps.get("normal") or {}
    if not roll.get("count") or not norm.get("count") or roll.get("mean_ns") is None:
        return None
    diff = roll["mean_ns"] - norm["mean_ns"]
    counts = f"{roll['count']:,} rollover vs {norm['count']:,} normal steps"
    ex = steps.get("rollover_excess")
    if diff > 0:
        where = ""
        if ex and ex["mean_ns"] > 0:
            where = f", mostly in {ex['region']} (+{duration(ex['mean_ns'])})"
        return f"rollover steps are slower by {duration(diff)} on average{where} ({counts})"
    if diff < 0:
        where = ""
        if ex and ex["mean_ns"] > 0:
            where = f"; {ex['region']} still takes {duration(ex['mean_ns'])} longer in them"
        return f"rollover steps are faster by {duration(-diff)} on average{where} ({counts})"
    return f"rollover steps take as long as normal ones on average ({counts})"


# The steady state (summary.json `steady`) in words, for the terminal and the dashboard.


def steady_title(steady: dict) -> str:
    """`steady state, per decode step (71 of 72 steps)`."""
    return f"steady state, per {steady['unit']} ({steady['counted']:,} of {steady['steps']:,} steps)"


def left_out_sentence(steady: dict) -> str | None:
    """What the steady state leaves out, each with its size: warm-up, CUDA-graph capture, prefill, drain steps."""
    ex = steady.get("excluded") or {}
    parts = []
    warm = ex.get("warmup") or {}
    if warm.get("steps"):
        parts.append(f"warm-up {warm['steps']:,} step(s), {duration(warm['host_ns'])}")
    cap = ex.get("capture") or {}
    bits = []
    if cap.get("steps"):
        bits.append(f"{cap['steps']:,} step(s), {duration(cap['host_ns'])}")
    if cap.get("ranges"):
        names = ", ".join(cap.get("range_names") or [])
        bits.append(
            f"{cap['ranges']:,} range(s) outside the steps ({names}), {duration(cap['range_host_ns'])}"
        )
    if bits:
        parts.append("CUDA graph capture " + " and ".join(bits))
    pre = ex.get("prefill") or {}
    bits = []
    if pre.get("steps"):
        bits.append(f"{pre['steps']:,} step(s) holding one, {duration(pre['host_ns'])}")
    if pre.get("ranges"):
        bits.append(f"{pre['ranges']:,} outside the steps, {duration(pre['range_host_ns'])}")
    if bits:
        parts.append("prefill " + " and ".join(bits))
    drain = ex.get("drain") or {}
    if drain.get("steps"):
        parts.append(f"drain {drain['steps']:,} step(s) that launched nothing, {duration(drain['host_ns'])}")
    return "left out (host time): " + "; ".join(parts) if parts else None


GRAPH_NOTE = "GPU: CUDA-graph replays counted in the region each kernel was captured in"


def overlap_note(steady: dict) -> str | None:
    """Said when a step's kernels overlap on their streams (programmatic dependent launch): its GPU figures count
    each kernel's own time, and their summed durations would be larger."""
    step = steady.get("step") or {}
    own, durations = step.get("gpu_mean_ns"), step.get("gpu_durations_mean_ns")
    if not own or not durations or durations <= own * 1.01:
        return None
    return (
        f"GPU: each kernel's own time on its stream; their durations add up to {duration(durations)} a "
        f"{steady.get('unit', 'step')}, {100 * (durations / own - 1):.0f}% more: kernels started while the one "
        "before ran (programmatic dependent launch) and waited for it"
    )


def concurrency_note(steady: dict) -> str | None:
    """Said when a step's kernels of two streams ran at once (a CUDA graph's parallel branches, a program's own
    streams): its GPU columns add each stream's time, so they add up to more than the time the GPU was busy."""
    step = steady.get("step") or {}
    own, busy = step.get("gpu_mean_ns"), step.get("gpu_busy_mean_ns")
    if not own or not busy or own <= busy * 1.01:
        return None
    gpus = steady.get("gpus") or 1
    busy_said = (
        f"the GPU was busy {duration(busy)}"
        if gpus == 1
        else f"the {gpus} GPUs were busy {duration(busy)} (summed)"
    )
    return (
        f"GPU: kernels of two or more streams ran at once (parallel graph branches or the program's own streams); "
        f"the GPU columns add each stream's time ({duration(own)} a {steady.get('unit', 'step')} in the whole-step "
        f"row), while {busy_said}"
    )


def gpus_note(steady: dict) -> str | None:
    """Said in a run of several processes (tensor-parallel ranks): the steps, and so their GPU figures, are one
    rank's (or, where no step log says which process is which rank, the lowest pid's)."""
    pids = steady.get("pids")
    if not pids or not steady.get("gpus"):  # one process, or no GPU time (a CPU run of several ranks)
        return None
    rank = steady.get("rank")
    whose = f"rank {rank}" if rank is not None and rank >= 0 else "its rank unknown"
    return (
        f"GPU: the steps' own process's GPU time (pid {', '.join(str(p) for p in pids)}, {whose}); every rank's: "
        "the per-rank GPU time table"
    )


def steps_line(steps: dict) -> str:
    """The step counts and times; rollovers only for the engine's decode steps."""
    d = duration
    if steps.get("kind", "decode") != "decode":
        what = "steps (ProfilerStep)" if steps.get("kind") == "profiler" else f"steps ({steps.get('name')})"
        return f"{what}: {steps['count']:,}  p50 {d(steps['p50_ns'])}  p99 {d(steps['p99_ns'])}"
    roll, norm = steps["rollover"], steps["normal"]
    line = f"decode steps: {steps['count']:,}  p50 {d(steps['p50_ns'])}  p99 {d(steps['p99_ns'])}"
    if roll["count"]:
        line += (
            f"  |  rollover ({roll['count']:,}) p50 {d(roll['p50_ns'])}  vs normal ({norm['count']:,}) p50 "
            f"{d(norm['p50_ns'])}"
        )
    return line


def common_prefix(names: list[str]) -> str:
    """The first dotted component every name starts with (`roseinfer.`, `hf.`), or "" when they do not share one
    or there are fewer than two: a narrow table can leave it out and say so once."""
    heads = {n.split(".", 1)[0] + "." if "." in n else "" for n in names}
    if len(names) < 2 or len(heads) != 1:
        return ""
    head = heads.pop()
    return head if all(len(n) > len(head) for n in names) else ""


def without_prefix(label: str, prefix: str) -> str:
    """A metric label (`name · what`) with its name's shared prefix left out."""
    return label[len(prefix) :] if prefix and label.startswith(prefix) else label


def whole_run_note(steady: dict | None) -> str:
    """` (warm-up and capture included)`: what a whole-run sum holds that the steady state leaves out."""
    ex = (steady or {}).get("excluded") or {}
    parts = [
        label
        for key, label in (("capture", "CUDA-graph capture"), ("warmup", "warm-up"), ("prefill", "prefill"))
        if (ex.get(key) or {}).get("steps") or (ex.get(key) or {}).get("ranges")
    ]
    if not parts:
        return ""
    return f" ({', '.join(parts[:-1]) + ' and ' + parts[-1] if len(parts) > 1 else parts[0]} included)"


def left_out_line(left_out: dict | None) -> str | None:
    """One line: the tokens the ITL figures leave out (the profiler's own work, CUDA-graph capture) and why."""
    if not left_out:
        return None
    parts = [f"{e['tokens']:,} token(s) whose gap holds {e['label']} (up to {duration(e['max_ms'] * 1e6)})"
             for e in left_out.values()]  # fmt: skip
    return "ITL figures leave out " + "; ".join(parts)


def evidence_text(evidence: list[dict] | None) -> str:
    """`roseinfer.model.forward +164.0 µs p50 (48 tokens); ...`: where a cause's time went."""
    if not evidence:
        return "-"
    return "; ".join(
        f"{e['where']} +{duration(e['p50_ms'] * 1e6)} p50 ({e['tokens']:,} token{'s' if e['tokens'] != 1 else ''})"
        for e in evidence
    )
