"""A load (roseprof load) as Chrome trace JSON (Perfetto): one track per request, the request as a slice from sent
to end (its status and error in its args), each token an instant on its track, and the server's /metrics gauges
(running, waiting) as counters where they were scraped, so a user sees the request waterfall and the queue."""

from __future__ import annotations

import json
from pathlib import Path

from roseprof.export import text_output

PID = 1
# /metrics gauges worth a counter track (ours and vLLM's spell them alike but for the prefix)
GAUGES = ("num_requests_running", "num_requests_waiting")


def write_load_chrome(
    tokens: list, metrics: list | None, run_id: str, out: Path, labels: list[str] | None = None
) -> Path:
    """`tokens`: run/tables.read_load_tokens' rows; `metrics`: read_load_metrics' (None: not scraped). A run of
    several loads (a sweep, a repeat: rows with `load` k) has a process per load, named by `labels[k]`."""
    us = lambda ms: round(ms * 1e3, 3)  # noqa: E731  (ms -> µs, the format's unit)
    loads = labels or [""]
    events: list[dict] = [
        {
            "ph": "M",
            "pid": PID + k,
            "name": "process_name",
            "args": {"name": f"load {run_id} {label}".strip()},
        }
        for k, label in enumerate(loads)
    ]
    for row in tokens:
        pid = PID + int(row.get("load", 0))
        tid = int(row["index"]) + 1
        label = f"request {row['index']}" + (f" ({row['request_id']})" if row.get("request_id") else "")
        events.append({"ph": "M", "pid": pid, "tid": tid, "name": "thread_name", "args": {"name": label}})
        events.append(
            {"ph": "M", "pid": pid, "tid": tid, "name": "thread_sort_index", "args": {"sort_index": tid}}
        )
        if row.get("sent_ms") is not None and row.get("end_ms") is not None:
            events.append({"ph": "X", "pid": pid, "tid": tid, "name": "request", "ts": us(row["sent_ms"]),
                           "dur": us(max(0.0, row["end_ms"] - row["sent_ms"])),
                           "args": {"request_id": row.get("request_id"), "tokens": len(row["t_ms"])}})  # fmt: skip
        for k, (t, tok, step) in enumerate(zip(row["t_ms"], row["token_ids"], row["steps"])):
            events.append({"ph": "i", "s": "t", "pid": pid, "tid": tid, "name": "token" if k else "first token",
                           "ts": us(t), "args": {"token_id": tok, "step": step}})  # fmt: skip
    for sample in metrics or []:
        for series, value in sample["samples"].items():
            name = series.split("{", 1)[0]
            if name.split(":")[-1] in GAUGES:
                events.append(
                    {
                        "ph": "C",
                        "pid": PID + int(sample.get("load", 0)),
                        "name": name,
                        "ts": us(sample["t_ms"]),
                        "args": {"value": value},
                    }
                )
    with text_output(out) as fh:
        json.dump(
            {"displayTimeUnit": "ms", "otherData": {"tool": "load", "run_id": run_id}, "traceEvents": events},
            fh,
        )
    return out
