"""A live run's cut of the server's flight recorder snapshot to the load's own records (roseprof/live/load_steps.py)
and the profiler's pauses in the slowest-requests list (roseprof/live/join.py), on synthetic step logs: the
snapshot as roseinfer serve's /debug/steps writes it (a meta record, then steps, prefills and requests by the
server's step numbers), the client's tokens as roseprof load stores them."""

from __future__ import annotations

import json
from pathlib import Path

from roseprof.api.live import server_summary
from roseprof.live.join import join
from roseprof.live.load_steps import cut_to_load, window_pauses
from roseprof.workload.steplog import read_steplog

MS = 1_000_000
META = {"type": "meta", "version": 4, "flight_recorder_steps": 4096}


def _steps(indices, t0: int = 0, took=lambda k: MS) -> list[dict]:
    """Step records of the server's numbers `indices`, back to back from t0 (a number missing: a gap in time)."""
    out, t = [], t0
    for k in indices:
        out.append({"type": "step", "index": k, "start_ns": t, "end_ns": t + took(k), "batch_size": 2})
        t += took(k) + MS // 10
    return out


def _request(seq: int, rid: str, arrival: int, prefill_ns: int, steps: list[dict]) -> dict:
    """A request whose first token is its prefill's and then one token a step of `steps`."""
    return {
        "type": "request", "id": seq, "request_id": rid, "arrival_ns": arrival,
        "token_ns": [prefill_ns, *(s["end_ns"] for s in steps)], "token_step": [-1, *(s["index"] for s in steps)],
    }  # fmt: skip


def _prefill(seqs: list[int], start: int, tokens: int = 8) -> dict:
    return {
        "type": "prefill",
        "start_ns": start,
        "end_ns": start + MS // 2,
        "requests": seqs,
        "tokens": tokens,
    }


