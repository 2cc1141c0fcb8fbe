"""An SLO capture (`roseinfer serve --capture-on ... --capture-dir DIR`, each file imported as a run): which requests
breached which limit, at which token and decode step, and why (roseprof/live/breach.py). `show` starts with them."""

from __future__ import annotations

from roseprof.analysis.sections.base import Context, Section, SectionResult

HEADLINES = 5  # breaches said first; the table lists every one the capture names


def compute(ctx: Context) -> SectionResult:
    if ctx.log is None or not isinstance(ctx.log.meta.get("slo_capture"), dict):
        return SectionResult()
    from roseprof.live.breach import breaches

    part = breaches(ctx.log)
    if part["malformed"]:
        ctx.warnings.append(
            f"the SLO capture's meta record lists {part['malformed']} malformed breach(es): left out"
        )
    return SectionResult(summary={"slo_capture": part})


def panels(summary: dict) -> list[dict]:
    part = summary.get("slo_capture")
    if not part:
        return []
    out = [
        {"title": b["line"], "columns": [], "rows": [], "note": None, "headline": True}
        for b in part["breaches"][:HEADLINES]
    ]
    rows = [
        [b["metric"], b["request_id"], f"{b['ms']:.1f}", b["token"], b["step"], b["cause"]]
        for b in part["breaches"]
    ]
    first, n = part["first_step"], part["steps"]
    note = (
        f"{part['breach_count']} breach(es) in this capture ({len(part['breaches'])} listed); server steps "
        f"{first}..{first + n - 1}; {part['skipped_before']} breach(es) before it fell in the rate limit's interval"
    )
    out.append(
        {
            "title": "SLO breaches that made the server write this capture (server clock)",
            "columns": ["limit", "request", "ms", "token", "step", "cause"],
            "rows": rows,
            "note": note,
        }
    )
    return out


SECTION = Section(
    name="slo_capture",
    compute=compute,
    checks={"slo_capture": ({"breaches": list, "breach_count": int, "first_step": int, "steps": int}, None)},
    panels=panels,
)
