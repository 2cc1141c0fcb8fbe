"""`roseprof ncu`'s options, defined once: the CLI fills them, `resolve` takes --from's kernels and command from
the earlier run the library hands it, and the driver turns them into ncu's command line (`argv`). Frozen, so what
was asked is what the manifest records."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from roseprof.drivers.demangle import demangle
from roseprof.errors import RoseprofError
from roseprof.kernel_names import names_pattern
from roseprof.workload.roseinfer import ncu_default_command

DEFAULT_LAUNCH_COUNT = 100  # ncu profiles every matching launch by default; a full set replays each ~40 times
FROM_LAUNCHES_PER_KERNEL = 5  # with --from: launches profiled per chosen kernel (at most)
DURATION_METRIC = "gpu__time_duration.sum"  # what every view of an ncu run is built on: always collected


@dataclass(frozen=True)
class NcuOptions:
    tool: ClassVar[str] = "ncu"

    kernel: str | None = None  # a regex over kernel names (ncu --kernel-name regex:...)
    nvtx_include: tuple[str, ...] = ()  # only kernels inside these NVTX ranges
    launch_skip: int = 0  # matching launches to skip
    launch_count: int | None = None  # matching launches to profile; None: the default; 0: every one
    section_set: str | None = None  # basic, detailed, full (None: full unless sections or metrics are given)
    sections: tuple[str, ...] = ()
    metrics: str | None = None  # comma-separated; the duration is always added
    kernel_name_base: str | None = None  # "demangled" when the names are nsys' or torch's (--from)
    from_run: str | None = None  # the nsys or torch run whose top kernels to profile
    top: int = 5  # with from_run: how many kernels
    from_kernels: tuple[str, ...] = ()  # with from_run: those kernels' names as that run spells them
    # With from_run and no --launch-count: launches of each launch configuration of each kernel (ncu's filter mode
    # per-launch-config, where the ncu has it; where not, launch_count caps them all together).
    launches_per_config: int | None = None

    def default_command(self) -> list[str]:
        """What runs when no command is given: the engine's benchmark sized for one profiled decode step."""
        return ncu_default_command()

    def resolve(self, cmd: list[str] | None, source: Callable) -> tuple[NcuOptions, list[str] | None]:
        """These options and the command as they run: with --from, the `top` kernels by GPU time of that nsys or
        torch run (FROM_LAUNCHES_PER_KERNEL launches each at most) and its command when none is given; the defaults
        filled. `source(ref)`: (run id, manifest, top(n) -> [(kernel, launches)] by GPU time) of the run `ref`
        names (roseprof.api reads it from the store)."""
        options = self
        if self.from_run is not None:
            if self.kernel:
                raise RoseprofError("--from picks the kernels itself: give --from or --kernel, not both")
            run_id, manifest, top_kernels = source(self.from_run)
            if (manifest.get("tool") or {}).get("name") == "ncu":
                raise RoseprofError(f"run {run_id} is an ncu run: --from takes an nsys or torch run")
            chosen = top_kernels(self.top)
            if not chosen:
                raise RoseprofError(
                    f"run {run_id} has no kernels to profile (--from needs a run with GPU kernels)"
                )
            launches, per_config = self.launch_count, None
            if launches is None:
                # ncu counts the matching launches together, in the order they come: the first few steps' launches
                # of the kernels a step runs most would fill a cap of 5 each, and a kernel run once a step would
                # get none. Counted per launch configuration (ncu 2023 and later), each gets its 5.
                launches = sum(min(c, FROM_LAUNCHES_PER_KERNEL) for _, c in chosen)
                per_config = FROM_LAUNCHES_PER_KERNEL
            # The names as that run's tool spells them, matched as any demangler spells them (torch writes GNU's
            # spelling, nsys and ncu NVIDIA's, and ncu shortens qualifiers): kernel_names.py. A torch run stored
            # before its reader demangled what Kineto left mangled still has such names: demangled here.
            names, _ = demangle([n for n, _ in chosen])
            options = dataclasses.replace(
                self,
                kernel=names_pattern(names),
                kernel_name_base="demangled",
                from_kernels=tuple(names),
                launch_count=launches,
                launches_per_config=per_config,
                from_run=run_id,
            )
            if not cmd:
                cmd = manifest.get("command")
                if not cmd:
                    raise RoseprofError(
                        f"run {run_id} has no command (it was imported): give the command after --"
                    )
        return options.with_defaults(), cmd

    def with_defaults(self) -> NcuOptions:
        """The launch cap and the full section set where the user chose neither."""
        count = DEFAULT_LAUNCH_COUNT if self.launch_count is None else self.launch_count
        full = self.section_set is None and not self.sections and not self.metrics
        return dataclasses.replace(self, launch_count=count, section_set="full" if full else self.section_set)

    def argv(self, per_launch_config: bool = False) -> list[str]:
        """ncu's options, clocks left alone and NVTX on (so every result names its enclosing ranges);
        `per_launch_config`: the ncu has that filter mode (launches_per_config is then the count)."""
        argv = ["--clock-control", "none", "--nvtx", "--target-processes", "all"]
        for rng in self.nvtx_include:
            argv += ["--nvtx-include", rng]
        if self.kernel:
            argv += ["--kernel-name", f"regex:{self.kernel}"]
        if self.kernel_name_base:
            argv += ["--kernel-name-base", self.kernel_name_base]
        if self.launch_skip:
            argv += ["--launch-skip", str(self.launch_skip)]
        if per_launch_config and self.launches_per_config:
            argv += ["--launch-count", str(self.launches_per_config), "--filter-mode", "per-launch-config"]
        elif self.launch_count:  # 0: every matching launch
            argv += ["--launch-count", str(self.launch_count)]
        if self.section_set:
            argv += ["--set", self.section_set]
        for section in self.sections:
            argv += ["--section", section]
        if self.metrics:
            wanted = [m for m in self.metrics.split(",") if m]
            argv += ["--metrics", ",".join(dict.fromkeys(wanted + [DURATION_METRIC]))]
        return argv

    def filters(self) -> str:
        """The filters, as a message about a profile that matched nothing names them."""
        if self.from_run:  # its pattern runs to kilobytes: the kernels it stands for, shortly
            parts = [f"--from {self.from_run}'s top {len(self.from_kernels)} kernel(s)"]
        else:
            parts = [f"--kernel-name regex:{self.kernel}"] if self.kernel else []
        parts += [f"--nvtx-include {r}" for r in self.nvtx_include]
        if self.launch_skip:
            parts.append(f"--launch-skip {self.launch_skip}")
        return ", ".join(parts) or "no filter"
