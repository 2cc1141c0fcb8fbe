"""`roseprof load` against an independent client on the same server, in one call: do their TTFT and ITL
percentiles agree (within 5% or 0.1 ms)?

    python scripts/load_agreement.py URL [--concurrency 8] [--requests 64] [--output-len 64] [--prompt-len 32]
                                         [--rounds R] [--split | --together] [--json FILE]

The independent client shares no code with roseprof's: plain asyncio streams on one event loop (as roseprof's
client, so that neither pays a thread switch or the GIL per token that the other does not), written apart from
roseprof/load/client.py: one connection per request (`Connection: close`, as roseprof's), HTTP/1.1 chunked or
Content-Length bodies, each SSE `data:` line stamped with time.perf_counter when the read that completed it
returned. Both run closed loop at the same concurrency with the same requests (roseprof's seeded prompt ids,
max_tokens, ignore_eos), one after the other (--rounds R: alternately, R times each, each client's requests
pooled). Prints a table and exits 1 when a figure disagrees.
`--together`: both clients at once in each round, each at the full concurrency (the server sees twice the streams):
one after the other, each client meets a different moment of the server (closed-loop TTFT depends on where arrivals
fall against the running steps, which moves load to load more than 5%); at once, both meet the same batches and
steps, and a difference left is a client's. The independent client counts the requests it sent within roseprof's
span of sends.

`--split` (a `roseinfer serve` on this host, with its flight recorder): roseprof's side runs as `roseprof live`
and the independent client's requests are matched to the server's step log after each of its rounds, so each
client's TTFT is split on the one clock into HTTP in (sent -> the server took the request), engine (-> first token
emitted) and delivery (-> the client read it), and every token's delivery is measured (roseprof/live/path.py: the
analysis of the server's records is shared, the clients are not). (httpx and aiohttp are not in the project's
environment; asyncio streams are as plain as either.)"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np

REPO = Path(__file__).resolve().parent.parent


async def _body_lines(reader: asyncio.StreamReader, headers: dict):
    """The response body's lines, each with the time the read that completed it returned."""
    if headers.get("transfer-encoding", "").lower() == "chunked":
        pending = b""
        while True:
            size = int((await reader.readline()).split(b";")[0].strip() or b"0", 16)
            if size == 0:
                break
            data = (await reader.readexactly(size + 2))[:-2]  # the chunk and its CRLF
            now = time.perf_counter()
            pending += data
            *lines, pending = pending.split(b"\n")
            for line in lines:
                yield line, now
        if pending:
            yield pending, time.perf_counter()
    else:
        while line := await reader.readline():
            yield line.rstrip(b"\n"), time.perf_counter()


