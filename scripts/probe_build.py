"""Issue 50's CUDA probes (scripts/probe_*.cu, each run by its .py, which imports this by plain name) built with
torch's extension loader: the one build they share."""

from __future__ import annotations

import sys
import time
from pathlib import Path

HOPPER = ("-O3", "-gencode=arch=compute_90a,code=sm_90a")


def build(stem: str, flags: tuple[str, ...] = HOPPER):
    """(module, seconds): scripts/<stem>.cu built under the name `stem` with nvcc `flags` (or taken from torch's
    extension cache, where the same build was made before)."""
    from torch.utils.cpp_extension import load

    src = Path(__file__).with_name(f"{stem}.cu")
    t0 = time.perf_counter()
    mod = load(name=stem, sources=[str(src)], extra_cuda_cflags=list(flags), verbose=False)
    return mod, time.perf_counter() - t0


def build_on_gpu(stem: str, flags: tuple[str, ...] = HOPPER):
    """`build(stem, flags)` after saying the GPU and torch it runs on; None, with a line on stderr, where there is
    no CUDA GPU (the probe then exits 2)."""
    import torch

    if not torch.cuda.is_available():
        print(f"{stem}: needs a CUDA GPU", file=sys.stderr)
        return None
    print(torch.cuda.get_device_name(), torch.__version__, flush=True)
    return build(stem, flags)
