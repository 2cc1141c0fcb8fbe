"""Instrumentation: named regions (NVTX and torch.profiler spans) and each region's own time per decode step.

`region(name)` is on the hot path. When both NVTX and record_function are off it returns a shared no-op
context manager after one attribute check, so the engine can keep its regions in place at no real cost.

Region names are stable API (dashboards, diffs and users' scripts match on them): roseinfer/names.py, which
roseprof imports. The step log (per-step and per-token records) is roseinfer/steplog.py; torch.profiler inside the
engine (ROSEINFER_TORCH_PROFILE) is roseinfer/torch_profile.py.
"""

from __future__ import annotations

import os
import threading
import time

from roseinfer import env, planted, run_delay, torch_profile

# Region names (stable API) live in roseinfer/names.py, torch-free, where roseprof reads them; re-exported here
# because the engine's modules name them as tracing.X.
from roseinfer.names import (  # noqa: F401
    ALLREDUCE,
    ARGMAX,
    ATTENTION,
    BUILD_BLOCK_TABLES,
    DECODE_STEP,
    EMBEDDING,
    H2D_BLOCK_TABLES,
    KV_APPEND,
    LAYERNORM,
    LM_HEAD,
    MLP,
    MODEL_FORWARD,
    PREFILL,
    REGION_NAMES,
    RESERVE_BLOCKS_AHEAD,
    SAMPLE,
    SCHEDULER_STEP,
    STEP_BREAKDOWN,
)

# torch.profiler inside the engine (ROSEINFER_TORCH_PROFILE) lives in roseinfer/torch_profile.py; its per-step calls
# are re-exported here because the engine's modules make them as tracing.X.
from roseinfer.torch_profile import close_profiler, profiler_step  # noqa: F401


class _State:
    __slots__ = (
        "enabled",
        "nvtx",
        "record_function",
        "_push",
        "_pop",
        "_profiling",
        "sleep_region",
        "sleep_s",
        "sleep_rank",
        "busy_region",
        "busy_ns",
        "slow_every",
        "slow_entries",
        "step_cpu",
        "clocks",
        "clocks_always",
        "clocks_window",
    )

    def __init__(self) -> None:
        self.enabled = False
        self.nvtx = False
        self.record_function = False
        self._push = None
        self._pop = None
        self._profiling = None  # () -> bool: is a torch profiler recording now
        self.sleep_region: str | None = None  # tests only: ROSEINFER_TEST_SLEEP_REGION
        self.sleep_s = 0.0
        self.sleep_rank: int | None = None  # tests only: ROSEINFER_TEST_SLEEP_RANK (None: every rank)
        self.busy_region: str | None = None  # tests only: ROSEINFER_TEST_BUSY_REGION
        self.busy_ns = 0
        self.slow_every: int | None = None  # tests only: ROSEINFER_TEST_SLOW_EVERY (None: every entry slows)
        self.slow_entries = 0
        # Regions inside a decode step read the thread's CPU time as well as the wall time (_StepTimes). The engine
        # turns it off on a GPU (and on several intra-op threads): there the thread's CPU time is not the code's
        # work (the GPU's, torch's other threads'), and two system calls a region would be a visible part of a
        # graph step; GPU diffs judge regions by their wall time (docs/BENCHMARKS.md, session 8).
        self.step_cpu = True
        # Each region's own host time per decode step (_StepTimes) is counted only while `clocks` is on: while a
        # profiler or NVTX has the regions on (their figures are joined to the step log's), while a capture window
        # records (`clocks_window`, set_region_clocks: a plain server's steps window names the region of a slow
        # step), or always (`clocks_always`, ROSEINFER_REGION_CLOCKS). The planted slowdowns (tests only) make
        # regions but no clocks: a slowed server is a plain server.
        self.clocks = False
        self.clocks_always = False
        self.clocks_window = False


STATE = _State()


