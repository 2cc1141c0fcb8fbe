"""The LayerNorm folded into the linear after it (`cuda_ext.ln_fold`), as the one-row kernels compute it: the
algebra against torch's LayerNorm and linear, and the constants kept once per set of weights (CPU: no kernel)."""

import torch
import torch.nn.functional as F

from roseinfer import cuda_ext


def _ln_and_linear(width: int, out: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    ln = torch.nn.LayerNorm(width, dtype=torch.float64)
    lin = torch.nn.Linear(width, out, dtype=torch.float64)
    with torch.no_grad():
        ln.weight.copy_(1 + 0.1 * torch.randn(width, generator=g, dtype=torch.float64))
        ln.bias.copy_(0.1 * torch.randn(width, generator=g, dtype=torch.float64))
        lin.weight.copy_(0.02 * torch.randn(out, width, generator=g, dtype=torch.float64))
        lin.bias.copy_(0.01 * torch.randn(out, generator=g, dtype=torch.float64))
    return ln, lin


def test_the_fold_gives_the_layernorm_then_the_linear():
    ln, lin = _ln_and_linear(768, 96, seed=0)
    s = torch.randn(768, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    s[138], s[447] = 3000.0, -800.0  # GPT-2's residual has a few such columns
    fold_w, fold_b = cuda_ext.ln_fold(ln, lin)  # [96] each, float32
    assert fold_w.dtype == fold_b.dtype == torch.float32 and fold_w.shape == fold_b.shape == (96,)
    mean, rstd = s.mean(), torch.rsqrt(s.var(unbiased=False) + ln.eps)
    folded = rstd * ((s * ln.weight) @ lin.weight.T - mean * fold_w.double()) + fold_b.double()
    want = F.linear(F.layer_norm(s, (768,), ln.weight, ln.bias, ln.eps), lin.weight, lin.bias)
    torch.testing.assert_close(folded, want, atol=1e-6, rtol=1e-5)


def test_the_constants_are_kept_until_a_weight_changes():
    ln, lin = _ln_and_linear(256, 32, seed=2)
    first = cuda_ext.ln_fold(ln, lin)
    assert cuda_ext.ln_fold(ln, lin) is first  # kept on the linear: made once
    with torch.no_grad():
        ln.weight.mul_(2)  # an in-place load: same storage, a new version
    again = cuda_ext.ln_fold(ln, lin)
    assert again is not first
    torch.testing.assert_close(again[0], 2 * first[0])
    torch.testing.assert_close(again[1], first[1])
