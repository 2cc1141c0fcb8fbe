"""`roseprof diff` in the terminal: the verdict first (is after faster or slower than before?), then where the
time moved, then every metric (--top of them), the method and the gate."""

from __future__ import annotations

import re
import textwrap

from rich import box
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

from roseprof.render import kernel_labels, text
from roseprof.render.console import fit_table
from roseprof.render.verdict_text import (
    headline_sentence,
    machine_line,
    one_run_note,
    options_line,
    per_what,
    samples_note,
    side_line,
    tools_note,
    what_moved_in,
)
from roseprof.render.view import DiffView

STYLE = {"faster": "green", "slower": "red", "mixed": "yellow"}


def _change_rows(rows: list[dict]) -> list[list[str]]:
    return [
        [
            r["label"],
            text.value(r["unit"], r["before"]),
            text.value(r["unit"], r["after"]),
            text.change(r["delta_pct"], r["ci_low_pct"], r["ci_high_pct"]),
            # a kernel run more or fewer times a step: how many, which is the point
            f"{r['word']} ({r['launches_before']:.2g}→{r['launches_after']:.2g})"
            if "launches_before" in r
            # a wall-clock figure that a slower machine explains (decision.py): the machine's, not the code's
            else (f"{r['word']} (machine)" if r.get("machine") else r["word"]),
        ]
        for r in rows
    ]


# A number and its unit in a sentence (`+417.5 µs`, `-12.3 ms`): one word to the wrapping.
NUMBER_UNIT = re.compile(r"(\d) (ns|µs|ms|s|tok/s)\b")
NO_BREAK = "\x00"  # a space textwrap does not break at (it breaks at ASCII whitespace only), put back after


def with_units(sentence: str, width: int) -> str:
    """A sentence wrapped to `width` at its spaces, never between a number and its unit (rich's wrapping split
    `(+417.5` / `µs p5 own CPU time per step)` over two lines)."""
    joined = NUMBER_UNIT.sub(lambda m: f"{m.group(1)}{NO_BREAK}{m.group(2)}", sentence)
    lines = textwrap.wrap(joined, width, break_on_hyphens=False) or [""]
    return "\n".join(lines).replace(NO_BREAK, " ")


def print_verdict(console: Console, v: dict, name=lambda n: n, prefix: str = "") -> None:
    """The verdict block; `name` gives each region's one short form in this output (print_diff), `prefix` the
    program prefix its tables leave out."""
    # The first lines say what is compared: the options apart, each side's run(s), and with one run a side what
    # that cannot see.
    options = options_line(v)
    if options:
        console.print(options, markup=False, overflow="fold")
    console.print(side_line("before", v["before"]), markup=False, overflow="fold")
    console.print(side_line("after", v["after"]), markup=False, overflow="fold")
    for note in (tools_note(v), one_run_note(v)):
        if note:
            console.print(note, markup=False, style="yellow", overflow="fold")
    console.print(
        with_units(headline_sentence(v), console.width),
        markup=False,
        style=f"bold {STYLE.get(v['overall'], '')}".strip(),
        overflow="fold",
    )
    machine = machine_line(v)
    if machine:
        console.print(with_units(machine, console.width), markup=False, style="yellow", overflow="fold")
    headers = ["figure", "before", "after", "change [95% CI]", "verdict"]
    # The figures and the verdict stay whole (they are the answer); a figure's name gives way first.
    console.print(
        fit_table(
            console, None, headers, _change_rows(v["headline"]), {0: text.shorten_middle},
            keep=set(range(5)), whole={1, 2, 3, 4},
        )
    )  # fmt: skip
    console.print(samples_note(v), markup=False, style="dim")
    at_rollover = ("rollover_regions", "regions at rollover steps")
    for key, title in (("regions", "regions"), at_rollover, ("kernels", "kernels")):
        changes = v.get(key) or []
        if not changes:
            continue
        per = per_what(changes)
        what = what_moved_in(changes)
        # (regions: short names already)
        shrink = {0: kernel_labels.kernel_name if key == "kernels" else _cut_statistic}
        rows = _change_rows(changes)
        if key != "kernels":
            for row, r in zip(rows, changes):
                row[0] = name(r["label"])
        if key == "kernels":  # one base name, several kernels: each keeps its tag
            labels = kernel_labels.kernel_labels([r["label"] for r in changes], v.get("kernel_names", ()))
            for row, label in zip(rows, labels):
                row[0] = label
        console.print(
            fit_table(
                console,
                f"where the time moved: {title} ({what} {per}, beyond the noise floor, most moved first)"
                + (f"; without {prefix}" if prefix and key == "regions" else ""),
                ["kernel" if key == "kernels" else "region", "before", "after", "change [95% CI]", "verdict"],
                rows,
                shrink,
                keep={0, 4},
                whole={1, 2, 3, 4},  # the figures and the verdict stay whole: the name gives way
            )
        )
    for line in kernel_change_lines(v):
        console.print(line, markup=False)


