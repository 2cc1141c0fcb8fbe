"""The decode step's fused kernels against plain torch, on random (never zero) data: residual add + LayerNorm,
the GELU-epilogue GEMM and the split argmax."""

import pytest
import torch
import torch.nn.functional as F

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("rows", [1, 7, 64, 300, 2048])
@pytest.mark.parametrize("width", [128, 768, 1600])  # 1600 (GPT-2 XL): not a power of two
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_add_layer_norm_matches_reference(rows, width, dtype):
    from roseinfer.kernels.add_layernorm import add_layer_norm_reference, add_layer_norm_triton

    g = torch.Generator(device="cuda").manual_seed(rows * width)
    rand = lambda *shape: torch.randn(*shape, generator=g, device="cuda").to(dtype)  # noqa: E731
    # x strided (every other row of a wider tensor), as the residual stream can be after `x[last]`
    x = rand(rows, 2 * width)[:, :width] * 3 + 1
    delta = rand(rows, width)
    weight, bias = rand(width) + 1.5, rand(width)
    s_ref, y_ref = add_layer_norm_reference(x, delta, weight, bias, 1e-5)
    s, y = add_layer_norm_triton(x, delta, weight, bias, 1e-5)
    # The residual stream is rounded like torch's add: exactly the same tensor.
    assert torch.equal(s, s_ref)
    tol = {torch.float16: 2e-3, torch.bfloat16: 1.6e-2, torch.float32: 1e-5}[dtype]
    torch.testing.assert_close(y, y_ref, atol=tol, rtol=tol)
    assert torch.isfinite(y).all() and (y != 0).any()


def test_add_layer_norm_of_no_rows():
    from roseinfer.kernels.add_layernorm import add_layer_norm_triton

    x = torch.randn(0, 768, device="cuda")
    s, y = add_layer_norm_triton(x, x, torch.ones(768, device="cuda"), torch.zeros(768, device="cuda"), 1e-5)
    assert s.shape == y.shape == (0, 768)


@pytest.mark.parametrize("early", [False, True])
def test_chained_add_layer_norms_in_a_graph_wait_for_each_other(early):
    # `pdl_layer_norm_early`: each add + LayerNorm releases the next before its own wait (one warp a row). Three
    # chained as dependent launches in a graph, each reading the one before, a K split's parts among the deltas:
    # replayed on fresh inputs, where a missing wait could read the previous replay's rows.
    from roseinfer.bench.timing import captured
    from roseinfer.kernels.add_layernorm import add_layer_norm_reference, add_layer_norm_triton
    from roseinfer.kernels.pdl import pdl_scope, pdl_supported
    from roseinfer.kernels.split_sum import SplitK

    if not pdl_supported():
        pytest.skip("PDL needs Hopper or later")
    g = torch.Generator(device="cuda").manual_seed(5)
    rows, c = 64, 768
    rand = lambda *shape: torch.randn(*shape, generator=g, device="cuda")  # noqa: E731
    x, d1 = rand(rows, c).half(), rand(rows, c).half()
    parts, d_bias = rand(3, rows, c), rand(c).half()  # [S, T, C] float32, [C]
    ln = [((rand(c) * 0.2 + 1).half(), (rand(c) * 0.1).half()) for _ in range(3)]

    def chain(add_ln):
        s1, y1 = add_ln(x, d1, *ln[0], 1e-5)
        s2, y2 = add_ln(s1, SplitK(parts, d_bias), *ln[1], 1e-5)
        return (s2, y2, *add_ln(s2, y1, *ln[2], 1e-5))

    with pdl_scope(True, layer_norm_early=early):
        graph, outputs = captured(lambda: chain(add_layer_norm_triton))
    for _ in range(3):
        for t in (x, d1, parts, d_bias):
            t.copy_(rand(*t.shape))
        graph.replay()
        torch.cuda.synchronize()
        for out, ref in zip(outputs, chain(add_layer_norm_reference)):
            torch.testing.assert_close(out.float(), ref.float(), atol=4e-3, rtol=4e-3)


