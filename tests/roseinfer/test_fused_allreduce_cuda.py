"""The decode step's all-reduce fused into its GEMVs (`tp_allreduce="fused"`, roseinfer/fused_allreduce.py) on 2
GPUs: greedy tokens equal NCCL's, and every rank pushed every word of every slot once per one-row decode step. On
one GPU: a push and a wait against a rank's row written by hand, a rank that never pushes, and the reader's regions
(its stamps) against CUPTI's duration and a row planted late.

The engines run in a child process: torch numbers symmetric-memory rendezvous per process, so a second TP engine
on symmetric memory in one process waits for keys its fresh ranks never write (docs/PARALLELISM.md), and the other
TP tests (`test_tensor_parallel_cuda.py`) build one. Needs two GPUs (scripts/gpu_tp_check.sh runs it)."""

import functools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.roseinfer.test_tensor_parallel_cuda import two_gpus

REPO = Path(__file__).resolve().parents[2]


def pack(values: torch.Tensor, epoch: int) -> torch.Tensor:
    """values [K] float16/bfloat16 -> the fused all-reduce's words [ceil(K / 2)] int64: values 2i and 2i + 1 in the
    low and high 16 bits, the epoch above them (as the producer GEMV writes them)."""
    bits = values.view(torch.int16).to(torch.int64) & 0xFFFF  # [K]
    bits = torch.cat([bits, bits.new_zeros(bits.numel() % 2)])
    return bits[0::2] | (bits[1::2] << 16) | (epoch << 32)


