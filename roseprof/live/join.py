"""The join of a load's requests (client side: roseprof/load/) to a server's decode steps (its flight recorder's
step log: roseinfer serve's /debug/steps), and the slowest requests explained in the spike causes' words
(analysis/spikes.py).

A client token carries the server's response id and the decode step that emitted it (roseinfer's `token_steps`
stream extension; -1: the prefill); the step log's request records carry the same id beside the engine's sequence
id, which its step and prefill records list. So every client token is either one step of the window, a prefill's
token, or outside the window (its step is older than the recorder kept): the join counts each.

For a slow request: its worst ITL token's step (the gap before it on the client ended with that step's token)
and the cause that added most to the server's gap of the same token (spikes.token_causes); its TTFT split into
time queued (arrival to the prefill that admitted it), the prefill, and the rest (the HTTP path both ways: on the
H200 the first requests of a load read their tokens ~100 ms after the engine made them, docs/BENCHMARKS.md session
23). A gap that a capture window's start or close made (the step log's `profiler_pauses`: live/load_steps.py) is
the profiler's (cause `profiler`), never a decode step's.
"""

from __future__ import annotations

import numpy as np

from roseprof.analysis.spike_costs import step_events
from roseprof.analysis.spike_evidence import LEFT_OUT, slowest_step
from roseprof.analysis.spike_evidence import STEP_EVIDENCE as STEP_CAUSES
from roseprof.analysis.spikes import CAUSES, token_causes
from roseprof.workload.steplog import StepLogRecords

SLOWEST = 5  # requests listed by TTFT and by worst ITL
REGION_MIN_NS = 500_000  # a region's time over its median below this names no region (noise)
SLOW_STEP = 1.5  # `roseprof request` says what grew under a step of this many median steps or more
HTTP_NAMED = 0.25  # a TTFT's time outside the engine is named where it is this share of the TTFT or more


def join(log: StepLogRecords, tokens: list[dict], slowest: int = SLOWEST) -> dict:
    """summary.json's `live` part: the window, how the client's tokens joined, the slowest requests explained."""
    first = int(log.meta.get("first_step", log.steps[0]["index"] if log.steps else 0))
    n_steps = len(log.steps)
    by_id = {r.get("request_id"): r for r in log.requests if r.get("request_id")}
    counts = {"tokens": 0, "joined": 0, "prefill": 0, "outside_window": 0, "no_step": 0, "no_request": 0}
    for row in tokens:
        for step in row["steps"]:
            counts["tokens"] += 1
            if row["request_id"] not in by_id:
                counts["no_request"] += 1
            elif step is None:
                counts["no_step"] += 1
            elif step < 0:
                counts["prefill"] += 1
            elif first <= step < first + n_steps:
                counts["joined"] += 1
            else:
                counts["outside_window"] += 1
    durs = np.array([s["end_ns"] - s["start_ns"] for s in log.steps], dtype=np.float64) / 1e6
    explain = Explainer(log, first)
    rows = [r for r in tokens if r["request_id"] in by_id and r["t_ms"] and r["sent_ms"] is not None]
    by_ttft = sorted(rows, key=lambda r: -(r["t_ms"][0] - r["sent_ms"]))[:slowest]
    # Each request by its worst gap that is not the profiler's (a window's close pauses every request in flight
    # at once: ranked by it, the list would say one thing five times); the pause said once, beside the list.
    worst = {
        r["request_id"]: explain.worst_gap(r, by_id[r["request_id"]]) for r in rows if len(r["t_ms"]) > 1
    }
    by_itl = sorted((r for r in rows if r["request_id"] in worst), key=lambda r: -worst[r["request_id"]][1])
    listed = [explain.ttft(r, by_id[r["request_id"]]) for r in by_ttft]
    listed += [explain.itl(r, by_id[r["request_id"]], worst[r["request_id"]]) for r in by_itl[:slowest]]
    part = {
        "window": {
            "first_step": first,
            "steps": n_steps,
            "kept": log.meta.get("flight_recorder_steps"),
            "step_p50_ms": float(np.median(durs)) if n_steps else None,
        },
        "join": counts,
        "slowest": listed,
    }
    paused = profiler_lines([w[2] for w in worst.values() if w[2] is not None])
    if paused:
        part["profiler"] = paused
    return part


def _gaps(row: dict) -> list[tuple[int, float]]:
    """(token index, ms) of the request's gaps between consecutive tokens on the client, longest first."""
    t = row["t_ms"]
    return sorted(((i + 1, b - a) for i, (a, b) in enumerate(zip(t, t[1:]))), key=lambda g: -g[1])


