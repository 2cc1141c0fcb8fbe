"""A fused kernel's stamps on the host (`roseinfer.cuda_ext.stamps`, `.recorder`): a launch's stamps reduced to its
phases' bounds, the stamps file's lines (StampLog: whole lines, one append each), and the recorder that copies each
captured step's stamps off the device and writes them in step order, all on the CPU with real and made stamps."""

import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from roseinfer.cuda_ext import fused_mlp as fm
from roseinfer.cuda_ext.recorder import StampedKernel, StampRecorder
from roseinfer.cuda_ext.stamps import StampLog
from roseinfer.names import KERNEL_REGION_NAMES, MLP, MLP_NORM

DATA = Path(__file__).parent.parent / "data"


def test_phase_ranges_are_contiguous_from_first_start_to_last_end():
    stamps = [[100, 150, 160, 190, 200, 230], [90, 152, 158, 195, 201, 240]]
    ranges = fm.phase_ranges(stamps)
    assert [r[1] for r in ranges] == list(KERNEL_REGION_NAMES)
    assert ranges[1][1] == MLP_NORM and all(r[1].startswith(MLP + ".") for r in ranges)
    assert ranges[0][2] == 90 and ranges[-1][3] == 240
    assert all(a[3] == b[2] for a, b in zip(ranges, ranges[1:]))
    assert [r[3] - r[2] for r in ranges] == [62, 8, 35, 6, 39]
    with pytest.raises(ValueError, match="stamps must be"):
        fm.phase_ranges([[1, 2, 3]])


def test_a_real_devices_stamps_read_into_regions():
    """tests/data/fused_mlp.stamps.json: one launch's stamps written by scripts/bench_cuda_mlp.py on an H200."""
    doc = json.loads((DATA / "fused_mlp.stamps.json").read_text())
    ranges = fm.phase_ranges(doc["stamps"])
    assert len(doc["stamps"]) == doc["blocks"] and all(len(r) == fm.NSTAMP for r in doc["stamps"])
    assert all(end >= start for _, _, start, end in ranges)
    assert ranges[-1][3] - ranges[0][2] == doc["span_ns"]


def test_a_launchs_bounds_go_to_the_stamps_file_one_line_each(tmp_path):
    """The real fixture's stamps, reduced to their boundaries and appended as the kernel's host code does."""
    doc = json.loads((DATA / "fused_mlp.stamps.json").read_text())
    path = tmp_path / "sub" / "kernel_stamps.jsonl"
    with StampLog(path) as log:
        for _ in range(2):
            log.record(fm.KERNEL, [r for _, r in fm.PHASES], fm.phase_bounds(doc["stamps"]))
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(lines) == 2 and lines[0] == lines[1]
    assert lines[0]["kernel"] == "fused_mlp_kernel" and lines[0]["regions"] == list(KERNEL_REGION_NAMES)
    bounds = lines[0]["bounds_ns"]
    assert bounds[-1] - bounds[0] == doc["span_ns"] and bounds == sorted(bounds)
    with pytest.raises(ValueError, match="5 regions need 6 bounds"), StampLog(path) as log:
        log.record(fm.KERNEL, [r for _, r in fm.PHASES], bounds[:-1])


def test_two_logs_of_one_file_append_whole_lines_each_written_at_once(tmp_path):
    # Two engines of one process each have a StampLog of the run's file: each write is one append of whole lines,
    # in the file as soon as it returns (nothing held in a buffer that a crash or the other log's write would cut).
    path = tmp_path / "kernel_stamps.jsonl"
    regions = [r for _, r in fm.PHASES]
    a, b = StampLog(path), StampLog(path)
    for step in range(50):
        a.record_many(fm.KERNEL, regions, np.full((12, fm.NSTAMP), 10**18 + step, dtype=np.int64))
        b.record(fm.KERNEL, regions, [step] * fm.NSTAMP)
        assert len(path.read_bytes().splitlines()) == 13 * (step + 1)  # written, not buffered
    a.close(), b.close()
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [line["bounds_ns"][0] for line in lines] == [
        v for step in range(50) for v in [10**18 + step] * 12 + [step]
    ]