def _nvtx_functions():
    """NVTX push/pop through the `nvtx` package (works without a CUDA build of torch); torch's otherwise.

    `nvtx.push_range(name)` looks up the domain, registers the string and builds the event's attributes on every
    call (~1.5 us a range on the CPU machine); the same calls made once per region name and kept cost ~0.15 us,
    and NVTX records the same event (nvtx 0.2.10's `_lib`, the version pinned for Nsight Systems 2022.4)."""
    try:
        import nvtx
    except ImportError:
        import torch

        return torch.cuda.nvtx.range_push, torch.cuda.nvtx.range_pop
    try:
        from nvtx._lib import Domain, EventAttributes, RegisteredString
        from nvtx._lib import pop_range as lib_pop
        from nvtx._lib import push_range as lib_push
    except ImportError:  # another nvtx version: its public functions
        return (lambda name: nvtx.push_range(name)), (lambda: nvtx.pop_range())
    handle = Domain(None).handle  # the default domain, as nvtx.push_range(name) uses
    attributes: dict[str, object] = {}

    def push(name: str) -> None:
        a = attributes.get(name)
        if a is None:
            a = attributes[name] = EventAttributes(RegisteredString(handle, name), "blue", None, None)
        lib_push(a, handle)

    return push, (lambda: lib_pop(handle))


def _nvtx_tool_attached() -> bool:
    # NVTX_DISABLE: the nvtx package's own off switch (its public functions then do nothing).
    return bool(os.environ.get("NVTX_INJECTION64_PATH")) and not os.environ.get("NVTX_DISABLE")


def _torch_profiling_check():
    """A cheap check (~0.1 us) that a torch profiler is recording (on this thread: the engine's regions are all
    on the thread that steps it, where roseinfer's own profiler runs). A record_function span costs ~6 us even when
    none is (the op is dispatched all the same), and torch.profiler's schedule leaves the profiler off for all
    but its window of steps: spans are made only while it records, which drops nothing it would have kept."""
    import torch

    return getattr(torch._C._autograd, "_profiler_enabled", lambda: True)


def configure(nvtx: bool | None = None, record_function: bool | None = None) -> None:
    """Switch regions on or off; None keeps the value from the environment (ROSEINFER_NVTX, ...)."""
    e = env.reload()
    # NVTX sends ranges to a tool only if one is named in NVTX_INJECTION64_PATH when NVTX initialises (Nsight
    # Systems and Nsight Compute set it for the program they launch; the ranges' domain is made just below, which
    # initialises NVTX): without one every NVTX call is a no-op for the life of the process, so the regions'
    # Python cost (~1% of a graph decode step on the H100) is skipped too.
    STATE.nvtx = (e.nvtx if nvtx is None else nvtx) and _nvtx_tool_attached()
    STATE.record_function = e.record_function if record_function is None else record_function
    if e.torch_profile and not torch_profile.running():
        torch_profile.start(e)
        STATE.record_function = True  # the profile's regions are the record_function spans
    if STATE.nvtx and STATE._push is None:
        STATE._push, STATE._pop = _nvtx_functions()
    if STATE.record_function and STATE._profiling is None:
        STATE._profiling = _torch_profiling_check()
    STATE.sleep_region, STATE.sleep_s = e.test_sleep_region or (None, 0.0)
    STATE.sleep_rank = e.test_sleep_rank
    busy, busy_s = e.test_busy_region or (None, 0.0)
    STATE.busy_region, STATE.busy_ns = busy, int(busy_s * 1e9)
    STATE.slow_every, STATE.slow_entries = e.test_slow_every, 0
    STATE.clocks_always = e.region_clocks
    _refresh_enabled()


def _refresh_enabled() -> None:
    STATE.clocks = STATE.nvtx or STATE.record_function or STATE.clocks_always or STATE.clocks_window
    STATE.enabled = STATE.clocks or STATE.sleep_region is not None or STATE.busy_region is not None


def set_region_clocks(on: bool) -> bool:
    """Each region's own host time per decode step on or off, with no NVTX and no profiler (a serving engine's
    capture window, roseinfer/serve/windows.py, turns them on for its steps only, so a plain server's steps window
    names the region of a slow step); returns the value before, to restore. Call between steps: a step's clocks
    are decided when it opens. Off, `region` is one attribute check again (when nothing else is on)."""
    before = STATE.clocks_window
    STATE.clocks_window = on
    _refresh_enabled()
    return before


def set_record_function(on: bool) -> bool:
    """Regions as record_function spans on or off (a serving engine's torch window, roseinfer/serve/profiling.py,
    turns them on for its steps only); returns the value before, to restore. Call between steps."""
    before = STATE.record_function
    STATE.record_function = on
    if on and STATE._profiling is None:
        STATE._profiling = _torch_profiling_check()
    _refresh_enabled()
    return before


