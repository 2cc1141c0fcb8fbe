"""The split sum (`roseinfer.kernels.split_sum`): the CUDA MLP's output as R float32 rows whose sum is the [1, C]
it stands for. Which deltas a one-row reader takes, and the torch paths that join one before they add it. The
kernels that sum the rows themselves are checked on a GPU: test_cuda_ext.py, test_cuda_attn.py,
test_gemv_kernel.py."""

import torch

from roseinfer.kernels.gemv import norm_gemv_reference
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
