#!/usr/bin/env bash
# The engine's own history as before/after captures on CPU, diffed with roseprof (docs/ROSEPROF.md's worked example).
# Usage: scripts/engine_history.sh [traces-dir] [dashboards-dir]
set -euo pipefail
cd "$(dirname "$0")/.."
traces=${1:-traces}
dashboards=${2:-dashboards}
workload=(python -m roseinfer.benchmark_streaming --hf-model-id gpt2-tiny --num-requests 64 --max-batch-size 64
  --prefill-max-batch-size 64 --max-new-tokens 400 --prompt abcdefghijklmnop
  --warmup-runs 0 --repeat-runs 1 --no-stop-on-eos)
rp() { local cmd=$1; shift; .venv/bin/roseprof "$cmd" --traces-dir "$traces" --dashboards-dir "$dashboards" "$@"; }
for flag in "" --no-batched-kv-append --no-batched-rollover --no-block-table-cache; do
  name=history${flag:-"-default"}
  rp nsys --name "$name" -- "${workload[@]}" $flag > /dev/null
done
for before in --no-batched-kv-append --no-batched-rollover --no-block-table-cache; do
  echo "== roseprof diff history$before history-default"
  rp diff "history$before" history-default --top 8 || true
done
