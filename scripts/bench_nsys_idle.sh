#!/usr/bin/env bash
# What a server under `roseprof nsys --capture-range nvtx --capture-range-end repeat` pays outside capture windows:
# two servers of one configuration side by side, a plain one and one under nsys (no window ever opened), and the
# same closed-loop load on each in turn, PAIRS times (interleaved, so the machine's drift falls on both); then
# `roseprof diff` of the two groups (a hierarchical interval over the loads) and each server's decode step time by
# batch size from its flight recorder (steps.txt: the engine's own cost, without the client's). NSYS_TRACE: nsys'
# --trace (default roseprof's). Results under $OUT (default /tmp/bench-nsys-idle): the runs in $OUT/traces, the
# diff in $OUT/diff.txt. SECOND=plain: both servers plain (the A/A pair that says what a difference here is worth).
#   bash scripts/bench_nsys_idle.sh                  # CPU, gpt2-tiny (docs/BENCHMARKS.md)
#   SERVE="gpt2 --device cuda --dtype float16 --paged-attn --cuda-graph" LOAD="--concurrency 64 --requests 512" \
#     bash scripts/bench_nsys_idle.sh                # on the GPU machine (nsys on PATH)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/bench-nsys-idle}
PY=${PYTHON:-python3}
read -ra SERVE <<< "${SERVE:-gpt2-tiny --max-batch-size 8}"
read -ra LOAD <<< "${LOAD:---concurrency 8 --requests 48 --output-len 64 --prompt-len 32}"
PAIRS=${PAIRS:-4}
mkdir -p "$OUT"
export COLUMNS=80 PYTHONUNBUFFERED=1 SECOND=${SECOND:-}

$PY -m roseinfer.serve "${SERVE[@]}" --port 18301 --enable-profiling >"$OUT/plain.log" 2>&1 &
PLAIN=$!
UNDER=($PY -m roseprof nsys --capture-range nvtx --capture-range-end repeat ${NSYS_TRACE:+--trace "$NSYS_TRACE"}
  --traces-dir "$OUT/nsys" --dashboards-dir "$OUT/dashboards" --)
[ "${SECOND:-}" = plain ] && UNDER=()  # A/A: the second server plain too, how far two like servers differ here
"${UNDER[@]}" $PY -m roseinfer.serve "${SERVE[@]}" --port 18302 --enable-profiling >"$OUT/nsys.log" 2>&1 &
NSYS=$!
trap 'kill -INT $NSYS $PLAIN 2>/dev/null; wait $NSYS $PLAIN 2>/dev/null' EXIT
for _ in $(seq 300); do grep -q "ready at" "$OUT/plain.log" && grep -q "ready at" "$OUT/nsys.log" && break; sleep 1; done
load() { $PY -m roseprof load "http://127.0.0.1:$1" "${LOAD[@]}" --traces-dir "$OUT/traces" --name "$2" >/dev/null; }
load 18301 warm && load 18302 warm  # first requests: allocator, caches
for i in $(seq "$PAIRS"); do
  if ((i % 2)); then load 18301 plain && load 18302 under-nsys; else load 18302 under-nsys && load 18301 plain; fi
done
uptime | tee "$OUT/uptime.txt"
$PY -m roseprof diff plain under-nsys --traces-dir "$OUT/traces" --dashboards-dir "$OUT/dashboards" --pool-mixed \
  | tee "$OUT/diff.txt"
$PY - <<'EOF' | tee "$OUT/steps.txt"
import json, os, statistics, urllib.request
second = "second plain (A/A)" if os.environ.get("SECOND") == "plain" else "under nsys"
for name, port in (("plain", 18301), (second, 18302)):
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/debug/steps?last=100000", timeout=60).read()
    by_batch = {}
    for line in body.splitlines():
        r = json.loads(line)
        if r.get("type") == "step":
            by_batch.setdefault(r["batch_size"], []).append((r["end_ns"] - r["start_ns"]) / 1e6)
    print(name + ": decode step ms, median by batch size: " + ", ".join(
        f"{b}: {statistics.median(v):.2f} (n={len(v)})" for b, v in sorted(by_batch.items()) if len(v) >= 20))
EOF
