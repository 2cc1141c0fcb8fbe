"""The next layer's weights into L2 from a side stream of the captured step (`roseinfer.kernels.l2_prefetch`)."""

import pytest
import torch

from roseinfer import LLM, SamplingParams
from roseinfer.kernels.l2_prefetch import CHUNK_BYTES, chunk_table, prefetch_scope
from tests.roseinfer.test_engine_matches_hf import NEW_TOKENS, make_prompts


def test_chunk_table_covers_each_tensor_in_order_in_aligned_chunks():
    a = torch.zeros(3 * CHUNK_BYTES // 4 + 40, dtype=torch.float16)  # 1.5 chunks + 80 bytes
    b = torch.zeros(100, 7, dtype=torch.float32)  # 2,800 bytes: less than a chunk
    addrs, sizes = chunk_table([a, b])
    assert addrs.tolist() == [a.data_ptr(), a.data_ptr() + CHUNK_BYTES, b.data_ptr()]
    assert sizes.tolist() == [CHUNK_BYTES, CHUNK_BYTES // 2 + 80, 2800]
    # a limit counts across the tensors, each tensor's part cut to a multiple of 16
    addrs, sizes = chunk_table([a, b], limit_bytes=3 * CHUNK_BYTES // 2 + 80 + 1000)
    assert addrs.tolist()[-1] == b.data_ptr() and sizes.tolist() == [CHUNK_BYTES, CHUNK_BYTES // 2 + 80, 992]
    assert sizes.dtype == torch.int32 and addrs.dtype == torch.int64
    assert all(
        s % 16 == 0 and 0 < s <= CHUNK_BYTES for s in chunk_table([a, b], limit_bytes=5000)[1].tolist()
    )


class _Recorder:
    def __init__(self):
        self.launched, self.joins = [], 0

    def launch(self, index):
        self.launched.append(index)

    def join(self):
        self.joins += 1


def test_model_asks_for_each_next_layer_at_its_start(tiny_checkpoint):
    # Prefill and decode alike: layer 0 before the embedding, then at layer l's start layer l + 1 (after the last
    # layer's: index n_layer, the lm_head), in order; outside a scope nothing is asked.
    llm = LLM(tiny_checkpoint, device="cpu")
    n_layer = llm.engine.model_cfg.n_layer
    recorder = _Recorder()
    with prefetch_scope(recorder):
        llm.generate(make_prompts()[:1], SamplingParams(max_new_tokens=3, ignore_eos=True))
    per_forward = list(range(n_layer + 1))
    assert len(recorder.launched) % len(per_forward) == 0 and len(recorder.launched) >= 3 * len(per_forward)
    assert recorder.launched == per_forward * (len(recorder.launched) // len(per_forward))
    assert recorder.joins == 1
    llm.generate(make_prompts()[:1], SamplingParams(max_new_tokens=2, ignore_eos=True))
    assert recorder.joins == 1 and len(recorder.launched) % len(per_forward) == 0


@pytest.mark.gpu
def test_prefetch_kernel_issues_bulk_prefetches():
    from roseinfer.kernels.l2_prefetch import _kernel, l2_prefetch_supported, prefetch_chunks

    if not l2_prefetch_supported():
        pytest.skip("bulk L2 prefetch needs compute capability 9.0")
    w = torch.randn(
        3000, 769, device="cuda", dtype=torch.float16
    )  # odd size: a last chunk shorter than the rest
    before = w.clone()
    prefetch_chunks(*chunk_table([w]))
    torch.cuda.synchronize()
    assert torch.equal(w, before)  # a hint: nothing written
    compiled = next(iter(_kernel().device_caches[torch.cuda.current_device()][0].values()))
    assert "cp.async.bulk.prefetch.L2.global" in compiled.asm["ptx"]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_engine_with_or_without_the_prefetch_gives_the_same_tokens(tiny_checkpoint, dtype):
    # CUDA graphs, paged attention, batches 1 to 8: the prefetch only reads weights, so the tokens are identical,
    # in a batch and one request at a time.
    from roseinfer.kernels.l2_prefetch import l2_prefetch_supported

    params = SamplingParams(max_new_tokens=NEW_TOKENS, ignore_eos=True)
    outs = {}
    for on in (True, False):
        llm = LLM(
            tiny_checkpoint, device="cuda", dtype=dtype, max_batch_size=8, paged_attn=True, cuda_graph=True,
            l2_prefetch=on,
        )  # fmt: skip
        assert (llm.engine.graphs.prefetch is not None) == (on and l2_prefetch_supported())
        batch = [o.token_ids for o in llm.generate(make_prompts(), params)]
        one = [llm.generate([p], params)[0].token_ids for p in make_prompts()[:3]]
        outs[on] = (batch, one)
    assert outs[True] == outs[False]
