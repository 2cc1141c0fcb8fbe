"""`roseprof load` against an independent client on the same server, in one call: do their TTFT and ITL
percentiles agree (within 5% or 0.1 ms)?

    python scripts/load_agreement.py URL [--concurrency 8] [--requests 64] [--output-len 64] [--prompt-len 32]

The independent client shares no code with roseprof's: stdlib `http.client` in threads (one connection per
request, `Connection: close`, as roseprof's), reading the SSE stream line by line, each token stamped with
time.perf_counter when its line arrives. Both run closed loop at the same concurrency with the same request
(the same prompt ids, max_tokens, ignore_eos), one after the other. Prints a table and exits 1 when a figure
disagrees. (httpx and aiohttp are not in the project's environment; http.client is as plain as either.)"""

from __future__ import annotations

import argparse
import http.client
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np

REPO = Path(__file__).resolve().parent.parent


def one(host: str, port: int, body: bytes) -> tuple[float, list[float]]:
    conn = http.client.HTTPConnection(host, port, timeout=120)
    conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json", "Connection": "close"})
    sent = time.perf_counter()
    resp = conn.getresponse()
    assert resp.status == 200, resp.read()[:300]
    times: list[float] = []
    while True:
        line = resp.readline()
        if not line:
            break
        now = time.perf_counter()
        if not line.startswith(b"data: "):
            continue
        if line.strip() == b"data: [DONE]":
            break
        chunk = json.loads(line[6:])
        for c in chunk.get("choices", []):
            times += [now] * len(c.get("token_ids") or [None])
    conn.close()
    return sent, times


def independent(
    url: str, model: str | None, concurrency: int, requests: int, prompt: list[int], out_len: int
):
    parts = urlsplit(url)
    body = {"prompt": prompt, "max_tokens": out_len, "stream": True, "ignore_eos": True, "temperature": 0}
    if model:
        body["model"] = model
    raw = json.dumps(body).encode()
    results, lock, left = [], threading.Lock(), [requests]

    def worker() -> None:
        while True:
            with lock:
                if left[0] == 0:
                    return
                left[0] -= 1
            r = one(parts.hostname, parts.port, raw)
            with lock:
                results.append(r)

    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ttft = [1e3 * (ts[0] - s) for s, ts in results if ts]
    itl = [1e3 * g for _, ts in results for g in np.diff(ts)]
    return np.asarray(ttft), np.asarray(itl)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("url")
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--requests", type=int, default=64)
    p.add_argument("--output-len", type=int, default=64)
    p.add_argument("--prompt-len", type=int, default=32)
    p.add_argument("--json", help="write the figures here")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.run(
            [sys.executable, "-m", "roseprof", "load", args.url, "--requests", str(args.requests), "--concurrency",
             str(args.concurrency), "--output-len", str(args.output_len), "--prompt-len", str(args.prompt_len),
             "--traces-dir", tmp, "--no-metrics", "--name", "agreement"],
            capture_output=True, text=True, cwd=REPO,
        )  # fmt: skip
        if proc.returncode != 0:
            sys.exit(f"roseprof load failed: {proc.stderr.strip()[-500:]}")
        run = next(p for p in Path(tmp).iterdir() if p.is_dir() and not p.name.startswith("."))
        serving = json.loads((run / "summary.json").read_text())["serving"]
        prompt = None  # the same prompt ids as roseprof's first request (its plan: the seed's)
        sys.path.insert(0, str(REPO))
        from roseprof.load.schedule import Length, Plan

        prompt = next(Plan(seed=0, requests=1, concurrency=1, prompt_len=Length(args.prompt_len, args.prompt_len),
                           output_len=Length(args.output_len, args.output_len)).schedule()).prompt  # fmt: skip
    ttft, itl = independent(
        args.url, serving.get("model"), args.concurrency, args.requests, prompt, args.output_len
    )
    rows, ok = [], True
    for label, ours, theirs in (
        ("TTFT p50", serving["ttft"]["p50_ms"], np.percentile(ttft, 50)),
        ("TTFT p99", serving["ttft"]["p99_ms"], np.percentile(ttft, 99)),
        ("ITL p50", serving["itl"]["p50_ms"], np.percentile(itl, 50)),
        ("ITL p99", serving["itl"]["p99_ms"], np.percentile(itl, 99)),
    ):
        diff = ours - theirs
        agree = abs(diff) <= 0.1 or abs(diff) <= 0.05 * abs(theirs)
        ok &= agree
        rows.append((label, ours, float(theirs), diff, agree))
    print(f"{'figure':10} {'roseprof ms':>12} {'independent ms':>15} {'diff ms':>9}  agree (5% or 0.1 ms)")
    for label, ours, theirs, diff, agree in rows:
        print(f"{label:10} {ours:12.3f} {theirs:15.3f} {diff:+9.3f}  {'yes' if agree else 'NO'}")
    if args.json:
        Path(args.json).write_text(json.dumps([dict(zip(("figure", "roseprof_ms", "independent_ms", "diff_ms",
                                                         "agree"), r)) for r in rows], indent=1))  # fmt: skip
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
