"""The sampler's nucleus (top_p) and per-request generators (seed)."""

import torch

from roseinfer.sampler import sample


def test_top_p_keeps_the_smallest_set_reaching_p():
    # Probabilities 0.5, 0.3, 0.2: top_p 0.6 keeps the first two, 0.5 only the first.
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.2]] * 2))
    gen = torch.Generator().manual_seed(0)
    seen = {tuple(sample(logits, [1.0, 1.0], gen, top_ps=[0.6, 0.5])) for _ in range(300)}
    assert {row[0] for row in seen} == {0, 1}
    assert {row[1] for row in seen} == {0}


def test_a_row_with_its_own_generator_repeats_whatever_the_others_do():
    logits = torch.randn(3, 50)
    first = sample(
        logits,
        [1.0] * 3,
        torch.Generator().manual_seed(1),
        generators=[None, torch.Generator().manual_seed(5), None],
    )
    again = sample(
        logits,
        [1.0] * 3,
        torch.Generator().manual_seed(2),
        generators=[None, torch.Generator().manual_seed(5), None],
    )
    assert first[1] == again[1]


def test_a_top_p_that_underflows_float32_is_greedy_not_an_engine_failure():
    """The server's fuzzer sent top_p 4.9e-217: 0.0 as a float32, so every token was masked and multinomial raised
    on the engine thread, failing the whole server. The most likely token always stays."""
    logits = torch.randn(4, 50)
    gen = torch.Generator().manual_seed(0)
    for tiny in (4.895214386517272e-217, 1e-45, 5e-324):
        assert sample(logits, [1.0] * 4, gen, top_ps=[tiny] * 4) == torch.argmax(logits, dim=-1).tolist()
