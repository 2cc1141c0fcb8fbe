"""The client of scripts/bench_serve.py: a minimal asyncio HTTP/1.1 + SSE reader of its own (no httpx or aiohttp
needed), `streams` concurrent streamed completions in one client process or several, and what the client sees of
them (tok/s, the median TPOT, the p99 inter-token gap)."""

from __future__ import annotations

import asyncio
import json
import statistics
import time


async def stream_one(port: int, body: dict) -> dict:
    """One streamed completion; returns the arrival time of each event and its token count."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    payload = json.dumps(body).encode()
    writer.write(
        b"POST /v1/completions HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(payload), payload)
    )
    await writer.drain()
    sent = time.perf_counter()
    status = await reader.readline()
    if b" 200 " not in status:
        rest = await reader.read()
        raise RuntimeError(f"server answered {status.decode().strip()}: {rest[-300:]!r}")
    chunked = False
    while (line := await reader.readline()) not in (b"\r\n", b""):
        if line.lower().startswith(b"transfer-encoding:") and b"chunked" in line.lower():
            chunked = True
    times, counts, buffer = [], [], b""
    while True:
        if chunked:
            size = int((await reader.readline()).strip() or b"0", 16)
            if size == 0:
                break
            data = await reader.readexactly(size + 2)
            buffer += data[:-2]
        else:
            data = await reader.read(65536)
            if not data:
                break
            buffer += data
        now = time.perf_counter()
        while b"\n\n" in buffer:
            event, buffer = buffer.split(b"\n\n", 1)
            if not event.startswith(b"data: {"):
                continue
            chunk = json.loads(event[6:])
            n = sum(len(c["token_ids"]) for c in chunk.get("choices", []))
            if n:
                times.append(now)
                counts.append(n)
    writer.close()
    return {"sent": sent, "times": times, "counts": counts}


async def load(port: int, streams: int, tokens: int, waves: int = 1) -> dict:
    """`streams` concurrent streams, each sending `waves` requests one after the other (a longer load at the same
    concurrency: the on/off pairs need seconds, not the 0.35 s of one wave at 64 x 512 on an H200)."""
    body = {"prompt": "x", "max_tokens": tokens, "temperature": 0, "ignore_eos": True, "stream": True}

    async def one_stream() -> list[dict]:
        return [await stream_one(port, body) for _ in range(waves)]

    start = time.perf_counter()
    results = [r for rs in await asyncio.gather(*(one_stream() for _ in range(streams))) for r in rs]
    wall = time.perf_counter() - start
    return summarised(results, wall)


def _load_part(
    port: int, streams: int, tokens: int, waves: int, at: float
) -> tuple[list[dict], float, float]:
    """One client process's share of a load, started at the wall-clock time `at` (all parts together)."""
    time.sleep(max(0.0, at - time.time()))
    start = time.perf_counter()
    results = asyncio.run(_streams(port, streams, tokens, waves))
    return results, start, time.perf_counter()


async def _streams(port: int, streams: int, tokens: int, waves: int) -> list[dict]:
    body = {"prompt": "x", "max_tokens": tokens, "temperature": 0, "ignore_eos": True, "stream": True}

    async def one_stream() -> list[dict]:
        return [await stream_one(port, body) for _ in range(waves)]

    return [r for rs in await asyncio.gather(*(one_stream() for _ in range(streams))) for r in rs]


def load_in_processes(port: int, streams: int, tokens: int, waves: int, procs: int) -> dict:
    """The load split over `procs` client processes (one Python event loop reads ~90k SSE events/s at most: at 64
    streams on an H200 one client process is the bottleneck, and its jitter is the measurement's noise)."""
    if procs <= 1:
        return asyncio.run(load(port, streams, tokens, waves))
    import concurrent.futures
    import multiprocessing

    shares = [streams // procs + (i < streams % procs) for i in range(procs)]
    at = time.time() + 0.5  # perf_counter is one clock for every process on Linux (CLOCK_MONOTONIC)
    ctx = multiprocessing.get_context("fork")
    with concurrent.futures.ProcessPoolExecutor(procs, mp_context=ctx) as pool:
        parts = list(
            pool.map(_load_part, [port] * procs, shares, [tokens] * procs, [waves] * procs, [at] * procs)
        )
    results = [r for rs, _, _ in parts for r in rs]
    return summarised(results, max(end for _, _, end in parts) - min(start for _, start, _ in parts))


def summarised(results: list[dict], wall: float) -> dict:
    generated = sum(sum(r["counts"]) for r in results)
    # Inter-token gaps as the client sees them: a chunk of k tokens is one gap then k-1 zero gaps.
    gaps = []
    for r in results:
        for prev, cur, n in zip(r["times"], r["times"][1:], r["counts"][1:]):
            gaps += [cur - prev] + [0.0] * (n - 1)
    tpots = [
        (r["times"][-1] - r["times"][0]) / (sum(r["counts"]) - r["counts"][0])
        for r in results
        if len(r["times"]) > 1
    ]
    return {
        "wall_s": wall,
        "generated": generated,
        "tok_s": generated / wall,
        "tpot_ms": 1e3 * statistics.median(tpots) if tpots else float("nan"),
        "itl_p99_ms": 1e3 * percentile(gaps, 99) if gaps else float("nan"),
    }


def percentile(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q / 100 * (len(values) - 1))))]
