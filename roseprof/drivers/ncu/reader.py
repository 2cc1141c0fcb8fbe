"""Nsight Compute exports -> the run model: kernel launches as GPU ops, their metrics as per-launch metrics.

ncu serialises the kernels it profiles and replays each one alone, so its results have no timeline. Each launch
becomes a KERNEL op whose duration is `gpu__time_duration` and whose start is synthetic: the launches placed end
to end in launch order (ID), from 0. Those starts are not times on any clock; only durations (and the order) are
real. The per-launch metrics (model.KernelMetrics) hold what ncu measured, converted exactly from the units ncu
printed (units.py), NaN where the export lacks a metric.

Which metric is which: the raw page names metrics (`sm__throughput.avg.pct_of_peak_sustained_elapsed`), the details
page shows them by section and label ("GPU Speed Of Light Throughput" / "Compute (SM) Throughput"); both maps
below agree on the H100 fixture (tests/roseprof/test_ncu_reader.py). FLOP rates and the GPU's peaks follow ncu's
own roofline sections (SpeedOfLight_RooflineChart and its hierarchical single/half/double variants): achieved
FP32 = (fadd + fmul + 2 ffma) thread instructions per cycle x SM frequency; FP16 counts 2 per hadd/hmul and 4 per
hfma (packed half2, as ncu's derived__*_x2/_x4 metrics do); the peak is ffma peak per cycle x 2 x clock, and peak
DRAM bandwidth dram__bytes.sum.peak_sustained x DRAM clock. roseprof takes the peaks at the device's maximum
clocks (device__attribute_max_*_frequency_khz), one roof per GPU; ncu draws each launch's roof at the clock it
measured during that launch.
"""

from __future__ import annotations

import math

import numpy as np

from roseprof.drivers.ncu.pages import Launch, Page
from roseprof.drivers.ncu.units import UnitError, convert
from roseprof.errors import RoseprofError
from roseprof.model import KERNEL, KERNEL_METRICS, GpuOps, KernelMetrics, Names, Tool, Trace

SOL = "GPU Speed Of Light Throughput"
COMMAND_LINE_METRICS = "Command line profiler metrics"  # the details page's section of the --metrics given
# metric key -> (raw page metric, canonical unit, details page (section, label))
MAP = {
    "duration_ns": ("gpu__time_duration.sum", "ns", (SOL, "Duration")),
    "elapsed_cycles": ("gpc__cycles_elapsed.max", "cycle", (SOL, "Elapsed Cycles")),
    "sm_throughput_pct": (
        "sm__throughput.avg.pct_of_peak_sustained_elapsed",
        "%",
        (SOL, "Compute (SM) Throughput"),
    ),
    "memory_throughput_pct": (
        "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
        "%",
        (SOL, "Memory Throughput"),
    ),
    "dram_throughput_pct": (
        "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
        "%",
        (SOL, "DRAM Throughput"),
    ),
    "achieved_occupancy_pct": (
        "sm__warps_active.avg.pct_of_peak_sustained_active",
        "%",
        ("Occupancy", "Achieved Occupancy"),
    ),
    "theoretical_occupancy_pct": (
        "sm__maximum_warps_per_active_cycle_pct",
        "%",
        ("Occupancy", "Theoretical Occupancy"),
    ),
    "registers_per_thread": (
        "launch__registers_per_thread",
        "register/thread",
        ("Launch Statistics", "Registers Per Thread"),
    ),
    "waves_per_sm": ("launch__waves_per_multiprocessor", "", ("Launch Statistics", "Waves Per SM")),
    "dram_read_bytes": ("dram__bytes_read.sum", "byte", None),
    "dram_write_bytes": ("dram__bytes_write.sum", "byte", None),
    "dram_bytes_per_s": (
        "dram__bytes.sum.per_second",
        "byte/s",
        ("Memory Workload Analysis", "Memory Throughput"),
    ),
    "tensor_pipe_pct": ("sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed", "%", None),
    "sm_frequency_hz": ("gpc__cycles_elapsed.avg.per_second", "hz", (SOL, "SM Frequency")),
    "dram_frequency_hz": ("dram__cycles_elapsed.avg.per_second", "hz", (SOL, "DRAM Frequency")),
}
_OP = "smsp__sass_thread_inst_executed_op_{}_pred_on.sum.per_cycle_elapsed"
# achieved FLOP rates: metric key -> [(thread instructions per cycle, FLOPs each)]
FLOPS = {
    "fp32_flop_per_s": [(_OP.format("fadd"), 1), (_OP.format("fmul"), 1), (_OP.format("ffma"), 2)],
    "fp16_flop_per_s": [(_OP.format("hadd"), 2), (_OP.format("hmul"), 2), (_OP.format("hfma"), 4)],
    "fp64_flop_per_s": [(_OP.format("dadd"), 1), (_OP.format("dmul"), 1), (_OP.format("dfma"), 2)],
    "tensor_flop_per_s": [("smsp__inst_executed_pipe_tensor.sum.per_cycle_elapsed", 512)],
}
ACHIEVED_CLOCK = "smsp__cycles_elapsed.avg.per_second"
# peaks per device: key -> (metric per cycle, factor, the clock attribute in kHz)
PEAKS = {
    "peak_dram_bytes_per_s": ("dram__bytes.sum.peak_sustained", 1, "device__attribute_max_mem_frequency_khz"),
    "peak_fp32_flop_per_s": (
        "sm__sass_thread_inst_executed_op_ffma_pred_on.sum.peak_sustained",
        2,
        "device__attribute_max_gpu_frequency_khz",
    ),
    "peak_fp16_flop_per_s": (
        "sm__sass_thread_inst_executed_op_hfma_pred_on.sum.peak_sustained",
        4,
        "device__attribute_max_gpu_frequency_khz",
    ),
    "peak_fp64_flop_per_s": (
        "sm__sass_thread_inst_executed_op_dfma_pred_on.sum.peak_sustained",
        2,
        "device__attribute_max_gpu_frequency_khz",
    ),
    "peak_tensor_flop_per_s": (
        "sm__inst_executed_pipe_tensor.sum.peak_sustained",
        512,
        "device__attribute_max_gpu_frequency_khz",
    ),
}
DEVICE_ATTRIBUTES = {
    "name": "device__attribute_display_name",
    "sm_count": "device__attribute_multiprocessor_count",
    "max_gpu_frequency_khz": "device__attribute_max_gpu_frequency_khz",
    "max_mem_frequency_khz": "device__attribute_max_mem_frequency_khz",
    "memory_bus_width_bits": "device__attribute_global_memory_bus_width",
    "l2_cache_bytes": "device__attribute_l2_cache_size",
}

