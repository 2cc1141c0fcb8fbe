"""Terminal rendering of runs with rich: the summary table after a capture, `ls`, `show`."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from roseprof.render import units
from roseprof.render.safe_text import text
from roseprof.run.store import Run


def make_console() -> Console:
    """A console for summaries; wide when not a terminal, so range and kernel names are not cut to nothing."""
    console = Console()
    return console if console.is_terminal else Console(width=160)


def print_summary(console: Console, run: Run, summary: dict | None, top: int = 12) -> None:
    m = run.manifest
    tool = m.get("tool") or {}
    console.print(
        Text.assemble(
            text(run.id, "bold"),
            text(f"  {tool.get('name')} {tool.get('version') or ''}  status "),
            text(m.get("status"), "bold"),
        )
    )
    for key in ("message", "damaged"):
        if m.get(key):
            console.print(text(f"  {m[key]}"))
    if summary is None:
        console.print(text(f"run folder: {run.path}"))
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
                text(name),
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
            console.print(text(f"  ... {len(regions) - top} more regions (roseprof show {run.id} --json)"))
    kernels = summary.get("kernels") or []
    if kernels:
        t = Table(title="top kernels", title_justify="left")
        for col in ("kernel", "region", "count", "total ms", "p50 µs"):
            t.add_column(col, justify="left" if col in ("kernel", "region") else "right")
        for k in kernels[:8]:
            t.add_row(
                text(k["name"][:70]),
                text(k["region"] or "-"),
                f"{k['count']:,}",
                units.ms(k["total_ns"]),
                units.us(k["p50_ns"]),
            )
        console.print(t)
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
                text(
                    f"rollover steps are slower mostly in {ex['region']} (+{units.us(ex['mean_ns'])} µs mean)"
                )
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
    req = summary.get("requests")
    if req:
        console.print(
            f"requests: {req['count']}  completion tokens {req['completion_tokens']:,}  "
            f"throughput {req['throughput_tok_s']:,.1f} tok/s  TTFT p50 {req['ttft']['p50_ms']:.2f} ms",
            markup=False,
        )
    for w in summary.get("warnings") or []:
        console.print(text(f"warning: {w}", "yellow"))
    console.print(text(f"run folder: {run.path}"))


def print_runs(console: Console, runs: list[Run]) -> None:
    t = Table()
    for col in ("run", "name", "tool", "status", "created (UTC)", "command"):
        t.add_column(col)
    for r in runs:
        m = r.manifest
        tool = m.get("tool") or {}
        cmd = " ".join(m.get("command") or [m.get("source") or ""])
        t.add_row(
            text(r.id),
            text(m.get("name") or ""),
            text(f"{tool.get('name') or ''} {tool.get('version') or ''}"),
            text(m.get("status") or "", "red" if m.get("status") == "damaged" else None),
            text(m.get("created_utc") or ""),
            text(cmd[-60:]),
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
    console.print(text(f"A: {a['id']}  ({a.get('name')})"))
    console.print(text(f"B: {b['id']}  ({b.get('name')})"))
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
            text(m["name"]),
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
                text(
                    f"{label} kernels: "
                    + ", ".join(k[:60] for k, _ in ks[:5])
                    + (" ..." if len(ks) > 5 else "")
                )
            )
    console.print(f"method: {result['method']}", markup=False, style="dim")
    if result["threshold_pct"] is not None:
        verdict = (
            f"{len(result['regressions'])} regression(s) over {result['threshold_pct']}%"
            if result["regressions"]
            else "no regression"
        )
        console.print(f"gate: {verdict}", markup=False, style="red" if result["regressions"] else "green")
