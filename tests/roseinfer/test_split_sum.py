"""The split sum (`roseinfer.kernels.split_sum`): the CUDA MLP's output as R float32 rows whose sum is the [1, C]
it stands for. Which deltas a one-row reader takes, and the torch paths that join one before they add it. The
kernels that sum the rows themselves are checked on a GPU: test_cuda_ext.py, test_cuda_attn.py,
test_gemv_kernel.py, test_norm_gemv.py."""

import torch

from roseinfer.kernels.norm_gemv import norm_gemv_reference
from roseinfer.kernels.split_sum import SPLIT_ROWS, delta_rows, joined
from roseinfer.model import residual_layer_norm
from tests.helpers import exact_split


def test_delta_rows_takes_a_row_or_a_float32_split_sum_and_nothing_else():
    x = torch.zeros(1, 16, dtype=torch.float16)
    assert delta_rows(x, torch.zeros(1, 16, dtype=torch.float16)) == 1
    assert delta_rows(x, torch.zeros(1, 16)) == 1
    assert delta_rows(x, torch.zeros(SPLIT_ROWS, 16)) == SPLIT_ROWS
    assert delta_rows(x, torch.zeros(2, 16)) == 0  # the kernels are built for one row or SPLIT_ROWS
    assert delta_rows(x, torch.zeros(SPLIT_ROWS + 1, 16)) == 0
    assert delta_rows(x, torch.zeros(SPLIT_ROWS, 16, dtype=torch.float16)) == 0  # a split sum is float32
    assert delta_rows(x, torch.zeros(SPLIT_ROWS, 8)) == 0  # another width
    assert (
        delta_rows(torch.zeros(3, 16), torch.zeros(SPLIT_ROWS, 16)) == 0
    )  # beside several rows: not a split
    assert delta_rows(torch.zeros(4, 16), torch.zeros(4, 16)) == 1  # x's own shape


def test_joined_sums_a_split_and_leaves_any_other_delta_alone():
    parts, whole = exact_split(16, "cpu")
    x = torch.zeros(1, 16, dtype=torch.float16)
    assert torch.equal(joined(x, parts), whole)
    same = torch.randn(1, 16)
    assert joined(x, same) is same
    rows = torch.randn(3, 16)
    assert joined(torch.zeros(3, 16), rows) is rows


def test_the_torch_readers_add_a_split_delta_as_its_sum():
    # Without the join, x [1, C] + parts [R, C] would broadcast into R rows.
    parts, whole = exact_split(40, "cpu", seed=3)
    x = torch.randn(1, 40)
    ln = torch.nn.LayerNorm(40)
    lin = torch.nn.Linear(40, 24)
    with torch.no_grad():
        s, h = residual_layer_norm(x, parts, ln, fused=False)
        s_ref, h_ref = residual_layer_norm(x, whole, ln, fused=False)
        assert s.shape == (1, 40) and torch.equal(s, s_ref) and torch.equal(h, h_ref)
        s, out = norm_gemv_reference(x, parts, ln.weight, ln.bias, ln.eps, lin.weight, lin.bias)
        s_ref, ref = norm_gemv_reference(x, whole, ln.weight, ln.bias, ln.eps, lin.weight, lin.bias)
        assert out.shape == (1, 24) and torch.equal(s, s_ref) and torch.equal(out, ref)


def test_each_layers_launch_adds_into_its_rows_and_clears_all_of_the_next_buffer():
    # The launches' arguments (a stand-in for the built module; no kernel): on a 3-layer scratch, layers 0 and 1 add
    # into SPLIT_ROWS rows (a split sum), the last layer into one (the lm_head's reader), and every launch zeroes the whole of
    # the next layer's buffer, whatever rows that one adds into; the caller gets [rows, C].
    from roseinfer.config import ModelConfig
    from roseinfer.cuda_ext import fused_mlp as fm
    from roseinfer.model import Block

    class Extension:
        SPLIT_ROWS = SPLIT_ROWS

        def __init__(self):
            self.calls = []

        def fused_mlp(self, *args):
            self.calls.append(args)

    block = Block(ModelConfig(n_layer=3, n_head=12, n_embd=768, vocab_size=100, n_positions=16))
    for split_rows in (SPLIT_ROWS, 1):
        scratch, ext = fm.MlpScratch(3, "cpu", split_rows=split_rows), Extension()
        for layer in range(3):
            _, out = fm.block_mlp(torch.randn(1, 768), torch.randn(1, 768), block, layer, scratch, module=ext)
            rows = 1 if layer == 2 else split_rows
            assert out.shape == (rows, 768) and out.data_ptr() == scratch.bufs[layer].data_ptr()
            launched_out, clear = ext.calls[-1][11], ext.calls[-1][12]
            assert launched_out.numel() == rows * 768
            assert (
                clear.data_ptr() == scratch.bufs[(layer + 1) % 3].data_ptr()
                and clear.numel() == split_rows * 768
            )
