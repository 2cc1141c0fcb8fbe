"""The stamps file: how a fused kernel's regions reach a profile (issue 50).

A kernel that stamps its phases (`fused_mlp.MlpScratch(stamps=True)`) leaves one launch's %globaltimer stamps in a
device buffer; its host code, after the launch has run, reduces them to the phase boundaries and appends one JSON
line per launch to the file named by `$ROSEINFER_KERNEL_STAMPS` (a roseprof capture sets it to the run folder's
`kernel_stamps.jsonl`, as it sets the step log; `roseprof import --stamps FILE` takes one written elsewhere):

    {"v": 1, "kernel": "fused_mlp_kernel", "regions": [R0, ..., Rn-1], "bounds_ns": [b0, ..., bn]}

`kernel`: the kernel function's name (the profiler's kernel name contains it as a word); `regions`: the engine's
region names of its phases (roseinfer/names.py); `bounds_ns`: n+1 times on the GPU's clock, phase k from b_k to
b_k+1. Lines are in launch order: roseprof matches the k-th line of a kernel to the k-th launch of that kernel in
the trace and places the phases from the launch's start (%globaltimer is not the trace's clock).

Torch-free: the caller hands the boundaries as plain ints.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from roseinfer.names import KERNEL_STAMPS_VERSION, ROSEINFER_KERNEL_STAMPS


def stamps_path() -> Path | None:
    """The file this process appends stamps to, or None (no one asked for them)."""
    value = os.environ.get(ROSEINFER_KERNEL_STAMPS)
    return Path(value) if value else None


class StampLog:
    """Appends launches' phase boundaries to a stamps file, one JSON line each, in launch order."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = open(self.path, "a", encoding="utf-8")

    def record(self, kernel: str, regions: tuple[str, ...] | list[str], bounds_ns: list[int]) -> None:
        if len(bounds_ns) != len(regions) + 1:
            raise ValueError(f"{len(regions)} regions need {len(regions) + 1} bounds, not {len(bounds_ns)}")
        line = {"v": KERNEL_STAMPS_VERSION, "kernel": kernel, "regions": list(regions),
                "bounds_ns": [int(b) for b in bounds_ns]}  # fmt: skip
        self._fh.write(json.dumps(line) + "\n")

    def close(self) -> None:
        self._fh.close()

    def __enter__(self) -> StampLog:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
