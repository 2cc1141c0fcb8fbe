"""Tensor parallelism on 2 GPUs (NCCL): greedy output of tensor_parallel_size=2 equals 1 and Hugging Face on the
eager, paged and CUDA-graph paths (the graphs capture the NCCL all-reduces), and the ranks' step logs agree.
Needs two GPUs (scripts/gpu_tp_check.sh runs these on the device)."""

import json

import pytest
import torch

from roseinfer import LLM, SamplingParams
from tests.roseinfer.test_engine_matches_hf import NEW_TOKENS, make_prompts

two_gpus = pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.device_count() < 2, reason="needs 2 GPUs"
)
TIMEOUT_S = 120.0

PATHS = {
    "eager": {},
    "paged": {"paged_attn": True},
    "graph": {"paged_attn": True, "cuda_graph": True},  # overlapped decode (the default)
    # torch's symmetric-memory all-reduce in the captured decode step (prefill's larger messages: NCCL)
    "graph-symm-mem": {"paged_attn": True, "cuda_graph": True, "tp_allreduce": "symm_mem"},
}


def _generate(llm):
    params = SamplingParams(max_new_tokens=NEW_TOKENS, ignore_eos=True)
    return [o.token_ids for o in llm.generate(make_prompts(), params)]


@pytest.fixture(scope="module")
def hf_reference_cuda(tiny_checkpoint):
    from tests.roseinfer.test_engine_cuda import hf_outputs

    return hf_outputs(tiny_checkpoint, torch.float32)


@pytest.mark.gpu
@two_gpus
@pytest.mark.parametrize("path", list(PATHS))
def test_tp2_greedy_equals_tp1_and_hf(tiny_checkpoint, hf_reference_cuda, path):
    options = dict(device="cuda", prefill_max_batch_size=1, max_batch_size=6, **PATHS[path])
    one = _generate(LLM(tiny_checkpoint, **options))
    assert one == hf_reference_cuda
    with LLM(tiny_checkpoint, tensor_parallel_size=2, tp_timeout_s=TIMEOUT_S, **options) as llm:
        assert llm.engine.device == torch.device("cuda", 0)
        assert llm.engine.kv_cache.k_caches[0].shape[1] == 2  # 2 of the checkpoint's 4 heads
        if options.get("cuda_graph"):
            assert sorted(llm.engine.graphs.graphs) == [1, 2, 4, 6]  # captured, all-reduces inside
        assert (llm.engine.runner.tp.symm_mem is not None) == (options.get("tp_allreduce") == "symm_mem")
        outs = _generate(llm)
        for i, (ours, ref) in enumerate(zip(outs, hf_reference_cuda)):
            assert ours == ref, f"prompt {i} ({path}): tensor_parallel_size=2 differs from Hugging Face"
        stats = llm.engine.stats
        assert stats["rollovers"] > 0 and stats["cow"] >= 1
        assert llm.engine.mgr.num_free() == llm.engine.mgr.num_blocks


@pytest.mark.gpu
@two_gpus
def test_tp2_graph_ranks_log_the_same_steps_under_preemption(monkeypatch, tmp_path, tiny_checkpoint):
    log = tmp_path / "steplog.jsonl"
    options = dict(
        device="cuda", block_size=16, num_blocks=14, max_batch_size=6, prefill_max_batch_size=6,
        paged_attn=True, cuda_graph=True,
    )  # fmt: skip
    prompts = [[(7 * i + j) % 500 + 1 for j in range(20 + 3 * i)] for i in range(6)]
    params = SamplingParams(max_new_tokens=60, ignore_eos=True)
    one = [o.token_ids for o in LLM(tiny_checkpoint, **options).generate(prompts, params)]
    monkeypatch.setenv("ROSEINFER_STEP_LOG", str(log))
    with LLM(tiny_checkpoint, tensor_parallel_size=2, tp_timeout_s=TIMEOUT_S, **options) as llm:
        assert [o.token_ids for o in llm.generate(prompts, params)] == one
        assert llm.engine.stats["preemptions"] > 0

    def schedule(path):
        with open(path, encoding="utf-8") as fh:
            records = [json.loads(line) for line in fh]
        return [
            (
                r["type"],
                r.get("index"),
                r.get("requests"),
                r.get("request"),
                r.get("bucket"),
                r.get("rollovers"),
            )
            for r in records
            if r["type"] in ("step", "prefill", "preempt")
        ]

    assert schedule(log) == schedule(tmp_path / "steplog.rank1.jsonl")
