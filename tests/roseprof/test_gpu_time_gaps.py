"""What the GPU did between two decode steps (analysis/gpu_time.py's gap): from a step's last kernel to the next
step's first, and whether a copy started there on that first kernel's GPU and stream. Checked against SQL over nsys'
own export on two real captures of the same command (tests/data/README.md: nsys 2025.3, CUDA graphs, 8 requests x
72 tokens): the engine of before session 59 on an H100, which copied each step's greedy tokens out after its replay,
and the engine since, whose argmax writes them into pinned host memory (H200), where only the step that starts new
KV blocks copies (its block tables, to the device); and the helper that counts the gaps against a loop."""

from __future__ import annotations

import json
import sqlite3

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from roseprof import api
from roseprof.analysis.gpu_time import gaps_holding
from roseprof.run.store import RunStore
from tests.helpers import DATA, roseprof

GRAPHS = DATA / "nsys" / "h100-nsys2025.3-roseinfer-graphs"
HOST_TOKENS = DATA / "nsys" / "h200-nsys2025.3-roseinfer-host-tokens"


def _sql_gaps(db: str) -> tuple[list[int], list[int]]:
    """(each gap's ns, the steps whose gap in front holds a copy's start on the GPU and stream of their first kernel)
    straight from the export: a decode step's kernels are those whose launching runtime call starts inside its
    `roseinfer.decode_step` range; a gap runs from a step's last kernel's end to the next step's first kernel's
    start, for consecutive steps that both launched kernels."""
    con = sqlite3.connect(db)
    steps = con.execute(
        "SELECT e.start, e.end FROM NVTX_EVENTS e LEFT JOIN StringIds s ON e.textId = s.id "
        "WHERE coalesce(e.text, s.value) = 'roseinfer.decode_step' ORDER BY e.start"
    ).fetchall()
    kernels = con.execute(
        "SELECT r.start, k.start, k.end, k.deviceId, k.streamId FROM CUPTI_ACTIVITY_KIND_KERNEL k "
        "JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = k.correlationId"  # (one process)
    ).fetchall()
    copies = [
        row
        for table in ("CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET")
        for row in con.execute(f"SELECT start, deviceId, streamId FROM {table}")
    ]
    spans = []  # [steps] (first kernel's (start, device, stream), last kernel's end) or None
    for lo, hi in steps:
        mine = [(s, d, st, e) for call, s, e, d, st in kernels if lo <= call <= hi]
        spans.append((min(mine)[:3], max(e for *_, e in mine)) if mine else None)
    gaps, holding = [], []
    for step, (this, nxt) in enumerate(zip(spans, spans[1:]), start=1):
        if this is None or nxt is None:
            continue
        (start, device, stream), lo = nxt[0], this[1]
        hi = max(start, lo)
        gaps.append(hi - lo)
        if any(lo <= c < hi and (d, st) == (device, stream) for c, d, st in copies):
            holding.append(step)
    return gaps, holding


def test_every_gap_between_the_graph_engines_steps_held_its_copy_as_sql_says(tmp_path):
    db = f"{GRAPHS}.sqlite"
    run = api.import_path(RunStore(tmp_path / "traces"), db, None, f"{GRAPHS}.steplog.jsonl")
    (rank,) = run.summary()["gpu_time"]["ranks"]
    gaps, holding = _sql_gaps(db)
    assert rank["steps"] == len(gaps) == 70
    assert rank["gap_copy_steps"] == len(holding) == 70  # the tokens' copy out, after every replay
    assert rank["gap_p50_ns"] == float(np.median(gaps))
    assert 0 < rank["gap_p50_ns"] < rank["idle_p50_ns"] < rank["period_p50_ns"]


def test_with_the_tokens_written_to_the_host_only_the_rollover_step_copies_in_its_gap(tmp_path):
    db = f"{HOST_TOKENS}.sqlite"
    steplog = f"{HOST_TOKENS}.steplog.jsonl"
    run = api.import_path(RunStore(tmp_path / "traces"), db, None, steplog)
    (rank,) = run.summary()["gpu_time"]["ranks"]
    gaps, holding = _sql_gaps(db)
    # the step log's own account of which step started blocks (each sequence's 65th token: 45-token prompts)
    rollover_steps = [
        r["index"] for r in map(json.loads, open(steplog)) if r.get("type") == "step" and r.get("rollovers")
    ]
    assert rank["steps"] == len(gaps) == 70
    assert rank["gap_copy_steps"] == len(holding) == 1
    assert holding == rollover_steps == [19]  # the block tables go to the device in front of that step only
    assert rank["gap_p50_ns"] == float(np.median(gaps))
    # the old engine's gap (the token copy after each replay) was 0.018 ms on the H100; this one is the launch's
    assert rank["gap_p50_ns"] < 5_000


def test_show_says_a_copy_sat_between_the_steps_at_80_columns(tmp_path):
    opts = ["--traces-dir", tmp_path / "traces", "--dashboards-dir", tmp_path / "dash"]
    steplog = f"{GRAPHS}.steplog.jsonl"
    proc = roseprof("import", f"{GRAPHS}.sqlite", "--steplog", steplog, *opts, env={"COLUMNS": "80"})
    assert proc.returncode == 0, proc.stderr
    text = " ".join(proc.stdout.split())  # the note wraps at 80 columns
    assert "Between steps (a step's last kernel to the next one's first): 0.018 ms" in text
    assert (
        "in 70 of 70 a copy (memcpy or memset) started there on the stream of the next step's first" in text
    )


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 50), st.integers(0, 30), st.integers(0, 1), st.integers(0, 2)), max_size=12
    ),
    st.lists(st.tuples(st.integers(-10, 1500), st.integers(0, 1), st.integers(0, 2)), max_size=20),
    st.randoms(use_true_random=False),
)
def test_gaps_holding_is_the_loops(gaps, ops, rnd):
    # Disjoint intervals laid end to end with spaces between (some empty), each with a GPU and stream, handed over
    # in any order; ops (start, GPU, stream) count where they start inside one on its GPU and stream.
    rows, at = [], 0
    for space, width, device, stream in gaps:
        at += space
        rows.append((at, at + width, device, stream))
        at += width
    expected = sum(any(a <= t < b and (d, s) == (od, os) for t, od, os in ops) for a, b, d, s in rows)
    rnd.shuffle(rows)
    cols = (
        [np.array(c, dtype=np.int64).reshape(-1) for c in zip(*rows)] if rows else [np.zeros(0, np.int64)] * 4
    )
    op_cols = (
        [np.array(c, dtype=np.int64).reshape(-1) for c in zip(*ops)] if ops else [np.zeros(0, np.int64)] * 3
    )
    assert gaps_holding(*cols, *op_cols) == expected
