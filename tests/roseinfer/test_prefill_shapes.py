"""The prefill's packed rows padded to a few sizes (roseinfer/prefill_shapes.py): cuBLAS chose an algorithm on the
host for every row count it had not met, up to 13 ms of a small prefill on the H200 (docs/BENCHMARKS.md, session
23). The padding must change nothing a request sees: its tokens, and the keys and values its prompt left behind."""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from roseinfer import LLM, SamplingParams
from roseinfer.prefill_shapes import padded_rows, row_sizes, warm_gemms


@given(st.integers(1, 1 << 16))
def test_padded_rows_are_few_sizes_with_bounded_padding(tokens):
    rows = padded_rows(tokens)
    assert tokens <= rows
    if tokens <= 1024:
        assert rows % 64 == 0 and rows - tokens < 64
    else:
        assert rows - tokens <= tokens / 8  # at most 12.5% padding beyond 1,024 rows
    assert padded_rows(rows) == rows  # a padded size is its own size
    assert rows in row_sizes(max(rows, 1 << 16))


def test_a_server_meets_few_sizes():
    # 16 prompts of up to 1,024 tokens: 16 sizes up to 1,024, then 8 per doubling
    assert len(row_sizes(16 * 1024)) == 48
    assert row_sizes(300) == [64, 128, 192, 256, 320]
    assert row_sizes(1200)[-3:] == [1024, 1152, 1280]


def _padded(llm: LLM) -> LLM:
    llm.engine.runner.prefill_rows = padded_rows  # as on CUDA (CPU pads nothing by default)
    return llm


def test_padding_the_rows_changes_no_token_and_no_cached_key(tiny_checkpoint):
    """Prompts of mixed lengths, some sharing a cached prefix (the prefix cache's other attention path), prefilled
    with their rows padded to 64 and beyond, decode token for token as without padding, and leave the same keys
    and values in the cache (float32, CPU)."""
    shared = [(5 * j) % 300 + 1 for j in range(64)]  # one full KV block: the later prompts hit it
    prompts = [[(11 * i + j) % 400 + 1 for j in range(n)] for i, n in enumerate([5, 40, 1, 17, 3, 29, 8])]
    prompts += [shared + [7, 8, 9], shared, shared + list(range(20, 90))]
    params = SamplingParams(max_new_tokens=6, ignore_eos=True)

    def run(llm: LLM):
        tokens = [o.token_ids for o in llm.generate(prompts, params)]
        cache = llm.engine.runner.kv_cache
        return tokens, [k.clone() for k in cache.k_caches], [v.clone() for v in cache.v_caches]

    opts = dict(prefill_max_batch_size=8, max_batch_size=8)
    plain_tokens, plain_k, plain_v = run(LLM(tiny_checkpoint, **opts))
    padded_tokens, padded_k, padded_v = run(_padded(LLM(tiny_checkpoint, **opts)))
    assert padded_tokens == plain_tokens
    for a, b in zip(plain_k + plain_v, padded_k + padded_v):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_the_warm_up_calls_every_shape_the_prefill_will(tiny_checkpoint, monkeypatch):
    """warm_gemms calls each linear at each padded size, and the lm_head at every sampled-row count; a prefill
    afterwards (rows padded) meets no (rows, N, K) the warm-up did not."""
    from roseinfer import linears, prefill_shapes

    llm = _padded(LLM(tiny_checkpoint, prefill_max_batch_size=4, max_batch_size=4))
    model = llm.engine.runner.model
    seen: set[tuple[int, ...]] = set()
    calls = []
    f_linear = torch.nn.functional.linear
    addmm_act = torch._addmm_activation

    def recording_linear(x, w, b=None):
        calls.append((x.shape[0], *w.shape))
        return f_linear(x, w, b)

    def recording_addmm(bias, x, wt, **kw):
        calls.append((x.shape[0], wt.shape[1], wt.shape[0]))
        return addmm_act(bias, x, wt, **kw)

    monkeypatch.setattr(linears.F, "linear", recording_linear)
    monkeypatch.setattr(prefill_shapes.F, "linear", recording_linear)
    monkeypatch.setattr(linears.torch, "_addmm_activation", recording_addmm)
    n = warm_gemms(model, 4 * model.cfg.n_positions, 4)
    assert n == 4 * len(row_sizes(4 * model.cfg.n_positions)) + 4
    seen.update(calls)
    calls.clear()
    import roseinfer.model as model_module

    monkeypatch.setattr(model_module.F, "linear", recording_linear)
    prompts = [[(3 * i + j) % 200 + 1 for j in range(n)] for i, n in enumerate([9, 70, 33, 2])]
    llm.generate(prompts, SamplingParams(max_new_tokens=1, ignore_eos=True))
    assert calls and set(calls) <= seen, set(calls) - seen


@pytest.mark.gpu
def test_on_cuda_the_rows_are_padded_and_the_tokens_are_unchanged(tiny_checkpoint):
    """The engine pads on CUDA by itself, and its float32 tokens match the unpadded engine's."""
    prompts = [[(11 * i + j) % 400 + 1 for j in range(n)] for i, n in enumerate([5, 40, 1, 17, 3, 29, 8])]
    params = SamplingParams(max_new_tokens=8, ignore_eos=True)
    cuda = LLM(tiny_checkpoint, device="cuda", dtype="float32", max_batch_size=8, prefill_max_batch_size=8)
    assert cuda.engine.runner.prefill_rows is padded_rows
    plain = LLM(tiny_checkpoint, device="cuda", dtype="float32", max_batch_size=8, prefill_max_batch_size=8)
    plain.engine.runner.prefill_rows = lambda tokens: tokens
    assert [o.token_ids for o in cuda.generate(prompts, params)] == [
        o.token_ids for o in plain.generate(prompts, params)
    ]


def test_the_start_up_prefill_changes_nothing_a_request_sees(tiny_checkpoint):
    """The start-up prefill (run on CUDA, where it loads the kernels) writes only the pad block: the block
    accounting is as it was, and the engine generates what a fresh one does (CPU, float32)."""
    import numpy as np

    prompts = [[(11 * i + j) % 400 + 1 for j in range(n)] for i, n in enumerate([5, 70, 3, 130])]
    params = SamplingParams(max_new_tokens=5, ignore_eos=True)
    opts = dict(prefill_max_batch_size=4, max_batch_size=4)
    warmed = _padded(LLM(tiny_checkpoint, **opts))
    runner = warmed.engine.runner
    before = (runner.mgr.num_free(), runner.mgr.fill.copy(), runner.mgr.refcount.copy())
    runner._warm_prefill()
    assert runner.mgr.num_free() == before[0]
    assert np.array_equal(runner.mgr.fill, before[1]) and np.array_equal(runner.mgr.refcount, before[2])
    fresh = LLM(tiny_checkpoint, **opts)
    assert [o.token_ids for o in warmed.generate(prompts, params)] == [
        o.token_ids for o in fresh.generate(prompts, params)
    ]