def test_a_stamps_file_refuses_what_it_cannot_write_in_one_line(tmp_path):
    regions = [r for _, r in fm.PHASES]
    log = StampLog(tmp_path / "kernel_stamps.jsonl")
    with pytest.raises(ValueError, match=r"launches must be \[launches, 6 bounds\], not of shape \(6,\)"):
        log.record_many(fm.KERNEL, regions, np.arange(6))  # one launch's bounds, not [launches, bounds]
    log.close()
    log.close()  # twice: nothing more to do
    with pytest.raises(ValueError, match="is closed"):
        log.record(fm.KERNEL, regions, list(range(6)))
    # A launch's stamp buffer is the scratch's [NSTAMP, BLOCKS] row (the kernel writes stamp k of block b at
    # k * BLOCKS + b): a by-block one would be filled where the recorder does not read, so it is refused.
    from roseinfer.cuda_ext.scratch import flat_stamps

    scratch = fm.MlpScratch(2, "cpu", stamps=True)
    assert (
        flat_stamps(scratch.for_layer(0)[2], fm.NSTAMP, fm.BLOCKS).data_ptr()
        == scratch.stamp_rows[0].data_ptr()
    )
    with pytest.raises(ValueError, match=r"stamps must be \[6, 128\]"):
        flat_stamps(scratch.stamps[0].contiguous(), fm.NSTAMP, fm.BLOCKS)  # [BLOCKS, NSTAMP]
    assert flat_stamps(fm.MlpScratch(2, "cpu").for_layer(1)[2], fm.NSTAMP, fm.BLOCKS).numel() == 0


def test_a_step_that_ran_no_launch_writes_no_stamps(tmp_path):
    # A profiled engine whose batch-1 MLP took the Triton path (a width not built, no nvcc) launched nothing into its
    # MlpScratch: its zero stamps must not reach the stamps file as launches, which roseprof would try to match.
    from roseinfer.config import ModelConfig
    from roseinfer.model import Block

    scratch = fm.MlpScratch(2, "cpu", stamps=True)
    path = tmp_path / "kernel_stamps.jsonl"
    regions = tuple(r for _, r in fm.PHASES)
    recorder = StampRecorder([StampedKernel(scratch, fm.KERNEL, regions)], StampLog(path))
    recorder.after_step()  # no launch yet: returns before any copy or event (none exists on a CPU machine)
    recorder.close()
    assert not recorder.pending and path.read_text() == ""

    class Extension:  # stands in for the built module: the launch's arguments, no kernel
        def __init__(self):
            self.calls = []

        def fused_mlp(self, *args):
            self.calls.append(args)

    block = Block(ModelConfig(n_layer=2, n_head=12, n_embd=768, vocab_size=100, n_positions=16))
    ext = Extension()
    fm.block_mlp(torch.randn(1, 768), torch.randn(1, 768), block, 1, scratch, module=ext)
    assert scratch.launched and len(ext.calls) == 1
    out, clear = ext.calls[0][11], ext.calls[0][12]
    assert out.data_ptr() == scratch.bufs[1].data_ptr() and clear.data_ptr() == scratch.bufs[0].data_ptr()


