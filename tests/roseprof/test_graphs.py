"""CUDA-graph-replayed kernels attributed to the regions open when their graph was captured.

A small model trace whose shape is what nsys 2025.3 records with --cuda-graph-trace=node: nodes made during
stream capture inside regions, cloned at instantiation, and kernels replayed later with the clones' ids.
"""

import numpy as np

from roseprof.analysis.graphs import attribution, capture_ranges, graph_warning
from roseprof.analysis.ranges import attribute_gpu_ops, build_tree
from roseprof.analysis.summary import analyse
from roseprof.model import KERNEL, GpuOps, GraphNodes, Names, Ranges, Tool, Trace

A = np.array


def engine_like_trace(with_nodes=True) -> Trace:
    names = Names()
    step, fwd, attn, mlp, launch = (
        names.intern(n)
        for n in (
            "roseinfer.decode_step",
            "roseinfer.model.forward",
            "roseinfer.layer.attention",
            "roseinfer.layer.mlp",
            "cudaGraphLaunch",
        )
    )
    kname = names.intern("kernel")
    # Capture phase (t 0..100): forward > attention [10, 20], mlp [30, 40]. Replays: two decode steps.
    ranges = Ranges(
        start=A([0, 10, 30, 200, 210, 400, 410]),
        end=A([100, 20, 40, 300, 290, 500, 490]),
        name=A([fwd, attn, mlp, step, fwd, step, fwd]),
        domain=A([0] * 7),
        tid=A([1] * 7),
        style=A([0] * 7),
    ).sort()
    nodes = GraphNodes(
        node=A([1, 2, 11, 12]), original=A([-1, -1, 1, 2]), start=A([15, 35, 95, 96]), tid=A([1, 1, 1, 1])
    )
    # Each step replays the graph: kernel of node 11 (attention: 7 ns) and of node 12 (mlp: 3 ns).
    ops = GpuOps(
        kind=A([KERNEL] * 4),
        start=A([220, 230, 420, 430]),
        end=A([227, 233, 427, 433]),
        name=A([kname] * 4),
        device=A([0] * 4),
        stream=A([7] * 4),
        graph_node=A([11, 12, 11, 12]) if with_nodes else A([-1] * 4),
        api_start=A([215, 215, 415, 415]),
        api_end=A([218, 218, 418, 418]),
        api_tid=A([1] * 4),
        api_name=A([launch] * 4),
    )
    return Trace(
        Tool("nsys", "test"),
        names=names,
        ranges=ranges,
        ops=ops,
        graph_nodes=nodes if with_nodes else GraphNodes(),
    )


def test_replayed_kernels_land_in_their_capture_regions():
    trace = engine_like_trace()
    r = trace.ranges
    tree = build_tree(r.start, r.end, r.tid)
    capture = capture_ranges(trace, tree)
    assert [trace.names[trace.ranges.name[c]] for c in capture] == [
        "roseinfer.layer.attention",
        "roseinfer.layer.mlp",
    ] * 2


def test_summary_graph_time_per_region_and_per_step():
    summary, tables = analyse(engine_like_trace(), None)
    regions = {r["name"]: r for r in summary["regions"]}
    assert regions["roseinfer.layer.attention"]["gpu_graph_ns"] == 14
    assert regions["roseinfer.layer.mlp"]["gpu_graph_ns"] == 6
    # forward holds the capture-time instance that encloses both (inclusive, like gpu_kernel_ns).
    assert regions["roseinfer.model.forward"]["gpu_graph_ns"] == 20
    # By the launch rule all four kernels sit under the replay-time forward ranges.
    assert regions["roseinfer.model.forward"]["gpu_kernel_ns"] == 20
    rows = tables["steps"]
    assert rows["graph:roseinfer.layer.attention"] == [7, 7] and rows["graph:roseinfer.layer.mlp"] == [3, 3]
    kernels = {(k["region"], k["capture_region"]): k for k in summary["kernels"]}
    assert kernels[("roseinfer.model.forward", "roseinfer.layer.attention")]["total_ns"] == 14
    att = summary["kernel_attribution"]
    assert att["attributed_pct"] == 100.0 and att["graph_by_capture_ns"] == 20 == att["graph_replayed_ns"]
    assert summary["steps"]["normal"]["graph_regions"]["roseinfer.layer.attention"] == 7
    assert not any("CUDA graphs" in w for w in summary["warnings"])


def test_without_node_table_graphs_count_whole_and_say_so():
    trace = engine_like_trace(with_nodes=False)
    r = trace.ranges
    tree = build_tree(r.start, r.end, r.tid)
    capture = capture_ranges(trace, tree)
    assert (capture == -1).all()
    note = graph_warning(trace, capture)
    assert note and "no CUDA graph node table" in note
    gpu = attribute_gpu_ops(
        r.start,
        r.end,
        r.tid,
        tree,
        trace.ops.kind,
        trace.ops.start,
        trace.ops.end,
        trace.ops.api_start,
        trace.ops.api_end,
        trace.ops.api_tid,
    )
    att = attribution(trace, gpu.op_range, capture)
    assert (
        att["graph_by_capture_ns"] == 0 and att["graph_replayed_ns"] == 20 and att["attributed_pct"] == 100.0
    )
    summary, _ = analyse(trace, None)
    assert sum("counted as whole graphs" in w for w in summary["warnings"]) == 1


def test_a_torch_trace_names_what_can_place_graph_kernels():
    trace = engine_like_trace(with_nodes=False)
    trace.tool = Tool("torch", "2.11")
    r = trace.ranges
    note = graph_warning(trace, capture_ranges(trace, build_tree(r.start, r.end, r.tid)))
    assert "torch does not record where graph nodes were captured" in note and "roseprof nsys" in note