@pytest.mark.parametrize("rows", [1, 64, 256, 1000])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_linear_gelu_epilogue_is_gpt2s_tanh_gelu(rows, dtype):
    # cuBLASLt's GELU epilogue must be the tanh form GPT-2 uses, not the exact erf one.
    from roseinfer.model import linear_gelu

    g = torch.Generator(device="cuda").manual_seed(rows)
    lin = torch.nn.Linear(768, 3072, device="cuda", dtype=dtype)
    with torch.no_grad():
        lin.weight.copy_(torch.randn(3072, 768, generator=g, device="cuda") * 0.05)
        lin.bias.copy_(torch.randn(3072, generator=g, device="cuda"))
    x = torch.randn(rows, 768, generator=g, device="cuda").to(dtype)
    with torch.no_grad():
        out = linear_gelu(x, lin)
        pre = F.linear(x.float(), lin.weight.float(), lin.bias.float())
    tanh_ref, erf_ref = F.gelu(pre, approximate="tanh"), F.gelu(pre)
    tol = 1e-2 if dtype == torch.float16 else 5e-2
    torch.testing.assert_close(out.float(), tanh_ref, atol=tol, rtol=tol)
    # closer to the tanh form than to the erf one where the two differ
    assert (out.float() - tanh_ref).abs().mean() < (out.float() - erf_ref).abs().mean()


