"""Prometheus metrics, named as vLLM's are (prefix `roseinfer:`, base units), rendered by prometheus-client.

Two halves, one per process. The engine core keeps `ServerMetrics`: plain bucket counts (a step's values appended to
lists, counted 256 steps at a time; a request's when it finishes, its inter-token gaps counted with a few numpy
calls), which costs the step loop little (scripts/bench_bookkeeping.py); a scrape asks the core for a `snapshot`
(plain numbers, between two steps). The server process renders that snapshot (`Collector`, prometheus-client's text
format). No per-request labels.

Exemplars: the request-level histograms (TTFT, ITL, E2E, queue, prefill, decode) keep, per bucket, the latest
request that fell in it (its id, the value, when), set when a request finishes (ITL: the request's largest gap in
each bucket its gaps fell in). A scraper that asks for OpenMetrics (`Accept: application/openmetrics-text`, as
Prometheus does with exemplar storage on) gets them on the buckets, so a slow bucket in Grafana leads to a request
id that `roseprof request` can open in a `roseprof live` run; the classic text format (the default) has none.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Iterable

import numpy as np
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, Exemplar, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.exposition import choose_encoder
from prometheus_client.openmetrics import exposition as openmetrics

PREFIX = "roseinfer:"

# Seconds: from 100 us, since this engine's inter-token latency on an H100 is 0.2-1 ms (vLLM's start at 10 ms).
SECONDS_BUCKETS = (
    1e-4, 2.5e-4, 5e-4, 7.5e-4, 1e-3, 2.5e-3, 5e-3, 7.5e-3, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75,
    1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
)  # fmt: skip
TOKENS_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)
STEP_BATCH = 256  # steps counted into the per-step histograms at once


class Histogram:
    """Bucket counts and a sum, bumped by the engine core's loop."""

    def __init__(self, name: str, doc: str, bounds: Iterable[float]) -> None:
        self.name, self.doc = PREFIX + name, doc
        self.bounds = list(bounds)
        self._bounds_np = np.asarray(self.bounds)
        self.counts = [0] * (len(self.bounds) + 1)  # the last one: above every bound (+Inf)
        self.sum = 0.0
        # per bucket, the latest request in it: (request id, value, Unix time) or None
        self.exemplars: list[tuple[str, float, float] | None] = [None] * len(self.counts)

    def observe(self, value: float, request_id: str | None = None, at: float | None = None) -> None:
        """`at`: the exemplar's Unix time (None: now)."""
        i = bisect.bisect_left(self.bounds, value)  # `le`: value <= bound
        self.counts[i] += 1
        self.sum += value
        if request_id is not None:
            self.exemplars[i] = (request_id, value, time.time() if at is None else at)

    def observe_many(
        self, values: np.ndarray, request_id: str | None = None, at: float | None = None
    ) -> None:
        """Every value of `values` (one request's gaps: a few hundred). Sorted once, the bounds looked up in it: a
        handful of numpy calls whatever the number of buckets hit (a mask per bucket cost 3 calls a bucket)."""
        n = values.size
        if n == 0:
            return
        self.sum += float(values.sum())  # summed unsorted: the same float as before the sort
        self._count(np.sort(values), request_id, at)

    def observe_each(self, values: list[float]) -> None:
        """`values` as one `observe` each would take them (no exemplars): the same counts and, added one by one in
        order, the same float sum; a few numpy calls for the lot instead of a bisect and three updates each."""
        if not values:
            return
        total = self.sum
        for value in values:
            total += value
        self.sum = total
        self._count(np.sort(np.asarray(values, dtype=np.float64)), None, None)

    def _count(self, ordered: np.ndarray, request_id: str | None, at: float | None) -> None:
        """Count sorted values into the buckets; with `request_id`, each bucket's largest value is its exemplar."""
        # ordered[:ends[i]] are <= bounds[i]: bucket i holds ordered[ends[i - 1]:ends[i]], the last bucket the rest
        ends = np.searchsorted(ordered, self._bounds_np, side="right").tolist()
        ends.append(ordered.size)
        counts, exemplars = self.counts, self.exemplars
        if request_id is not None and at is None:
            at = time.time()
        start = 0
        for i, end in enumerate(ends):
            if end > start:
                counts[i] += end - start
                if request_id is not None:  # the request's largest value in this bucket
                    exemplars[i] = (request_id, float(ordered[end - 1]), at)
                start = end

    def snapshot(self) -> tuple[list[float], list[int], float, list]:
        return self.bounds, list(self.counts), self.sum, list(self.exemplars)


