#!/usr/bin/env bash
# `roseprof torch` on the GPU (issue 13): the engine with --paged-attn and with --cuda-graph under torch.profiler,
# what the profiler shows of kernels replayed by CUDA graphs, a dashboard screenshot, the Perfetto export, and
# the cost of the engine's instrumentation with the profiler off (NVTX vs record_function). Results under $OUT.
# Run from the repo root: OUT=/some/dir bash scripts/gpu_torch_check.sh   (a few minutes)
set -uo pipefail
OUT=${OUT:-/tmp/gpu-torch-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}  # keeps wheels installed beside (plotly, nvtx)
TR=/tmp/torch-traces DB=/tmp/torch-dash
python3 -c "import torch; print(torch.__version__, torch.cuda.get_device_name(0))" | tee "$OUT/machine.txt"
ENGINE="python3 -m roseinfer.benchmark_streaming --hf-model-id gpt2 --device cuda --num-requests 64 --max-batch-size 64
  --max-new-tokens 256 --warmup-runs 0 --repeat-runs 1 --no-stop-on-eos --mode online"

for variant in paged-attn cuda-graph; do
  echo "== roseprof torch, --$variant"
  python3 -m roseprof torch --name "torch-$variant" --traces-dir $TR --dashboards-dir $DB -- $ENGINE --$variant \
    > "$OUT/torch-$variant.log" 2>&1; echo "rc=$?" | tee -a "$OUT/torch-$variant.log"
  run=$(ls -d $TR/*torch-$variant* | tail -1)
  cp "$run/summary.json" "$OUT/torch-$variant-summary.json"
  cp "$run/manifest.json" "$OUT/torch-$variant-manifest.json"
  cp "$run"/raw/torch/trace.json.gz "$OUT/torch-$variant-trace.json.gz"
  python3 -m roseprof export "$(basename "$run")" --traces-dir $TR -o "$OUT/torch-$variant.perfetto.json.gz"
  cp "$DB/$(basename "$run").html" "$OUT/dashboard-torch-$variant.html"
  python3 scripts/screenshot_dashboard.py "$DB/$(basename "$run").html" "$OUT/dashboard-torch-$variant.png" \
    || echo "no screenshot here (no Chromium): take one from dashboard-torch-$variant.html elsewhere"
  # What torch.profiler shows of graph replays: the launching calls and how many kernels each launched.
  python3 - "$run" > "$OUT/torch-$variant-launches.txt" <<'PY'
import sys, collections
from pathlib import Path
import numpy as np
from roseprof.run.tables import read_trace
t = read_trace(Path(sys.argv[1]))
o = t.ops
calls = collections.Counter(t.names[i] if i >= 0 else "(no launching call)" for i in o.api_name.tolist())
print("GPU ops by launching call:", dict(calls))
launched = o.api_tid >= 0
key = np.stack([o.api_tid, o.api_start], 1)[launched]
_, per_call = np.unique(key, axis=0, return_counts=True)
print("ops per launching call: max", per_call.max() if len(per_call) else 0, "median", np.median(per_call) if len(per_call) else 0)
PY
  cat "$OUT/torch-$variant-launches.txt"
done

echo "== instrumentation cost with the profiler off: NVTX vs record_function (interleaved A/B in one process)"
for sw in nvtx record_function; do
  python3 scripts/bench_nvtx_overhead_ab.py --device cuda --model gpt2 --cuda-graph --paged-attn --switch $sw \
    --pairs 6 2>&1 | tail -3 | tee "$OUT/overhead-$sw.txt"
done
python3 scripts/bench_tracing_overhead.py 2>&1 | tail -8 | tee "$OUT/tracing-overhead.txt"
