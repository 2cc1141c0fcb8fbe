#!/usr/bin/env bash
# Issue 27 (decode latency) on the GPU machine, in one call, results under $OUT:
#   tests   the GEMV kernel against its torch reference (PDL chains in a graph too), the fused and attention
#           kernels, the CUDA-graph decode (HF greedy)
#   gemv    scripts/bench_gemv.py: the GEMV against cuBLAS on GPT-2 small's decode linears, rows 1 to 16 (SWEEP=--sweep)
#   step    scripts/bench_graph_step.py: GPU time of one graph replay at batch 1, 2 and 8 (STEP_VARIANTS, default
#           7,9,10,11: session 6's first step, + split attention, + the norm prologue (engine), + PDL on attention)
#   b1      batch 1, 256 new tokens, --paged-attn --cuda-graph, each of B1_FLAGS (';'-separated, 'default': no flag; by default session
#           3's engine, session 6's first step, each new kernel off, the default); HBM floor
#   hf      scripts/bench_hf_compiled.py: Hugging Face static cache + torch.compile at batch 1, 256 tokens
#   nsys    the b1 command (at BATCH requests and max batch, default 1) under `roseprof nsys`, RUNS (default 3)
#           captures a side interleaved (NSYS_BEFORE against
#           NSYS_AFTER; default both --no-pdl, whose kernel durations are the kernels' own), `roseprof diff` of the
#           two groups, the per-region graph time and the kernels per step of one of each
#   ncu     `roseprof ncu` speed of light of NCU_KERNEL's (default split_decode) first launches at batch BATCH
#   a       workload (a) (64 x 512, batch 64), each of A_FLAGS (';'-separated)
# Run from the repo root (or a copy of it) with .gpu and .whl carried:
#   STAGES=tests,step,b1,hf,a bash scripts/gpu_latency_check.sh
set -uo pipefail
OUT=${OUT:-/tmp/gpu-out}
STAGES=${STAGES:-tests,gemv,step,b1,nsys,ncu,a}
want() { [[ ",$STAGES," == *",$1,"* ]]; }
W=/tmp/lat27
mkdir -p "$OUT" "$W"
export PYTHONUNBUFFERED=1
main() {
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
SECONDS=0
NB=${BATCH:-1}  # the nsys and ncu stages' batch (the b1 stage's is 1)
B1="--device cuda --hf-model-id gpt2 --paged-attn --cuda-graph --no-stop-on-eos --num-requests 1 --max-batch-size 1 \
--prefill-max-batch-size 1 --max-new-tokens 256 --warmup-runs 1"
BN="--device cuda --hf-model-id gpt2 --paged-attn --cuda-graph --no-stop-on-eos --num-requests $NB \
--max-batch-size $NB --prefill-max-batch-size $NB --max-new-tokens 256 --warmup-runs 1"
if want tests; then
  echo "== tests [${SECONDS}s]"
  timeout ${TEST_LIMIT:-240} python3 -m pytest -p no:cacheprovider -o addopts='' -q ${TEST_K:+-k "$TEST_K"} \
    tests/roseinfer/test_split_attention_kernel.py tests/roseinfer/test_gemv_kernel.py \
    tests/roseinfer/test_cuda_graphs.py tests/roseinfer/test_paged_attention_kernel.py \
    tests/roseinfer/test_fused_kernels.py tests/roseinfer/test_regions.py 2>&1 | tail -25
fi
if want gemv; then
  echo "== GEMV against cuBLAS [${SECONDS}s]"
  timeout 200 python3 scripts/bench_gemv.py --rows 1,2,4,8 ${SWEEP-} 2>&1 | tee "$W/gemv.txt" | tail -40
fi
if want step; then
  echo "== graph replay GPU time [${SECONDS}s]"
  for b in ${STEP_BATCHES:-1 2 8}; do
    timeout 150 python3 scripts/bench_graph_step.py --batch $b --past 128,256,512 --reps 100 \
      --variants "${STEP_VARIANTS:-7,9,10,11}" 2>&1 | tail -7
  done
fi
if want b1; then
  echo "== batch 1, 256 tokens [${SECONDS}s]"
  IFS=';' read -ra flags <<< "${B1_FLAGS:---no-gemv --no-pdl --no-split-attn --no-norm-gemv;--no-split-attn --no-norm-gemv;--no-norm-gemv;--no-split-attn;default}"
  for flag in "${flags[@]}"; do
    [ "$flag" = default ] && flag=""
    echo "-- b1 ${flag:-(default)}"
    timeout 120 python3 -m roseinfer.benchmark_streaming $B1 --repeat-runs 5 $flag --json "$W/b1${flag// /}.json" 2>&1 \
      | tail -12
  done
fi
if want hf; then
  echo "== HF static cache + torch.compile, batch 1 [${SECONDS}s]"
  timeout 240 python3 scripts/bench_hf_compiled.py --batch 1 --new-tokens 256 --repeat 3 2>&1 | tail -4
fi
if want nsys; then
  echo "== b$NB under roseprof nsys, ${RUNS:-3} a side [${SECONDS}s]"
  source ../.gpu/nsys-on-gpu.sh 2>/dev/null || source .gpu/nsys-on-gpu.sh
  STORE="--traces-dir $W/tr --dashboards-dir $W/dash"
  for r in $(seq "${RUNS:-3}"); do
    for design in before after; do
      flag=${NSYS_BEFORE---no-pdl --no-split-attn --no-norm-gemv}; [ "$design" = after ] && flag=${NSYS_AFTER---no-pdl}
      timeout 100 python3 -m roseprof nsys $STORE --name "b$NB-$design" --trace cuda,nvtx -- \
        python3 -m roseinfer.benchmark_streaming $BN --repeat-runs 1 $flag > "$W/nsys-$design-$r.log" 2>&1
      echo "b$NB-$design ($flag) run $r rc=$? [${SECONDS}s]"
    done
  done
  # the verdict and where the time moved first, all of it in diff.txt beside the traces
  timeout 60 python3 -m roseprof diff b$NB-before b$NB-after $STORE > "$W/diff.txt" 2>&1
  head -45 "$W/diff.txt"; cp "$W/diff.txt" "$OUT/diff-b$NB.txt"
  for design in before after; do
    run=$(ls -d "$W"/tr/*b$NB-$design* | tail -1)
    echo "-- per-region GPU time of a graph replay, b$NB $design ($run)"
    python3 scripts/graph_step_table.py "$run"
    python3 - "$run" <<'EOF'
import sys
from pathlib import Path
import numpy as np
from roseprof.model import KERNEL
from roseprof.run import tables
folder = sys.argv[1]
steps = tables.read_steps(Path(folder))["rows"]
start = np.asarray(steps["start_ns"], dtype=np.int64); end = start + np.asarray(steps["dur_ns"], dtype=np.int64)
ops = tables.read_trace(Path(folder)).ops
k = np.flatnonzero((ops.kind == KERNEL) & (ops.api_start >= 0))
step = np.searchsorted(start, ops.api_start[k], side="right") - 1
inside = (step >= 0) & (ops.api_start[k] <= end[np.maximum(step, 0)])
counts = np.bincount(step[inside], minlength=len(start))
print(f"kernels per launched step: p50 {np.median(counts[counts > 0]):.0f} (steps {int((counts > 0).sum())})")
EOF
  done
  tar czf "$OUT/nsys-b$NB.tgz" -C "$W" --exclude=raw --exclude='*.npz' tr 2>/dev/null
fi
if want ncu; then
  echo "== ncu speed of light of ${NCU_KERNEL:-split_decode} at batch $NB [${SECONDS}s]"
  timeout 150 python3 -m roseprof ncu --traces-dir $W/tr --dashboards-dir $W/dash --name ncu-b$NB \
    --kernel "${NCU_KERNEL:-split_decode}" --launch-count "${NCU_COUNT:-4}" -- python3 -m roseinfer.benchmark_streaming \
    $BN --max-new-tokens 8 --repeat-runs 1 --warmup-runs 0 2>&1 | tail -30
fi
if want a; then
  echo "== workload (a) [${SECONDS}s]"
  IFS=';' read -ra flags <<< "${A_FLAGS:---no-split-attn --no-norm-gemv;default}"
  for flag in "${flags[@]}"; do
    [ "$flag" = default ] && flag=""
    echo "-- (a) ${flag:-(default)}"
    timeout 120 python3 -m roseinfer.benchmark_scheduler --device cuda --hf-model-id gpt2 --no-stop-on-eos --paged-attn \
      --cuda-graph --num-requests 64 --prompt x --max-new-tokens 512 --max-batch-size 64 --prefill-max-batch-size 64 \
      --warmup-runs 1 --repeat-runs 3 $flag --json "$W/a${flag// /}.json" 2>&1 | grep -E "decode|TPOT|ITL|HBM"
  done
fi
tar czf "$OUT/json.tgz" -C "$W" $(cd "$W" && ls *.json) gemv.txt 2>/dev/null
echo "== done [${SECONDS}s]"
}
main 2>&1 | tee "$OUT/report.txt"