def set_nvtx(on: bool) -> bool:
    """Regions as NVTX ranges on or off (a serving engine's nsys window, roseinfer/serve/nsys_window.py, turns them
    on for its steps only, so the server emits no NVTX between windows); on only where a tool is attached. Returns
    the value before, to restore. Call between steps."""
    before = STATE.nvtx
    STATE.nvtx = on and _nvtx_tool_attached()
    if STATE.nvtx and STATE._push is None:
        STATE._push, STATE._pop = _nvtx_functions()
    _refresh_enabled()
    return before


def nvtx_tool_attached() -> bool:
    """Does a tool (Nsight Systems, Nsight Compute) receive this process' NVTX ranges?"""
    return _nvtx_tool_attached()


def push_nvtx(name: str) -> None:
    """One NVTX range opened on this thread, outside any region (after set_nvtx(True))."""
    STATE._push(name)


def pop_nvtx() -> None:
    STATE._pop()


class _NullRegion:
    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


_NULL = _NullRegion()


class _StepTimes:
    """Each region's own host time in the decode step now running, for the step log (`take_step_times`): its wall
    time always (while STATE.clocks), and its thread CPU time too where that is the code's work (STATE.step_cpu).

    Wall ("host_own_ns") on every device. On a GPU engine the stepping thread does all the host work, but a region
    that waits for the GPU (the sampler reading the previous step's tokens back, a sync) spins or sleeps as CUDA's
    scheduling policy decides, so its CPU time is the wait one run and none of it the next; its wall time is always
    the wait, and what a slow step's explanation needs is where the host's time went (a torch or nsys window then
    says which kernels). A wall clock read is also a vDSO call, a CPU clock read a system call (`_wall_ns`).
    CPU ("cpu_own_ns") only where STATE.step_cpu (a CPU engine on one intra-op thread): on a busy CPU the process
    waits for a core at random moments, and whichever region runs then absorbs the wait in its wall time; its
    thread CPU time (CLOCK_THREAD_CPUTIME_ID) leaves the wait out (docs/BENCHMARKS.md, session 8). The keys are
    distinct so that nothing that judges code by its CPU time (diffs, analysis/machine_speed.py) ever reads a GPU
    run's host wall time as CPU work. Nsight Systems 2022.4 cannot record context switches on this machine, so the
    engine measures them itself, only while the clocks are on; with the CPU times, the step's waits for a core
    ("wait_ns": its thread's run delay, run_delay.py), which no sleep or lock is in.

    The step's accounting opens when a `roseinfer.decode_step` region is entered while STATE.clocks is on, and
    closes when it exits: the prefill and scheduler regions between steps are not in any step, nor is a region
    entered before the step opened. Only the thread that entered the step counts (`thread`): a region on another
    thread never touches the step's stacks, and another engine's step on another thread, opened while this one is,
    is not counted (its step log record has no region times; `take_step_times` gives a thread only its own)."""

    __slots__ = ("thread", "cpu", "host_children", "cpu_children", "host_own", "cpu_own", "wait0", "last")

    def __init__(self) -> None:
        self.thread: int | None = None  # the thread whose decode step is open; None between steps
        self.cpu = False  # this step reads CPU times too (STATE.step_cpu when it opened)
        # per open region (innermost last): wall / CPU ns of its children that ended
        self.host_children: list[int] = []
        self.cpu_children: list[int] = []
        self.host_own: dict[str, int] = {}  # region -> its own wall ns in this step (less its children's)
        self.cpu_own: dict[str, int] = {}  # region -> its own CPU ns in this step (STATE.step_cpu only)
        self.wait0 = -1  # the thread's run delay when the step opened (STATE.step_cpu only; -1: unknown)
        # the last step's (thread, its step log fields)
        self.last: tuple[int, dict[str, object]] | None = None


_STEP = _StepTimes()
_OPENING = threading.Lock()  # opening a step's accounting (once a step; the regions inside take no lock)
_thread_time_ns = time.thread_time_ns
_wall_ns = time.perf_counter_ns  # CLOCK_MONOTONIC: a vDSO read, no system call
_thread_id = threading.get_ident