# Every metric key this reader reads (raw page names and details page (section, label) pairs): the CSV pages keep
# only these (pages.read_page's `keep`), so a raw page of thousands of columns costs what is read.
USED = (
    {raw for raw, _, _ in MAP.values()}
    | {where for _, _, where in MAP.values() if where is not None}
    | {(COMMAND_LINE_METRICS, raw) for raw, _, _ in MAP.values()}
    | {name for parts in FLOPS.values() for name, _ in parts}
    | {ACHIEVED_CLOCK}
    | {metric for metric, _, _ in PEAKS.values()}
    | {clock for _, _, clock in PEAKS.values()}
    | set(DEVICE_ATTRIBUTES.values())
)


def used(key) -> bool:
    return key in USED


def _value(launch: Launch, key, unit: str | None, label: str) -> float:
    """One metric of one launch in `unit` (None: whatever it converts to); NaN where missing."""
    cell = launch.metrics.get(key)
    if cell is None:
        return math.nan
    try:
        got = convert(*cell)
    except UnitError as e:
        raise RoseprofError(f"{label}: metric {key} has a unit roseprof cannot convert ({e})") from None
    if got is None:
        return math.nan
    value, canonical = got
    if unit is not None and canonical != unit:
        raise RoseprofError(f"{label}: metric {key} is in {cell[1]!r}, expected a unit of {unit!r}")
    return value


def _raw_values(launch: Launch, label: str) -> dict[str, float]:
    out = {key: _value(launch, raw, unit, label) for key, (raw, unit, _) in MAP.items()}
    clock = _value(launch, ACHIEVED_CLOCK, "hz", label)
    for key, parts in FLOPS.items():
        per_cycle = sum(_value(launch, name, None, label) * n for name, n in parts)  # NaN if any is missing
        out[key] = per_cycle * clock
    return out


def _details_values(launch: Launch, label: str) -> dict[str, float]:
    """A launch's metrics from the details page: in their sections, or, for a report collected with --metrics,
    under their raw names in ncu's "Command line profiler metrics" section
    (tests/data/ncu/h200-ncu2025.3-roseinfer-names-details.csv.xz)."""
    out = {}
    for key, (raw, unit, where) in MAP.items():
        out[key] = _value(launch, where, unit, label) if where is not None else math.nan
        if math.isnan(out[key]):
            out[key] = _value(launch, (COMMAND_LINE_METRICS, raw), unit, label)
    return out