@pytest.mark.parametrize("copies_land", [True, False], ids=["copies-landed", "gpu-behind"])
def test_the_recorder_writes_every_steps_launches_in_step_order_across_its_ring(
    tmp_path, monkeypatch, copies_land
):
    # The recorder queues each step's copies into a ring of slots and writes a step once its copies land: every
    # step's lines reach the file, in step order, each kernel's launches in layer order, however the ring wraps,
    # a flush lands, or a kernel launches in some steps only (its Triton path in the others). Stamps on the CPU (the
    # copy is synchronous), so this runs without a GPU; the GPU's engine test checks the same file's counts.
    # gpu-behind: no copy is seen to land before the ring is full, which then waits for its oldest step.
    from roseinfer.cuda_ext import recorder as rec
    from roseinfer.cuda_ext.scratch import LayerScratch
    from roseinfer.cuda_ext.stamps import phase_bounds

    monkeypatch.setattr(rec._Landed, "query", lambda self: copies_land)
    g = torch.Generator().manual_seed(1)
    a = LayerScratch("ka", 2, 8, 5, 3, "cpu", stamps=True)  # stamps [L, BLOCKS, NSTAMP]: [2, 5, 3]
    b = LayerScratch("kb", 3, 8, 4, 4, "cpu", stamps=True)
    kernels = [StampedKernel(a, "ka", ("r1", "r2")), StampedKernel(b, "kb", ("s1", "s2", "s3"))]
    path = tmp_path / "kernel_stamps.jsonl"
    recorder = StampRecorder(kernels, StampLog(path), ring=4)
    expected = []
    for step in range(11):
        a.launched = True
        b.launched = step >= 2  # kb's launches begin at step 2
        for scratch, kernel in ((a, kernels[0]), (b, kernels[1])):
            scratch.stamps.copy_(
                torch.randint(1, 10**9, scratch.stamps.shape, generator=g).sort(dim=2).values
            )
            if scratch.launched:
                for layer in scratch.stamps.tolist():
                    bounds = phase_bounds(layer, len(kernel.regions) + 1)
                    expected.append(
                        {
                            "v": 1,
                            "kernel": kernel.kernel,
                            "regions": list(kernel.regions),
                            "pid": os.getpid(),
                            "bounds_ns": bounds,
                        }
                    )
        recorder.after_step()
        since_flush = step + 1 if step <= 6 else step - 6
        assert len(recorder.pending) == (0 if copies_land else min(since_flush, 4))
        if step == 6:
            recorder.flush()  # e.g. the graphs released mid-run
            assert not recorder.pending
    recorder.close()
    assert path.read_text().splitlines() == [json.dumps(e) for e in expected]


def test_a_steps_stamps_reduce_to_each_launchs_bounds_and_lines_json_would_write(tmp_path):
    # The recorder reduces a step's stamps as the kernels write them, [L, NSTAMP, BLOCKS], in numpy and writes its
    # lines from one format (both run after every profiled step): the same bounds as phase_bounds launch by launch
    # (of each block's stamps, [BLOCKS, NSTAMP]), the same lines as json.dumps.
    from roseinfer.cuda_ext.recorder import launch_bounds
    from roseinfer.cuda_ext.stamps import phase_bounds

    g = torch.Generator().manual_seed(0)
    stamps = (
        torch.randint(1, 10**12, (2, 3, 96, fm.NSTAMP), generator=g).sort(dim=3).values
    )  # [steps, L, BLOCKS, NSTAMP]
    by_stamp = stamps.transpose(-1, -2).contiguous().numpy()  # [steps, L, NSTAMP, BLOCKS]
    bounds = launch_bounds(by_stamp)  # [steps, L, NSTAMP]
    assert bounds.tolist() == [[phase_bounds(layer, fm.NSTAMP) for layer in step] for step in stamps.tolist()]
    assert launch_bounds(by_stamp[0]).tolist() == bounds[0].tolist()
    bounds = bounds[0].tolist()
    regions = [r for _, r in fm.PHASES]
    with StampLog(tmp_path / "k.jsonl") as log:
        log.record_many(fm.KERNEL, regions, bounds)
        log.record(fm.KERNEL, regions, bounds[0])
        log.record_many(fm.KERNEL, regions, np.asarray(bounds[1:]))
    lines = (tmp_path / "k.jsonl").read_text().splitlines()
    expected = [
        {"v": 1, "kernel": fm.KERNEL, "regions": regions, "pid": os.getpid(), "bounds_ns": b}
        for b in [*bounds, bounds[0], *bounds[1:]]
    ]
    assert lines == [json.dumps(e) for e in expected]
    with pytest.raises(ValueError, match="5 regions need 6 bounds"):
        StampLog(tmp_path / "bad.jsonl").record(fm.KERNEL, regions, [1, 2])
    with pytest.raises(ValueError, match="5 regions need 6 bounds, not 5"):
        StampLog(tmp_path / "bad.jsonl").record_many(fm.KERNEL, regions, np.zeros((3, 5), dtype=np.int64))


