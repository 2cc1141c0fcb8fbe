"""Terminal rendering of runs with rich: the summary after a capture, `ls`, `show` (the diff: terminal_diff.py).

Tables fit the console (80 columns and up): columns with nothing in them are dropped (GPU columns of a CPU
run), long names are shortened in the middle so their distinguishing tail survives, run ids are never cut
(users copy them), and commands are cut at a word with an ellipsis.
"""

from __future__ import annotations

from rich import box
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from roseprof.render import text, units
from roseprof.render.safe_text import plain
from roseprof.run.store import Run

MIN_NAME = 24  # a shortened name keeps at least this many characters (room for a last component)


def make_console() -> Console:
    """A console for summaries; wide when not a terminal, so a log or a pipe gets names whole."""
    console = Console()
    return console if console.is_terminal else Console(width=160)


def _empty(cells) -> bool:
    return all(c in ("-", "") for c in cells)


def fit_table(
    console: Console,
    title: str | None,
    headers: list[str],
    rows: list[list[str]],
    shrink: dict[int, callable] | None = None,
    keep: set[int] = frozenset({0}),
    optional: tuple[int, ...] = (),
    whole: set[int] = frozenset(),
) -> Table:
    """A table of `rows` that fits the console. `shrink` maps a column to fit(text, width) used to narrow it;
    columns whose cells are all empty are dropped (except those in `keep`); `optional` columns are dropped, in
    order, while the shrinkable ones would otherwise go below MIN_NAME; `whole` columns are never cut (run ids)."""
    shrink = shrink or {}
    rows = [
        [plain(c) for c in r] for r in rows
    ]  # names from traces: no control characters reach the terminal
    cols = [i for i in range(len(headers)) if i in keep or not _empty(r[i] for r in rows)]

    def build(cols: list[int], widths: dict[int, int]) -> Table:
        t = Table(
            title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True
        )
        for i in cols:
            left = i in shrink or i == 0
            width = max([len(headers[i])] + [len(r[i]) for r in rows]) if i in whole else None
            t.add_column(headers[i], justify="left" if left else "right", no_wrap=True, min_width=width)
        for r in rows:
            # Text, not markup: kernel names hold brackets ("[lambda(int) (instance 1)]") rich would eat.
            t.add_row(*(Text(shrink[i](r[i], widths[i]) if i in widths else r[i]) for i in cols))
        return t

    def natural(cols: list[int]) -> int:
        return Measurement.get(console, console.options.update(width=10**5), build(cols, {})).maximum

    while True:
        excess = natural(cols) - console.width
        if excess <= 0:
            return build(cols, {})
        targets = [i for i in cols if i in shrink]
        room = {i: max(len(r[i]) for r in rows) if rows else 0 for i in targets}
        give = sum(max(0, w - MIN_NAME) for w in room.values())
        dropping = [i for i in optional if i in cols]
        if give >= excess or not dropping:
            floor = MIN_NAME if give >= excess else MIN_NAME // 2  # nothing left to drop: names give more
            widths, left = {}, excess
            for i in sorted(targets, key=lambda i: -room[i]):  # take from the widest first
                cut = min(left, max(0, room[i] - floor))
                widths[i] = room[i] - cut
                left -= cut
            return build(cols, widths)
        cols.remove(dropping[0])


