"""What an analysis section is: a name, a compute step, the checks of what it stores, the metrics it offers diff
and the panels it renders. `sections/__init__.py` lists them; `analysis/summary.py` runs them in that order."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from roseprof.analysis.diff_metric import Sides, figure
from roseprof.analysis.gpu_regions import kernel_range_pairs
from roseprof.analysis.graphs import capture_ranges, graph_kernel_ns
from roseprof.analysis.ranges import attribute_gpu_ops, build_tree
from roseprof.analysis.stats import dense_ids, unique_rows
from roseprof.analysis.stream_time import own_stream_ns
from roseprof.model import KERNEL, Trace, is_gpu_track
from roseprof.workload.steplog import StepLogRecords


@dataclass
class SectionResult:
    """A section's summary part ({summary key: value}) and the named tables it keeps beside summary.json."""

    summary: dict = field(default_factory=dict)
    tables: dict = field(default_factory=dict)


@dataclass
class KernelKeys:
    """The kernels' keys, computed once per run (Context.kernel_keys): per kernel (in `kernels` order) its name id,
    the name id of the innermost range around its launch and of the one around its graph node's capture (-1:
    none), the distinct (name, region, capture) rows in sorted order with each kernel's row, and the distinct
    kernel names in ascending id order with each kernel's index among them."""

    kernels: np.ndarray  # [K] indices into the ops
    name: np.ndarray  # [K]
    region: np.ndarray  # [K]
    capture: np.ndarray  # [K]
    rows: np.ndarray  # [U, 3] (name, region, capture), sorted
    row: np.ndarray  # [K] index into rows
    names: np.ndarray  # [N] the distinct kernel name ids, ascending
    name_index: np.ndarray  # [K] index into names

    @classmethod
    def of(cls, ctx: Context) -> KernelKeys:
        trace, k = ctx.trace, ctx.kernels
        names = trace.ranges.name

        def name_of(rng: np.ndarray) -> np.ndarray:
            out = np.full(len(rng), -1, dtype=np.int64)
            out[rng >= 0] = names[rng[rng >= 0]]
            return out

        name = trace.ops.name[k]
        # A kernel outside every range (or a trace with no range at all: `nsys profile -t cuda`) has no region.
        region, capture = name_of(ctx.gpu.op_range[k]), name_of(ctx.capture[k])
        rows, row = unique_rows([name, region, capture], len(trace.names))
        names, name_index = dense_ids(name, len(trace.names))
        return cls(k, name, region, capture, rows, row, names, name_index)


@dataclass
class Context:
    """What every section computes from: the model, the step log, and what several sections share (the range tree,
    the GPU ops' attribution, graph capture regions), each built once on first use. `results` holds the sections
    computed so far, by name, so a later section reads an earlier one's tables instead of recomputing them."""

    trace: Trace
    log: StepLogRecords | None
    step_range: str | None = None
    warnings: list[str] = field(default_factory=list)
    results: dict[str, SectionResult] = field(default_factory=dict)
    # Every rank's step log by the rank its file name gives (0: `log` itself), for a run of several ranks.
    logs: dict[int, StepLogRecords] = field(default_factory=dict)
    # [R] each range's own name where `trace.ranges.name` holds the spelled `domain:name` (None: every range is of
    # the default domain; model.spelled_range_names): the tables keyed by (domain, name) name a region by its own.
    own_names: np.ndarray | None = None
    # Why the ranks' timings cannot be compared (step logs that do not match their traces, clocks that disagree by
    # more than collectives can explain): said first, in summary.json's rank_clock.doubts, and no straggler is named.
    doubts: list[str] = field(default_factory=list)

    def range_names(self) -> np.ndarray:
        """[R] each range's own name index (with its domain apart: the `regions` and per-rank region tables)."""
        return self.trace.ranges.name if self.own_names is None else self.own_names

    @cached_property
    def tree(self):
        r = self.trace.ranges
        return build_tree(r.start, r.end, r.tid)

    @cached_property
    def gpu(self):
        """Per range its GPU ops (projection, kernel time) and per op its innermost launching range (ranges.py)."""
        r, ops = self.trace.ranges, self.trace.ops
        return attribute_gpu_ops(
            r.start,
            r.end,
            r.tid,
            self.tree,
            ops.kind,
            ops.start,
            ops.end,
            ops.api_start,
            ops.api_end,
            ops.api_tid,
            is_gpu_track(r.tid),
        )

    @cached_property
    def capture(self) -> np.ndarray:
        """[G] the capture-time range of each graph-replayed op, -1 otherwise."""
        return capture_ranges(self.trace, self.tree)

    @cached_property
    def kernels(self) -> np.ndarray:
        """[K] the indices of the kernels among the GPU ops."""
        return np.flatnonzero(self.trace.ops.kind == KERNEL)

    @cached_property
    def kernel_pairs(self) -> tuple[np.ndarray, np.ndarray]:
        """(op, range) pairs: every range around each kernel's launch and its graph node's capture
        (gpu_regions.kernel_range_pairs), made once per run for every view of kernel time per region."""
        return kernel_range_pairs(self.tree, self.gpu.op_range, self.capture, self.kernels)

    @cached_property
    def region_keys(self) -> tuple[np.ndarray, np.ndarray]:
        """(keys, [R] each range's index among them): each range's (domain, own name) as one code, domain *
        (len(names) + 1) + name, factorised once per run (the `regions` table and whatever groups ranges so)."""
        r = self.trace.ranges
        key = r.domain * (len(self.trace.names) + 1) + self.range_names()
        keys, inverse = np.unique(key, return_inverse=True)
        return keys, inverse.ravel()

    @cached_property
    def kernel_keys(self) -> KernelKeys:
        """Each kernel's name, launching region and capture-time region, and their distinct triples, factorised
        once per run (KernelKeys) for every table of kernels."""
        return KernelKeys.of(self)

    @cached_property
    def own_ns(self) -> np.ndarray:
        """[G] each kernel's own time on its stream (stream_time.py): what the per-step GPU views count."""
        return own_stream_ns(self.trace.ops)

    @cached_property
    def graph_ns(self) -> np.ndarray:
        """[R] kernel time of the graph replays each range launched."""
        return graph_kernel_ns(self.trace, self.tree, self.capture)

    @property
    def has_log_steps(self) -> bool:
        return bool(self.log is not None and self.log.steps)

    def table(self, name: str):
        """A table an earlier section made, by name (None when no section made it)."""
        for result in self.results.values():
            if name in result.tables:
                return result.tables[name]
        return None


