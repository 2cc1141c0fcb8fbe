"""Terminal rendering of runs with rich: the summary after a capture, `ls`, `show` (the diff: terminal_diff.py).

Tables fit the console (console.py: 80 columns and up): columns with nothing in them are dropped (GPU columns of a
CPU run), long names are shortened in the middle so their distinguishing tail survives, run ids are never cut
(users copy them), and commands are cut at a word with an ellipsis.
"""

from __future__ import annotations

import os

from rich.console import Console
from rich.text import Text

from roseprof.render import commands, kernel_labels, text, units, wrap
from roseprof.render.console import fit_table
from roseprof.render.safe_text import plain
from roseprof.render.view import RunRecord, RunView
from roseprof.workload.roseinfer import CAPTURE_ENV

MIN_RUN_NAME = 10  # `ls` keeps a run's name, shortened in the middle to no fewer characters than this
MIN_COMMAND = 12  # `ls` shows a command cut to no fewer characters than this, or none


def print_summary(
    console: Console, run: RunRecord, summary: dict | None, top: int = 12, panels: list[dict] = ()
) -> None:
    """The run in the terminal. `panels`: the plain tables of analysis sections that have no view of their own
    here (analysis/sections/, api.section_panels), printed after the built-in views."""
    m = run.manifest
    head = Text.assemble(
        (plain(run.id), "bold"),
        plain(f"  {commands.tool_label(m.get('tool') or {})}  status "),
        (plain(m.get("status")), "bold"),
    )
    if head.cell_len > console.width:  # a long imported id: the id alone on its line, whole
        head = Text.assemble(
            (plain(run.id), "bold"),
            "\n" + plain(f"{commands.tool_label(m.get('tool') or {})}  status "),
            (plain(m.get("status")), "bold"),
        )
    console.print(head, overflow="fold")
    for (
        panel
    ) in panels:  # a section's verdict line (a load's "p99 ITL ..., goodput ..."): first, before the rest
        if panel.get("headline"):
            console.print(plain(panel["title"]), markup=False, overflow="fold", style="bold")
    panels = [p for p in panels if not p.get("headline")]
    if m.get("command"):
        console.print(plain(f"command: {' '.join(map(str, m['command']))}"), markup=False, overflow="fold")
    elif m.get("source"):
        _print_path(console, "imported from", m["source"])
    for key in ("message", "damaged"):
        if m.get(key):
            _say(console, plain(f"  {m[key]}"))
    if summary is None:
        _print_path(console, "run folder", run.path)
        return
    # Why the ranks' timings cannot be compared: before any figure, since every cross-rank figure below is in doubt.
    for doubt in (summary.get("rank_clock") or {}).get("doubts") or []:
        console.print(plain(f"warning: {doubt}"), markup=False, style="yellow")
    if summary.get("steady"):
        print_steady(console, summary["steady"], top)
    _print_regions(console, run, summary, top)
    _print_kernels(console, summary)
    if summary.get("ncu"):
        _print_ncu(console, summary["ncu"])
    steps = summary.get("steps")
    if steps:
        _say(console, plain(text.steps_line(steps)))
        sentence = text.rollover_sentence(steps) if steps.get("kind", "decode") == "decode" else None
        if sentence:
            _say(console, plain(sentence))
    itl = summary.get("itl")
    if itl and itl.get("count"):
        at, el = itl["at_rollover"], itl["elsewhere"]
        fmt = lambda x: "-" if x is None else f"{x:.3f}"  # noqa: E731
        line = f"ITL ms: p50 {fmt(itl['p50_ms'])}  p95 {fmt(itl['p95_ms'])}  p99 {fmt(itl['p99_ms'])}"
        if at.get("count"):
            line += f"  |  at rollover p99 {fmt(at['p99_ms'])}  elsewhere p99 {fmt(el['p99_ms'])}"
        _say(console, line)
    if summary.get("spikes"):
        print_spikes(console, summary["spikes"])
    req = summary.get("requests")
    if req:
        _say(
            console,
            f"requests: {req['count']}  completion tokens {req['completion_tokens']:,}  "
            f"throughput {req['throughput_tok_s']:,.1f} tok/s  TTFT p50 {req['ttft']['p50_ms']:.2f} ms",
        )
    for panel in panels:
        print_panel(console, panel)
    for w in summary.get("warnings") or []:
        _say(console, plain(f"warning: {w}"), style="yellow")
    _print_path(console, "run folder", run.path)


def _say(console: Console, line: str, style: str | None = None) -> None:
    """A line of figures or words, wrapped to the console between words, never between a number and its unit."""
    console.print(wrap.wrap_figures(line, console.width), markup=False, style=style, overflow="fold")


class TerminalRenderer:
    """A run in the terminal (`show`, and after a capture or import), from its view, fitted to the console."""

    def __init__(self, console: Console, top: int = 12):
        self.console, self.top = console, top

    def render(self, view: RunView) -> None:
        print_summary(self.console, view.run, view.summary, self.top, view.panels)


