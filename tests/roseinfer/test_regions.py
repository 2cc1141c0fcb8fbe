"""The model's part regions cover every op of a decode step: what a CUDA graph capture records as nodes is made
inside one of them, so a profiler can attribute every replayed kernel (checked on CPU through the static path
that graphs capture, with a dispatch mode recording the regions open at each op)."""

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from roseinfer import LLM, SamplingParams, planted, tracing

PARTS = {
    tracing.EMBEDDING,
    tracing.ATTENTION,
    tracing.LAYERNORM,
    tracing.MLP,
    tracing.LM_HEAD,
    tracing.ARGMAX,
}
# Ops that make no kernel (views, metadata, allocation): no graph node, so no region needed.
NO_KERNEL = {
    "view", "_unsafe_view", "reshape", "slice", "select", "permute", "unbind", "t", "transpose", "expand",
    "as_strided", "alias", "detach", "unsqueeze", "squeeze", "split", "empty", "empty_like", "empty_strided",
}  # fmt: skip


class RecordRegions(TorchDispatchMode):
    def __init__(self, stack: list[str]) -> None:
        super().__init__()
        self.stack = stack
        self.ops: list[tuple[str, tuple[str, ...]]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append((func.overloadpacket.__name__, tuple(self.stack)))
        return func(*args, **(kwargs or {}))


@pytest.fixture
def region_stack(monkeypatch):
    """Regions switched on, recorded on a stack instead of NVTX."""
    stack: list[str] = []
    monkeypatch.setattr(tracing.STATE, "nvtx", True)
    monkeypatch.setattr(tracing.STATE, "enabled", True)
    monkeypatch.setattr(tracing.STATE, "_push", stack.append)
    monkeypatch.setattr(tracing.STATE, "_pop", stack.pop)
    return stack


def test_every_op_of_a_static_decode_step_is_inside_a_part(region_stack):
    llm = LLM("gpt2-tiny", max_batch_size=4)
    llm.engine.use_static_decode(capture=False)
    llm.generate(
        [[1, 2, 3]] * 3, SamplingParams(max_new_tokens=3, ignore_eos=True)
    )  # real tables and lengths
    graphs = llm.engine.graphs
    mode = RecordRegions(region_stack)
    with torch.inference_mode(), mode:
        graphs.forward(graphs.bucket_for(3))  # what `DecodeGraphs._capture` records, run eagerly
    assert region_stack == []
    outside = {name for name, stack in mode.ops if not PARTS & set(stack) and name not in NO_KERNEL}
    assert outside == set()
    seen = {r for _, stack in mode.ops for r in stack}
    assert PARTS <= seen and tracing.KV_APPEND in seen


def test_eager_steps_open_the_parts_inside_forward_and_sample(region_stack):
    llm = LLM("gpt2-tiny", max_batch_size=2)
    opened: list[tuple[str, ...]] = []
    push = tracing.STATE._push

    def record(name):
        push(name)
        opened.append(tuple(region_stack))

    tracing.STATE._push = record
    llm.generate([[1, 2]] * 2, SamplingParams(max_new_tokens=2, ignore_eos=True))
    decode = [s for s in opened if s[:2] == (tracing.SCHEDULER_STEP, tracing.DECODE_STEP)]
    inside = {s[-1] for s in decode if len(s) > 3 and s[2] == tracing.MODEL_FORWARD}
    assert PARTS - {tracing.ARGMAX} <= inside
    assert any(s[-2:] == (tracing.SAMPLE, tracing.ARGMAX) for s in decode)
    layers = llm.engine.model_cfg.n_layer
    per_step = [s[-1] for s in decode if len(s) == 4 and s[2] == tracing.MODEL_FORWARD]
    steps = sum(1 for s in decode if len(s) == 2)
    # Per layer an attention, an MLP and two residual add + LayerNorms (ln_2, then the next ln_1 or ln_f).
    assert per_step.count(tracing.ATTENTION) == per_step.count(tracing.MLP) == layers * steps
    assert per_step.count(tracing.LAYERNORM) == (2 * layers + 1) * steps


def test_record_function_spans_only_while_a_profiler_records(monkeypatch):
    """With record_function on and no profiler recording, a region makes no span (one costs ~6 us even then);
    while a torch profiler records, every region is a span."""
    from torch.profiler import ProfilerActivity, profile

    made: list[str] = []
    real = torch.profiler.record_function

    def counted(name, *args):
        made.append(name)
        return real(name, *args)

    monkeypatch.setattr(torch.profiler, "record_function", counted)
    monkeypatch.setattr(tracing.STATE, "_profiling", None)
    try:
        tracing.configure(nvtx=False, record_function=True)
        with tracing.region(tracing.SAMPLE):
            pass
        assert made == []
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            with tracing.region(tracing.SAMPLE):
                torch.ones(2).sum()
        assert made == [tracing.SAMPLE]
        assert [e.name for e in prof.events()].count(tracing.SAMPLE) == 1
    finally:
        tracing.configure()


def test_nvtx_regions_only_when_a_tool_listens(monkeypatch):
    """ROSEINFER_NVTX=1 without a tool (no NVTX_INJECTION64_PATH, which nsys and ncu set) leaves the regions off:
    NVTX would drop every range anyway. Under a tool they are on."""
    monkeypatch.delenv("NVTX_INJECTION64_PATH", raising=False)
    monkeypatch.setenv("ROSEINFER_NVTX", "1")
    try:
        tracing.configure()
        assert not tracing.STATE.nvtx and tracing.region(tracing.SAMPLE) is tracing._NULL
        monkeypatch.setenv("NVTX_INJECTION64_PATH", "libToolsInjection64.so")  # as nsys sets it
        tracing.configure()
        assert tracing.STATE.nvtx and tracing.region(tracing.SAMPLE) is not tracing._NULL
        monkeypatch.setenv("NVTX_DISABLE", "1")  # the nvtx package's off switch
        tracing.configure()
        assert not tracing.STATE.nvtx
    finally:
        monkeypatch.undo()
        tracing.configure()
    assert not tracing.STATE.nvtx


def test_the_injected_sleep_can_be_confined_to_one_rank(monkeypatch):
    """ROSEINFER_TEST_SLEEP_RANK (tests only) makes one rank late: the sleep runs where this process' rank is the
    one named, and nowhere else (a process with no tensor-parallel group is rank 0)."""
    import types

    monkeypatch.setenv("ROSEINFER_TEST_SLEEP_REGION", "roseinfer.layer.mlp:0")
    monkeypatch.setenv("ROSEINFER_TEST_SLEEP_RANK", "1")
    tracing.configure()
    try:
        assert tracing.STATE.sleep_rank == 1
        assert not planted.sleeps_on_this_rank(tracing.STATE)
        group = types.SimpleNamespace(rank=1)
        monkeypatch.setattr("roseinfer.distributed._GROUP", group)
        assert planted.sleeps_on_this_rank(tracing.STATE)
        monkeypatch.delenv("ROSEINFER_TEST_SLEEP_RANK")
        tracing.configure()
        group.rank = 0
        # unset: every rank
        assert tracing.STATE.sleep_rank is None and planted.sleeps_on_this_rank(tracing.STATE)
    finally:
        monkeypatch.delenv("ROSEINFER_TEST_SLEEP_REGION")
        monkeypatch.delenv("ROSEINFER_TEST_SLEEP_RANK", raising=False)
        tracing.configure()