def _device(launch: Launch, label: str) -> dict:
    dev: dict = {"id": launch.device, "cc": launch.cc or None}
    name = launch.metrics.get(DEVICE_ATTRIBUTES["name"])
    if name and name[0]:
        dev["name"] = name[0]
    for key, metric in DEVICE_ATTRIBUTES.items():
        if key != "name":
            v = _value(launch, metric, None, label)
            dev[key] = None if math.isnan(v) else int(v)
    for key, (metric, n, clock_attr) in PEAKS.items():
        per_cycle, khz = _value(launch, metric, None, label), _value(launch, clock_attr, None, label)
        v = per_cycle * n * khz * 1e3
        dev[key] = None if math.isnan(v) else v
    return dev


def build_trace(raw: Page | None, details: Page | None, label: str, version: str = "?") -> Trace:
    """The model from ncu's raw page, details page, or both (the raw page's exact values win; the details page adds
    the rule findings and fills what the raw page lacks)."""
    by_id_details = {launch.id: launch for launch in details.launches} if details else {}
    launches = raw.launches if raw else (details.launches if details else [])
    if not launches:
        raise RoseprofError(f"{label}: the export holds no kernel launch (ncu profiled none)")
    launches = sorted(launches, key=lambda launch: launch.id)
    k = len(launches)
    values = {name: np.full(k, np.nan) for name in KERNEL_METRICS}
    rules, devices, nvtx = [], {}, []
    for i, launch in enumerate(launches):
        row = _raw_values(launch, label) if raw else _details_values(launch, label)
        other = by_id_details.get(launch.id) if raw else None
        if other is not None:
            for key, v in _details_values(other, label).items():
                if math.isnan(row[key]):
                    row[key] = v
        for key, v in row.items():
            values[key][i] = v
        for rule in (other or launch).rules:
            rules.append({"launch": i, **rule})
        if raw and launch.device not in devices:
            devices[launch.device] = _device(launch, label)
        nvtx.append(launch.nvtx or (other.nvtx if other is not None else []))
    dur = values["duration_ns"]
    if np.isnan(dur).any():
        first = launches[int(np.flatnonzero(np.isnan(dur))[0])]
        raise RoseprofError(
            f"{label}: launch {first.id} ({first.kernel[:60]}) has no duration (gpu__time_duration): export a "
            "report collected with it (roseprof ncu always collects it)"
        )
    names = Names()
    dur_ns = np.rint(dur).astype(np.int64)
    start = np.concatenate([[0], np.cumsum(dur_ns)[:-1]]).astype(np.int64)
    minus = np.full(k, -1, dtype=np.int64)
    ops = GpuOps(
        kind=np.full(k, KERNEL, dtype=np.int64),
        start=start,
        end=start + dur_ns,
        name=names.intern_many([launch.kernel for launch in launches]),
        device=np.array([launch.device for launch in launches], dtype=np.int64),
        stream=np.array([launch.stream for launch in launches], dtype=np.int64),
        graph_node=minus.copy(),
        api_start=minus.copy(),
        api_end=minus.copy(),
        api_tid=minus.copy(),
        api_name=minus.copy(),
    )
    metrics = KernelMetrics(
        op=np.arange(k, dtype=np.int64),
        launch_id=np.array([launch.id for launch in launches], dtype=np.int64),
        grid=np.array([launch.grid for launch in launches], dtype=np.int64).reshape(k, 3),
        block=np.array([launch.block for launch in launches], dtype=np.int64).reshape(k, 3),
        values=values,
        nvtx=nvtx,
        rules=rules,
        devices=devices,
    )
    pages = "+".join(p.kind for p in (raw, details) if p is not None)
    warnings = []
    if raw is None:
        warnings.append(
            "ncu details page only: values are rounded as ncu printed them, and DRAM bytes, FLOP rates and the "
            "GPU's peaks need the raw page (ncu --import R --csv --page raw)"
        )
    gpus = [{"index": d, "name": dev["name"]} for d, dev in sorted(devices.items()) if dev.get("name")]
    return Trace(
        tool=Tool("ncu", version, pages),
        names=names,
        ops=ops,
        gpus=gpus,
        warnings=warnings,
        kernel_metrics=metrics,
    )