def test_readers_of_different_grids_reduce_each_to_its_own_bounds(tmp_path):
    # The fused all-reduce's readers (`ReaderStamps`): one launch a slot a step, each of its own grid (c_fc's, the
    # next c_attn's, the lm_head's), side by side in one [NSTAMP, sum of programs] buffer. Each slot's line has the
    # bounds of its own programs' stamps only, in slot order, with the reader's region names: the first program's
    # start, the first program past the wait and past the rows (events all its programs wait for), the last one's
    # end.
    from roseinfer.fused_allreduce import ReaderStamps
    from roseinfer.kernels.gemv import ALLREDUCE_KERNEL, NSTAMP
    from roseinfer.names import ALLREDUCE_KERNEL_REGION_NAMES

    programs = [7, 3, 7, 1, 12]
    stamps = ReaderStamps(programs, "cpu")
    assert stamps.stamp_rows.shape == (NSTAMP, sum(programs)) and not stamps.launched
    g = torch.Generator().manual_seed(3)
    by_program = []  # each slot's [programs, NSTAMP], what its programs wrote
    for slot, n in enumerate(programs):
        mine = torch.randint(1, 10**12, (n, NSTAMP), generator=g).sort(dim=1).values
        view = stamps.for_slot(slot)  # [NSTAMP, n], a view of stamp_rows
        assert view.shape == (NSTAMP, n) and view.stride() == (sum(programs), 1)
        view.copy_(mine.T)
        by_program.append(mine.tolist())
    kernel = StampedKernel(stamps, ALLREDUCE_KERNEL, ALLREDUCE_KERNEL_REGION_NAMES, stamps.launch_bounds)
    path = tmp_path / "kernel_stamps.jsonl"
    recorder = StampRecorder([kernel], StampLog(path, pid=41))
    recorder.after_step()  # nothing launched: no line
    stamps.launched = True
    recorder.after_step()
    recorder.close()
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    firsts = [[min(stamps) for stamps in zip(*p)] for p in by_program]
    lasts = [max(stamps[-1] for stamps in p) for p in by_program]
    assert [line["bounds_ns"] for line in lines] == [[*f[:-1], last] for f, last in zip(firsts, lasts)]
    assert {(line["kernel"], line["pid"]) for line in lines} == {("allreduce_gemv_kernel", 41)}
    assert all(line["regions"] == list(ALLREDUCE_KERNEL_REGION_NAMES) for line in lines)


def test_a_reader_of_several_waves_ends_its_wait_where_its_first_program_did():
    # A grid larger than fits at once: its first wave waits (for the kernel in front until 50, for the rows until
    # 80) and computes until 100; a second wave starts at 100, passes both at once and ends at 130. The wait ends at
    # 50 and the peers at 80 (the events), not where the second wave got past them (100): its GEMV is the GEMV's.
    from roseinfer.fused_allreduce import ReaderStamps

    stamps = ReaderStamps([4], "cpu")
    first, second = [0, 50, 80, 100], [100, 100, 100, 130]
    stamps.stamp_rows.copy_(torch.tensor([first, first, second, second]).T)  # [NSTAMP, programs]
    with pytest.raises(ValueError, match="every slot's reader has programs"):
        ReaderStamps([3, 0], "cpu")
    assert stamps.launch_bounds(stamps.stamp_rows.numpy()).tolist() == [[0, 50, 80, 130]]
