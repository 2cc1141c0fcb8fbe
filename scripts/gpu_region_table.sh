#!/usr/bin/env bash
# Issue 27 on the GPU machine: the batch-1 step's GPU time by region, before the issue, after round 2 and now.
# The B=1 command with 256 new tokens under `roseprof nsys --trace cuda,nvtx`, once per configuration (FLAGS,
# ';'-separated, 'default' for no flag), then scripts/graph_step_table.py on each run (each kernel's own time on
# its stream, so the regions add up under PDL). Run from the repo root with .gpu and .whl carried:
#   bash scripts/gpu_region_table.sh
set -uo pipefail
source scripts/gpu_wheels.sh
source .gpu/nsys-on-gpu.sh
B1="--device cuda --hf-model-id gpt2 --paged-attn --cuda-graph --no-stop-on-eos --num-requests 1 --max-batch-size 1 \
--prefill-max-batch-size 1 --max-new-tokens 256 --warmup-runs 1 --repeat-runs 1"
IFS=';' read -ra configs <<< "${FLAGS:---no-gemv --no-pdl --no-split-attn --no-norm-gemv;--no-attn-prefetch;default}"
i=0
for flag in "${configs[@]}"; do
  i=$((i + 1))
  [ "$flag" = default ] && flag=""
  timeout 120 python3 -m roseprof nsys --traces-dir /tmp/rg/tr --dashboards-dir /tmp/rg/dash --name "b1-v$i" \
    --trace cuda,nvtx -- python3 -m roseinfer.benchmark_streaming $B1 $flag > "/tmp/rg$i.log" 2>&1
  echo "== v$i: ${flag:-default} rc=$?"
  python3 scripts/graph_step_table.py "$(ls -d /tmp/rg/tr/*b1-v$i-* | tail -1)"  # this run: the newest of the name
done
