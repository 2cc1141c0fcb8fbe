"""The engine on CUDA: greedy output equals Hugging Face `generate` in fp32 and stays close in fp16."""

import pytest
import torch

from roseinfer import LLM, SamplingParams
from tests.roseinfer.test_engine_matches_hf import NEW_TOKENS, make_prompts
from tests.roseinfer.test_engine_matches_hf import hf_outputs as hf_outputs_on

pytestmark = pytest.mark.gpu


def hf_outputs(path, dtype):
    return hf_outputs_on(path, dtype, "cuda")


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"batched_kv_append": False},
        {"batched_rollover": False},
        {"block_table_cache": False},
        {"prefix_cache": False},
    ],
)
def test_cuda_fp32_matches_hf(tiny_checkpoint, options):
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    ref = hf_outputs(tiny_checkpoint, torch.float32)
    llm = LLM(tiny_checkpoint, device="cuda", prefill_max_batch_size=1, max_batch_size=8, **options)
    outs = llm.generate(make_prompts(), SamplingParams(max_new_tokens=NEW_TOKENS, ignore_eos=True))
    assert [o.token_ids for o in outs] == ref
    assert llm.engine.mgr.num_free() == llm.engine.mgr.num_blocks


def test_cuda_fp16_stays_close(tiny_checkpoint):
    # Both in fp16. Rounding in a different order can flip a near-tie (these random weights make many), after
    # which two greedy continuations differ; seen on an H100: 7 of 8 prompts agreed on all 150 tokens, one
    # diverged early. Most must agree on a long stretch.
    ref = hf_outputs(tiny_checkpoint, torch.float16)
    llm = LLM(tiny_checkpoint, device="cuda", dtype="float16", max_batch_size=8)
    outs = llm.generate(make_prompts(), SamplingParams(max_new_tokens=NEW_TOKENS, ignore_eos=True))
    agree = [
        next((i for i, (a, b) in enumerate(zip(o.token_ids, r)) if a != b), NEW_TOKENS)
        for o, r in zip(outs, ref)
    ]
    assert sum(a >= 32 for a in agree) >= 0.75 * len(agree), agree