def print_summary(console: Console, run: Run, summary: dict | None, top: int = 12) -> None:
    m = run.manifest
    tool = m.get("tool", {})
    console.print(
        Text.assemble(
            (plain(run.id), "bold"),
            plain(f"  {tool.get('name')} {tool.get('version') or ''}  status "),
            (plain(m.get("status")), "bold"),
        ),
        overflow="fold",
    )
    for key in ("message", "damaged"):
        if m.get(key):
            console.print(plain(f"  {m[key]}"), markup=False)
    if summary is None:
        console.print(plain(f"run folder: {run.path}"), markup=False, overflow="fold")
        return
    regions = summary.get("regions") or []
    if regions:
        headers = ["region", "count", "total ms", "self ms", "p50 µs", "p99 µs", "GPU proj ms", "GPU kern ms"]
        rows = [units.region_cells(r) for r in regions[:top]]
        # At 80 columns a GPU run's eight columns leave no room for names: the percentiles go first.
        table = fit_table(
            console, "time per region", headers, rows, {0: text.shorten_middle}, optional=(4, 5)
        )
        console.print(table)
        if len(regions) > top:
            console.print(
                plain(f"  ... {len(regions) - top} more regions (roseprof show {run.id} --json)"),
                markup=False,
            )
    kernels = summary.get("kernels") or []
    if kernels:
        rows = [
            [k["name"], k["region"] or "-", f"{k['count']:,}", units.ms(k["total_ns"]), units.us(k["p50_ns"])]
            for k in kernels[:8]
        ]
        headers = ["kernel", "region", "count", "total ms", "p50 µs"]
        shrink = {0: text.kernel_name, 1: text.shorten_middle}
        console.print(fit_table(console, "top kernels", headers, rows, shrink))
    if summary.get("ncu"):
        _print_ncu(console, summary["ncu"])
    steps = summary.get("steps")
    if steps:
        roll, norm = steps["rollover"], steps["normal"]
        d = text.duration
        console.print(
            f"decode steps: {steps['count']:,}  p50 {d(steps['p50_ns'])}  p99 {d(steps['p99_ns'])}  |  "
            f"rollover ({roll['count']:,}) p50 {d(roll['p50_ns'])}  vs normal ({norm['count']:,}) p50 "
            f"{d(norm['p50_ns'])}",
            markup=False,
        )
        sentence = text.rollover_sentence(steps)
        if sentence:
            console.print(plain(sentence), markup=False)
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
        console.print(plain(f"warning: {w}"), markup=False, style="yellow")
    console.print(plain(f"run folder: {run.path}"), markup=False, overflow="fold")


def _tool(m: dict) -> str:
    tool = m.get("tool", {})
    version = ".".join(str(tool.get("version", "")).split(".")[:2])  # 2025.3.2.0 -> 2025.3
    return f"{tool.get('name', '')} {version}".strip()


def _print_ncu(console: Console, ncu: dict, top: int = 8) -> None:
    """Nsight Compute runs: the key metrics per kernel (means over its profiled launches) and the top findings."""
    pct = lambda x: "-" if x is None else f"{x:.1f}"  # noqa: E731
    headers = ["kernel", "launches", "µs", "SM %", "memory %", "DRAM % of peak BW", "occupancy %"]
    rows = [
        [
            k["name"],
            f"{k['launches']:,}",
            units.us(k["mean_duration_ns"]),
            pct(k["mean_sm_throughput_pct"]),
            pct(k["mean_memory_throughput_pct"]),
            pct(k["mean_dram_bandwidth_pct_of_peak"]),
            pct(k["mean_achieved_occupancy_pct"]),
        ]
        for k in ncu["kernels"][:top]
    ]
    console.print(
        fit_table(
            console, "ncu: per kernel, mean over profiled launches", headers, rows, {0: text.kernel_name}
        )
    )
    for r in [r for r in ncu["rules"] if r["speedup_pct"]][:3]:
        console.print(
            f"ncu finding: {r['kernel'][:50]}: {r['rule']} (est. speedup {r['speedup_pct']:.1f}%)",
            markup=False,
        )
    console.print(plain(f"note: {ncu['note']}"), markup=False, style="dim")


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
    headers = ["run", "name", "tool", "status", "created (UTC)", "command"]
    rows = [
        [
            r.id,
            r.manifest.get("name", ""),
            _tool(r.manifest),
            r.manifest.get("status", ""),
            r.manifest.get("created_utc", ""),
            text.command(r.manifest.get("command") or [r.manifest.get("source", "")], 10**6),
        ]
        for r in runs
    ]
    # The run id holds the creation time and the name: those columns go first when room is short, then the
    # tool; the id is never cut (users copy it), the command is cut at a word.
    console.print(
        fit_table(
            console, None, headers, rows, {5: text.command}, keep={0, 5}, optional=(4, 1, 2), whole={0}
        ),
        crop=False,
    )
