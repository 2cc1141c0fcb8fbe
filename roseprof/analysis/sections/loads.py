"""Several loads in one run (`roseprof load --sweep RATES|auto`, `--repeat K`): summary.json's `loads` part (the
load writes it: roseprof/api/load.py) holds each load's `serving` part. A sweep's diff compares rate with rate
(the same rates on both sides; each rate's metrics are the single-load diff's, named `sweep.RATE/s.*`); a
repeat's K loads are K runs of a group to the diff (api/compare.load_samples), so it needs nothing here but
its panels. `show` prints the throughput-latency curve and names its knee (roseprof/load/sweep.py)."""

from __future__ import annotations

from roseprof.analysis.diff_metric import Sides, figure
from roseprof.analysis.run_data import RunData
from roseprof.analysis.sections import serving
from roseprof.analysis.sections.base import Section, SectionResult
from roseprof.errors import RoseprofError
from roseprof.load import sweep
from roseprof.run.checks import OPT_NUM

CURVE_ROW = {
    "asked_rate": OPT_NUM,
    "sent_rate": OPT_NUM,
    "achieved_rate": OPT_NUM,
    "output_tok_s": OPT_NUM,
    "ttft_p50_ms": OPT_NUM,
    "ttft_p99_ms": OPT_NUM,
    "itl_p50_ms": OPT_NUM,
    "itl_p99_ms": OPT_NUM,
    "goodput_pct": OPT_NUM,
    "loads": (int, None),  # the loads a point is the median of (--repeat)
}
CHECKS = {
    "loads": (
        {
            "kind": str,
            "parts": [serving.CHECKS["serving"][0]],
            "curve": ([CURVE_ROW], None),
            "knee": (dict, None),
        },
        None,
    )
}


def label(rate: float) -> str:
    """A sweep point's name in metric names: `sweep.10/s.ttft.p50_ms`."""
    return f"{rate:g}/s"


def part_runs(part: dict, tokens: list | None, k: int) -> RunData:
    """The k-th load of a run of several, as a run of its own (the single-load diff's samples)."""
    rows = [r for r in tokens or [] if r.get("load") == k]
    return RunData({"serving": part}, sections={"serving": serving.part_samples(part, rows)})


def sweep_points(summary: dict, tokens: list | None) -> dict[str, list[RunData]] | None:
    """A sweep's points by rate (label -> its loads, one each or K with --repeat K); None for a run that is no
    sweep."""
    loads = summary.get("loads")
    if not loads or loads["kind"] != "sweep":
        return None
    out: dict[str, list[RunData]] = {}
    for k, p in enumerate(loads["parts"]):
        out.setdefault(label(p["plan"]["rate"]), []).append(part_runs(p, tokens, k))
    return out


def check_comparable(before: list[RunData], after: list[RunData]) -> None:
    """Refuse, in one line, a diff of a sweep with a run that is no sweep, or of sweeps that share no rate."""
    points = [r.sections.get("sweep") for r in before + after]
    if all(p is None for p in points):
        return
    if any(p is None for p in points):
        raise RoseprofError("a sweep compares only with a sweep (roseprof load --sweep on both sides)")
    rates = lambda g: sorted({float(k[:-2]) for r in g for k in r.sections["sweep"]})  # noqa: E731
    if not set.intersection(*(set(p) for p in points)):
        listed = lambda g: ", ".join(f"{x:g}" for x in rates(g))  # noqa: E731
        raise RoseprofError(
            f"the sweeps share no rate (before {listed(before)}; after {listed(after)} req/s): sweep the same "
            f"rates on both sides, e.g. --sweep {','.join(f'{x:g}' for x in rates(before))}"
        )


