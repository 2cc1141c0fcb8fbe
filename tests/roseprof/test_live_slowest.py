"""The slowest-requests list of a `roseprof live` run on records built here, no server: the step a token's gap is
blamed on (roseprof/live/join.py) and the table's missing step (the live section's panels)."""

from __future__ import annotations


def test_a_slow_step_before_the_tokens_own_is_the_one_named():
    """With the overlapped decode a request's first decode token is read in the step after the one that computed
    it, so its gap holds that slower step: the explanation names the slow step (and says which it is), not the
    token's own ordinary one."""
    from roseprof.live.join import join
    from roseprof.workload.steplog import StepLogRecords

    ms = 1_000_000
    steps, t = [], 0
    for k in range(60):
        if k == 30:
            t += 2 * ms  # room for request 1's prefill before step 30
        took = 21 * ms if k == 30 else ms
        ids = (
            [0, 2] if k < 30 else [0, 1]
        )  # request 2 finished at step 29; request 1 joined: the size stays 2
        steps.append({"index": k, "start_ns": t, "end_ns": t + took, "batch_size": 2, "requests": ids})
        t += took
    s30 = steps[30]["start_ns"]
    prefill = {"start_ns": s30 - 2 * ms, "end_ns": s30 - ms, "requests": [1], "readmitted": [], "tokens": 12}
    ends = [s["end_ns"] for s in steps]
    requests = [
        {"id": 0, "request_id": "a", "arrival_ns": 0, "token_ns": [0, *ends], "token_step": [-1, *range(60)]},
        {
            "id": 2,
            "request_id": "c",
            "arrival_ns": 0,
            "token_ns": [0, *ends[:30]],
            "token_step": [-1, *range(30)],
        },
        {
            "id": 1,
            "request_id": "b",
            "arrival_ns": s30 - 3 * ms,
            "token_ns": [
                s30 - ms,
                *ends[31:],
            ],  # its first decode token, computed in step 30, read in step 31
            "token_step": [-1, *range(31, 60)],
        },
    ]
    log = StepLogRecords(meta={"first_step": 0}, steps=steps, prefills=[prefill], requests=requests)
    rows = [
        {"request_id": r["request_id"], "index": i, "sent_ms": r["arrival_ns"] / ms,
         "t_ms": [x / ms for x in r["token_ns"]], "steps": r["token_step"]}
        for i, r in enumerate(requests)
    ]  # fmt: skip
    entry = next(e for e in join(log, rows)["slowest"] if e["by"] == "itl" and e["request_id"] == "b")
    assert (entry["token"], entry["step"], entry["cause"], entry["cause_step"]) == (1, 31, "slow_step", 30)
    assert "step 30: slower decode step (21.0 ms" in entry["line"], entry["line"]


def test_a_slow_request_of_no_step_in_the_window_shows_a_dash_not_none():
    """A TTFT whose prefill is older than the server's window has no step: its row says `-`, as every table does for
    a missing figure (it said `None`)."""
    from roseprof.analysis.sections.live import panels

    slow = {"by": "ttft", "request_id": "cmpl-a", "ms": 54.5, "token": 0, "step": None, "cause": "unknown"}
    part = {
        "slowest": [{**slow, "line": "req cmpl-a: TTFT 54.5 ms: its prefill is older than the window"}],
        "join": {"tokens": 2, "joined": 1, "prefill": 0, "outside_window": 1, "no_request": 0},
        "window": {"first_step": 614, "steps": 200, "step_p50_ms": 11.2},
    }
    (table,) = [p for p in panels({"live": part}) if p["columns"]]
    (row,) = table["rows"]
    assert row[table["columns"].index("step")] == "-"
    assert "None" not in [str(c) for c in row]
