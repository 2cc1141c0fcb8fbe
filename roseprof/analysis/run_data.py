"""One stored run as the samples a comparison needs (`RunData`), and `Shared`, how a section hands over the samples
that the diff's own machinery reads too.

Each analysis section makes its own samples of a stored run (its `diff_prepare`, built by analysis/samples.py's
builders for the built-in sections); `samples.prepare` asks every section it is given. Samples that only the
section's own diff families read stay in `RunData.sections[name]`; samples that the machinery around the families
reads (machine speed, the verdict's "where the time moved", kernel changes, the noise floor's device) are handed
over as `Shared` and become RunData's typed fields below. This module imports nothing of roseprof, so every
analysis module, the sections included, can take RunData from it without a circle."""

from __future__ import annotations

from dataclasses import dataclass, field, fields

import numpy as np


class Shared(dict):
    """{RunData field: value}: samples a section makes that RunData keeps as its typed fields (a section's
    `diff_prepare` returns one where other analyses read its samples too)."""


@dataclass
class RunData:
    """One run's samples, as the comparison needs them. A field stays None (or empty) where no section made it."""

    summary: dict
    step_dur: np.ndarray | None = None  # [S]
    step_roll: np.ndarray | None = None  # [S] bool
    itl: np.ndarray | None = None  # [T] ms
    itl_roll: np.ndarray | None = None  # [T] bool
    itl_step: np.ndarray | None = None  # [T] decode step of each token: tokens of one step move together
    # region inside the decode step -> [S] ns per step
    step_regions: dict[str, np.ndarray] = field(default_factory=dict)
    # kernel -> ([S] its own stream ns launched in each step, own ns outside)
    kernel_steps: dict[str, tuple[np.ndarray, float]] = field(default_factory=dict)
    region_durations: dict[str, np.ndarray] = field(default_factory=dict)  # name -> instance durations
    region_self: dict[str, float] = field(default_factory=dict)
    kernel_durations: dict[str, np.ndarray] = field(default_factory=dict)  # kernel name -> instance durations
    ttft: np.ndarray | None = None  # [R] ms per request (runs stored before itl.json had ttft_ms: None)
    # region inside the decode step -> ([S] its own ns (less its children) in each step, own ns outside the steps)
    step_self: dict[str, tuple[np.ndarray, float]] = field(default_factory=dict)
    # [S] ns each decode step kept the GPU busy: the union of the kernels launched in its window on each GPU, summed
    # over GPUs (two streams' kernels at once count once; in a multi-rank run every process's kernels by the first
    # rank's step windows, as kernel_steps); None where no step launched a kernel
    step_gpu_busy: np.ndarray | None = None
    # kernel -> [S] its launches in each step: a kernel whose time per step moved because it runs more or fewer
    # times a step (the same kernel given other work) is not faster or slower
    kernel_launches: dict[str, np.ndarray] = field(default_factory=dict)
    # kernel name -> each launch's own time on its stream (its duration where nothing overlaps it): what a run's
    # kernel totals add, so that under programmatic dependent launch no kernel is charged for its wait
    kernel_own: dict[str, np.ndarray] = field(default_factory=dict)
    # region inside the decode step -> [S] its own thread CPU ns in each step (the step log's, version 3: no wait for
    # a core in it); empty for runs captured without them
    step_cpu: dict[str, np.ndarray] = field(default_factory=dict)
    # [S] each step's waits for a core, its thread's run delay in ns (step log version 5, a CPU engine); None for runs
    # captured without them
    step_wait: np.ndarray | None = None
    # section name -> what that section's diff_prepare made of the stored run: samples of its own (a per-step
    # column from the trace and the step windows, say) that its diff_samples families read back
    sections: dict[str, object] = field(default_factory=dict)

    @property
    def steps(self) -> int | None:
        return None if self.step_dur is None else len(self.step_dur)


# The fields a section may hand over in a Shared (everything but the summary and the sections' own samples).
SHARED_FIELDS = frozenset(f.name for f in fields(RunData)) - {"summary", "sections"}