class _Region:
    __slots__ = ("name", "_rf", "_t0", "_cpu0")

    def __init__(self, name: str) -> None:
        self.name = name
        self._rf = None
        # the wall / thread CPU ns when this region was entered inside a decode step; -1: not counted
        self._t0 = -1
        self._cpu0 = -1

    def __enter__(self) -> None:
        if STATE.nvtx:
            STATE._push(self.name)
        if STATE.record_function and STATE._profiling():
            import torch

            self._rf = torch.profiler.record_function(self.name)
            self._rf.__enter__()
        st = _STEP
        # A step opens where none is open, or anew on the thread that left one open (interrupted in __enter__):
        # another engine's step on another thread at the same time would otherwise take the accounting over, and
        # the first thread's regions pop the second's stack.
        if self.name == DECODE_STEP and STATE.clocks:
            me = _thread_id()
            if st.thread in (None, me):
                with _OPENING:  # checked again under the lock: two threads may both have seen no step open
                    if st.thread in (None, me):
                        st.host_children, st.cpu_children, st.host_own, st.cpu_own = [], [], {}, {}
                        st.cpu = STATE.step_cpu
                        st.wait0 = run_delay.run_delay_ns() if st.cpu else -1
                        st.thread = me
        if st.thread is not None and st.thread == _thread_id():
            st.host_children.append(0)
            if st.cpu:
                st.cpu_children.append(0)
                self._cpu0 = _thread_time_ns()
            self._t0 = _wall_ns()  # read last: the profiler's own work above is not this region's
        # The planted slowdowns (tests only) inside the region's clocks as well as its NVTX range and span: a
        # sleep is host time of this region (and no CPU time), a busy loop both.
        if (
            self.name == STATE.sleep_region
            and planted.sleeps_on_this_rank(STATE)
            and planted.slowed_entry(STATE)
        ):
            time.sleep(STATE.sleep_s)
        if self.name == STATE.busy_region and planted.slowed_entry(STATE):
            planted.burn(STATE.busy_ns)

    def __exit__(self, *exc: object) -> None:
        if self._t0 >= 0:
            host = _wall_ns() - self._t0  # read first, as __enter__ reads last
            st = _STEP
            children = st.host_children.pop()
            st.host_own[self.name] = st.host_own.get(self.name, 0) + host - children
            if st.host_children:
                st.host_children[-1] += host
            cpu = -1
            if self._cpu0 >= 0:
                cpu = _thread_time_ns() - self._cpu0
                children = st.cpu_children.pop()
                st.cpu_own[self.name] = st.cpu_own.get(self.name, 0) + cpu - children
                if st.cpu_children:
                    st.cpu_children[-1] += cpu
            if self.name == DECODE_STEP:
                fields = {"cpu_ns": cpu, "cpu_own_ns": st.cpu_own} if cpu >= 0 else {}
                wait1 = run_delay.run_delay_ns() if fields and st.wait0 >= 0 else -1
                if wait1 >= 0:  # the step's waits for a core (run_delay.py), read after its clocks
                    fields["wait_ns"] = wait1 - st.wait0
                st.last, st.thread = (st.thread, {**fields, "host_own_ns": st.host_own}), None
        if self._rf is not None:
            self._rf.__exit__(None, None, None)
            self._rf = None
        if STATE.nvtx:
            STATE._pop()


def take_step_times() -> dict[str, object]:
    """The last decode step's region times for its step log record, once: `host_own_ns` ({region: its own wall ns
    in the step, less its children's}) while the clocks are on (STATE.clocks), and where STATE.step_cpu also `cpu_ns` (the step's
    thread CPU time), `cpu_own_ns` (each region's own CPU ns) and `wait_ns` (the step's run delay, where the kernel
    says it). {} when the clocks are off (or the step's region was
    not entered, or was another thread's)."""
    last = _STEP.last
    if last is None or last[0] != _thread_id():  # none, or another thread's step: never this thread's figures
        return {}
    _STEP.last = None
    return last[1]


def region(name: str):
    """A context manager marking `name` on the timeline; a shared no-op when tracing is off."""
    if not STATE.enabled:
        return _NULL
    return _Region(name)


def time_calls(obj: object, labels: dict[str, str], into: dict[str, list[int]]) -> None:
    """Host time of each call to some of `obj`'s methods, without a profiler: labels maps a method name to the
    label its call times (perf_counter_ns) are appended under in `into`. Only this object's methods are wrapped
    (an instance attribute shadows the class's), so nothing else pays for it. The engine and the runner say
    which of their parts can be timed (`Engine.time_parts`); scripts/bench_decode_host.py reads the result."""
    for name, label in labels.items():
        method = getattr(obj, name)
        into.setdefault(label, [])

        def timed(*args, _method=method, _times=into[label], **kwargs):
            t0 = time.perf_counter_ns()
            try:
                return _method(*args, **kwargs)
            finally:
                _times.append(time.perf_counter_ns() - t0)

        setattr(obj, name, timed)


def now_ns() -> int:
    return time.monotonic_ns()


configure()