def unpack(words: torch.Tensor, k: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """words [ceil(K / 2)] -> (values [K] in dtype, epochs [ceil(K / 2)])."""
    halves = torch.stack([words & 0xFFFF, (words >> 16) & 0xFFFF], 1).flatten()[:k]  # [K]
    return halves.to(torch.int16).view(dtype), words >> 32


def one_gpu_ranks(k: int, device="cuda"):
    """A two-rank slot on one GPU: both ranks' buffers are the same [2, ceil(K / 2)] words, so rank 0's producer
    writes row 0 (twice) and the test writes rank 1's row by hand."""
    from roseinfer.fused_allreduce import PushTarget

    words = torch.zeros(2, (k + 1) // 2, dtype=torch.int64, device=device)  # [W, K / 2]
    addrs = torch.tensor([words.data_ptr()] * 2, dtype=torch.int64, device=device)
    return words, PushTarget(words, addrs, 0, 0)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
# GPT-2 small's row, gpt2-xl's at TP=2 (c_attn's 2,496 columns: the 16-column tile a fused reader takes), an odd one
@pytest.mark.parametrize("n,k,k_rank", [(2304, 768, 384), (2496, 1600, 3200), (37, 129, 40)])
def test_push_then_wait_reads_both_rows_as_nccl_adds_them(dtype, n, k, k_rank):
    # Rank 0's GEMV pushes its partial sum (epoch 1); rank 1's row is written by hand with epoch 1; the norm GEMV
    # that waits reads both and adds them as NCCL's two-rank reduction does: a + b rounded once.
    from roseinfer.fused_allreduce import PushedRows
    from roseinfer.kernels.gemv import gemv_reference, gemv_triton
    from roseinfer.kernels.norm_gemv import norm_gemv_reference, norm_gemv_triton, pick_norm_config

    g = torch.Generator(device="cuda").manual_seed(k)
    rand = lambda *shape, scale=1.0: (torch.randn(*shape, generator=g, device="cuda") * scale).to(dtype)  # noqa: E731
    o, w_proj, b_proj = rand(1, k_rank), rand(k, k_rank, scale=k_rank**-0.5), rand(k)  # attn_proj's shard
    x, ln_w, ln_b, w, b = rand(1, k), rand(k) + 1, rand(k, scale=0.1), rand(n, k, scale=k**-0.5), rand(n)
    peer = rand(k)  # rank 1's partial sum
    words, target = one_gpu_ranks(k)
    words[1] = pack(peer, epoch=1)
    assert gemv_triton(o, w_proj, b_proj, push=target) is words
    ours, epochs = unpack(words[0], k, dtype)
    assert (epochs == 1).all()
    torch.testing.assert_close(
        ours.float(), gemv_reference(o, w_proj, b_proj)[0].float(), atol=2e-2, rtol=2e-2
    )
    delta = (ours.float() + peer.float()).to(dtype)[None]  # [1, K]: a + b rounded once
    s_ref, out_ref = norm_gemv_reference(x, delta, ln_w, ln_b, 1e-5, w, b, gelu=True)
    for pdl in (False, True):
        s, out = norm_gemv_triton(
            x, words, ln_w, ln_b, 1e-5, w, b, gelu=True, pdl=pdl, wait=PushedRows(0, 10**10),
            config=pick_norm_config(n, k, fused_rows=True),
        )  # fmt: skip
        assert torch.equal(s, s_ref)
        torch.testing.assert_close(out.float(), out_ref.float(), atol=2e-2, rtol=2e-2)


@functools.cache
def late_row_kernel():
    """A second rank's row written late, on one GPU: a kernel that waits until the reader's first program has
    stamped its start, then until `delay_ns` after that stamp on the GPU's clock, then copies the row in. The delay
    is planted in the reader's peers phase, measured from the reader's own start whatever the two launches' skew."""
    import triton
    import triton.language as tl
    from triton.language.extra.cuda import globaltimer

    @triton.jit(do_not_specialize=["n_words", "delay_ns"])  # one compile, whatever the delay
    def late_row(start_ptr, row_ptr, words_ptr, n_words, delay_ns, BLOCK: tl.constexpr):
        t0 = tl.load(start_ptr, volatile=True)
        while t0 == 0:
            t0 = tl.load(start_ptr, volatile=True)
        now = globaltimer()
        while now < t0 + delay_ns:
            now = globaltimer()
        offs = tl.arange(0, BLOCK)
        tl.store(row_ptr + offs, tl.load(words_ptr + offs, mask=offs < n_words), mask=offs < n_words)

    return late_row


def planted_reader(k: int = 768, n: int = 768, dtype=torch.float16):
    """A reader of a two-rank slot on one GPU (768 wide, 768 columns: 384 programs, all resident at once with room
    for the writer; a reader with programs still queued behind its waiting ones would keep the writer off the GPU
    until its timeout), recording its stamps; run(delay_ns) launches it with rank 0's row in place and rank 1's
    written `delay_ns` after the reader's start, and returns the reader's phase bounds [NSTAMP]."""
    import triton

    from roseinfer.fused_allreduce import PushedRows, ReaderStamps
    from roseinfer.kernels.norm_gemv import norm_gemv_triton, pick_norm_config

    g = torch.Generator(device="cuda").manual_seed(5)
    rand = lambda *shape, scale=1.0: (torch.randn(*shape, generator=g, device="cuda") * scale).to(dtype)  # noqa: E731
    x, ln_w, ln_b, w, b = rand(1, k), rand(k) + 1, rand(k, scale=0.1), rand(n, k, scale=k**-0.5), rand(n)
    ours, peer = rand(k), rand(k)
    cfg = pick_norm_config(n, k, fused_rows=True)
    stamps = ReaderStamps([-(-n // cfg.block_n)], "cuda")
    words = torch.zeros(2, (k + 1) // 2, dtype=torch.int64, device="cuda")  # [W, K / 2]
    side = torch.cuda.Stream()
    epoch = [0]
    # compiled before any reader waits on it: a reader left waiting through a compile would time out
    started = torch.ones(1, dtype=torch.int64, device="cuda")
    late_row_kernel()[(1,)](started, words[1], words[1], words.shape[1], 0, BLOCK=triton.next_power_of_2(k))
    torch.cuda.synchronize()

    def run(delay_ns: int):
        epoch[0] += 1
        late = pack(peer, epoch[0])
        words[0] = pack(ours, epoch[0])
        stamps.stamp_rows.zero_()
        torch.cuda.synchronize()
        wait = PushedRows(0, 10 * 10**9, stamps.for_slot(0))
        norm_gemv_triton(x, words, ln_w, ln_b, 1e-5, w, b, gelu=True, pdl=False, wait=wait, config=cfg)
        with torch.cuda.stream(side):
            late_row_kernel()[(1,)](
                stamps.stamp_rows,
                words[1],
                late,
                late.numel(),
                delay_ns,
                BLOCK=triton.next_power_of_2(k),
            )
        torch.cuda.synchronize()
        return stamps.launch_bounds(stamps.stamp_rows.cpu().numpy())[0].tolist()

    return run


@pytest.mark.gpu
@pytest.mark.parametrize("delay_us", [100, 200])
def test_a_readers_stamps_add_up_to_its_duration(delay_us):
    # The reader's three regions cover its launch: their span (first start to last end) against CUPTI's duration
    # of the same launch, within 2%. A row that arrives 100 or 200 us late makes the launch that long: what no stamp
    # sees (the programs' dispatch, the grid's retirement) is about a microsecond.
    from tests.roseinfer.test_cuda_ext import _profiled_launch

    run = planted_reader()
    run(1000)  # compiled and warm
    ratios = []
    for _ in range(5):
        bounds = []
        kernel_ns = _profiled_launch(
            lambda bounds=bounds: bounds.append(run(delay_us * 1000)), kernel="allreduce_gemv_kernel"
        )
        ratios.append((bounds[0][-1] - bounds[0][0]) / kernel_ns)
    ratios.sort()
    print(f"stamps span / kernel duration: {ratios}")
    assert abs(ratios[2] - 1) <= 0.02, ratios


@pytest.mark.gpu
def test_a_row_planted_late_moves_the_peers_region_only():
    # Rank 1's row 150 us or 200 us after the reader's start (later than the writer's own launch, ~80 us after the
    # reader's from Python): the peers region (the other ranks' rows arriving) grows by the 50 us within 10%, and
    # the wait for the kernel in front and the GEMV after the rows move by less than 10% of it.
    run = planted_reader()
    run(1000)

    def phases(delay_ns):  # the median of 7 launches, per region
        durations = []
        for _ in range(7):
            bounds = run(delay_ns)
            durations.append([b - a for a, b in zip(bounds, bounds[1:])])
        return [sorted(d[k] for d in durations)[3] for k in range(3)]

    base, slow = phases(150_000), phases(200_000)
    moved = [s - b for s, b in zip(slow, base)]
    print(f"regions (wait, peers, gemv) at 150 us: {base} ns; moved at 200 us: {moved} ns")
    assert abs(moved[1] - 50_000) <= 5_000, moved
    assert abs(moved[0]) <= 5_000 and abs(moved[2]) <= 5_000, moved


TRAP_CHILD = """
import torch
from roseinfer.fused_allreduce import PushedRows
from roseinfer.kernels.gemv import gemv_triton
from roseinfer.kernels.norm_gemv import norm_gemv_triton
from tests.roseinfer.test_fused_allreduce_cuda import one_gpu_ranks

k, n = 768, 64
x, w_proj = torch.randn(1, 384, device="cuda").half(), torch.randn(k, 384, device="cuda").half()
words, target = one_gpu_ranks(k)
gemv_triton(x, w_proj, push=target)  # rank 0 at epoch 1; rank 1's row stays at 0: a rank that never pushed
ln = torch.ones(k, device="cuda").half()
_, out = norm_gemv_triton(torch.zeros(1, k, device="cuda").half(), words, ln, ln, 1e-5,
                          torch.zeros(n, k, device="cuda").half(), wait=PushedRows(0, 50_000_000))
torch.cuda.synchronize()
print("READER RETURNED")
"""


@pytest.mark.gpu
def test_a_wait_for_a_rank_that_never_pushes_ends_in_an_error_not_a_hang():
    # The reader gives up after its timeout (50 ms here) with a trap: the host sees a CUDA error. In a child: the
    # error ends its CUDA context.
    proc = subprocess.run(
        [sys.executable, "-c", TRAP_CHILD], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode != 0 and "READER RETURNED" not in proc.stdout
    assert "CUDA" in proc.stderr or "cuda" in proc.stderr, proc.stderr[-2000:]


def run_child(code: str, checkpoint, env=None) -> dict:
    """Run `code` in a child Python (its engines' symmetric memory must not meet another engine's) with the
    checkpoint's path as its argument; returns what its last `RESULT {json}` line says."""
    proc = subprocess.run(
        [sys.executable, "-c", code, str(checkpoint)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=400,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    return json.loads(lines[-1][len("RESULT ") :])


CHILD = """
import json, sys
from roseinfer import LLM, SamplingParams
from tests.roseinfer.test_engine_matches_hf import NEW_TOKENS, make_prompts

# float16 (the GEMVs run in half precision only), one sequence a step: every decode step is a one-row step
options = dict(device="cuda", dtype="float16", paged_attn=True, cuda_graph=True, max_batch_size=1,
               prefill_max_batch_size=1)
params = SamplingParams(max_new_tokens=NEW_TOKENS, ignore_eos=True)
prompts = make_prompts()
out = {"prompts": len(prompts), "new_tokens": NEW_TOKENS}
with LLM(sys.argv[1], tensor_parallel_size=2, tp_allreduce="nccl", tp_timeout_s=120, **options) as llm:
    out["nccl"] = [o.token_ids for o in llm.generate(prompts, params)]
with LLM(sys.argv[1], tensor_parallel_size=2, tp_allreduce="fused", tp_timeout_s=120, **options) as llm:
    out["fused"] = [o.token_ids for o in llm.generate(prompts, params)]
    # every word's epoch in rank 0's buffer: how many times each rank pushed it
    out["epochs"] = sorted(set(llm.engine.runner.tp.fused.epochs().flatten().tolist()))
print("RESULT " + json.dumps(out))
"""


@pytest.mark.gpu
@two_gpus
def test_fused_allreduce_tp2_equals_tp1_and_pushes_every_step(tiny_checkpoint):
    out = run_child(CHILD, tiny_checkpoint)
    # At two ranks the fused sum is NCCL's, a + b rounded once, so every token is the same (against one GPU a
    # float16 run may flip a near-tie: the sum's order differs there)
    for i, (ours, ref) in enumerate(zip(out["fused"], out["nccl"])):
        assert ours == ref, f"prompt {i}: the fused all-reduce at tensor_parallel_size=2 differs from NCCL's"
    assert len(out["fused"]) == len(out["nccl"]) == out["prompts"]
    # Every word of every slot (2 a layer) was pushed by both ranks the same number of times: at least once per
    # decode step (the first token of each prompt comes from its prefill; warm-up steps add more).
    assert len(out["epochs"]) == 1, out["epochs"]
    assert out["epochs"][0] >= out["prompts"] * (out["new_tokens"] - 1)


STAMPS_CHILD = """
import json, sys
from roseinfer import LLM, SamplingParams

options = dict(device="cuda", dtype="float16", paged_attn=True, cuda_graph=True, max_batch_size=1,
               prefill_max_batch_size=1, tensor_parallel_size=2, tp_allreduce="fused", tp_timeout_s=120)
with LLM(sys.argv[1], **options) as llm:
    llm.generate([[5, 6, 7], [9, 10]], SamplingParams(max_new_tokens=12, ignore_eos=True))
    print("RESULT " + json.dumps({"n_layer": llm.engine.runner.model.cfg.n_layer}))
"""


@pytest.mark.gpu
@two_gpus
def test_a_profiled_tp2_engine_writes_each_ranks_reader_stamps(tiny_checkpoint, tmp_path):
    # With the regions on (record_function, as roseprof's torch capture sets it) and a stamps file asked for, both
    # ranks' readers stamp their regions into the one file, each line with its process: per process the same
    # number of launches, 2 x n_layer a one-row step (c_fc, then the next c_attn or the lm_head), in launch order.
    from roseinfer.names import (
        ALLREDUCE_KERNEL_REGION_NAMES,
        ROSEINFER_KERNEL_STAMPS,
        ROSEINFER_RECORD_FUNCTION,
    )

    path = tmp_path / "kernel_stamps.jsonl"
    env = {**os.environ, ROSEINFER_KERNEL_STAMPS: str(path), ROSEINFER_RECORD_FUNCTION: "1"}
    n_layer = run_child(STAMPS_CHILD, tiny_checkpoint, env=env)["n_layer"]
    stamped = [json.loads(line) for line in path.read_text().splitlines()]
    readers = [line for line in stamped if line["kernel"] == "allreduce_gemv_kernel"]
    by_pid: dict[int, list[dict]] = {}
    for line in readers:
        by_pid.setdefault(line["pid"], []).append(line)
    assert len(by_pid) == 2, sorted(by_pid)
    counts = {len(mine) for mine in by_pid.values()}
    # both ranks alike; whole steps; at least the 22 one-row decode steps (11 a prompt) and the 2 warm-ups
    assert len(counts) == 1 and counts.pop() % (2 * n_layer) == 0
    assert len(readers) >= 2 * 2 * n_layer * (22 + 2)
    for mine in by_pid.values():
        assert all(line["regions"] == list(ALLREDUCE_KERNEL_REGION_NAMES) for line in mine)
        assert all(
            line["bounds_ns"] == sorted(line["bounds_ns"]) and line["bounds_ns"][0] > 0 for line in mine
        )
        starts = [line["bounds_ns"][0] for line in mine]  # in launch order (two may start within a tick)
        assert starts == sorted(starts)