def print_panel(console: Console, panel: dict) -> None:
    """One section panel: {"title", "columns", "rows", "note"}, cells already text."""
    rows = [[str(c) for c in r] for r in panel.get("rows") or []]
    # The title on its own line: as a table title it would wrap to the width of a narrow table.
    console.print(plain(panel["title"]), markup=False, overflow="fold")
    if rows:
        # Names (the first column, and the columns a panel names) give way to fit.
        shrink = {i: text.shorten_middle for i in panel.get("shrink") or [0]}
        console.print(fit_table(console, None, list(panel["columns"]), rows, shrink))
    if panel.get("note"):
        console.print(plain(panel["note"]), markup=False)


def _print_path(console: Console, label: str, path) -> None:
    """`label: PATH` on one line, never cut or folded, so that it copies whole (a terminal wraps it softly)."""
    console.print(plain(f"{label}: {path}"), markup=False, highlight=False, soft_wrap=True)


def print_steady(console: Console, steady: dict, top: int = 12) -> None:
    """Per step in steady state: host and GPU time per region, mean and median; what was left out."""
    headers, rows = units.steady_table(steady, steady["regions"][:top], f"(whole {steady['unit']})")
    console.print(fit_table(console, text.steady_title(steady), headers, rows, {0: text.shorten_middle}))
    if "own CPU p5" in headers:
        console.print(
            plain("  own CPU (µs): a region's thread CPU time less its children's (no core waits)"),
            markup=False, style="dim",
        )  # fmt: skip
    if len(steady["regions"]) > top:
        console.print(f"  ... {len(steady['regions']) - top} more regions (--json)", markup=False)
    if steady.get("graph_replays"):
        console.print(plain(f"  {text.GRAPH_NOTE}"), markup=False, style="dim")
    # Notes wrapped as every line of figures is: continuation lines indented, a figure kept with its unit.
    for note in (
        text.overlap_note(steady),
        text.concurrency_note(steady),
        text.gpus_note(steady),
        text.left_out_sentence(steady),
    ):
        if note:
            _say(console, plain(f"  {note}"), style="dim")


def _print_regions(console: Console, run: RunRecord, summary: dict, top: int) -> None:
    regions = summary.get("regions") or []
    if not regions:
        return
    graphs = any(r.get("gpu_ns") != r.get("gpu_kernel_ns") for r in regions)
    headers = ["region", "count", "total ms", "self ms", "p50 µs", "p99 µs", "GPU proj ms", "GPU kern ms"]
    rows = [units.region_cells(r) for r in regions[:top]]
    if graphs:
        # The launch rule (nsys stats) puts a graph replay's kernels under the launch; this column does not.
        headers.append("GPU ms w/ graphs")
        for row, r in zip(rows, regions):
            row.append(units.ms(r.get("gpu_ns")))
    title = "time per region, whole run" + text.whole_run_note(summary.get("steady"))
    # At 80 columns a GPU run's columns leave no room for names: the percentiles go first, then nsys' columns.
    optional = (4, 5, 6, 7) if graphs else (4, 5)
    console.print(fit_table(console, title, headers, rows, {0: text.shorten_middle}, optional=optional))
    if graphs:
        console.print(
            plain("  GPU ms w/ graphs: CUDA-graph replays counted where captured (proj, kern: nsys stats' rule)"),
            markup=False, style="dim",
        )  # fmt: skip
    if len(regions) > top:
        console.print(
            plain(f"  ... {len(regions) - top} more regions (roseprof show {run.id} --json)"),
            markup=False,
            overflow="fold",
        )


def _print_kernels(console: Console, summary: dict) -> None:
    # Rows by the region a kernel ran for (graph replays: where captured); older runs: by launching region.
    kernels = summary.get("kernel_regions") or summary.get("kernels") or []
    if not kernels:
        return
    shown = kernels[:8]
    # tagged where a kernel of the run's table outside these rows shares a shown one's base name, too
    labels = kernel_labels.kernel_labels([k["name"] for k in shown], [k["name"] for k in kernels])
    rows = [
        [label, k["region"] or "-", f"{k['count']:,}", units.ms(k["total_ns"]), units.us(k["p50_ns"])]
        for label, k in zip(labels, shown)
    ]
    headers = ["kernel", "region", "count", "total ms", "p50 µs"]
    shrink = {0: kernel_labels.kernel_name, 1: text.shorten_middle}
    # A kernel name needs more room than a region's to stay recognisable: the median goes first.
    console.print(fit_table(console, "top kernels", headers, rows, shrink, optional=(4,), min_width={0: 36}))
    if any(k.get("graph_count") for k in shown):
        console.print(
            plain("  region: innermost; CUDA-graph replays are in the region they were captured in"),
            markup=False,
            style="dim",
        )


def _tool(m: dict) -> str:
    tool = m.get("tool", {})
    raw = str(tool.get("version") or "")
    version = (
        ".".join(raw.split(".")[:2]) if raw != "?" else ""
    )  # 2025.3.2.0 -> 2025.3; unknown: the name alone
    return f"{tool.get('name', '')} {version}".strip()


