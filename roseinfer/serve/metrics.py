"""Prometheus metrics, named as vLLM's are (prefix `roseinfer:`, base units), rendered by prometheus-client.

The engine thread pays almost nothing for them: histograms are plain bucket counts it bumps (per step, and per
request when it finishes, a request's inter-token gaps counted with one numpy call), counters and gauges are read
from the engine and the bridge only when /metrics is scraped (`Collector.collect`). No per-request labels.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable

import numpy as np
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

PREFIX = "roseinfer:"

# Seconds: from 100 us, since this engine's inter-token latency on an H100 is 0.2-1 ms (vLLM's start at 10 ms).
SECONDS_BUCKETS = (
    1e-4, 2.5e-4, 5e-4, 7.5e-4, 1e-3, 2.5e-3, 5e-3, 7.5e-3, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75,
    1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
)  # fmt: skip
TOKENS_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)


class Histogram:
    """Bucket counts and a sum, bumped by one thread (the engine's), read by the scrape."""

    def __init__(self, name: str, doc: str, bounds: Iterable[float]) -> None:
        self.name, self.doc = PREFIX + name, doc
        self.bounds = list(bounds)
        self._bounds_np = np.asarray(self.bounds)
        self.counts = [0] * (len(self.bounds) + 1)  # the last one: above every bound (+Inf)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1  # `le`: value <= bound
        self.sum += value

    def observe_many(self, values: np.ndarray) -> None:
        if values.size == 0:
            return
        per_bucket = np.bincount(
            np.searchsorted(self._bounds_np, values, side="left"), minlength=len(self.counts)
        )
        for i in np.flatnonzero(per_bucket):
            self.counts[i] += int(per_bucket[i])
        self.sum += float(values.sum())

    def family(self, model_name: str) -> HistogramMetricFamily:
        fam = HistogramMetricFamily(self.name, self.doc, labels=["model_name"])
        counts = list(self.counts)  # one read, so the buckets and the count agree
        cumulative, total = [], 0
        for bound, n in zip(self.bounds, counts):
            total += n
            cumulative.append((repr(float(bound)), total))
        cumulative.append(("+Inf", total + counts[-1]))
        fam.add_metric([model_name], cumulative, self.sum)
        return fam


class ServerMetrics:
    """What the bridge records; `render` is /metrics."""

    def __init__(self, model_name: str) -> None:
        self.model_name = model_name
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

    def request_finished(self, seq, prefill_start_ns: int | None) -> None:
        """One request's latencies (engine thread, when it leaves the engine)."""
        self.finished[seq.finish_reason] = self.finished.get(seq.finish_reason, 0) + 1
        token_ns = seq.token_ns
        if not token_ns:
            return
        self.ttft.observe((token_ns[0] - seq.arrival_ns) / 1e9)
        self.e2e.observe((token_ns[-1] - seq.arrival_ns) / 1e9)
        self.decode.observe((token_ns[-1] - token_ns[0]) / 1e9)
        if prefill_start_ns is not None:
            self.queue.observe(max(0, prefill_start_ns - seq.arrival_ns) / 1e9)
            self.prefill.observe(max(0, token_ns[0] - prefill_start_ns) / 1e9)
        if len(token_ns) > 1:
            self.itl.observe_many(np.diff(np.asarray(token_ns, dtype=np.int64)) / 1e9)


class Collector:
    """Reads the gauges and counters at scrape time (the engine keeps its own counts: `Engine.stats`)."""

    def __init__(self, metrics: ServerMetrics, bridge) -> None:
        self.metrics = metrics
        self.bridge = bridge

    def collect(self):
        m, labels = self.metrics, [self.metrics.model_name]
        for h in m.histograms:
            yield h.family(m.model_name)

        def gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
            fam = GaugeMetricFamily(PREFIX + name, doc, labels=["model_name"])
            fam.add_metric(labels, value)
            return fam

        def counter(name: str, doc: str, value: float) -> CounterMetricFamily:
            fam = CounterMetricFamily(PREFIX + name, doc, labels=["model_name"])
            fam.add_metric(labels, value)
            return fam

        engine = self.bridge.engine
        running = waiting = 0
        usage = 0.0
        stats: dict[str, int] = {}
        block_size = 0
        if engine is not None:
            running, waiting = len(engine.scheduler.running), len(engine.scheduler.waiting)
            mgr = engine.mgr
            usage = 1.0 - mgr.num_free() / mgr.num_blocks
            stats, block_size = engine.stats, engine.cfg.block_size
        waiting += self.bridge.num_submitted_not_added()
        yield gauge("num_requests_running", "Requests in the engine's running batch.", running)
        yield gauge("num_requests_waiting", "Requests waiting to be admitted.", waiting)
        yield gauge("kv_cache_usage_perc", "Fraction of KV blocks in use (1 = all).", usage)
        yield counter("prompt_tokens", "Prompt tokens of admitted requests.", m.prompt_tokens)
        yield counter("generation_tokens", "Tokens generated.", m.generation_tokens)
        fam = CounterMetricFamily(
            PREFIX + "request_success",
            "Requests finished, by reason.",
            labels=["model_name", "finished_reason"],
        )
        for reason, n in sorted(m.finished.items()):
            fam.add_metric([m.model_name, reason], n)
        yield fam
        yield counter(
            "prefix_cache_queries",
            "Prompt tokens looked up in the prefix cache (full blocks).",
            m.prefix_queries_tokens,
        )
        yield counter(
            "prefix_cache_hits",
            "Prompt tokens found in the prefix cache.",
            stats.get("prefix_hit_blocks", 0) * block_size,
        )
        yield counter("num_preemptions", "Requests preempted to free KV blocks.", stats.get("preemptions", 0))
        yield counter(
            "kv_block_rollovers",
            "Decode-time KV block allocations (a sequence filling a block).",
            stats.get("rollovers", 0),
        )


def registry_for(metrics: ServerMetrics, bridge) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(Collector(metrics, bridge))
    return registry


def render(registry: CollectorRegistry) -> bytes:
    return generate_latest(registry)
