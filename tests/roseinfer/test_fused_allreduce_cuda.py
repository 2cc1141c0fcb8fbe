"""The decode step's all-reduce fused into its GEMVs (`tp_allreduce="fused"`, roseinfer/fused_allreduce.py) on 2
GPUs: greedy tokens equal NCCL's, and every rank pushed every word of every slot once per one-row decode step.

The engines run in a child process: torch numbers symmetric-memory rendezvous per process, so a second TP engine
on symmetric memory in one process waits for keys its fresh ranks never write (docs/PARALLELISM.md), and the other
TP tests (`test_tensor_parallel_cuda.py`) build one. Needs two GPUs (scripts/gpu_tp_check.sh runs it)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.roseinfer.test_tensor_parallel_cuda import two_gpus

REPO = Path(__file__).resolve().parents[2]

CHILD = """
import json, sys
from roseinfer import LLM, SamplingParams
from tests.roseinfer.test_engine_matches_hf import NEW_TOKENS, make_prompts

# float16 (the GEMVs run in half precision only), one sequence a step: every decode step is a one-row step
options = dict(device="cuda", dtype="float16", paged_attn=True, cuda_graph=True, max_batch_size=1,
               prefill_max_batch_size=1)
params = SamplingParams(max_new_tokens=NEW_TOKENS, ignore_eos=True)
prompts = make_prompts()
out = {"prompts": len(prompts), "new_tokens": NEW_TOKENS}
with LLM(sys.argv[1], tensor_parallel_size=2, tp_allreduce="nccl", tp_timeout_s=120, **options) as llm:
    out["nccl"] = [o.token_ids for o in llm.generate(prompts, params)]
with LLM(sys.argv[1], tensor_parallel_size=2, tp_allreduce="fused", tp_timeout_s=120, **options) as llm:
    out["fused"] = [o.token_ids for o in llm.generate(prompts, params)]
    # every word's epoch in rank 0's buffer: how many times each rank pushed it
    out["epochs"] = sorted(set(llm.engine.runner.tp.fused.epochs().flatten().tolist()))
print("RESULT " + json.dumps(out))
"""


@pytest.mark.gpu
@two_gpus
def test_fused_allreduce_tp2_equals_tp1_and_pushes_every_step(tiny_checkpoint):
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(tiny_checkpoint)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=400,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    out = json.loads(lines[-1][len("RESULT ") :])
    # At two ranks the fused sum is NCCL's, a + b rounded once, so every token is the same (against one GPU a
    # float16 run may flip a near-tie: the sum's order differs there)
    for i, (ours, ref) in enumerate(zip(out["fused"], out["nccl"])):
        assert ours == ref, f"prompt {i}: the fused all-reduce at tensor_parallel_size=2 differs from NCCL's"
    assert len(out["fused"]) == len(out["nccl"]) == out["prompts"]
    # Every word of every slot (2 a layer) was pushed by both ranks the same number of times: at least once per
    # decode step (the first token of each prompt comes from its prefill; warm-up steps add more).
    assert len(out["epochs"]) == 1, out["epochs"]
    assert out["epochs"][0] >= out["prompts"] * (out["new_tokens"] - 1)