def profiler_lines(pauses: list[dict]) -> list[dict]:
    """One line per capture window pause that was a request's worst gap: `3 requests' worst gap was the torch
    window's close after step 139 (69 ms on the loop)`, with how many requests."""
    out = []
    for key in sorted({(p["after_step"], p["what"]) for p in pauses}):
        same = [p for p in pauses if (p["after_step"], p["what"]) == key]
        p = same[0]
        out.append(
            {
                "requests": len(same),
                "after_step": p["after_step"],
                "line": f"{len(same)} request(s)' worst gap was {p['what']} after step {p['after_step']} "
                f"({p['loop_ms']:.0f} ms on the loop): the profiler's, so each is listed by its next worst",
            }
        )
    return out


class Explainer:
    """The words for one slow request, from the step log (each step and prefill by its position in the window)."""

    def __init__(self, log: StepLogRecords, first: int) -> None:
        self.log, self.first = log, first
        self.tc = token_causes(log, None, None) if log.steps else None
        # the flattened server tokens of token_causes: (sequence id, step position) -> index
        self.index: dict[tuple[int, int], int] = {}
        if self.tc is not None:
            tok = self.tc["tok"]
            for t, (seq, step) in enumerate(zip(tok["request"].tolist(), tok["step"].tolist())):
                self.index.setdefault((seq, step), t)

    def ttft(self, row: dict, record: dict) -> dict:
        ttft = row["t_ms"][0] - row["sent_ms"]
        prefill = next((p for p in self.log.prefills if record["id"] in p.get("requests", [])), None)
        if prefill is None:
            words = "its prefill is older than the window"
            cause = "unknown"
        else:
            queued = (prefill["start_ns"] - record["arrival_ns"]) / 1e6
            took = (prefill["end_ns"] - prefill["start_ns"]) / 1e6
            others = len(prefill.get("requests", [])) - 1
            # the rest of the client's TTFT: the way to the engine and the first token's way back (live/path.py
            # splits it where both sides share a clock); named where it is a large part
            rest = ttft - queued - took
            cause = max((("queued", queued), ("prefill", took), ("http", rest)), key=lambda kv: kv[1])[0]
            words = (
                f"queued {queued:.1f} ms, then a {prefill.get('tokens', 0)}-token prefill"
                f"{f' with {others} other request(s)' if others else ''} ({took:.1f} ms)"
                + (f"; {rest:.1f} ms more on the HTTP path (to the server, and the first token back)"
                   if rest >= HTTP_NAMED * ttft else "")
            )  # fmt: skip
        return self._entry(row, "ttft", ttft, 0, None, cause, words)

    def token_of(self, row: dict, record: dict, i: int) -> int | None:
        """The server token (token_causes' index) of the request's client token i, None outside the window."""
        step = row["steps"][i]
        pos = step - self.first if isinstance(step, int) and step >= 0 else None
        return self.index.get((record["id"], pos)) if pos is not None else None

    def worst_gap(self, row: dict, record: dict) -> tuple[int, float, dict | None]:
        """(token index, ms, the pause) of the request's worst client gap that is not a capture window's pause
        (profiler_pause), and the pause where its worst gap of all was one (None: it was not). A request whose
        every gap is a pause: its worst."""
        gaps = _gaps(row)
        pause = None
        for n, (i, gap) in enumerate(gaps):
            t = self.token_of(row, record, i)
            said = self.profiler_pause(t, row["steps"][i], gap) if t is not None else None
            if said is None:
                return i, gap, pause
            if n == 0:
                pause = said[1]
        return gaps[0][0], gaps[0][1], None

    def itl(self, row: dict, record: dict, worst: tuple[int, float, dict | None] | None = None) -> dict:
        i, gap = (worst or self.worst_gap(row, record))[:2]
        step = row["steps"][i]
        pos = step - self.first if isinstance(step, int) and step >= 0 else None
        t = self.token_of(row, record, i)
        if t is None:
            return self._entry(row, "itl", gap, i, step, "unknown", "its step is outside the window")
        tc = self.tc
        pause = self.profiler_pause(t, step, gap)
        if pause is not None:  # the profiler's gap, not a decode step's: no step cause
            return self._entry(row, "itl", gap, i, step, "profiler", pause[0])
        names, added = tc["names"], tc["added"][t]
        j = int(tc["primary"][t])
        cause = names[j] if added[j] > 0 else "none"
        words = self.words(cause, t, pos, added[j] / 1e6)
        entry = self._entry(row, "itl", gap, i, step, cause, words)
        # the step the words name: the token's own, or the slower one before it inside its gap
        entry["cause_step"] = self.first + self.cause_pos(cause, t, pos)
        return entry

    def profiler_pause(self, t: int, step: int, gap_ms: float) -> tuple[str, dict | None] | None:
        """(the words, the pause: None where the log's pauses do not say which) for a capture window's pause of the engine loop (the log's `profiler_pauses`) that made the
        client's gap of token t (server step `step`), or None: a pause that took half the gap's time over the
        median or more. The gap holds one where the server's own gap of the token does (it is left out of the ITL
        figures as the profiler's), or where the token is of the step before the pause: the pause came before the
        core's outbox thread had sent the step's tokens."""
        pauses = self.log.meta.get("profiler_pauses") or []
        half = 0.5 * (gap_ms - self.tc["median_ms"])
        if self.tc["why_out"][t] == "profiler":
            if self.tc["took_out"][t] / 1e6 < half:
                return None  # the gap held the profiler's pause, but something else took most of it
            before = [p for p in pauses if p["after_step"] < step]
            if not before:
                return LEFT_OUT["profiler"], None
            pause = max(before, key=lambda p: p["after_step"])
            return pause_words(pause), pause
        held = [p for p in pauses if p["after_step"] == step and p["loop_ms"] >= half]
        return (pause_words(held[0]), held[0]) if held else None

    def cause_pos(self, cause: str, t: int, pos: int) -> int:
        """The step (its position in the window) a step cause names for token t: its own, or for a slower step
        slower than its logged causes explain, the slowest step inside its gap (overlapped decode: the step before
        the token's own runs in its gap too)."""
        if cause != "slow_step":
            return pos
        if not hasattr(self, "_starts"):
            self._starts = np.array([s["start_ns"] for s in self.log.steps], dtype=np.float64)
        tok = self.tc["tok"]
        return slowest_step(self.log, self._starts, tok["start"][t], tok["end"][t], pos)

    def words(self, cause: str, t: int, pos: int, added_ms: float) -> str:
        log, tok = self.log, self.tc["tok"]
        k = self.first + pos
        lo, hi = tok["start"][t], tok["end"][t]
        hit = [p for p in log.prefills if p["end_ns"] > lo and p["start_ns"] < hi]
        n = sum(p.get("tokens", 0) for p in hit)
        ms = sum(p["end_ns"] - p["start_ns"] for p in hit) / 1e6
        if cause == "prefill" or cause == "readmission":
            what = "admitted" if cause == "prefill" else "recomputed (preempted requests)"
            return f"step {k} {what} a {n}-token prefill ({ms:.1f} ms)"
        if cause in STEP_CAUSES:
            pos = self.cause_pos(cause, t, pos)
            also = f"; the gap also held a {n}-token prefill ({ms:.1f} ms)" if hit else ""
            return self.step_words(cause, pos) + also
        if cause == "none":
            return f"step {k}: nothing above the run's median gap"
        return f"step {k}: {CAUSES.get(cause, cause)} ({added_ms:.1f} ms)"

    def step_words(self, cause: str, pos: int) -> str:
        """What the step did (a step cause) and, where the step log has region times, the region that grew."""
        log, k = self.log, self.first + pos
        step = log.steps[pos]
        took = (step["end_ns"] - step["start_ns"]) / 1e6
        if cause == "rollover":
            words = f"step {k}: KV block rollover for {step['rollovers']} sequences"
        elif cause == "cow":
            words = f"step {k}: copy-on-write of {step['cow']} KV block(s)"
        elif cause == "batch_change":  # spike_costs.step_events: the size, the graph bucket, or a drain
            prev = log.steps[pos - 1] if pos > 0 else {}
            if not step.get("launched", True):
                words = f"step {k}: a drain (read the step in flight, launched none)"
            elif (
                prev
                and prev.get("batch_size") == step["batch_size"]
                and prev.get("bucket") != step.get("bucket")
            ):
                words = f"step {k}: CUDA graph bucket {prev.get('bucket')} -> {step.get('bucket')}"
            else:
                words = f"step {k}: batch size {prev.get('batch_size', '?')} -> {step['batch_size']}"
        elif cause == "preemption":
            words = f"step {k}: a sequence preempted before it"
        else:
            words = f"step {k}: slower decode step ({took:.1f} ms)"
        grown = self.region_grown(pos)
        if grown is not None:
            return f"{words}; {grown_words(grown)} ({took:.1f} ms step)"
        if cause != "slow_step":
            return words
        if not hasattr(self, "_events"):
            self._events = step_events(log)
        logged = logged_in_step(self._events, step, pos)
        why = (
            f"beyond what its {' and '.join(logged)} cost in other steps"
            if logged
            else "nothing in the log says why"
        )
        return f"{words[:-1]}, {why})"

    def region_grown(self, pos: int) -> tuple[str, float, str] | None:
        if not hasattr(self, "_growth"):
            self._growth = RegionGrowth(self.log)
        return self._growth.at(pos)

    def _entry(self, row, by: str, ms: float, token: int, step, cause: str, words: str) -> dict:
        rid = row["request_id"]
        what = "TTFT" if by == "ttft" else f"ITL {ms:.1f} ms at token {token}"
        line = f"req {rid}: TTFT {ms:.1f} ms: {words}" if by == "ttft" else f"req {rid}: {what}: {words}"
        return {
            "request_id": rid,
            "by": by,
            "ms": ms,
            "token": token,
            "step": step,
            "cause": cause,
            "line": line,
        }


