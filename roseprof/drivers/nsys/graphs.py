"""CUDA graph node events in an nsys export: where each replayed kernel's node was made.

With `--cuda-graph-trace=node`, Nsight Systems 2025.x writes CUDA_GRAPH_NODE_EVENTS (older versions:
CUDA_GRAPH_EVENTS, same columns): one row per node made by stream capture or cloned at instantiation
(originalGraphNodeId), with the making thread; and puts graphNodeId on every kernel it replays.
"""

from __future__ import annotations

from roseprof.model import GraphNodes

TABLES = ("CUDA_GRAPH_NODE_EVENTS", "CUDA_GRAPH_EVENTS")
NEEDED = {"start", "globalTid", "graphNodeId"}


def read_graph_nodes(db) -> GraphNodes:
    """The graph nodes of the export (db: drivers/nsys/sqlite.Export), or none where it has no usable table.
    Rows with a damaged value are left out: a node the kernels cannot find only loses its capture region."""
    for table in TABLES:
        if table not in db.tables:
            continue
        cols = db.columns(table)
        if not NEEDED <= cols:
            continue
        original = "originalGraphNodeId" if "originalGraphNodeId" in cols else "NULL"
        rows = db.query(
            f"SELECT graphNodeId, coalesce({original}, -1), start, coalesce(globalTid, -1) FROM {table} "
            "WHERE typeof(graphNodeId) = 'integer' AND typeof(start) = 'integer' "
            f"AND typeof(coalesce({original}, -1)) = 'integer' AND typeof(coalesce(globalTid, -1)) = 'integer'"
        )
        if rows:
            arr = db.to_ints(rows, 4, table)
            return GraphNodes(node=arr[:, 0], original=arr[:, 1], start=arr[:, 2], tid=arr[:, 3])
    return GraphNodes()
