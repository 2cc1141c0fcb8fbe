"""Live: a `roseprof live` run's join of client requests to server steps (roseprof/live/join.py writes the part;
no trace is analysed here: `applies` is never true for a trace). `show` starts with its lines: the slowest
requests, by TTFT and by worst ITL, each with the step that made it slow and why."""

from __future__ import annotations

from roseprof.analysis.sections.base import Section, SectionResult


def panels(summary: dict) -> list[dict]:
    part = summary.get("live")
    if not part:
        return []
    out = [
        {"title": e["line"], "columns": [], "rows": [], "note": None, "headline": True}
        for e in part["slowest"]
    ]
    j, w = part["join"], part["window"]
    note = (
        f"server steps {w['first_step']}..{w['first_step'] + w['steps'] - 1} (step p50 "
        f"{w['step_p50_ms'] or 0:.2f} ms); client tokens {j['tokens']}: {j['joined']} joined to a step, "
        f"{j['prefill']} from a prefill, {j['outside_window']} outside the window, {j['no_request']} of requests "
        "the server's window does not name"
    )
    rows = [
        [e["by"], e["request_id"], f"{e['ms']:.2f}", e["token"], e["step"], e["cause"]]
        for e in part["slowest"]
    ]
    out.append(
        {
            "title": "slowest requests (client clock) and the server step that made each slow",
            "columns": ["by", "request", "ms", "token", "step", "cause"],
            "rows": rows,
            "note": note,
        }
    )
    path = part.get("path")
    if path and path.get("clocks_agree"):
        out.append(
            {
                "title": f"HTTP path on one clock (server on this host, {path['requests']} requests), ms",
                "columns": ["part", "p50", "p99"],
                "rows": [[label, _ms(path[key]["p50"]), _ms(path[key]["p99"])] for key, label in PATH_PARTS],
                "note": "client TTFT = HTTP in + engine + first delivery; a gap's difference: |client gap - "
                "server gap| of one token",
            }
        )
    return out


# the path's parts (roseprof/live/path.py), in the order a request meets them
PATH_PARTS = (
    ("http_in_ms", "HTTP in (sent -> the server took it)"),
    ("engine_ttft_ms", "engine (-> first token emitted)"),
    ("first_delivery_ms", "first delivery (-> the client read it)"),
    ("delivery_ms", "every token's delivery"),
    ("gap_diff_ms", "a gap's difference, client vs server"),
)


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"


SECTION = Section(
    name="live",
    compute=lambda ctx: SectionResult(),
    applies=lambda trace: False,
    checks={"live": ({"window": dict, "join": dict, "slowest": list}, None)},
    panels=panels,
)
