#!/usr/bin/env bash
# A real nsys 2025.3 capture of the engine's batch-1 fast path with programmatic dependent launches (PDL), as a
# test fixture for stream-own kernel time (tests/roseprof/test_stream_time.py): under PDL a kernel starts
# while the one before still runs, so nsys's kernel durations overlap on the stream. Writes under $OUT the
# sqlite, the step log and `nsys stats` oracles, then prints the per-region graph time of the run.
# Run from the repo root with .gpu and .whl carried:  bash scripts/gpu_pdl_fixture.sh
set -uo pipefail
OUT=${OUT:-/tmp/gpu-out}
W=/tmp/pdlfix
BASE=h100-nsys2025.3-roseinfer-pdl
mkdir -p "$OUT" "$W"
source scripts/gpu_wheels.sh
source .gpu/nsys-on-gpu.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
nsys --version
timeout 200 python3 -m roseprof nsys --traces-dir "$W/tr" --dashboards-dir "$W/dash" --name b1-pdl --trace cuda,nvtx -- \
  python3 -m roseinfer.benchmark_streaming --device cuda --hf-model-id gpt2 --paged-attn --cuda-graph --no-stop-on-eos \
  --num-requests 1 --max-batch-size 1 --prefill-max-batch-size 1 --max-new-tokens 48 --warmup-runs 0 --repeat-runs 1 \
  > "$W/capture.log" 2>&1
echo "capture rc=$?"; tail -5 "$W/capture.log"
run=$(ls -d "$W"/tr/*b1-pdl* | head -1)
cp "$run/raw/trace.sqlite" "$OUT/$BASE.sqlite"
cp "$run/steplog.jsonl" "$OUT/$BASE.steplog.jsonl"
nsys stats -q --force-export=false -r cuda_gpu_kern_sum --format csv -o "$OUT/$BASE.stats" "$OUT/$BASE.sqlite" \
  > /dev/null 2>&1; echo "nsys stats rc=$?"
ls -la "$OUT"
python3 scripts/graph_step_table.py "$run"
