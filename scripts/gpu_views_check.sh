#!/usr/bin/env bash
# Issue 22 (views) on the GPU machine, in one call (~4 minutes on an H100): fixtures of a CUDA-graph program that
# is not the engine (scripts/hf_graph_program.py: Hugging Face GPT-2, NVTX ranges from forward hooks, 3 eager
# forwards, one capture, 60 replays) and of the engine under torch.profiler. Results under $OUT (6 files):
#   report.txt                              this script's log: versions, capture logs, `roseprof show` at 80/120 columns
#   h100-nsys2025.3-hf-graph.sqlite         `roseprof nsys --trace cuda,nvtx` of the program (--cuda-graph-trace=node)
#   h100-nsys2025.3-hf-graph.nsys-rep       the same capture's report
#   h100-torch2.11-hf-graph.json.gz         `roseprof torch` of the program (its own torch.profiler, ProfilerStep#N)
#   engine-torch.tgz                        `roseprof torch` of the engine's fast path: Kineto trace + step log
#   extra.tgz                               `nsys stats` oracles of the nsys fixture, summaries, show outputs, dashboards
# Run from the repo root with .gpu (nsys-on-gpu.sh) and .whl (nvtx, plotly, msgspec wheels) carried:
#   OUT=/some/dir bash scripts/gpu_views_check.sh            (STAGES=nsys,torch,engine picks stages)
set -uo pipefail
OUT=${OUT:-/tmp/gpu-views-out}
STAGES=${STAGES:-nsys,torch,engine}
want() { [[ ",$STAGES," == *",$1,"* ]]; }
W=/tmp/views22
rm -rf "$W"; mkdir -p "$OUT" "$W/extra"
export PYTHONUNBUFFERED=1
main() {
source scripts/gpu_wheels.sh
source .gpu/nsys-on-gpu.sh
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
nsys --version
python3 -c "import torch, triton, transformers; print(torch.__version__, triton.__version__, transformers.__version__)"
git log --oneline -1 2>/dev/null
STORE="--traces-dir $W/tr --dashboards-dir $W/dash"
X=$W/extra
SECONDS=0

show() {  # show a run at 80 and 120 columns, into the log and the bundle
  for cols in 80 120; do
    echo "-- roseprof show $1 (COLUMNS=$cols)"
    COLUMNS=$cols python3 -m roseprof show "$1" $STORE 2>&1 | tee "$X/show-$2-$cols.txt"
  done
}

if want nsys; then
  echo "== 1. the HF CUDA-graph program under roseprof nsys [${SECONDS}s]"
  timeout 240 python3 -m roseprof nsys $STORE --name hf-graph --trace cuda,nvtx --step-range hf.step -- \
    python3 scripts/hf_graph_program.py > "$X/capture-nsys.log" 2>&1
  echo "capture rc=$?"; tail -30 "$X/capture-nsys.log"
  run=$(ls -d "$W"/tr/*hf-graph* | head -1)
  B=$OUT/h100-nsys2025.3-hf-graph
  cp "$run/raw/trace.sqlite" "$B.sqlite"
  cp "$run/raw/trace.nsys-rep" "$B.nsys-rep"
  cp "$run/summary.json" "$X/hf-graph-nsys-summary.json"
  ls -la "$B".*
  python3 -c "import os; s=os.path.getsize('$B.sqlite')/2**20; print(f'fixture sqlite {s:.2f} MiB', 'OK' if s < 10 else 'OVER 10 MiB')"
  nsys stats -q --force-export=false -r nvtx_sum,cuda_gpu_kern_sum,nvtx_gpu_proj_sum,nvtx_kern_sum --format csv \
    -o "$X/h100-nsys2025.3-hf-graph.stats" "$B.sqlite" > /dev/null 2>&1; echo "nsys stats rc=$?"
  python3 - "$B.sqlite" <<'EOF'
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
k = c.execute("SELECT count(*), count(graphNodeId) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()
print(f"kernels {k[0]}, with graphNodeId {k[1]}")
print("graph node events", c.execute("SELECT count(*) FROM CUDA_GRAPH_NODE_EVENTS").fetchone()[0])
EOF
  show "$(basename "$run")" nsys
  cp "$W"/dash/*hf-graph*.html "$X/" 2>/dev/null
fi

if want torch; then
  echo "== 2. the HF CUDA-graph program under roseprof torch [${SECONDS}s]"
  timeout 240 python3 -m roseprof torch $STORE --name hf-graph-torch -- \
    python3 scripts/hf_graph_program.py > "$X/capture-torch.log" 2>&1
  echo "capture rc=$?"; tail -30 "$X/capture-torch.log"
  run=$(ls -d "$W"/tr/*hf-graph-torch* | head -1)
  cp "$run"/raw/torch/trace.json.gz "$OUT/h100-torch2.11-hf-graph.json.gz"
  cp "$run/summary.json" "$X/hf-graph-torch-summary.json"
  ls -la "$OUT/h100-torch2.11-hf-graph.json.gz"
  show "$(basename "$run")" torch
fi

if want engine; then
  echo "== 3. the engine's fast path under roseprof torch (the profiler's own flush at the window's end) [${SECONDS}s]"
  timeout 240 python3 -m roseprof torch $STORE --name engine-torch -- python3 -m roseinfer.benchmark_streaming \
    --device cuda --hf-model-id gpt2 --paged-attn --cuda-graph --num-requests 8 --max-batch-size 8 \
    --max-new-tokens 72 --warmup-runs 0 --repeat-runs 1 --no-stop-on-eos > "$X/capture-engine.log" 2>&1
  echo "capture rc=$?"; tail -30 "$X/capture-engine.log"
  run=$(ls -d "$W"/tr/*engine-torch* | head -1)
  E=$W/engine; mkdir -p "$E"
  cp "$run"/raw/torch/*.json* "$E/" 2>/dev/null
  cp "$run/steplog.jsonl" "$run/summary.json" "$run/manifest.json" "$E/" 2>/dev/null
  ls -la "$E"
  tar czf "$OUT/engine-torch.tgz" -C "$E" .
  show "$(basename "$run")" engine
fi
tar czf "$OUT/extra.tgz" -C "$X" .
echo "== done [${SECONDS}s]"
}
main 2>&1 | tee "$OUT/report.txt"
ls -la "$OUT"
