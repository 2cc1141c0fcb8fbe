"""Terminal rendering of runs with rich: the summary table after a capture, `ls`, `show`."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from roseprof.render import units
from roseprof.run.store import Run


def make_console() -> Console:
    """A console for summaries; wide when not a terminal, so range and kernel names are not cut to nothing."""
    console = Console()
    return console if console.is_terminal else Console(width=160)


def print_summary(console: Console, run: Run, summary: dict | None, top: int = 12) -> None:
    m = run.manifest
    console.print(
        f"[bold]{run.id}[/]  {m.get('tool', {}).get('name')} {m.get('tool', {}).get('version', '')}  status [bold]{m.get('status')}[/]"
    )
    if m.get("message"):
        console.print(f"  {m['message']}", markup=False)
    if summary is None:
        console.print(f"run folder: {run.path}", markup=False)
        return
    regions = summary.get("regions") or []
    if regions:
        t = Table(title="time per region", title_justify="left")
        for col in (
            "region",
            "count",
            "total ms",
            "self ms",
            "p50 µs",
            "p99 µs",
            "GPU proj ms",
            "GPU kernel ms",
        ):
            t.add_column(col, justify="left" if col == "region" else "right")
        for r in regions[:top]:
            name = f"{r['domain']}:{r['name']}" if r.get("domain") else r["name"]
            t.add_row(
                name,
                f"{r['count']:,}",
                units.ms(r["total_ns"]),
                units.ms(r["self_ns"]),
                units.us(r["p50_ns"]),
                units.us(r["p99_ns"]),
                units.ms(r["gpu_proj_ns"]),
                units.ms(r["gpu_kernel_ns"]),
            )
        console.print(t)
        if len(regions) > top:
            console.print(
                f"  ... {len(regions) - top} more regions (roseprof show {run.id} --json)", markup=False
            )
    kernels = summary.get("kernels") or []
    if kernels:
        t = Table(title="top kernels", title_justify="left")
        for col in ("kernel", "region", "count", "total ms", "p50 µs"):
            t.add_column(col, justify="left" if col in ("kernel", "region") else "right")
        for k in kernels[:8]:
            t.add_row(
                k["name"][:70],
                k["region"] or "-",
                f"{k['count']:,}",
                units.ms(k["total_ns"]),
                units.us(k["p50_ns"]),
            )
        console.print(t)
    if summary.get("ncu"):
        _print_ncu(console, summary["ncu"])
    steps = summary.get("steps")
    if steps:
        roll, norm = steps["rollover"], steps["normal"]
        console.print(
            f"decode steps: {steps['count']:,}  p50 {units.us(steps['p50_ns'])} µs  p99 {units.us(steps['p99_ns'])} µs  |  "
            f"rollover ({roll['count']}) p50 {units.us(roll['p50_ns'])} µs  vs normal ({norm['count']}) p50 {units.us(norm['p50_ns'])} µs",
            markup=False,
        )
        if steps.get("rollover_excess"):
            ex = steps["rollover_excess"]
            console.print(
                f"rollover steps are slower mostly in {ex['region']} (+{units.us(ex['mean_ns'])} µs mean)",
                markup=False,
            )
    itl = summary.get("itl")
    if itl and itl.get("count"):
        at, el = itl["at_rollover"], itl["elsewhere"]
        fmt = lambda x: "-" if x is None else f"{x:.3f}"  # noqa: E731
        console.print(
            f"ITL ms: p50 {fmt(itl['p50_ms'])}  p95 {fmt(itl['p95_ms'])}  p99 {fmt(itl['p99_ms'])}  |  "
            f"at rollover p99 {fmt(at['p99_ms'])}  elsewhere p99 {fmt(el['p99_ms'])}",
            markup=False,
        )
    if summary.get("spikes"):
        print_spikes(console, summary["spikes"])
    req = summary.get("requests")
    if req:
        console.print(
            f"requests: {req['count']}  completion tokens {req['completion_tokens']:,}  "
            f"throughput {req['throughput_tok_s']:,.1f} tok/s  TTFT p50 {req['ttft']['p50_ms']:.2f} ms",
            markup=False,
        )
    for w in summary.get("warnings") or []:
        console.print(f"warning: {w}", markup=False, style="yellow")
    console.print(f"run folder: {run.path}", markup=False)


def _print_ncu(console: Console, ncu: dict, top: int = 8) -> None:
    """Nsight Compute runs: the key metrics per kernel (means over its profiled launches) and the top findings."""
    pct = lambda x: "-" if x is None else f"{x:.1f}"  # noqa: E731
    t = Table(title="ncu: per kernel, mean over profiled launches", title_justify="left")
    for col in ("kernel", "launches", "µs", "SM %", "memory %", "DRAM % of peak BW", "occupancy %"):
        t.add_column(col, justify="left" if col == "kernel" else "right")
    for k in ncu["kernels"][:top]:
        t.add_row(
            k["name"][:70],
            f"{k['launches']:,}",
            units.us(k["mean_duration_ns"]),
            pct(k["mean_sm_throughput_pct"]),
            pct(k["mean_memory_throughput_pct"]),
            pct(k["mean_dram_bandwidth_pct_of_peak"]),
            pct(k["mean_achieved_occupancy_pct"]),
        )
    console.print(t)
    for r in [r for r in ncu["rules"] if r["speedup_pct"]][:3]:
        console.print(
            f"ncu finding: {r['kernel'][:50]}: {r['rule']} (est. speedup {r['speedup_pct']:.1f}%)",
            markup=False,
        )
    console.print(f"note: {ncu['note']}", markup=False, style="dim")


def print_spikes(console: Console, spikes: dict) -> None:
    """The ITL spike cause table: how many spike tokens each cause touched and the latency it added."""
    console.print(
        f"ITL spikes: {spikes['spike_tokens']:,} of {spikes['tokens']:,} tokens ({spikes['spike_steps']} steps) "
        f"above {spikes['threshold_ms']:.3f} ms = {spikes['definition'].removeprefix('ITL above ')}",
        markup=False,
    )
    if not spikes["causes"]:
        return
    t = Table(title="spike causes (a token can have several)", title_justify="left")
    for col in ("cause", "tokens", "share %", "added p50 ms", "added total ms"):
        t.add_column(col, justify="left" if col == "cause" else "right")
    for c in spikes["causes"]:
        t.add_row(
            c["label"],
            f"{c['tokens']:,}",
            f"{c['share_pct']:.1f}",
            f"{c['added_p50_ms']:.3f}",
            f"{c['added_total_ms']:.1f}",
        )
    console.print(t)


def print_runs(console: Console, runs: list[Run]) -> None:
    t = Table()
    for col in ("run", "name", "tool", "status", "created (UTC)", "command"):
        t.add_column(col)
    for r in runs:
        m = r.manifest
        cmd = " ".join(m.get("command") or [m.get("source", "")])
        t.add_row(
            r.id,
            m.get("name", ""),
            f"{m.get('tool', {}).get('name', '')} {m.get('tool', {}).get('version', '')}",
            m.get("status", ""),
            m.get("created_utc", ""),
            cmd[-60:],
        )
    console.print(t)


def _fmt_value(name: str, v) -> str:
    if v is None:
        return "-"
    if (
        name.endswith("_ns") or ".regions." in name or ".regions_p50." in name
    ):  # steps.<group>.regions.<region> is ns per step
        return f"{v / 1e3:,.1f} µs"
    if name.endswith("_ms"):
        return f"{v:,.3f} ms"
    return f"{v:,.2f}"


def print_diff(console: Console, result: dict, top: int) -> None:
    a, b = result["a"], result["b"]
    console.print(f"A: {a['id']}  ({a.get('name')})\nB: {b['id']}  ({b.get('name')})", markup=False)
    for label, side in (("A", a), ("B", b)):
        if len(side.get("runs") or []) > 1:
            console.print(
                f"{label} is a group of {len(side['runs'])} runs: {', '.join(side['runs'])}", markup=False
            )
    t = Table(title="largest significant changes first", title_justify="left")
    for col in ("metric", "A", "B", "Δ %", "95% CI", ""):
        t.add_column(col, justify="left" if col == "metric" else "right")
    for m in result["metrics"][:top]:
        d = m["delta_pct"]
        ci = "-" if m["ci_low_pct"] is None else f"[{m['ci_low_pct']:+.1f}, {m['ci_high_pct']:+.1f}]"
        flag = "REGRESSION" if m.get("regression") else ("significant" if m["significant"] else "")
        style = (
            "red"
            if m.get("regression")
            else ("green" if m["significant"] and d is not None and (d < 0) == m["lower_is_better"] else None)
        )
        t.add_row(
            m["name"],
            _fmt_value(m["name"], m["a"]),
            _fmt_value(m["name"], m["b"]),
            "-" if d is None else f"{d:+.1f}",
            ci,
            flag,
            style=style,
        )
    console.print(t)
    if len(result["metrics"]) > top:
        console.print(f"... {len(result['metrics']) - top} more metrics (--json for all)", markup=False)
    for label in ("new", "vanished"):
        ks = result["kernels"][label]
        if ks:
            console.print(
                f"{label} kernels: " + ", ".join(k[:60] for k, _ in ks[:5]) + (" ..." if len(ks) > 5 else ""),
                markup=False,
            )
    console.print(f"method: {result['method']}", markup=False, style="dim")
    if result["threshold_pct"] is not None:
        verdict = (
            f"{len(result['regressions'])} regression(s) over {result['threshold_pct']}%"
            if result["regressions"]
            else "no regression"
        )
        console.print(f"gate: {verdict}", markup=False, style="red" if result["regressions"] else "green")