def kernel_change_lines(v: dict) -> list[str]:
    """ "new kernels: ..." and "vanished kernels: ...", each name shortened for the terminal. Both lists are labelled
    together: two instantiations of one template (new, vanished, or one of each) keep their tags, where their base
    names alone would read as one kernel twice, or as one both new and vanished."""
    new, gone = v["new_kernels"], v["vanished_kernels"]
    labels = kernel_labels.kernel_labels(new + gone, v.get("kernel_names", ()))
    lines = []
    for label, names in (("new kernels", labels[: len(new)]), ("vanished kernels", labels[len(new) :])):
        if names:
            lines.append(f"{label}: " + ", ".join(kernel_labels.kernel_name(n, 60) for n in names))
    return lines


class TerminalDiff:
    """A diff in the terminal (`roseprof diff`), from its view, fitted to the console: `top` metrics in the table."""

    def __init__(self, console: Console, top: int = 25):
        self.console, self.top = console, top

    def render(self, view: DiffView) -> None:
        print_diff(self.console, view.result, self.top)


GPU_FIGURES = (("gpu_step_ms", "step"), ("gpu_compute_ms", "compute"), ("gpu_exposed_ms", "exposed comm"),
               ("gpu_idle_ms", "idle"))  # fmt: skip


def print_gpu_time(console: Console, metrics: list[dict]) -> None:
    """Each rank's GPU step time split into compute, exposed communication and idle time, before -> after (the
    gpu_time section's figures): why a tensor-parallel step got faster, or did not."""
    by_rank: dict[str, dict[str, dict]] = {}
    for m in metrics:
        rank, _, figure = m["name"].partition(".")
        if rank.startswith("rank ") and figure in dict(GPU_FIGURES):
            by_rank.setdefault(rank, {})[figure] = m
    # Rank 0 first (the diff's metrics come ordered by evidence, not by rank).
    by_rank = dict(
        sorted(by_rank.items(), key=lambda kv: int(kv[0].split()[1]) if kv[0].split()[1].isdigit() else 0)
    )
    rows = [
        [rank] + [f"{f[key]['a']:.3f}→{f[key]['b']:.3f}" if key in f else "-" for key, _ in GPU_FIGURES]
        for rank, f in by_rank.items()
    ]
    if not rows:
        return
    console.print(
        fit_table(
            console,
            "GPU time per step (ms, p50, before→after)",
            ["", *dict(GPU_FIGURES).values()],
            rows,
        )
    )
    first, f = next(iter(by_rank.items()))
    if len(f) == len(GPU_FIGURES):
        said = ", ".join(
            f"{label} {f[key]['b'] - f[key]['a']:+.3f} ms" for key, label in GPU_FIGURES[1:]
        )  # fmt: skip
        console.print(
            f"{first}'s GPU step {f['gpu_step_ms']['a']:.3f} → {f['gpu_step_ms']['b']:.3f} ms: {said}",
            markup=False,
        )


# A region statistic in the terminal's table, in few characters (the dashboard keeps metric_label's words), so
# that at 80 columns a region's name keeps its distinguishing end.
COMPACT = {
    "time/step": "time", "self/step": "self", "self/step p5": "self p5", "CPU self/step": "cpu",
    "CPU self/step p5": "cpu p5", "CPU self/step p5 raw": "cpu p5 raw", "calls/step": "calls",
    "time/run": "time/run", "self/run": "self/run",
    # a region's time in the rollover steps and in the other steps (sections/steps.py): `…build_block_tables ·
    # rollover mean` is 35 characters, more than the 32 the metric column has at 80 columns, and was cut to
    # `rollover m…` (mean or p50?); these fit whole beside the longest name's distinguishing end (ROLL_LEGEND)
    "rollover mean": "roll mean", "rollover p50": "roll p50", "rollover CPU p50": "roll cpu",
    "normal mean": "norm mean", "normal p50": "norm p50", "normal CPU p50": "norm cpu",
}  # fmt: skip
ROLL_LEGEND = "roll / norm: in the rollover steps / in the other steps (cpu: the median of its CPU time)"
MIN_SHORT = 10  # a name this short is never shortened
ELLIPSIS = text.ELLIPSIS


