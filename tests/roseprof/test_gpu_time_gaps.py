"""What the GPU did between two decode steps (analysis/gpu_time.py's gap): from a step's last kernel to the next
step's first, and whether a copy started there on that first kernel's GPU and stream. Checked on a real capture of the engine of
before session 59, which copied each step's greedy tokens out after its replay (tests/data/README.md: H100, nsys
2025.3, CUDA graphs), against SQL over nsys' own export, and the helper that counts the gaps against a loop."""

from __future__ import annotations

import sqlite3

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from roseprof import api
from roseprof.analysis.gpu_time import gaps_holding
from roseprof.run.store import RunStore
from tests.helpers import DATA, roseprof

GRAPHS = DATA / "nsys" / "h100-nsys2025.3-roseinfer-graphs"


def _sql_gaps(db: str) -> tuple[list[int], int]:
    """(each gap's ns, how many hold a copy's start on the GPU and stream of the next step's first kernel)
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
    gaps, holding = [], 0
    for this, nxt in zip(spans, spans[1:]):
        if this is None or nxt is None:
            continue
        (start, device, stream), lo = nxt[0], this[1]
        hi = max(start, lo)
        gaps.append(hi - lo)
        holding += any(lo <= c < hi and (d, st) == (device, stream) for c, d, st in copies)
    return gaps, holding


def test_every_gap_between_the_graph_engines_steps_held_its_copy_as_sql_says(tmp_path):
    db = f"{GRAPHS}.sqlite"
    run = api.import_path(RunStore(tmp_path / "traces"), db, None, f"{GRAPHS}.steplog.jsonl")
    (rank,) = run.summary()["gpu_time"]["ranks"]
    gaps, holding = _sql_gaps(db)
    assert rank["steps"] == len(gaps) == 70
    assert rank["gap_copy_steps"] == holding == 70  # the tokens' copy out, after every replay
    assert rank["gap_p50_ns"] == float(np.median(gaps))
    assert 0 < rank["gap_p50_ns"] < rank["idle_p50_ns"] < rank["period_p50_ns"]


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