def _print_ncu(console: Console, ncu: dict, top: int = 8) -> None:
    """Nsight Compute runs: the key metrics per kernel (means over its profiled launches) and the top findings."""
    pct = lambda x: "-" if x is None else f"{x:.1f}"  # noqa: E731
    headers = ["kernel", "launches", "µs", "SM %", "memory %", "DRAM % of peak BW", "occupancy %"]
    # a tag where kernels share a base name (three CUTLASS GEMMs are all `cutlass::device_kernel`)
    label = kernel_labels.label_of([k["name"] for k in ncu["kernels"]])
    rows = [
        [
            label[k["name"]],
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
            console,
            "ncu: per kernel, mean over profiled launches",
            headers,
            rows,
            {0: kernel_labels.kernel_name},
        )
    )
    for r in [r for r in ncu["rules"] if r["speedup_pct"]][:3]:
        # Names from the file: control characters written out; a long kernel name cut visibly, as in the table.
        kernel = kernel_labels.kernel_name(plain(label.get(r["kernel"], r["kernel"])), 50)
        _say(console, f"ncu finding: {kernel}: {plain(r['rule'])} (est. speedup {r['speedup_pct']:.1f}%)")
    console.print(plain(f"note: {ncu['note']}"), markup=False, style="dim")


def print_spikes(console: Console, spikes: dict) -> None:
    """The ITL spikes: one main cause per spike token, with what took the time; the tokens left out."""
    _say(
        console,
        f"ITL spikes: {spikes['spike_tokens']:,} of {spikes['tokens']:,} tokens ({spikes['spike_steps']} steps) "
        f"above {spikes['threshold_ms']:.3f} ms = {spikes['definition'].removeprefix('ITL above ')}",
    )
    line = text.left_out_line(spikes.get("left_out"))
    if line:
        _say(console, plain(line))
    if not spikes["causes"]:
        return
    rows = [
        [c["label"], f"{c['tokens']:,}", f"{c['share_pct']:.1f}", f"{c['added_p50_ms']:.3f}",
         f"{c['added_total_ms']:.1f}"]
        for c in spikes["causes"]
    ]  # fmt: skip
    headers = ["main cause", "tokens", "share %", "added p50 ms", "added total ms"]
    console.print(fit_table(console, "spike causes (one per spike token)", headers, rows))
    for c in spikes["causes"]:  # the evidence: where each cause's time went
        _say(console, plain(f"  {c['label']}: {text.evidence_text(c.get('evidence'))}"))


def print_runs(console: Console, runs: list[RunRecord]) -> None:
    headers = ["run", "name", "tool", "status", "created (UTC)", "command"]
    # The command column says what tells the runs apart (the flags and switches not every run of the program
    # has); `show` prints the whole command.
    apart = commands.commands_apart([(_argv(r.manifest), _switches(r.manifest)) for r in runs])
    rows = [
        [
            r.id,
            r.manifest.get("name", ""),
            _tool(r.manifest),
            r.manifest.get("status", ""),
            r.manifest.get("created_utc", ""),
            cmd if cmd is not None else f"import {os.path.basename(str(r.manifest.get('source') or ''))}",
        ]
        for r, cmd in zip(runs, apart)
    ]
    # The name is what `diff` and `baseline` take: it stays whole while any other column can give way. The command
    # is cut first (at a word, while it keeps MIN_COMMAND characters); then the columns go: the creation time
    # first (the run id holds it), then the tool, then the command (`show` prints it whole). Only then, beside ids
    # that leave no room (a live capture's, live-HOST-PORT, is 41 characters and up), is the name shortened in the
    # middle, to MIN_RUN_NAME characters; it goes only where the id leaves it no room at all (an import's id of 60
    # characters, which holds its name). The id and the status are never cut (users copy ids; a cut status reads
    # as another word).
    console.print(
        fit_table(
            console, None, headers, rows, {1: text.shorten_middle, 5: _command}, keep={0, 1, 3},
            optional=(4, 2, 5, 1), whole={0, 3}, min_width={1: MIN_RUN_NAME, 5: MIN_COMMAND}, cut_last={1},
        ),
        crop=False,
    )  # fmt: skip


def _command(command: str, width: int) -> str:
    """`ls`'s command cell in `width` columns: cut at a word where that keeps MIN_COMMAND characters, else at the
    width (`import cpu-…`, not `import…`, which tells nothing)."""
    shown = commands.command(command, width)
    if shown.endswith(text.ELLIPSIS) and len(shown) < min(width, MIN_COMMAND):
        return command[: width - 1].rstrip() + text.ELLIPSIS
    return shown


def _argv(m: dict) -> list[str] | None:
    cmd = m.get("command")
    if isinstance(cmd, str) and cmd:
        return [cmd]
    return [str(w) for w in cmd] if isinstance(cmd, list) and cmd else None


def _switches(m: dict) -> dict:
    """The engine switches a run's program ran with, less those the capture set itself."""
    env = (m.get("environment") or {}).get("env") if isinstance(m.get("environment"), dict) else None
    return (
        {k: str(v) for k, v in (env or {}).items() if k not in CAPTURE_ENV} if isinstance(env, dict) else {}
    )
