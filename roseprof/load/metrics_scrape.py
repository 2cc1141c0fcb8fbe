"""A server's Prometheus /metrics, scraped before, during (every second) and after a load: the text format read
into {series: value} (a series is the metric's name with its labels, as the text spells it), and the server's own
TTFT over the load from its histogram's sum and count (what the server saw, against what the client saw)."""

from __future__ import annotations

import math

from roseprof.workload.roseinfer import SERVER_TTFT_HISTOGRAMS


def parse(text: str) -> dict[str, float]:
    """Prometheus text exposition -> {series: value}; comments, `_created` series and unreadable lines left out."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        series, _, rest = line.rpartition("}") if "}" in line else line.partition(" ")
        if "}" in line:
            series += "}"
        value = rest.split()[0] if rest.split() else ""
        name = series.split("{", 1)[0]
        if name.endswith("_created"):
            continue
        try:
            v = float(value)
        except ValueError:
            continue
        if math.isfinite(v):
            out[series.strip()] = v
    return out


def _family_total(samples: dict[str, float], name: str) -> float | None:
    """A metric's value summed over its label sets (None where the server has no such series)."""
    found = [v for k, v in samples.items() if k == name or k.startswith(name + "{")]
    return sum(found) if found else None


def server_ttft(series: list[dict]) -> dict | None:
    """The server's mean TTFT over the load (ms) and the requests it counted, from the first and last scrape of a
    TTFT histogram it exposes (ours or vLLM's): None where it has none."""
    if len(series) < 2:
        return None
    first, last = series[0]["samples"], series[-1]["samples"]
    for hist in SERVER_TTFT_HISTOGRAMS:
        s0, s1 = _family_total(first, hist + "_sum"), _family_total(last, hist + "_sum")
        c0, c1 = _family_total(first, hist + "_count"), _family_total(last, hist + "_count")
        if None in (s0, s1, c0, c1) or c1 - c0 <= 0:
            continue
        return {"histogram": hist, "requests": int(c1 - c0), "mean_ms": 1e3 * (s1 - s0) / (c1 - c0)}
    return None