@dataclass(frozen=True)
class Section:
    """One analysis.

    name          unique; its result is Context.results[name]
    compute       Context -> SectionResult (its summary keys and its named tables); never prints, never reads files
    applies       Trace -> bool: whether this section runs for a trace (e.g. ncu's kernel views only for ncu runs)
    absent        its summary part where it does not apply (summary.json keeps a key readers expect, as null)
    checks        {summary key: spec} in run/checks.py's spec language: what a stored summary.json must hold there
                  (handed to the store that reads runs back: roseprof.api.open_store)
    stores        {table name: part of the run folder}: which of its tables the run folder keeps, and where
                  (run/tables.py: STORED_PARTS, e.g. "steps.rows", "itl.series"); its other tables are for the
                  sections after it only
    diff_metrics  (runs_before, runs_after) -> [{"name", "a", "b", "lower_is_better" (default True)}]: a figure
                  per side from the runs' analysis.run_data.RunData (summary included), no sample behind it: a plain
                  change, never called significant alone
    diff_samples  {family: Sides -> [metric]}: metrics with samples behind them (per-step or per-token values,
                  resampled with the diff's one generator: analysis/diff_metric.py, Sides.metric). Families are
                  asked in sections.DIFF_ORDER (the built-in ones), then in SECTIONS' order. A long run's interval
                  is filled in after every family has asked (Sides.intervals: analysis/shared_draws.py), so a
                  family reads no interval of the metrics it makes
    diff_prepare  (summary, steps, itl_rows, trace) -> anything: this section's samples of one stored run (e.g. a
                  per-step column of its own, from the trace and the step windows), kept in RunData.sections[name];
                  or a run_data.Shared of RunData's typed fields, which the diff's machinery reads too (the
                  built-in sections' samples: analysis/samples.py). None where the section compares no samples.
                  An import stores what it makes where that is None, an array or a Shared of arrays, and a diff
                  reads that back (run/sample_tables.py): raise samples.SAMPLES_VERSION when what it makes changes
    diff_compare  (runs_before, runs_after, metrics, floor) -> (metrics, method) or None: a comparison of the
                  section's own that replaces diff's (ncu's launch by launch: sections/ncu_kernels.py), given the
                  metrics diff.compare made and the noise floor; None where it does not apply to these runs
    panels        summary -> [{"title", "columns", "rows", "note"}]: plain tables that show (terminal) and the run
                  dashboard present the same way; None where the renderers already have the section's own views
    """

    name: str
    compute: Callable[[Context], SectionResult]
    applies: Callable[[Trace], bool] = lambda trace: True
    absent: dict = field(default_factory=dict)
    checks: dict = field(default_factory=dict)
    stores: dict[str, str] = field(default_factory=dict)
    diff_metrics: Callable | None = None
    diff_samples: dict[str, Callable[[Sides], list[dict]]] = field(default_factory=dict)
    diff_prepare: Callable | None = None
    diff_compare: Callable | None = None
    panels: Callable[[dict], list[dict]] | None = None

    def diff_families(self) -> list[tuple[str, Callable[[Sides], list[dict]]]]:
        """What this section offers diff, as (family, Sides -> metrics): its sample families, then its plain
        figures as one family of the section's name. diff.compare asks every family through this one path and
        marks each metric against the noise floor."""
        families = list(self.diff_samples.items())
        if self.diff_metrics is not None:
            families.append((self.name, self._figures))
        return families

    def _figures(self, sides: Sides) -> list[dict]:
        return [
            figure(m["name"], m["a"], m["b"], m.get("lower_is_better", True))
            for m in self.diff_metrics(sides.before, sides.after)
        ]
