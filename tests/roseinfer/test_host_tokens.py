"""The host side of `roseinfer.host_tokens` (the kernel that writes the tokens is tested on a GPU,
tests/roseinfer/test_fused_kernels.py): which row of host memory each row of a step reads."""

import torch

from roseinfer.host_tokens import HostTokens


def test_each_step_of_a_row_reads_the_other_host_row_than_the_step_before():
    host = HostTokens(5, torch.device("cpu"))
    assert host.launched(4).tolist() == [0, 0, 0, 0]  # a step of bucket 4
    assert host.launched(1).tolist() == [1]  # bucket 1: row 0's second step
    assert host.launched(4).tolist() == [0, 1, 1, 1]  # row 0's third, the others' second
    host.host[0, :4] = torch.tensor([10, 11, 12, 13])
    host.host[1, :4] = torch.tensor([20, 21, 22, 23])
    assert host.read(host.launched(2), 2) == [20, 11]  # row 0's fourth step (host row 1), row 1's third (0)
    assert host.parity.tolist() == [0] * 5  # the device's parities: only the kernel flips them


def test_reset_sets_every_row_back_to_the_first_host_row():
    host = HostTokens(3, torch.device("cpu"))
    host.launched(2)
    host.parity.fill_(1)  # as a capture's warm-up runs leave the device's
    host.reset()
    assert host.launched(3).tolist() == [0, 0, 0] and host.parity.tolist() == [0, 0, 0]
