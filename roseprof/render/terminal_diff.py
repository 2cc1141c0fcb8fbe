"""`roseprof diff` in the terminal: the verdict first (is after faster or slower than before?), then where the
time moved, then every metric (--top of them), the method and the gate."""

from __future__ import annotations

from rich.console import Console

from roseprof.render import text
from roseprof.render.terminal import fit_table
from roseprof.render.verdict_text import (
    headline_sentence,
    machine_line,
    one_run_note,
    options_line,
    samples_note,
    side_line,
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


def print_verdict(console: Console, v: dict) -> None:
    # The first lines say what is compared: the options apart, each side's run(s), and with one run a side what
    # that cannot see.
    options = options_line(v)
    if options:
        console.print(options, markup=False, overflow="fold")
    console.print(side_line("before", v["before"]), markup=False, overflow="fold")
    console.print(side_line("after", v["after"]), markup=False, overflow="fold")
    note = one_run_note(v)
    if note:
        console.print(note, markup=False, style="yellow", overflow="fold")
    console.print(
        headline_sentence(v),
        markup=False,
        style=f"bold {STYLE.get(v['overall'], '')}".strip(),
        overflow="fold",
    )
    machine = machine_line(v)
    if machine:
        console.print(machine, markup=False, style="yellow", overflow="fold")
    headers = ["figure", "before", "after", "change [95% CI]", "verdict"]
    # The figures and the verdict stay whole (they are the answer); a figure's name gives way first.
    console.print(
        fit_table(
            console, None, headers, _change_rows(v["headline"]), {0: text.shorten_middle},
            keep=set(range(5)), whole={1, 2, 3, 4},
        )
    )  # fmt: skip
    console.print(samples_note(v), markup=False, style="dim")
    for key, title in (("regions", "regions"), ("kernels", "kernels")):
        changes = v[key]
        if not changes:
            continue
        per = "per decode step" if changes[0].get("per_step") else "per run"
        what = what_moved_in(changes)
        shrink = {0: text.shorten_middle if key == "regions" else text.kernel_name}
        rows = _change_rows(changes)
        if key == "kernels":  # one base name, several kernels: each keeps its tag
            for row, label in zip(rows, text.kernel_labels([r["label"] for r in changes])):
                row[0] = label
        console.print(
            fit_table(
                console,
                f"where the time moved: {title} ({what} {per}, beyond the noise floor, most moved first)",
                [key[:-1], "before", "after", "change [95% CI]", "verdict"],
                rows,
                shrink,
            )
        )
    for label, names in (("new kernels", v["new_kernels"]), ("vanished kernels", v["vanished_kernels"])):
        if names:
            shown = ", ".join(text.kernel_name(n, 60) for n in names)
            console.print(f"{label}: {shown}", markup=False)


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


def print_diff(console: Console, result: dict, top: int) -> None:
    print_verdict(console, result["verdict"])
    print_gpu_time(console, result["metrics"])
    metrics = result["metrics"]
    labels = [text.metric_label(m["name"], m.get("per_step", False)) for m in metrics[:top]]
    # Region labels share their program's prefix (`roseinfer.`): left out (and said) so names fit 80 columns.
    prefix = text.common_prefix([label.rpartition(" · ")[0] for label in labels if " · " in label])
    rows = []
    for m, label in zip(metrics[:top], labels):
        unit = text.metric_unit(m["name"])
        # One character for a change beyond the noise floor, so that 80 columns keep the figures whole; a
        # regression stays loud.
        flag = "REGRESSION" if m.get("regression") else ("*" if m["significant"] else "")
        rows.append(
            [
                text.without_prefix(label, prefix),
                text.value(unit, m["a"]),
                text.value(unit, m["b"]),
                text.change(m["delta_pct"], m["ci_low_pct"], m["ci_high_pct"]),
                flag,
            ]
        )
    title = f"all metrics, by evidence then size ({min(top, len(metrics))} of {len(metrics)})"
    if prefix:
        title += f"; regions without {prefix}"
    headers = ["metric", "before", "after", "change [95% CI]", ""]
    console.print(fit_table(console, title, headers, rows, {0: text.shorten_label}, whole={1, 2, 3}))
    if any(r[4] == "*" for r in rows):
        console.print(
            "* a change the verdict names: the 95% interval clears its noise floor (a region's or kernel's by the "
            "statistic where the time moved judges it)",
            markup=False,
            style="dim",
        )
    console.print(
        "order: changes (*), intervals clear of 0, other intervals, figures with none",
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
