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
        for e in part["slowest"] + (part.get("profiler") or [])  # a window's pause: once, after the list
    ]
    j, w = part["join"], part["window"]
    steps = (
        f"server steps {w['first_step']}..{w['first_step'] + w['steps'] - 1}"
        if w["steps"]
        else "no server step of the load"
    )
    p50 = f" (step p50 {w['step_p50_ms']:.2f} ms)" if w["step_p50_ms"] is not None else ""
    note = (
        f"{steps}{left_out_words(w, p50)}; "
        f"client tokens {j['tokens']}: {j['joined']} joined to a step, "
        f"{j['prefill']} from a prefill, {j['outside_window']} outside the window, {j['no_request']} of requests "
        "the server's window does not name"
    )
    rows = [
        [e["by"], e["request_id"], f"{e['ms']:.2f}", _or_dash(e["token"]), _or_dash(e["step"]), e["cause"]]
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
                "rows": [
                    [label, _ms(path[key]["p50"]), _ms(path[key]["p99"])]
                    for key, label in PATH_PARTS
                    if key in path  # runs before the queue/prefill split lack those parts
                ],
                "note": "client TTFT = HTTP in + engine + first delivery; engine = queue + prefill"
                + (
                    f"; {path['busy_at_arrival']:.0%} of the requests arrived while a step ran"
                    if path.get("busy_at_arrival") is not None
                    else ""
                )
                + "; a gap's difference: |client gap - server gap| of one token",
            }
        )
    if part.get("capture"):
        out.append(capture_panel(part["capture"]))
        if part["capture"].get("ranks"):
            out.append(ranks_panel(part["capture"]["ranks"], summary.get("ranks") or []))
    return out


def _or_dash(value):
    """A cell of the slowest requests: `-` where the request has none (a TTFT whose prefill the window lacks has no
    step)."""
    return "-" if value is None else value


def left_out_words(window: dict, p50: str = "") -> str:
    """The step p50 and what of the server's snapshot the run's step figures leave out (runs stored before the
    cut: nothing): `, the load's (step p50 3.54 ms); the snapshot held 127 more (...)`."""
    before, after = window.get("before", 0), window.get("after", 0)
    if not before and not after:
        return p50
    return (
        f", the load's{p50}; the snapshot held {before + after} more (not the load's: {before} before its "
        f"first decode token, {after} after its last), left out here and kept in raw/steps.jsonl"
    )


def ranks_panel(window_ranks: list[dict], ranks: list[dict]) -> dict:
    """A window on every tensor-parallel rank: each rank's decode steps (from its own window log) and, where the
    window had a profiler, what its trace holds of that rank (the ranks section's entry)."""
    traced = {r["rank"]: r for r in ranks if r.get("rank") is not None}

    def span(e: dict) -> str:
        return "-" if not e["steps"] else f"{e['first_step']}..{e['last_step']}"

    rows = [
        [str(e["rank"]), str(e["steps"]), span(e), _ms(e.get("stop_ms")),
         str(traced[e["rank"]]["range_count"]) if e["rank"] in traced else "-",
         str(traced[e["rank"]]["kernel_count"]) if e["rank"] in traced else "-"]
        for e in window_ranks
    ]  # fmt: skip
    counts = {e["steps"] for e in window_ranks}
    return {
        "title": f"the window on {len(window_ranks)} ranks: "
        + (f"{counts.pop()} decode steps each" if len(counts) == 1 else "the ranks' step counts DISAGREE"),
        "columns": ["rank", "steps", "engine steps", "stop ms", "ranges", "GPU kernels"],
        "rows": rows,
        "note": "each rank's steps from its own window log; stop: the profiler's stop on that rank's loop (the "
        "ranks step together, so the slowest holds them all); ranges and kernels: the rank's own in the trace",
    }


# the path's parts (roseprof/live/path.py), in the order a request meets them
PATH_PARTS = (
    ("http_in_ms", "HTTP in (sent -> the server took it)"),
    ("engine_ttft_ms", "engine (-> first token emitted)"),
    ("queue_ms", "  queue (-> its prefill started)"),
    ("prefill_ms", "  prefill (-> first token emitted)"),
    ("step_wait_ms", "  wait for the step running at arrival"),
    ("first_delivery_ms", "first delivery (-> the client read it)"),
    ("delivery_ms", "every token's delivery"),
    ("gap_diff_ms", "a gap's difference, client vs server"),
)


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"


def capture_panel(c: dict) -> dict:
    """A capture window (roseprof live --tool torch): its steps and what its export cost the engine loop."""
    p = c["pause"]

    def ms(v) -> str:
        return "-" if v is None else f"{v:.1f}"

    first = c["first_step"]
    early = ", stopped early (the load ended)" if c["stopped_early"] else ""
    rows = [
        ["on the loop: profiler start", ms(p.get("start_ms"))],
        ["on the loop: profiler stop", ms(p.get("stop_ms"))],
        ["on the loop: flight recorder dump", ms(p.get("dump_ms"))],
        ["export (off the loop)", ms(p.get("export_ms"))],
        ["median step in the window", ms(p.get("median_step_ms"))],
        [f"longest step during the export ({p.get('steps_during_export', 0)} steps)",
         ms(p.get("longest_step_during_export_ms"))],
    ]  # fmt: skip
    return {
        "title": f"{c['tool']} window: steps {first}..{first + c['steps'] - 1} ({c['steps']} of {c['asked']}{early})",
        "columns": ["what the window cost the engine loop", "ms"],
        "rows": rows,
        "note": "the export runs on a thread of the engine's process; the steps it overlapped say what it cost",
    }


SECTION = Section(
    name="live",
    compute=lambda ctx: SectionResult(),
    applies=lambda trace: False,
    checks={"live": ({"window": dict, "join": dict, "slowest": list}, None)},
    panels=panels,
)