def pause_words(pause: dict) -> str:
    """`the torch window's close after step 76: 19 ms on the loop, its export 23 ms beside it`."""
    beside = f", its export {pause['beside_ms']:.0f} ms beside it" if pause["beside_ms"] else ""
    return f"{pause['what']} after step {pause['after_step']}: {pause['loop_ms']:.0f} ms on the loop{beside}"


class RegionGrowth:
    """The region that grew in a slow step, from the step log's own time of each region per step (there while the
    engine's regions were on): by its thread CPU time first where the log has it (a CPU engine on one thread: a
    busy machine's waits for a core are not in it) and the step's extra time was mostly CPU work, else by its host
    wall time (step log version 4, any device:
    on a GPU engine what the host did, a wait for the GPU included, and a torch or nsys window says which
    kernels; on a CPU engine a wait, a sleep or a lock, which costs no CPU time)."""

    KINDS = (("cpu_own_ns", "CPU"), ("host_own_ns", "of host time"))

    def __init__(self, log: StepLogRecords) -> None:
        self.steps = log.steps
        # key -> (each region's median own ns over the window's steps, the median step's total)
        self.medians: dict[str, tuple[dict[str, float], float]] = {}
        for key, _ in self.KINDS:
            # the steps that have them (regions may have been on for part of the window: a torch window's steps)
            owns = [s[key] for s in log.steps if s.get(key)]
            if owns:
                names = {r for own in owns for r in own}
                by_region = {r: float(np.median([own.get(r, 0) for own in owns])) for r in names}
                self.medians[key] = by_region, float(np.median([sum(own.values()) for own in owns]))

    def at(self, pos: int) -> tuple[str, float, str] | None:
        """(region, ms, unit) whose own time in step `pos` exceeds its median over the window's steps the most,
        where that is most of the step's time over the median step's (the regions' own times sum to the step's)."""
        step = self.steps[pos]
        # each kind's time of the step over its median step's (the regions' own times sum to the step's)
        over = {
            key: sum(step[key].values()) - self.medians[key][1]
            for key, _ in self.KINDS
            if step.get(key) and key in self.medians
        }
        for key, unit in self.KINDS:
            if key not in over:
                continue
            if key == "cpu_own_ns" and over[key] < 0.5 * over.get("host_own_ns", 0.0):
                continue  # most of the step's extra host time was no CPU work (a sleep, a lock): host time says where
            medians = self.medians[key][0]
            region, ns = max(
                ((r, v - medians.get(r, 0.0)) for r, v in step[key].items()), key=lambda rv: rv[1]
            )
            if ns >= REGION_MIN_NS and ns >= 0.5 * over[key]:
                return region, ns / 1e6, unit
        return None


def grown_words(grown: tuple[str, float, str]) -> str:
    """`roseinfer.decode_step +20.0 ms of host time over its median` (or `... ms CPU over its median`)."""
    region, ms, unit = grown
    return f"{region} +{ms:.1f} ms {unit} over its median"


def logged_in_step(ev: dict[str, np.ndarray], step: dict, pos: int) -> list[str]:
    """What the step log records in step `pos` itself, in words, as spike_costs reads it (`ev`: its step_events of
    the log; `step`: the step's record): the causes it caps by their cost in other steps, so a slower step beside
    them is slower beyond what they cost elsewhere."""
    out = []
    if ev["rollovers"][pos]:
        out.append(f"rollover of {step['rollovers']} sequences")
    if ev["cow"][pos]:
        out.append("copy-on-write")
    if ev["batch_change"][pos]:
        out.append("batch change")
    if ev["preemption"][pos]:
        out.append("preemption")
    return out