def histogram_family(name: str, doc: str, model_name: str, snap) -> HistogramMetricFamily:
    bounds, counts, total_sum, exemplars = snap
    fam = HistogramMetricFamily(name, doc, labels=["model_name"])
    cumulative, total = [], 0
    for i, (bound, n) in enumerate(zip(bounds, counts)):
        total += n
        cumulative.append(_bucket(repr(float(bound)), total, exemplars[i]))
    cumulative.append(_bucket("+Inf", total + counts[-1], exemplars[-1]))
    fam.add_metric([model_name], cumulative, total_sum)
    return fam


def _bucket(bound: str, count: int, exemplar: tuple[str, float, float] | None) -> tuple:
    if exemplar is None:
        return (bound, count)
    request_id, value, at = exemplar
    return (bound, count, Exemplar({"request_id": request_id}, value, at))


class ServerMetrics:
    """What the engine core records (its loop alone touches it); `snapshot` is what a scrape renders."""

    def __init__(self) -> None:
        s, t = SECONDS_BUCKETS, TOKENS_BUCKETS
        self.ttft = Histogram(
            "time_to_first_token_seconds", "Time to first token: arrival to first token.", s
        )
        self.itl = Histogram(
            "inter_token_latency_seconds", "Inter-token latency: between two tokens of a request.", s
        )
        self.e2e = Histogram(
            "e2e_request_latency_seconds", "End-to-end request latency: arrival to last token.", s
        )
        self.queue = Histogram(
            "request_queue_time_seconds", "Arrival to the start of the step that prefilled it.", s
        )
        self.prefill = Histogram(
            "request_prefill_time_seconds", "Start of its prefill step to its first token.", s
        )
        self.decode = Histogram("request_decode_time_seconds", "First token to last token.", s)
        self.step = Histogram(
            "decode_step_seconds", "One engine step (admission, prefill, decode, emission).", s
        )
        self.iteration_tokens = Histogram(
            "iteration_tokens_total",
            "Tokens one engine step computed: its prefills' prompt tokens and the tokens it generated.",
            t,
        )
        self.histograms = [
            self.ttft, self.itl, self.e2e, self.queue, self.prefill, self.decode, self.step, self.iteration_tokens,
        ]  # fmt: skip
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.finished: dict[str, int] = {"stop": 0, "length": 0, "abort": 0}
        self.prefix_queries_tokens = 0
        # Steps not counted into `step` and `iteration_tokens` yet: their values, counted STEP_BATCH at a time (and
        # before a snapshot), so that a step costs two list appends rather than two observations.
        self._step_s: list[float] = []
        self._step_tokens: list[int] = []

    def step_done(
        self,
        step_s: float,
        emitted: int,
        prefilled: list[tuple[int, int]],
        block_size: int,
        prefix_cache: bool,
    ) -> None:
        """One engine step: its time, the tokens it emitted, and its prefills ((tokens computed, prompt tokens if
        admitted, 0 if readmitted after a preemption) each)."""
        self._step_s.append(step_s)
        self.generation_tokens += emitted
        computed_total = 0
        for computed, prompt in prefilled:
            self.prompt_tokens += prompt
            if prefix_cache:  # the full blocks looked up, as the hits counter counts them
                self.prefix_queries_tokens += computed // block_size * block_size
            computed_total += computed
        # As vLLM's: the tokens the iteration computed, its prefills' tokens and the tokens it generated.
        self._step_tokens.append(emitted + computed_total)
        if len(self._step_s) >= STEP_BATCH:
            self._count_steps()

    def _count_steps(self) -> None:
        steps, self._step_s = self._step_s, []
        tokens, self._step_tokens = self._step_tokens, []
        self.step.observe_each(steps)
        self.iteration_tokens.observe_each(tokens)

    def request_finished(self, seq, prefill_start_ns: int | None, at: float | None = None) -> None:
        """One request's latencies, when it has left the engine; `at`: the Unix time it finished (its exemplars' time;
        None: now)."""
        self.finished[seq.finish_reason] = self.finished.get(seq.finish_reason, 0) + 1
        token_ns = seq.token_ns
        if not token_ns:
            return
        rid = seq.request_id  # the exemplars' request id (the response id a client sees)
        if at is None:
            at = time.time()  # the exemplars' time: one clock read for the request's six histograms
        arrival, first, last = seq.arrival_ns, token_ns[0], token_ns[-1]
        self.ttft.observe((first - arrival) / 1e9, rid, at)
        self.e2e.observe((last - arrival) / 1e9, rid, at)
        self.decode.observe((last - first) / 1e9, rid, at)
        if prefill_start_ns is not None:
            self.queue.observe(max(0, prefill_start_ns - arrival) / 1e9, rid, at)
            self.prefill.observe(max(0, first - prefill_start_ns) / 1e9, rid, at)
        if len(token_ns) > 1:
            self.itl.observe_many(np.diff(np.asarray(token_ns, dtype=np.int64)) / 1e9, rid, at)

    def snapshot(self, engine) -> dict:
        """Plain numbers (they cross the pipe): the histograms, the counters, and the engine's gauges now."""
        self._count_steps()
        mgr, sched = engine.mgr, engine.scheduler
        return {
            "histograms": {h.name: (h.doc, h.snapshot()) for h in self.histograms},
            "running": len(sched.running),
            "waiting": len(sched.waiting),
            "kv_usage": 1.0 - mgr.num_free() / mgr.num_blocks,
            "prompt_tokens": self.prompt_tokens,
            "generation_tokens": self.generation_tokens,
            "finished": dict(self.finished),
            "prefix_queries_tokens": self.prefix_queries_tokens,
            "prefix_hits_tokens": engine.stats["prefix_hit_blocks"] * engine.cfg.block_size,
            "preemptions": engine.stats["preemptions"],
            "rollovers": engine.stats["rollovers"],
        }


