"""torch.profiler inside the engine (ROSEINFER_TORCH_PROFILE=DIR): a schedule of decode steps, started when tracing is
configured (roseinfer/tracing.py, before decode step 0) and advanced once per decode step (`profiler_step`)."""

from __future__ import annotations

import os

from roseinfer import env, exit_hooks


def start(e: env.Env) -> bool:
    """Start the engine's profiler, once a process (ROSEINFER_TORCH_PROFILE); whether one now runs. Started before
    decode step 0: the schedule's step k is then the engine's decode step k."""
    global _PROFILER
    if _PROFILER is None:
        _PROFILER = TorchProfile(e)
        _PROFILER.start()
    return True


def running() -> bool:
    """Is the engine's own profiler (ROSEINFER_TORCH_PROFILE) on in this process?"""
    return _PROFILER is not None


class TorchProfile:
    """torch.profiler inside the engine (ROSEINFER_TORCH_PROFILE=DIR): a schedule of decode steps, advanced once
    per decode step by `profiler_step()`; the trace goes to DIR/trace.json.gz when the window ends, or at exit
    when the run ends inside it."""

    def __init__(self, e: env.Env) -> None:
        self.dir = e.torch_profile
        self.e = e
        self.prof = None
        self.done = False
        self.tagged = False
        # The file's name, fixed at the first decode step, inside the process group: a window longer than the run
        # is written at exit, after the group is gone, where every rank would write `trace.json.gz`.
        self.name: str | None = None

    def start(self) -> None:
        import torch
        from torch.profiler import ProfilerActivity, profile, schedule

        activities = [ProfilerActivity.CPU]
        if torch.cuda.is_available() and not self.e.torch_profile_cpu_only:
            activities.append(ProfilerActivity.CUDA)
        wait, warmup, active = self.e.torch_profile_schedule
        os.makedirs(self.dir, exist_ok=True)
        self.prof = profile(
            activities=activities,
            schedule=schedule(wait=wait, warmup=warmup, active=active, repeat=1),
            on_trace_ready=self._save,
            with_stack=self.e.torch_profile_with_stack,
        )
        self.prof.record_steps = False  # no ProfilerStep#N spans: the decode_step spans are the steps
        self.prof.start()
        exit_hooks.register(self.close)  # the window the run ended inside: its trace written at exit

    def _save(self, prof) -> None:
        prof.export_chrome_trace(os.path.join(self.dir, self.name or trace_name()))
        self.done = True

    def step(self) -> None:
        if self.name is None:
            self.name = trace_name()
        self.prof.step()
        if not self.tagged and self.prof.current_action.name.startswith("RECORD"):
            import torch

            # Kineto keeps metadata only while it records; read back as the run's tool version.
            self.prof.add_metadata("torch_version", torch.__version__)
            self.tagged = True
        if self.done:  # the window is written: stop profiling for the rest of the run
            self.close()

    def close(self) -> None:
        global _PROFILER
        if self.prof is not None:
            prof, self.prof = self.prof, None
            prof.stop()  # inside the window this saves what was recorded (on_trace_ready)
        _PROFILER = None


def trace_name() -> str:
    """The trace's file name in ROSEINFER_TORCH_PROFILE's folder: `trace.json.gz`, or with tensor parallelism one
    file per rank, `trace.rank<r>.json.gz` (every rank profiles itself into the same folder; roseprof reads them
    all as one run, and HTA-style tools find the rank in the name)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        return f"trace.rank{dist.get_rank()}.json.gz"
    return "trace.json.gz"


_PROFILER: TorchProfile | None = None


def close_profiler() -> None:
    """Stop torch.profiler and write what its window recorded. A tensor-parallel rank that multiprocessing started
    calls this before its process group goes (the group names the trace file) and before it says it finished."""
    if _PROFILER is not None:
        _PROFILER.close()


def profiler_step() -> None:
    """Once per decode step: advances torch.profiler's schedule when ROSEINFER_TORCH_PROFILE is set."""
    if _PROFILER is not None:
        _PROFILER.step()