def _natural(console: Console, headers: list[str], rows: list[list[str]]) -> int:
    """The width a table of these cells takes whole (fit_table's layout)."""
    t = Table(box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    for h in headers:
        t.add_column(h, no_wrap=True)
    for r in rows:
        t.add_row(*r)
    return Measurement.get(console, console.options.update(width=10**5), t).maximum


def _room(console: Console, headers: list[str], rows: list[list[str]]) -> int:
    """How many characters the first column has at the console's width, the others whole."""
    return console.width - _natural(console, headers, [["", *r[1:]] for r in rows]) + len(headers[0])


def short_names(names: list[str], width: int) -> dict[str, str]:
    """One short form per name for a whole diff output (issue 44: one region read `k…append_token`, `kv.a…ken`,
    `kv.a…token` and `…append_token` in one diff): a name that does not fit `width` keeps its longest run of
    whole trailing components that does (`…append_token`), or where not even its last one does, its last characters
    (`…ld_block_tables`: a statistic beside it stays whole; cut there, `norm me…` said neither mean nor p50)."""
    out = {}
    for n in names:
        parts = n.split(".")
        out[n] = n
        if len(n) > max(width, MIN_SHORT):
            tails = [".".join(parts[i:]) for i in range(1, len(parts))]
            fits = next((t for t in tails if len(t) + 1 <= width), None)
            out[n] = ELLIPSIS + (fits if fits is not None else n[-max(width - 1, MIN_SHORT - 1) :])
    return out


def _cut_statistic(label: str, width: int) -> str:
    """A metric label cut to `width` from its statistic's end, its (already short) name whole; first without the
    spaces around its ` · ` (a wider change column leaves the name column 29 characters, and
    `…build_block_tables·roll p50` then fits whole where `roll p…` would not say which statistic)."""
    if len(label) <= width:
        return label
    tight = label.replace(" · ", "·", 1)
    if len(tight) <= width:
        return tight
    return tight[: max(width - 1, 1)] + ELLIPSIS


def _split(label: str) -> tuple[str, str]:
    """(region or kernel name, its statistic in COMPACT words) of a metric label, or (label, "") for a figure."""
    name, sep, what = label.rpartition(" · ")
    return (name, COMPACT.get(what, what)) if sep else (label, "")


def print_diff(console: Console, result: dict, top: int) -> None:
    v = result["verdict"]
    metrics = result["metrics"]
    split = [_split(text.metric_label(m["name"], m.get("per_step", False))) for m in metrics[:top]]
    moved = [r["label"] for key in ("regions", "rollover_regions", "kernels") for r in v.get(key) or []]
    # Region labels share their program's prefix (`roseinfer.`): left out (and said) so names fit 80 columns.
    prefix = text.common_prefix([name for name, what in split if what] + moved)
    rows = []
    for m, (name, what) in zip(metrics[:top], split):
        unit = text.metric_unit(m["name"])
        # One character for a change the verdict names, one for the machine's (a slower machine's waits, not the
        # code: decision.py), one for a regression, so that 80 columns keep the figures whole and the marker column.
        flag = (
            "!" if m.get("regression") else ("m" if m.get("machine") else ("*" if m["significant"] else ""))
        )
        rows.append(
            [
                text.without_prefix(name, prefix) if what else name,
                text.value(unit, m["a"]),
                text.value(unit, m["b"]),
                text.change(m["delta_pct"], m["ci_low_pct"], m["ci_high_pct"]),
                flag or " ",
            ]
        )
    headers = ["metric", "before", "after", "change [95% CI]", ""]
    # One width for every region name in this output: the narrowest room its tables leave.
    widest_what = max((len(what) + 3 for _, what in split if what), default=0)
    rooms = [_room(console, headers, rows) - widest_what] if rows else []
    for key in ("regions", "rollover_regions", "kernels"):
        if v.get(key):
            moved_rows = [[r["label"], *c[1:]] for r, c in zip(v[key], _change_rows(v[key]))]
            rooms.append(
                _room(console, ["region", "before", "after", "change [95% CI]", "verdict"], moved_rows)
            )
    names = {n for n, what in split if what} | set(moved)
    short = short_names(sorted(text.without_prefix(n, prefix) for n in names), min(rooms, default=80))
    print_verdict(console, v, lambda n: short.get(text.without_prefix(n, prefix), n), prefix)
    print_gpu_time(console, metrics)
    for row, (_, what) in zip(rows, split):
        if what:
            row[0] = f"{short.get(row[0], row[0])} · {what}"
    title = f"all metrics, by evidence then size ({min(top, len(metrics))} of {len(metrics)})"
    if prefix:
        title += f"; regions without {prefix}"
    console.print(
        fit_table(console, title, headers, rows, {0: _cut_statistic}, keep={0, 4}, whole={1, 2, 3, 4})
    )
    marks = {r[4] for r in rows}
    if "*" in marks or "!" in marks or "m" in marks:
        console.print(
            "* a change the verdict names (its interval clears its noise floor; a region's or kernel's by the "
            "statistic where the time moved judges it); m one it puts down to the machine (its waits, not the "
            "code: never gated); ! a REGRESSION the gate fails on",
            markup=False,
            style="dim",
        )
    if any(what.startswith(("roll ", "norm ")) for _, what in split):
        console.print(ROLL_LEGEND, markup=False, style="dim")
    console.print(
        "order: changes (*, m), intervals clear of 0, other intervals, figures with none",
        markup=False,
        style="dim",
    )
    if len(metrics) > top:
        console.print(f"... {len(metrics) - top} more metrics (--top N, or --json for all)", markup=False)
    console.print(f"method: {result['method']}", markup=False, style="dim")
    if result["threshold_pct"] is not None:
        regressions = result["regressions"]
        verdict = (
            f"{len(regressions)} regression(s) over {result['threshold_pct']}%: " + ", ".join(regressions)
            if regressions
            else "no regression"
        )
        console.print(f"gate: {verdict}", markup=False, style="red" if regressions else "green")