@pytest.mark.parametrize("rows", [1, 7, 64, 256])
@pytest.mark.parametrize("vocab", [512, 50257, 50304])
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_argmax_matches_torch_ties_included(rows, vocab, dtype):
    from roseinfer.kernels.argmax import argmax_triton

    g = torch.Generator(device="cuda").manual_seed(rows + vocab)
    padded = torch.randn(rows, vocab + 47, generator=g, device="cuda").to(dtype)
    logits = padded[:, :vocab]  # strided rows, as the padded lm_head's output
    # Ties: every third row repeats its maximum at a later index and at an earlier one (the first must win).
    for r in range(0, rows, 3):
        top = logits[r].max()
        logits[r, vocab - 1] = top
        logits[r, vocab // 3] = top
    # Rows of negative logits only, and one whose max is a tie of -0.0 and +0.0 (equal to torch: the first wins)
    for r in range(1, rows, 3):
        logits[r] = -logits[r].abs() - 0.5
    if rows > 1:
        logits[rows - 1] = -1.0
        logits[rows - 1, 5], logits[rows - 1, 9] = -0.0, 0.0
    for chunk, warps in ((4096, 4), (4096, 8), (2048, 4), (8192, 16)):
        torch.testing.assert_close(
            argmax_triton(logits, chunk=chunk, num_warps=warps),
            torch.argmax(logits, dim=-1),
            atol=0,
            rtol=0,
        )


@pytest.mark.parametrize("rows", [1, 6, 64])
def test_argmax_advance_leaves_the_next_steps_inputs(rows):
    # In a captured step the argmax's second kernel also writes the next step's token ids and past lengths
    # (past += live: 0 for a bucket's padding rows), as `ids.copy_(tokens); past.add_(live)` did.
    from roseinfer.kernels.argmax import argmax_triton

    g = torch.Generator(device="cuda").manual_seed(rows)
    logits = torch.randn(rows, 50304, generator=g, device="cuda").half()[:, :50257]
    inputs = torch.zeros(3, rows + 5, dtype=torch.int64, device="cuda")  # [3, B_MAX] as the runner's
    inputs[0, :rows] = 7
    inputs[1, :rows] = torch.arange(rows, device="cuda") * 100
    inputs[2, : rows - rows // 3] = 1  # the last third padding
    before = inputs.clone()
    ids, past, live = inputs[0, :rows], inputs[1, :rows], inputs[2, :rows]
    tokens = argmax_triton(logits, advance=(ids, past, live))
    expected = torch.argmax(logits, dim=-1)
    assert torch.equal(tokens, expected) and torch.equal(ids, expected)
    assert torch.equal(past, before[1, :rows] + before[2, :rows]) and torch.equal(live, before[2, :rows])
    assert torch.equal(inputs[:, rows:], before[:, rows:])  # the rows beyond the bucket untouched


@pytest.mark.parametrize("rows", [1, 6, 64])
def test_argmax_to_host_writes_each_rows_token_into_pinned_memory_by_its_parity(rows):
    # The captured step's argmax also writes each row's token into pinned host memory (`roseinfer.host_tokens`),
    # into the row of it that the row's parity picks, then flips that parity on the device. Steps of all rows, of
    # the first row alone (a smaller bucket), of the second half (a step part at rows [lo, hi), as one of two
    # halves), then of all rows again: after each, its tokens are where the host's mirror says, and the step before
    # it of every row is still readable (the overlapped decode reads a step while the next one runs).
    from roseinfer.host_tokens import HostTokens
    from roseinfer.kernels.argmax import argmax_triton

    g = torch.Generator(device="cuda").manual_seed(rows)
    parts = [(0, rows), (0, 1), (rows // 2, rows), (0, rows)]
    host = HostTokens(rows + 3, torch.device("cuda"))  # [2, B_MAX]: the bucket's rows and three beyond
    steps: dict[int, list[tuple[int, int]]] = {
        r: [] for r in range(rows)
    }  # row -> its steps' (host row, token)
    for lo, hi in parts:
        logits = torch.randn(hi - lo, 50304, generator=g, device="cuda").half()[:, :50257]
        tokens = argmax_triton(logits, to_host=host.rows(lo, hi))
        expected = torch.argmax(logits, dim=-1)
        assert torch.equal(tokens, expected)
        which = host._parity[lo:hi].copy()
        host._parity[lo:hi] ^= (
            1  # the mirror of a step part of rows [lo, hi) (`launched` keeps rows [0, bucket))
        )
        for r, (w, t) in enumerate(zip(which.tolist(), expected.tolist(), strict=True)):
            steps[lo + r].append((w, t))
        torch.cuda.synchronize()
        table = host.host.tolist()
        for r, row_steps in steps.items():
            last_two = row_steps[-2:]  # this step of the row and the one before it
            assert all(table[w][r] == t for w, t in last_two)
            assert len({w for w, _ in last_two}) == len(last_two)  # in the two host rows
    assert host.parity.tolist() == host._parity.tolist()
    assert host.parity.tolist()[rows:] == [0] * 3 and (host.host[:, rows:] == 0).all()  # beyond: untouched


def _lm_head(seed, c=768, n=50304):
    """A GPT-2-shaped tail's operands: head [n, c] (the padded vocabulary), ln_f's weight and bias [c], x and delta
    [1, c], all float16 and random."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    head = (torch.randn(n, c, generator=g, device="cuda") * c**-0.5).half()
    ln_w = (torch.rand(c, generator=g, device="cuda") + 0.5).half()
    ln_b = (torch.randn(c, generator=g, device="cuda") * 0.1).half()
    x, delta = (torch.randn(1, c, generator=g, device="cuda").half() for _ in range(2))
    return g, head, ln_w, ln_b, x, delta


@pytest.mark.parametrize("pdl", [False, True])
def test_lm_head_gemv_folds_the_argmax_ties_and_padding_included(pdl):
    # The one-row lm_head GEMV folds each logit with its column into the words, which `argmax_words` reads and
    # resets: the token torch.argmax gives of the logits the GEMV wrote (the first 50,257 of 50,304), on random
    # data, at ties within one program and across programs and words (the first column wins), where every real
    # logit is negative and the padding's zeros would win (after calls with larger maxima: words not reset would
    # keep one of those), where all are equal (column 0), where column 0's logit is -0.0 and the rest +0.0 or
    # -0.0 (equal: column 0), and with NaN logits (a NaN wins, as in torch.argmax).
    from roseinfer.kernels.argmax import LmHeadArgmax, argmax_words
    from roseinfer.kernels.norm_gemv import norm_gemv_triton
    from roseinfer.kernels.pdl import pdl_supported

    v = 50257
    g, head, ln_w, ln_b, x, delta = _lm_head(5)
    fold = LmHeadArgmax(torch.device("cuda"))
    pdl = pdl and pdl_supported()

    def token(head, ln_w, ln_b):
        logits = norm_gemv_triton(x, delta, ln_w, ln_b, 1e-5, head, pdl=pdl, argmax=(fold.words, v))[1]
        return argmax_words(fold.words, pdl=pdl), logits[:, :v]

    for _ in range(3):  # random
        x.copy_(torch.randn(1, 768, generator=g, device="cuda"))
        got, logits = token(head, ln_w, ln_b)
        assert torch.equal(got, torch.argmax(logits, dim=-1))
    best = int(got)
    # the same program (or its neighbour), another program's column in the same word, another word, column 0
    words = fold.words.numel()
    earlier_columns = [e for e in (best - 1, best - words, best - 2 * words - 3, 0) if 0 <= e < best]
    assert len(earlier_columns) >= 3
    for earlier in earlier_columns:
        tied = head.clone()
        tied[earlier] = head[best]
        got, logits = token(tied, ln_w, ln_b)
        assert logits[0, earlier] == logits[0, best]
        assert int(got) == earlier == int(torch.argmax(logits, dim=-1))
    # LayerNorm's output all +0.5 (weight 0, bias 0.5) against a head of negative weights: every real logit is
    # negative, the padding rows' logits are 0 and must not win
    negative = -head.abs() - 1e-3
    negative[v:] = 0
    zero, half = torch.zeros_like(ln_w), torch.full_like(ln_b, 0.5)
    got, logits = token(negative, zero, half)
    assert logits.max() < 0 and int(got) == int(torch.argmax(logits, dim=-1)) < v
    got, logits = token(head, zero, zero)  # LayerNorm's output 0: every logit 0, the first column wins
    assert (logits == 0).all() and int(got) == 0
    nan = head.clone()
    nan[[1000, 20000]] = float("nan")
    got, logits = token(nan, ln_w, ln_b)
    assert torch.isnan(logits[0, int(got)]) and int(got) == int(torch.argmax(logits, dim=-1))
    assert (fold.words == torch.iinfo(torch.int64).min).all()  # reset for the next step
    # -0.0 against +0.0: 1,024 wide (no masked lanes in the GEMV's sum, whose +0.0 would make every sum +0.0) and
    # LayerNorm's output +0.0, so a row of negative weights sums to -0.0: column 0's; the others' mixed signs give
    # +0.0 (or -0.0), all equal to it
    _, head, _, _, x1024, delta1024 = _lm_head(6, c=1024)
    head[0] = -head[0].abs() - 1e-3
    zero = torch.zeros(1024, dtype=torch.float16, device="cuda")
    logits = norm_gemv_triton(x1024, delta1024, zero, zero, 1e-5, head, pdl=pdl, argmax=(fold.words, v))[1]
    got = argmax_words(fold.words, pdl=pdl)
    assert (
        torch.signbit(logits[0, 0]) and (logits[:, :v] == 0).all() and not torch.signbit(logits[0, 1:v]).all()
    )
    assert int(got) == 0 == int(torch.argmax(logits[:, :v], dim=-1))


@pytest.mark.parametrize("fold", [False, True])
@pytest.mark.parametrize("early", [False, True])
def test_lm_head_gemv_then_dependent_argmax_in_a_graph(early, fold):
    # The batch-1 step's tail: ln_f + lm_head as one PDL GEMV (the 50,304 padded rows, sliced to 50,257), then
    # the argmax's two kernels as dependent launches that advance the inputs, or (fold) the GEMV folding the
    # argmax into its words and one dependent kernel reading them. Replayed on fresh inputs: a wait missing
    # anywhere would read the previous replay's logits, maxima or words.
    from roseinfer.bench.timing import captured
    from roseinfer.kernels.argmax import LmHeadArgmax, argmax_triton, argmax_words
    from roseinfer.kernels.norm_gemv import norm_gemv_reference, norm_gemv_triton
    from roseinfer.kernels.pdl import pdl_scope, pdl_supported

    if not pdl_supported():
        pytest.skip("PDL needs Hopper or later")
    c, v = 768, 50257
    g, head, ln_w, ln_b, x, delta = _lm_head(11, c)
    inputs = torch.zeros(3, 1, dtype=torch.int64, device="cuda")
    inputs[2] = 1
    words = LmHeadArgmax(torch.device("cuda")).words

    def tail():
        advance = (inputs[0], inputs[1], inputs[2])
        if fold:
            logits = norm_gemv_triton(x, delta, ln_w, ln_b, 1e-5, head, pdl=True, argmax=(words, v))[1][:, :v]
            return logits, argmax_words(words, advance=advance, pdl=True)
        logits = norm_gemv_triton(x, delta, ln_w, ln_b, 1e-5, head, pdl=True)[1][:, :v]  # [1, V]
        return logits, argmax_triton(logits, advance=advance, pdl=True)

    with pdl_scope(True, early_release=early):
        graph, (logits, tokens) = captured(tail)
    for step in range(4):
        x.copy_(torch.randn(1, c, generator=g, device="cuda"))
        delta.copy_(torch.randn(1, c, generator=g, device="cuda"))
        inputs[1] = 10 * step
        graph.replay()
        torch.cuda.synchronize()
        ref = norm_gemv_reference(x, delta, ln_w, ln_b, 1e-5, head)[1][:, :v]
        torch.testing.assert_close(logits.float(), ref.float(), atol=1e-2, rtol=1e-2)
        expected = torch.argmax(logits, dim=-1)  # of the logits the kernel wrote: exact
        assert torch.equal(tokens, expected) and torch.equal(inputs[0], expected)
        assert inputs[1].item() == 10 * step + 1
        assert not fold or (words == torch.iinfo(torch.int64).min).all()  # reset for the next replay
