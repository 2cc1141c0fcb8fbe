#!/usr/bin/env bash
# Issue 47 on the GPU machine, in one call: scripts/bench_serve.py (`roseinfer serve` against the offline engine:
# TPOT at B=1 x 256, tok/s at 64 and 256 streams x 512, metrics on/off pairs), results under $OUT.
# Run from the repo root with .whl carried, holding the server's wheels for the machine's Python (no internet there):
#   fastapi 0.163.2, starlette 1.10.0, uvicorn 0.54.0, h11 0.16.0, click, prometheus-client 0.26.0,
#   pydantic 2.14.4, pydantic-core 2.50.5 (the binary wheel for that Python), annotated-types, typing-inspection,
#   typing-extensions>=4.16, anyio 4.16.0, idna, annotated-doc, opentelemetry-api
#   bash scripts/gpu_serve_check.sh                  # BENCH_FLAGS="--server-flag=..." to vary
# With .base/roseinfer carried (`mkdir .base && git archive REV roseinfer | tar -x -C .base`), REV's server is
# measured beside this one on the same cases (--baseline-code); BASELINE_FLAGS="--loop=asyncio --http=h11" gives
# the baseline server those flags (this code's server, without .base).
set -uo pipefail
OUT=${OUT:-/tmp/gpu-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
source scripts/gpu_wheels.sh
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c "import torch, fastapi, uvicorn, prometheus_client; print('torch', torch.__version__, 'fastapi', \
fastapi.__version__, 'uvicorn', uvicorn.__version__)" || { echo "gpu_serve_check: the server's wheels are missing"; exit 1; }
BASE=()
[ -d .base/roseinfer ] && BASE=(--baseline-code .base)
[ -n "${BASELINE_FLAGS:-}" ] && for f in $BASELINE_FLAGS; do BASE+=("--baseline-flag=$f"); done
# shellcheck disable=SC2086
timeout "${LIMIT:-560}" python3 scripts/bench_serve.py --json "$OUT/bench_serve.json" "${BASE[@]}" ${BENCH_FLAGS:-} 2>&1 \
  | tee "$OUT/bench_serve.txt"
