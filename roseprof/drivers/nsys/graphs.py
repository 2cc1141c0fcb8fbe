"""CUDA graph node events in an nsys export: where each replayed kernel's node was made.

With `--cuda-graph-trace=node`, Nsight Systems 2025.x writes CUDA_GRAPH_NODE_EVENTS (older versions:
CUDA_GRAPH_EVENTS, same columns): one row per node made by stream capture or cloned at instantiation
(originalGraphNodeId), with the making thread; and puts graphNodeId on every kernel it replays.
"""

from __future__ import annotations

import sqlite3

import numpy as np

from roseprof.model import GraphNodes

TABLES = ("CUDA_GRAPH_NODE_EVENTS", "CUDA_GRAPH_EVENTS")
NEEDED = {"start", "globalTid", "graphNodeId"}


def read_graph_nodes(conn: sqlite3.Connection, tables: set[str], columns) -> GraphNodes:
    """The graph nodes of the export, or none where it has no usable node table."""
    for table in TABLES:
        if table not in tables:
            continue
        cols = columns(conn, table)
        if not NEEDED <= cols:
            continue
        original = "coalesce(originalGraphNodeId, -1)" if "originalGraphNodeId" in cols else "-1"
        rows = conn.execute(
            f"SELECT graphNodeId, {original}, start, coalesce(globalTid, -1) FROM {table} "
            "WHERE graphNodeId IS NOT NULL AND start IS NOT NULL"
        ).fetchall()
        if rows:
            arr = np.array(rows, dtype=np.int64).reshape(-1, 4)
            return GraphNodes(node=arr[:, 0], original=arr[:, 1], start=arr[:, 2], tid=arr[:, 3])
    return GraphNodes()