class Collector:
    """Renders the engine core's latest snapshot (the server process sets `snapshot` before each render)."""

    def __init__(self, model_name: str) -> None:
        self.model_name = model_name
        self.snapshot: dict | None = None
        self.not_yet_admitted = 0  # requests the server has sent the core and the core has not taken in yet

    def collect(self):
        snap, model, labels = self.snapshot, self.model_name, [self.model_name]
        if snap is None:
            return  # the engine is still being built: nothing measured yet
        for name, (doc, hist) in snap["histograms"].items():
            yield histogram_family(name, doc, model, hist)

        def gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
            fam = GaugeMetricFamily(PREFIX + name, doc, labels=["model_name"])
            fam.add_metric(labels, value)
            return fam

        def counter(name: str, doc: str, value: float) -> CounterMetricFamily:
            fam = CounterMetricFamily(PREFIX + name, doc, labels=["model_name"])
            fam.add_metric(labels, value)
            return fam

        yield gauge("num_requests_running", "Requests in the engine's running batch.", snap["running"])
        yield gauge(
            "num_requests_waiting",
            "Requests waiting to be admitted.",
            snap["waiting"] + self.not_yet_admitted,
        )
        yield gauge("kv_cache_usage_perc", "Fraction of KV blocks in use (1 = all).", snap["kv_usage"])
        yield counter("prompt_tokens", "Prompt tokens of admitted requests.", snap["prompt_tokens"])
        yield counter("generation_tokens", "Tokens generated.", snap["generation_tokens"])
        fam = CounterMetricFamily(
            PREFIX + "request_success",
            "Requests finished, by reason.",
            labels=["model_name", "finished_reason"],
        )
        for reason, n in sorted(snap["finished"].items()):
            fam.add_metric([model, reason], n)
        yield fam
        yield counter(
            "prefix_cache_queries",
            "Tokens looked up in the prefix cache (the full blocks of each prefill, readmissions included).",
            snap["prefix_queries_tokens"],
        )
        yield counter("prefix_cache_hits", "Tokens found in the prefix cache.", snap["prefix_hits_tokens"])
        yield counter("num_preemptions", "Requests preempted to free KV blocks.", snap["preemptions"])
        yield counter(
            "kv_block_rollovers",
            "Decode-time KV block allocations (a sequence filling a block).",
            snap["rollovers"],
        )


def registry_for(collector: Collector) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return registry


def render(registry: CollectorRegistry) -> bytes:
    return generate_latest(registry)


def render_for(registry: CollectorRegistry, accept: str | None) -> tuple[bytes, str]:
    """(body, content type): OpenMetrics, with the exemplars, where the scraper's Accept header asks for it; the
    classic text format otherwise (prometheus-client's choice, as its own HTTP handler makes it).

    OpenMetrics is written with the names as they are: prometheus-client 0.26's default escaping ("underscores")
    keeps the `:` of `roseinfer:` in # HELP and # TYPE but turns it into `_` in the samples, which then belong to
    no family (its own parser refuses them). Every name here is a valid classic name (`:` is allowed), so no
    escaping is needed and "allow-utf-8" writes them unchanged, as any escaping a scraper may ask for would."""
    encode, content_type = choose_encoder(accept or "")
    if content_type.startswith("application/openmetrics-text"):
        return openmetrics.generate_latest(
            registry, escaping=openmetrics.ALLOWUTF8
        ), openmetrics.CONTENT_TYPE_LATEST
    return encode(registry), content_type