def diff_sweep(sides: Sides) -> list[dict]:
    """Rate by rate, the rates both sides measured: each rate's latencies (bootstrap over its requests, with the
    diff's one generator; a rate measured K times is a group of K loads, as a repeat's) and its throughput and
    goodput (one figure a run: never a change alone)."""
    points = [r.sections.get("sweep") for r in sides.runs]
    if not points or any(p is None for p in points):
        return []
    shared = sorted(set.intersection(*(set(p) for p in points)), key=lambda s: float(s[:-2]))
    out = []
    for rate in shared:
        sub = Sides([d for r in sides.before for d in r.sections["sweep"][rate]],
                    [d for r in sides.after for d in r.sections["sweep"][rate]], sides.rng,
                    sides.pending)  # fmt: skip
        named = serving.diff_serving(sub) + [
            figure(m["name"], m["a"], m["b"], m["lower_is_better"])
            for m in serving.diff_figures(sub.before, sub.after)
        ]
        for m in named:
            m["name"] = f"sweep.{rate}." + m["name"].removeprefix("serving.")
            m["rate"] = float(rate[:-2])
        out += named
    return out


def _fmt(x, digits: int = 3) -> str:
    if x is None:
        return "-"
    return f"{x:.{digits}g}" if abs(x) < 1000 else f"{x:,.0f}"


def curve_table(rows: list[dict], first: list[str], first_title: str, marked: int | None = None) -> dict:
    """The throughput-latency table (80 columns): one row a load."""
    body = []
    for i, (name, r) in enumerate(zip(first, rows)):
        body.append([
            name + (" *" if i == marked else ""), _fmt(r["achieved_rate"]), _fmt(r["output_tok_s"]),
            _fmt(r["ttft_p50_ms"]), _fmt(r["ttft_p99_ms"]), _fmt(r["itl_p50_ms"]), _fmt(r["itl_p99_ms"]),
            "-" if r["goodput_pct"] is None else f"{r['goodput_pct']:.1f}",
        ])  # fmt: skip
    return {
        "title": "throughput and latency (req/s, tok/s, ms; client clock)",
        "columns": [first_title, "done/s", "tok/s", "TTFT p50", "p99", "ITL p50", "p99", "good %"],
        "rows": body,
        "note": None,
    }


def panels(summary: dict) -> list[dict]:
    loads = summary.get("loads")
    if not loads:
        return []
    parts = loads["parts"]
    if loads["kind"] == "sweep":
        curve = sorted(loads["curve"], key=lambda r: r["asked_rate"])
        knee = loads["knee"]
        marked = knee.get("index") if knee.get("saturated") else None
        table = curve_table(curve, [f"{r['asked_rate']:g}" for r in curve], "rate", marked)
        what = f"* the knee; past it, {knee['why']}" if marked is not None else f"no knee: {knee['why']}"
        table["note"] = f"{what}. done/s: requests completed per second while they completed"
        if loads.get("repeat", 1) > 1:
            table["note"] += f"; each rate the median of its {loads['repeat']} loads"
        probes = loads.get("probes") or []
        facts = [["probe", f"{p['concurrency']} at a time: {p['requests_s']:.3g} req/s, {p['output_tok_s']:,.0f} "
                           "tok/s"] for p in probes]  # fmt: skip
        out = [{"title": sweep.headline(curve, knee), "columns": [], "rows": [], "note": None, "headline": True},
               table]  # fmt: skip
        if facts:
            out.append({"title": "--sweep auto found its rates from", "columns": ["", ""], "rows": facts,
                        "note": None})  # fmt: skip
        return out
    rows = [sweep.curve_row(p) for p in parts]
    p99 = [r["itl_p99_ms"] for r in rows if r["itl_p99_ms"] is not None]
    spread = f"p99 ITL {_fmt(min(p99))}-{_fmt(max(p99))} ms" if p99 else "no ITL"
    good = [r["goodput_pct"] for r in rows if r["goodput_pct"] is not None]
    goodput = f"goodput {min(good):.1f}-{max(good):.1f}%" if good else "goodput -"
    at = serving.verdict_line(parts[0]).rsplit(" at ", 1)[1]
    head = f"{len(parts)} loads of one schedule: {spread}, {goodput} at {at}"
    return [
        {"title": head, "columns": [], "rows": [], "note": None, "headline": True},
        curve_table(rows, [str(k + 1) for k in range(len(rows))], "load"),
    ]


SECTION = Section(
    name="loads",
    compute=lambda ctx: SectionResult(),
    applies=lambda trace: False,
    checks=CHECKS,
    diff_samples={"sweep": diff_sweep},
    panels=panels,
)