def _write(folder: Path, records: list[dict]) -> Path:
    path = folder / "snapshot.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def _row(record: dict, index: int = 0) -> dict:
    """The client's row of a request: its tokens at the server's times (one clock), each with its step."""
    return {
        "request_id": record["request_id"], "index": index, "sent_ms": record["arrival_ns"] / MS,
        "t_ms": [t / MS for t in record["token_ns"]], "steps": list(record["token_step"]),
    }  # fmt: skip


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_the_loads_steps_and_requests_only_with_a_gap_before_its_first_step(tmp_path):
    """Another client's request shares the load's steps: the steps stay whole, its tokens are left out (the ITL
    figures are the load's tokens'). The snapshot lacks the step before the load's first (a gap): what ran before
    step 13 (the snapshot's last before the load's) ended is another load's, left out; the load's own prefill,
    before that, is kept."""
    steps = _steps([*range(10, 14), *range(15, 30)])  # no step 14
    at = {s["index"]: s for s in steps}
    earlier_prefill = _prefill([7], at[10]["start_ns"] - MS)  # another load's, before the kept span
    load_prefill = _prefill([1], at[12]["end_ns"] + MS // 20)  # the load's, before step 13 ended
    gc_before = {"type": "gc", "start_ns": at[11]["start_ns"], "end_ns": at[11]["start_ns"] + 10}
    gc_inside = {"type": "gc", "start_ns": at[20]["start_ns"], "end_ns": at[20]["start_ns"] + 10}
    mine = _request(
        1, "cmpl-load", at[12]["start_ns"], load_prefill["end_ns"], [at[k] for k in range(15, 25)]
    )
    other = _request(2, "cmpl-other", 0, at[10]["start_ns"], steps)
    path = _write(tmp_path, [META, *steps, earlier_prefill, load_prefill, gc_before, gc_inside, mine, other])
    out = tmp_path / "steplog.jsonl"
    said = cut_to_load(path, out, [_row(mine)])
    assert said == {"snapshot": 19, "kept": 10, "before": 4, "after": 5, "requests": 1}
    records = _records(out)
    assert [r["index"] for r in records if r["type"] == "step"] == list(range(15, 25))
    assert [r["request_id"] for r in records if r["type"] == "request"] == ["cmpl-load"]
    assert [r["requests"] for r in records if r["type"] == "prefill"] == [[1]]  # the other load's is not
    assert [r["start_ns"] for r in records if r["type"] == "gc"] == [gc_inside["start_ns"]]
    assert records[0]["load_steps"]["kept"] == 10
    # the ITL figures count the load's 10 decode tokens (its prefill's first has no gap), not the other's 19
    assert server_summary(out)["itl"]["count"] == 10
    # its TTFT is explained by its own prefill, though it ran before the step before the load's first
    entry = next(e for e in join(read_steplog(str(out)), [_row(mine)])["slowest"] if e["by"] == "ttft")
    assert entry["cause"] != "unknown" and "8-token prefill" in entry["line"], entry


def test_a_load_of_no_decode_token_keeps_its_requests_and_prefills(tmp_path):
    """--output-len 1: each request's one token is its prefill's, so no step is the load's; its requests and
    their prefills are kept (another client's decode steps, request and prefill are not), and their TTFT lines
    still say queued vs prefill."""
    steps = _steps(range(40, 50))
    p1, p2 = _prefill([5], steps[3]["end_ns"] + 10), _prefill([6], steps[6]["end_ns"] + 10, tokens=30)
    theirs = _prefill([9], steps[0]["start_ns"] - MS)
    a = _request(5, "cmpl-a", steps[2]["start_ns"], p1["end_ns"], [])
    b = _request(6, "cmpl-b", steps[4]["start_ns"], p2["end_ns"], [])
    other = _request(9, "cmpl-other", 0, theirs["end_ns"], steps)
    path = _write(tmp_path, [META, *steps, theirs, p1, p2, a, b, other])
    out = tmp_path / "steplog.jsonl"
    said = cut_to_load(path, out, [_row(a, 0), _row(b, 1)])
    assert said == {"snapshot": 10, "kept": 0, "before": 0, "after": 0, "requests": 2}
    log = read_steplog(str(out))
    assert not log.steps and [r["request_id"] for r in log.requests] == ["cmpl-a", "cmpl-b"]
    assert [p["requests"] for p in log.prefills] == [[5], [6]]
    part = join(log, [_row(a, 0), _row(b, 1)])
    ttft = [e for e in part["slowest"] if e["by"] == "ttft"]
    assert len(ttft) == 2 and all(e["cause"] in ("queued", "prefill", "http") for e in ttft), ttft
    assert any("30-token prefill" in e["line"] for e in ttft)
    assert part["join"] == {"tokens": 2, "joined": 0, "prefill": 2, "outside_window": 0, "no_step": 0,
                            "no_request": 0}  # fmt: skip


def test_a_snapshot_with_no_meta_record_is_cut_without_one(tmp_path):
    steps = _steps(range(3, 9))
    mine = _request(1, "cmpl-x", 0, steps[0]["start_ns"] - 10, steps[2:4])
    path = _write(tmp_path, [*steps, mine])
    out = tmp_path / "steplog.jsonl"
    assert cut_to_load(path, out, [_row(mine)])["kept"] == 2
    records = _records(out)
    assert [r["type"] for r in records] == ["step", "step", "request"]  # no meta record made up


def test_a_tensor_parallel_windows_pause_is_its_slowest_ranks():
    """The ranks run in lockstep: the loop paused as long as the slowest rank's start, stop, dump and export."""
    window = {
        "tool": "torch", "steps_done": 8, "first_step": 100,
        "pause": {"start_ms": 1.0, "stop_ms": 10.0, "dump_ms": 1.0, "export_ms": 5.0},  # rank 0's
        "ranks": [
            {"rank": 0, "pause": {"start_ms": 1.0, "stop_ms": 10.0, "dump_ms": 1.0, "export_ms": 5.0}},
            {"rank": 1, "pause": {"start_ms": 4.0, "stop_ms": 30.0, "dump_ms": 0.5, "export_ms": 20.0}},
        ],
    }  # fmt: skip
    start, close = window_pauses(window)
    assert (start["after_step"], start["loop_ms"]) == (99, 4.0)
    assert (close["after_step"], close["loop_ms"], close["beside_ms"]) == (107, 31.0, 20.0)
    del window["ranks"]
    assert window_pauses(window)[1]["loop_ms"] == 11.0  # one rank: its own


def test_a_windows_close_is_said_once_and_requests_rank_by_their_next_worst_gap(tmp_path):
    """A window's close pauses every request in flight: each one's worst gap is the profiler's. The list ranks
    them by their worst gap that is not (a slow step of one request is named), and the close is said once."""
    slow = 35  # a 9 ms step, which only the load's request "cmpl-3" is in (the others finished)
    steps = _steps(range(10, 40), took=lambda k: 9 * MS if k == slow else MS)
    at = {s["index"]: s for s in steps}
    pause_ms = 60
    for s in steps[steps.index(at[29]) + 1 :]:  # the loop paused 60 ms after step 29 (the window's close)
        s["start_ns"] += pause_ms * MS
        s["end_ns"] += pause_ms * MS
    requests = [
        _request(k, f"cmpl-{k}", 0, at[10]["start_ns"] - MS, [at[i] for i in range(10, 34 if k < 3 else 40)])
        for k in range(4)
    ]
    pauses = [{"after_step": 29, "what": "the torch window's close", "loop_ms": float(pause_ms),
               "beside_ms": 0.0}]  # fmt: skip
    path = _write(tmp_path, [META, *steps, *requests])
    out = tmp_path / "steplog.jsonl"
    rows = [_row(r, i) for i, r in enumerate(requests)]
    cut_to_load(path, out, rows, pauses)
    log = read_steplog(str(out))
    part = join(log, rows)
    itl = [e for e in part["slowest"] if e["by"] == "itl"]
    assert [e["cause"] for e in itl].count("profiler") == 0, [e["line"] for e in itl]
    assert itl[0]["request_id"] == "cmpl-3" and itl[0]["step"] in (slow, slow + 1), itl[0]
    (said,) = part["profiler"]
    assert said["requests"] == 4 and said["after_step"] == 29
    assert said["line"].startswith(
        "4 request(s)' worst gap was the torch window's close after step 29 (60 ms"
    )
    # the close's gap is the profiler's in the server's figures too: left out of the ITL figures
    summary = server_summary(out)
    assert summary["itl"]["left_out"]["profiler"]["tokens"] == 4


def test_a_spike_in_the_windows_trace_says_where_and_one_outside_says_it_cannot():
    """The run's spike figures are made with no trace (the flight recorder's steps): a listed spike whose step is
    one of the torch window's gets the window's top operators and regions of that step; one outside keeps
    `(no trace to say where)`."""
    from roseprof.live.window_run import said_where

    detail = {"105": {"kernel_kind": "cpu_op", "kernels": [["aten::mm", 3_100_000]],
                      "regions": [["roseinfer.lm_head", 2_000_000]]}}  # fmt: skip
    spikes = {
        "listed": [
            {"step": 105, "main": {"cause": "slow_step", "where": "decode step 105 (no trace to say where)"}},
            {"step": 300, "main": {"cause": "slow_step", "where": "decode step 300 (no trace to say where)"}},
        ]
    }
    said_where(spikes, detail)
    inside, outside = (e["main"]["where"] for e in spikes["listed"])
    assert inside == "decode step 105: CPU ops aten::mm 3.10 ms; regions roseinfer.lm_head 2.00 ms"
    assert outside == "decode step 300 (no trace to say where)"


def test_a_recorders_step_breakdown_is_drawn_by_the_servers_step_numbers(tmp_path):
    """The steps table of a flight recorder's log (its first step is the server's 200th) carries the server's
    step numbers, and the dashboard's per-step breakdown is drawn by them, as the spikes name the steps."""
    from roseprof.api.sections import analyse_trace
    from roseprof.model import Tool, Trace
    from roseprof.render.step_figures import step_breakdown

    steps = _steps(range(200, 210))
    mine = _request(1, "cmpl-x", 0, steps[0]["start_ns"] - 10, steps)
    path = _write(tmp_path, [META, *steps, mine])
    _, tables_of = analyse_trace(Trace(tool=Tool("steps", "?")), path)
    rows = tables_of["steps.rows"]
    assert rows["step"] == list(range(200, 210))
    fig = step_breakdown({"rows": {**rows, "region:roseinfer.model.forward": [0] * 10}, "run_starts": []})
    assert list(fig.data[0].x) == list(range(200, 210))


def test_a_requests_step_detail_is_wrapped_under_its_token(tmp_path):
    """`roseprof request`: a step's top kernels and regions (a torch window's) under its token, each line within 80
    columns and nothing dropped, a name never parted from its time (no line but a token's starts with a figure); an
    item longer than a line stands whole on its own. (The request's prefill is not
    in the snapshot: its line says so, within 80 columns too.)"""
    from roseprof.live.timeline import timeline

    steps = _steps(range(10, 14))
    request = _request(0, "cmpl-0", 0, steps[0]["start_ns"] - MS, steps)
    path = _write(tmp_path, [META, *steps, request])
    out = tmp_path / "steplog.jsonl"
    rows = [_row(request)]
    cut_to_load(path, out, rows)
    long_name = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>(int)"
    kernels = [(f"aten::kernel_number_{i}", (i + 1) * MS) for i in range(6)] + [
        (long_name.replace(" ", "_"), MS)
    ]
    regions = [(f"roseinfer.layer.region_{i}", MS) for i in range(5)]
    detail = {"12": {"kernel_kind": "cpu", "kernels": kernels, "regions": regions}}
    lines = timeline(read_steplog(str(out)), rows, "cmpl-0", detail)
    said = " ".join(" ".join(lines).split())
    for name, _ in kernels + regions:
        assert name in said
    assert all(
        len(line) <= 80 or line.strip() == long_name.replace(" ", "_") + " 1.00 ms;" for line in lines
    ), [line for line in lines if len(line) > 80]
    assert any(line.startswith("        CPU ops aten::kernel_number_0 1.00 ms,") for line in lines), lines
    detail_lines = [line for line in lines if line.startswith(" " * 8)]  # a token's line starts 2 to 6 in
    assert not [line for line in detail_lines if line.strip()[:1].isdigit()], detail_lines
