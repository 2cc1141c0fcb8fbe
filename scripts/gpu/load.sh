#!/usr/bin/env bash
# Issue 48 on the GPU machine, in one call: `roseprof load` against `roseinfer serve gpt2` (fp16, paged attention,
# CUDA graphs, batch up to 256) on one GPU; results under $OUT (runs in $OUT/traces, a table in $OUT/load.txt).
#   bash scripts/gpu/load.sh           # from the repo root, .whl carried (the server's wheels: scripts/gpu_serve_check.sh)
# What it runs:
#   1. the generator's own ceiling on this machine (roseprof load --measure-ceiling: a stub streaming instantly)
#   2. B=1 (concurrency 1) and 8, 64, 256 concurrent streams, 256 output tokens each (prompt 32 tokens, ignore_eos)
#   3. a sweep of open-loop rates (Poisson) with a TTFT/TPOT SLO, one run (--sweep); its curve and knee (`show`)
#   4. two same-code loads at 64 streams and their diff (the serving noise floor on a GPU: one pair)
#   5. scripts/load_agreement.py: roseprof load against an independent asyncio client at 8 streams, 3 rounds
#   6. the same against the stub at 2 ms a token (1 and 8 streams, 4 rounds): the CPU comparison on quiet cores
set -uo pipefail
OUT=${OUT:-/tmp/gpu-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 COLUMNS=80 PYTHONPATH=${PYTHONPATH:-$PWD}
[ -f scripts/gpu_wheels.sh ] && source scripts/gpu_wheels.sh
T=$OUT/traces
PORT=${PORT:-8765}
URL=http://127.0.0.1:$PORT
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; git log --oneline -1; date -u; } \
  | tee "$OUT/machine.txt"

python3 -m roseinfer.serve gpt2 --device cuda --dtype float16 --paged-attn --cuda-graph --max-batch-size 256 \
  --port "$PORT" >"$OUT/serve.log" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null; wait $SERVER 2>/dev/null' EXIT
for _ in $(seq 300); do grep -q "ready at" "$OUT/serve.log" && break; sleep 1; done
grep -q "ready at" "$OUT/serve.log" || { echo "load.sh: the server did not start"; tail -20 "$OUT/serve.log"; exit 1; }

load() { python3 -m roseprof load "$URL" --traces-dir "$T" --prompt-len 32 --output-len 256 "$@"; }

python3 -m roseprof load ceiling --measure-ceiling --traces-dir "$T" | tee "$OUT/ceiling.txt"
load --concurrency 8 --requests 32 --name warmup >/dev/null  # CUDA graphs and allocator warm
for C in 1 8 64 256; do
  N=$((C < 8 ? 16 : C * 4))
  load --concurrency "$C" --requests "$N" --name "conc-$C" >"$OUT/conc-$C.txt"
done
load --sweep 10,20,40,80,160,320 --duration 20 --slo ttft=200ms,tpot=20ms --name sweep --seed 1 >"$OUT/sweep.txt"
load --sweep auto --requests 48 --output-len 64 --concurrency 256 --name sweep-auto >"$OUT/sweep-auto.txt"
for I in 1 2; do load --concurrency 64 --requests 256 --name "same-$I" >/dev/null; done
python3 -m roseprof diff same-1 same-2 --traces-dir "$T" --dashboards-dir "$OUT/dash" --json >"$OUT/same-diff.json"
python3 -m roseprof diff same-1 same-2 --traces-dir "$T" --dashboards-dir "$OUT/dash" >"$OUT/same-diff.txt"
python3 scripts/load_agreement.py "$URL" --concurrency 8 --requests 64 --output-len 256 --rounds 3 \
  --json "$OUT/agreement.json" | tee "$OUT/agreement.txt"
# 6. the CPU comparison again on this machine's quiet cores: the stub at a known 2 ms a token
python3 -m roseprof.load.stub --port 0 --token-delay-ms 2 >"$OUT/stub.log" 2>&1 &
STUB=$!
for _ in $(seq 50); do grep -q "ready at" "$OUT/stub.log" && break; sleep 0.2; done
STUB_URL=$(sed -n 's/.*ready at //p' "$OUT/stub.log")
for CASE in "1 16" "8 64"; do
  set -- $CASE
  python3 scripts/load_agreement.py "$STUB_URL" --concurrency "$1" --requests "$2" --output-len 64 --rounds 4 \
    --json "$OUT/agreement-stub-$1.json" | tee "$OUT/agreement-stub-$1.txt"
done
kill $STUB

python3 - "$T" <<'PYEOF' | tee "$OUT/load.txt"
import json, sys
from pathlib import Path
runs = {}
for d in Path(sys.argv[1]).iterdir():
    if d.is_dir() and (d / "summary.json").is_file():
        name, summary = json.loads((d / "manifest.json").read_text())["name"], json.loads((d / "summary.json").read_text())
        for part in summary["loads"]["parts"] if "loads" in summary else [summary["serving"]]:
            runs[f"{name}@{part['plan']['rate']:g}" if "loads" in summary else name] = part
print(f"{'load':14} {'req/s':>7} {'tok/s':>8} {'TTFT p50':>9} {'TTFT p99':>9} {'TPOT p50':>9} {'ITL p50':>8} "
      f"{'ITL p99':>8} {'E2E p50':>8} {'goodput':>8}  (ms)")
names = [f"conc-{c}" for c in (1, 8, 64, 256)] + [f"sweep@{r}" for r in (10, 20, 40, 80, 160, 320)]
names += sorted((n for n in runs if n.startswith("sweep-auto@")), key=lambda n: float(n.split("@")[1]))
for n in names:
    s = runs.get(n)
    if not s:
        print(f"{n:14} (missing)")
        continue
    g = s["goodput"]["pct"]
    print(f"{n:14} {s['throughput']['requests_s']:7.1f} {s['throughput']['output_tok_s']:8.0f} "
          f"{s['ttft']['p50_ms']:9.2f} {s['ttft']['p99_ms']:9.2f} {s['tpot']['p50_ms']:9.3f} {s['itl']['p50_ms']:8.3f} "
          f"{s['itl']['p99_ms']:8.3f} {s['e2e']['p50_ms']:8.0f} {'-' if g is None else f'{g:7.1f}%'}")
PYEOF
