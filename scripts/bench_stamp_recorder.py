"""The stamp recorder's host time per profiled step (issue 50): `StampRecorder.after_step` on the two fused kernels'
stamp buffers as the engine has them at batch 1 (GPT-2 small: 12 layers of 96 and 128 blocks, 6 stamps, int64 on
the GPU), the GPU otherwise idle, so each step's copies land at once. Prints µs per step for 5 repeats of 2,000 steps, and the
hash of the file 300 steps write, each step's stamps different from the last (two checkouts' recorders must write the
same file; a slot of the ring reused before its step was written would not).

    python3 scripts/bench_stamp_recorder.py [TREE]     # TREE: the checkout whose roseinfer is timed (default: this)

Run two checkouts alternately to compare them (docs/BENCHMARKS.md, sessions 29 and 30). Needs CUDA."""

import hashlib
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

tree = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parents[1])
sys.path.insert(0, str(tree))

import torch  # noqa: E402

from roseinfer.cuda_ext import recorder as rec  # noqa: E402
from roseinfer.cuda_ext.stamps import StampLog  # noqa: E402

if not torch.cuda.is_available():
    sys.exit("bench_stamp_recorder: needs CUDA (the recorder copies the stamps off the GPU)")
g = torch.Generator().manual_seed(0)


def scratch(blocks: int) -> SimpleNamespace:
    """The same stamps as a recorder of session 29 reads them (`stamps`, by block [12, BLOCKS, 6]) and as one of
    session 30 does (`stamp_rows`, stamp-major [12, 6, BLOCKS]), each contiguous, so that either tree copies what
    its engine would and both write the same file."""
    by_block = torch.randint(0, 1 << 40, (12, blocks, 6), generator=g).cuda()
    return SimpleNamespace(stamps=by_block, stamp_rows=by_block.transpose(1, 2).contiguous(), launched=True)


kernels = [
    rec.StampedKernel(scratch(blocks), name, tuple(f"phase{i}" for i in range(5)))
    for name, blocks in (("fused_attn_kernel", 96), ("fused_mlp_kernel", 128))
]
with tempfile.TemporaryDirectory() as tmp:
    check = Path(tmp) / "check.jsonl"
    recorder = rec.StampRecorder(kernels, StampLog(check))
    for _ in range(300):
        for k in kernels:  # on the GPU, queued before the copy, as a step's kernels write theirs
            k.scratch.stamps.add_(1)
            k.scratch.stamp_rows.add_(1)
        recorder.after_step()
    recorder.close()
    digest = hashlib.sha256(check.read_bytes()).hexdigest()[:16]
    recorder = rec.StampRecorder(kernels, StampLog(Path(tmp) / "timed.jsonl"))
    for _ in range(200):  # warm-up: the ring's pinned memory, the formats
        recorder.after_step()
    recorder.flush()
    rounds = []
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(2000):
            recorder.after_step()
        recorder.flush()
        rounds.append((time.perf_counter() - t) / 2000 * 1e6)
    recorder.close()
print(f"{tree}: recorder host µs/step (2 kernels): {' '.join(f'{x:.1f}' for x in rounds)}; file sha {digest}")
