"""The HBM-floor arithmetic: bytes the weights and the KV cache take, and the tokens the engine counts as read."""

from roseinfer import LLM, SamplingParams
from roseinfer.bench import roofline
from roseinfer.config import BUILTIN_MODELS


def test_weight_and_kv_bytes_of_gpt2_tiny():
    llm = LLM("gpt2-tiny")
    c = BUILTIN_MODELS["gpt2-tiny"]
    e = c.n_embd
    # Per block: ln_1, c_attn (3E^2 + 3E), attn_proj (E^2 + E), ln_2, c_fc (4E^2 + 4E), mlp_proj (4E^2 + E);
    # then ln_f and the tied embedding once; the position table is not streamed.
    params = c.n_layer * (12 * e * e + 13 * e) + 2 * e + c.vocab_size * e
    assert roofline.weight_bytes(llm.engine.model) == 4 * params
    assert roofline.kv_bytes_per_token(llm.engine.model) == c.n_layer * 2 * e * 4
    floor = roofline.decode_floor_seconds(
        llm.engine.model, decode_steps=10, kv_tokens_read=100, bandwidth=1e9
    )
    assert floor == (10 * 4 * params + 100 * c.n_layer * 2 * e * 4) / 1e9


def test_engine_counts_the_past_tokens_each_decode_step_reads():
    llm = LLM("gpt2-tiny")
    llm.generate([[7] * 5, [8] * 20], SamplingParams(max_new_tokens=10, ignore_eos=True))
    stats = llm.engine.stats
    # The first token comes from prefill; decode step j (1..9) of a prompt of p tokens reads p + j - 1 past tokens.
    assert stats["decode_steps"] == 9
    assert stats["decode_kv_tokens"] == sum(p + j - 1 for p in (5, 20) for j in range(1, 10))