async def one(host: str, port: int, body: bytes) -> tuple[float, list[float], dict]:
    reader, writer = await asyncio.open_connection(host, port)
    head = (
        f"POST /v1/completions HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode()
    writer.write(head + body)
    sent = time.perf_counter()
    await writer.drain()
    status = (await reader.readline()).split()
    assert status[1] == b"200", status
    headers = {}
    while (line := await reader.readline()) not in (b"\r\n", b"\n", b""):
        key, _, value = line.decode("latin-1").partition(":")
        headers[key.strip().lower()] = value.strip()
    times: list[float] = []
    meta: dict = {"steps": []}  # the response id and each token's decode step (for --split)
    async for line, now in _body_lines(reader, headers):
        line = line.rstrip(b"\r")
        if not line.startswith(b"data: "):
            continue
        if line == b"data: [DONE]":
            break
        chunk = json.loads(line[6:])
        meta.setdefault("id", chunk.get("id"))
        for c in chunk.get("choices", []):
            ids = c.get("token_ids") or [None]
            times += [now] * len(ids)
            meta["steps"] += (c.get("token_steps") or [None] * len(ids))[: len(ids)]
    writer.close()
    return sent, times, meta


async def _closed_loop(host: str, port: int, bodies: list[bytes], concurrency: int) -> list:
    queue = list(reversed(bodies))
    results = []

    async def worker() -> None:
        while queue:
            results.append(await one(host, port, queue.pop()))

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return results


def independent(
    url: str, model: str | None, concurrency: int, prompts: list, out_len: int, split: list | None
):
    parts = urlsplit(url)
    bodies = _bodies(model, prompts, out_len)
    start, start_ns = time.perf_counter(), time.monotonic_ns()
    results = asyncio.run(_closed_loop(parts.hostname, parts.port, bodies, concurrency))
    ttft = [1e3 * (ts[0] - s) for s, ts, _ in results if ts]
    itl = [1e3 * g for _, ts, _ in results for g in np.diff(ts)]
    if split is not None:
        rows = [{"request_id": m.get("id"), "sent_ms": 1e3 * (s - start), "t_ms": [1e3 * (t - start) for t in ts],
                 "steps": m["steps"]} for s, ts, m in results if ts]  # fmt: skip
        split.append(_path_of(url, rows, start_ns, len(results) * (out_len + 2)))
    return np.asarray(ttft), np.asarray(itl)


def _path_of(url: str, rows: list[dict], start_ns: int, steps: int) -> dict | None:
    """The HTTP path split of one round of the independent client: its tokens against the server's last steps."""
    import urllib.request

    from roseprof.live.path import http_path
    from roseprof.workload.steplog import read_steplog

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "steps.jsonl"
        with urllib.request.urlopen(f"{url.rstrip('/')}/debug/steps?last={steps}", timeout=60) as resp:
            path.write_bytes(resp.read())
        log = read_steplog(str(path))
    return http_path(log, rows, start_ns, url) if log is not None and log.steps else None


def together(args, tmp: str, k: int, model: str | None, prompts: list) -> tuple[tuple, tuple]:
    """Both clients at once, each at the full concurrency with the same requests: one `roseprof load` (a
    subprocess, as a user runs it) while the independent client loops on this process's event loop. They see the
    same server: the same batches, the same steps. The independent client counts only the requests it sent while
    roseprof was sending (both clocks are CLOCK_MONOTONIC), so neither's figures include a server the other did not
    load. Returns (roseprof's TTFT, ITL), (the independent client's TTFT, ITL)."""
    bodies = _bodies(model, prompts, args.output_len)
    proc = subprocess.Popen(_roseprof_cmd(args, tmp, k, ["load", args.url]), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, cwd=REPO)  # fmt: skip
    parts = urlsplit(args.url)

    async def loop() -> list:
        results, i = [], 0

        async def worker() -> None:
            nonlocal i
            while proc.poll() is None:
                body, i = bodies[i % len(bodies)], i + 1
                results.append(await one(parts.hostname, parts.port, body))

        await asyncio.gather(*(worker() for _ in range(args.concurrency)))
        return results

    results = asyncio.run(loop())
    if proc.wait() != 0:
        sys.exit(f"roseprof load failed: {proc.stderr.read().strip()[-500:]}")
    ttft, itl, summary = _read_run(tmp, k)
    serving = summary["serving"]
    t0 = serving["clock"]["start_monotonic_ns"] / 1e9
    sent = [t for t in serving["requests"]["sent_ms"] if t is not None]
    lo, hi = t0 + min(sent) / 1e3, t0 + max(sent) / 1e3
    mine = [(s, ts) for s, ts, _ in results if ts and lo <= s <= hi]
    theirs = (np.asarray([1e3 * (ts[0] - s) for s, ts in mine]),
              np.asarray([1e3 * g for _, ts in mine for g in np.diff(ts)]))  # fmt: skip
    print(f"round {k} together: roseprof {len(ttft)} requests, independent {len(mine)} sent in its span "
          f"({len(results) - len(mine)} outside it)")  # fmt: skip
    return (ttft, itl), theirs


def _bodies(model: str | None, prompts: list, out_len: int) -> list[bytes]:
    bodies = []
    for prompt in prompts:
        body = {"prompt": prompt, "max_tokens": out_len, "stream": True, "ignore_eos": True, "temperature": 0}
        if model:
            body["model"] = model
        bodies.append(json.dumps(body).encode())
    return bodies


def _roseprof_cmd(args, tmp: str, k: int, how: list[str]) -> list[str]:
    return [sys.executable, "-m", "roseprof", *how, "--requests", str(args.requests), "--concurrency",
            str(args.concurrency), "--output-len", str(args.output_len), "--prompt-len", str(args.prompt_len),
            "--traces-dir", tmp, "--no-metrics", "--name", f"agreement-{k}"]  # fmt: skip


def _read_run(tmp: str, k: int) -> tuple[np.ndarray, np.ndarray, dict]:
    """Round k's stored run: its TTFT per request, every ITL gap, and its summary."""
    run = max(
        (p for p in Path(tmp).iterdir() if p.is_dir() and f"agreement-{k}-" in p.name), key=lambda p: p.name
    )
    summary = json.loads((run / "summary.json").read_text())
    ttft = [t for t in summary["serving"]["requests"]["ttft_ms"] if t is not None]
    tokens = json.loads((run / "load_tokens.json").read_text())
    itl = [g for row in tokens for g in np.diff(row["t_ms"])]
    return np.asarray(ttft), np.asarray(itl), summary


def roseprof_load(args, tmp: str, k: int, split: list | None) -> tuple[np.ndarray, np.ndarray, str | None]:
    """One `roseprof load` (`live` with --split) as a user runs it: its TTFT per request and every ITL gap, read
    from the stored run."""
    how = ["live", args.url, "--steps", str(args.requests * (args.output_len + 2))] if split is not None else [
        "load", args.url]  # fmt: skip
    proc = subprocess.run(_roseprof_cmd(args, tmp, k, how), capture_output=True, text=True, cwd=REPO)
    if proc.returncode != 0:
        sys.exit(f"roseprof load failed: {proc.stderr.strip()[-500:]}")
    ttft, itl, summary = _read_run(tmp, k)
    if split is not None:
        split.append(summary.get("live", {}).get("path"))
    return ttft, itl, summary["serving"].get("model")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("url")
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--requests", type=int, default=64)
    p.add_argument("--output-len", type=int, default=64)
    p.add_argument("--prompt-len", type=int, default=32)
    p.add_argument("--rounds", type=int, default=1,
                   help="alternate the two clients this many times and pool each one's requests (spreads the "
                        "machine's drift over both)")  # fmt: skip
    p.add_argument(
        "--split",
        action="store_true",
        help="split each client's TTFT into HTTP in, engine and delivery (a roseinfer serve on this host)",
    )
    p.add_argument(
        "--independent-first",
        action="store_true",
        help="in each round the independent client goes first (a figure that follows the order, not the client, "
        "is the server's)",
    )
    p.add_argument(
        "--together",
        action="store_true",
        help="run both clients at once in each round (the same server state for both; not with --split)",
    )
    p.add_argument("--json", help="write the figures here")
    args = p.parse_args()
    if args.together and args.split:
        p.error("--together and --split are two different measurements: one at a time")
    sys.path.insert(0, str(REPO))
    from roseprof.load.schedule import Length, Plan

    plan = Plan(seed=0, requests=args.requests, concurrency=args.concurrency,
                prompt_len=Length(args.prompt_len, args.prompt_len),
                output_len=Length(args.output_len, args.output_len))  # fmt: skip
    prompts = [p.prompt for p in plan.schedule()]  # the same prompt ids as roseprof's requests
    ours, theirs = {"ttft": [], "itl": []}, {"ttft": [], "itl": []}
    splits = ([], []) if args.split else (None, None)  # per round: roseprof's, the independent client's
    with tempfile.TemporaryDirectory() as tmp:
        model = _model(args.url)
        for k in range(args.rounds):
            if args.together:
                (a, b), (c, d) = together(args, tmp, k, model, prompts)
                (
                    ours["ttft"].append(a),
                    ours["itl"].append(b),
                    theirs["ttft"].append(c),
                    theirs["itl"].append(d),
                )
                continue
            for side in (
                ("independent", "roseprof") if args.independent_first else ("roseprof", "independent")
            ):
                if side == "roseprof":
                    ttft, itl, _ = roseprof_load(args, tmp, k, splits[0])
                    ours["ttft"].append(ttft)
                    ours["itl"].append(itl)
                else:
                    ttft, itl = independent(
                        args.url, model, args.concurrency, prompts, args.output_len, splits[1]
                    )
                    theirs["ttft"].append(ttft)
                    theirs["itl"].append(itl)
                if args.split:
                    got = splits[side == "independent"][-1] or {}
                    print(f"round {k} {side:11}: TTFT p50 {np.percentile(ttft, 50):8.3f} p99 "
                          f"{np.percentile(ttft, 99):8.3f}; p99 of HTTP in {_p99(got, 'http_in_ms')}, engine "
                          f"{_p99(got, 'engine_ttft_ms')}, delivery {_p99(got, 'delivery_ms')} ms")  # fmt: skip
    rows, ok = [], True
    for label, key, q in (("TTFT p50", "ttft", 50), ("TTFT p99", "ttft", 99), ("ITL p50", "itl", 50),
                          ("ITL p99", "itl", 99)):  # fmt: skip
        a = float(np.percentile(np.concatenate(ours[key]), q))
        b = float(np.percentile(np.concatenate(theirs[key]), q))
        diff = a - b
        agree = abs(diff) <= 0.1 or abs(diff) <= 0.05 * abs(b)
        ok &= agree
        # each client's own spread between its rounds: how far the machine moves one client's figure
        spread = [float(np.ptp([np.percentile(v, q) for v in side[key]])) for side in (ours, theirs)]
        rows.append((label, a, b, diff, agree, *spread))
    print(f"{'figure':10} {'roseprof ms':>12} {'independent ms':>15} {'diff ms':>9}  agree (5% or 0.1 ms)"
          + ("  round-to-round range: roseprof / independent ms" if args.rounds > 1 else ""))  # fmt: skip
    for label, a, b, diff, agree, sa, sb in rows:
        extra = f"  {sa:.3f} / {sb:.3f}" if args.rounds > 1 else ""
        print(f"{label:10} {a:12.3f} {b:15.3f} {diff:+9.3f}  {'yes' if agree else 'NO ':<20}{extra}")
    if args.split:
        _print_split(splits)
    if args.json:
        keys = ("figure", "roseprof_ms", "independent_ms", "diff_ms", "agree", "roseprof_range_ms",
                "independent_range_ms")  # fmt: skip
        Path(args.json).write_text(json.dumps([dict(zip(keys, r)) for r in rows], indent=1))
    sys.exit(0 if ok else 1)


def _model(url: str) -> str | None:
    """The server's first model (/v1/models), as roseprof load takes it."""
    import urllib.request

    with urllib.request.urlopen(f"{url.rstrip('/')}/v1/models", timeout=30) as resp:
        data = json.loads(resp.read())["data"]
    return str(data[0]["id"]) if data else None


def _p99(path: dict, part: str) -> str:
    v = (path.get(part) or {}).get("p99")
    return "-" if v is None else f"{v:.3f}"


def _print_split(splits: tuple[list, list]) -> None:
    """Per client, the median over rounds of each part's p50 (and the deliveries' p99), ms."""
    parts = ("http_in_ms", "engine_ttft_ms", "queue_ms", "prefill_ms", "step_wait_ms", "first_delivery_ms",
             "delivery_ms", "gap_diff_ms")  # fmt: skip
    print(
        "\nTTFT and token path on one clock (median of the rounds' p50; p99 in brackets), ms; engine = queue +"
    )
    print("prefill; step_wait: of the requests that arrived while a step ran (busy), the wait for its end")
    print(f"{'client':12}" + "".join(f"{p[:-3]:>20}" for p in parts) + f"{'busy':>20}")
    for label, rounds in zip(("roseprof", "independent"), splits):
        got = [r for r in rounds if r]
        if not got:
            print(f"{label:12} (no split: no joined request)")
            continue
        cells = []
        for p in parts:
            p50 = [r[p]["p50"] for r in got if r[p]["p50"] is not None]
            p99 = [r[p]["p99"] for r in got if r[p]["p99"] is not None]
            cells.append(f"{np.median(p50):.3f} [{np.median(p99):.3f}]" if p50 else "-")
        busy = [r["busy_at_arrival"] for r in got if r.get("busy_at_arrival") is not None]
        cells.append(f"{np.median(busy):.0%}" if busy else "-")
        print(f"{label:12}" + "".join(f"{c:>20}" for c in cells))


if __name__ == "__main__":
    main()
