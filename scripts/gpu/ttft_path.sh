#!/usr/bin/env bash
# Where a client's TTFT goes, on the GPU machine in one call: scripts/load_agreement.py --split (roseprof live and
# the independent asyncio client against one `roseinfer serve gpt2`, each client's TTFT split on the one clock into
# HTTP in, engine and first delivery) at SIZES (streams:requests:tokens, default 1:16:256 8:64:256), each client
# first in turn (FIRST, default 'roseprof independent'); with .base/roseinfer carried (`mkdir .base && git archive
# REV roseinfer | tar -x -C .base`), REV's server measured the same way after this one's. TOGETHER (sizes as
# SIZES): both clients at once as well (load_agreement.py --together). Results under $OUT.
#   bash scripts/gpu/ttft_path.sh      # from the repo root, .whl carried (the server's wheels)
set -uo pipefail
OUT=${OUT:-/tmp/gpu-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 COLUMNS=80
source scripts/gpu_wheels.sh  # PYTHONPATH: the wheels and this repo
PORT=${PORT:-8765}
URL=http://127.0.0.1:$PORT
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; git log --oneline -1; date -u; } \
  | tee "$OUT/machine.txt"

measure() {  # $1: label, $2: the folder of the server's roseinfer (first on PYTHONPATH, before the wheels)
  local label=$1
  PYTHONPATH=$2:$PYTHONPATH python3 -m roseinfer.serve gpt2 --device cuda --dtype float16 --paged-attn --cuda-graph \
    --max-batch-size 64 --flight-recorder-steps 32768 --port "$PORT" >"$OUT/serve-$label.log" 2>&1 &
  local server=$!
  for _ in $(seq 180); do
    grep -q "ready at" "$OUT/serve-$label.log" && break
    kill -0 $server 2>/dev/null || break  # it died: no use waiting
    sleep 1
  done
  if ! grep -q "ready at" "$OUT/serve-$label.log"; then
    echo "ttft_path.sh: the $label server did not start"; tail -20 "$OUT/serve-$label.log"; kill $server; return
  fi
  python3 -m roseprof load "$URL" --concurrency 8 --requests 32 --output-len 32 \
    --traces-dir "$OUT/warm" >/dev/null  # CUDA graphs and allocator warm
  local first flag
  for first in ${FIRST:-roseprof independent}; do  # which client loads first in each round: both orders
    flag=; [ "$first" = independent ] && flag=--independent-first
    for size in ${SIZES-1:16:256 8:64:256}; do  # streams:requests:tokens
      IFS=: read -r C N L <<< "$size"
      echo "== $label server, $C streams x $N requests x $L tokens, $first first" | tee -a "$OUT/ttft_path.txt"
      timeout 150 python3 scripts/load_agreement.py "$URL" --concurrency "$C" --requests "$N" $flag \
        --output-len "$L" --rounds "${ROUNDS:-3}" --split --json "$OUT/agreement-$label-$C-$N-$L-$first.json" 2>&1 \
        | tee -a "$OUT/ttft_path.txt"
    done
  done
  for size in ${TOGETHER:-}; do  # streams:requests:tokens, both clients at once (load_agreement.py --together)
    IFS=: read -r C N L <<< "$size"
    echo "== $label server, both clients at once, $C streams each x $N requests x $L tokens" | tee -a "$OUT/ttft_path.txt"
    timeout 150 python3 scripts/load_agreement.py "$URL" --concurrency "$C" --requests "$N" --together \
      --output-len "$L" --rounds "${ROUNDS:-3}" --json "$OUT/together-$label-$C-$N-$L.json" 2>&1 | tee -a "$OUT/ttft_path.txt"
  done
  kill $server; wait $server 2>/dev/null
}

measure this "$PWD"
[ -d .base/roseinfer ] && measure base "$PWD/.base"
