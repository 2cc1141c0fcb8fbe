#!/usr/bin/env bash
# Issue 25 (tensor parallelism) on 2 GPUs (`nvidia-h200-x2`), in one call (~8 minutes), results under $OUT
# (at most 8 files):
#   tests       the TP tests on NCCL (TP=2 vs TP=1 vs Hugging Face on the eager, paged and graph paths; ranks'
#               step logs under preemption); the CPU (gloo) ones run in CI
#   latency     gpt2-xl, B=1, TP=1 then TP=2 (fast path: --paged-attn --cuda-graph, overlapped decode): per-token
#               latency (TPOT p50) and the ratio, with each run's HBM floor per GPU
#   throughput  gpt2-xl, workload (a): 64 requests x 512 tokens, batch 64, TP=1 then TP=2
#   nsys        one `roseprof nsys` capture of the TP=2 B=1 command (both ranks in one run): the all-reduce
#               region's GPU time per decode step (its NCCL kernels; nothing overlaps them in a decode step, so it
#               is exposed) beside the step time; the run's summary.json is kept
# Run from the repo root with .gpu (nsys-on-gpu.sh) and .whl (nvtx, plotly wheels) carried:
#   NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 bash scripts/gpu_tp_check.sh   (STAGES=tests,... picks)
set -uo pipefail
OUT=${OUT:-/tmp/gpu-out}
STAGES=${STAGES:-tests,latency,throughput,nsys}
MODEL=${MODEL:-gpt2-xl}
want() { [[ ",$STAGES," == *",$1,"* ]]; }
# Every stage's timeout is cut to what is left of BUDGET seconds (the device call's 10 minutes, less the start).
cap() { local left=$(( ${BUDGET:-560} - SECONDS )); (( left < 5 )) && left=5; echo $(( $1 < left ? $1 : left )); }
W=/tmp/tp25
mkdir -p "$OUT" "$W/bundle"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
main() {
source scripts/gpu_wheels.sh
[ -f .gpu/nsys-on-gpu.sh ] && source .gpu/nsys-on-gpu.sh
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
nvidia-smi topo -m 2>/dev/null | head -4
python3 -c "import torch, triton; print(torch.__version__, triton.__version__, 'nccl', torch.cuda.nccl.version())"
git log --oneline -1 2>/dev/null
SECONDS=0

if want tests; then
  echo "== 1. TP tests: NCCL on 2 GPUs, gloo on CPU [${SECONDS}s]"
  # one pytest process per file: a second TP engine on symmetric memory cannot share a process with the first
  for f in ${TESTS:-tests/roseinfer/test_tensor_parallel_cuda.py tests/roseinfer/test_fused_allreduce_cuda.py}; do
    timeout "$(cap 200)" python3 -m pytest -p no:cacheprovider -o addopts='' -q -rs "$f" 2>&1 | tail -15
  done
fi

# bfloat16 everywhere: torch's symmetric-memory all-reduce has no float16 kernels, and the same dtype on every run
# keeps the comparison fair (bfloat16 and float16 move the same bytes).
B="python3 -m roseinfer.benchmark_scheduler --device cuda --dtype bfloat16 --hf-model-id $MODEL --paged-attn \
--cuda-graph --no-stop-on-eos --prompt x"
LAT="$B --num-requests 1 --max-batch-size 1 --prefill-max-batch-size 1 --max-new-tokens 256 --warmup-runs 1 --repeat-runs 3"
THR="$B --num-requests 64 --max-batch-size 64 --prefill-max-batch-size 64 --max-new-tokens 512 --warmup-runs 1 --repeat-runs 1"
# Runs: TP=1, TP=2 on NCCL's all-reduce, TP=2 on torch's symmetric-memory all-reduce (--tp-allreduce symm_mem),
# TP=2 with the all-reduce fused into the one-row GEMVs (--tp-allreduce fused); RUNS="TP:ALLREDUCE ..." picks.
export RUNS=${RUNS:-1:nccl 2:nccl 2:symm_mem 2:fused}
if want latency; then
  for run in $RUNS; do
    tp=${run%%:*} ar=${run##*:}
    echo "== 2. $MODEL B=1 latency, TP=$tp all-reduce $ar [${SECONDS}s]"
    timeout "$(cap 100)" $LAT --tensor-parallel-size $tp --tp-allreduce $ar \
      --json "$W/bundle/latency-tp$tp-$ar.json" 2>&1 | tail -12
    echo "rc=$? [${SECONDS}s]"
  done
fi
if want throughput; then
  for run in $RUNS; do
    tp=${run%%:*} ar=${run##*:}
    echo "== 3. $MODEL workload (a) 64 x 512, TP=$tp all-reduce $ar [${SECONDS}s]"
    timeout "$(cap 120)" $THR --tensor-parallel-size $tp --tp-allreduce $ar \
      --json "$W/bundle/throughput-tp$tp-$ar.json" 2>&1 | tail -12
    echo "rc=$? [${SECONDS}s]"
  done
fi
if want latency || want throughput; then
  python3 - "$W/bundle" <<'EOF' | tee "$W/bundle/side-by-side.md"
import glob, json, os, statistics, sys
d = sys.argv[1]
def load(name):
    p = os.path.join(d, name)
    return json.load(open(p)) if os.path.exists(p) else None
print("| run | TP, all-reduce | TPOT p50 ms | ITL p50 ms | decode tok/s | weights per GPU MB | copy GB/s | floor ms/step (weights) | of floor |")
print("|---|---|---|---|---|---|---|---|---|")
rows = {}
for kind in ("latency", "throughput"):
    for tp in (run.replace(":", "-") for run in os.environ["RUNS"].split()):
        r = load(f"{kind}-tp{tp}.json")
        if r is None:
            continue
        runs = r["runs"]
        tpot = statistics.median(x["tpot_ms"]["50"] for x in runs)
        itl = statistics.median(x["itl_ms"]["50"] for x in runs)
        tok = statistics.median(x["decode_tok_s"] for x in runs)
        f = r.get("hbm_floor") or {}
        wb, bw = f.get("weight_bytes", 0), f.get("copy_bandwidth_bytes_s", 1)
        frac = statistics.median(f["fraction_of_floor"]) if f else float("nan")
        rows[(kind, tp)] = (tpot, tok)
        print(f"| {kind} | {tp} | {tpot:.3f} | {itl:.3f} | {tok:.0f} | {wb / 1e6:.0f} | {bw / 1e9:.0f} | "
              f"{wb / bw * 1e3:.3f} | {frac:.1%} |")
for ar in ("nccl", "symm_mem", "fused"):
    one, two = ("latency", "1-nccl"), ("latency", f"2-{ar}")
    if one in rows and two in rows:
        print(f"B=1 per-token latency TP=2 ({ar}) / TP=1: {rows[two][0] / rows[one][0]:.3f}x (issue 50: <= 0.6x)")
    one, two = ("throughput", "1-nccl"), ("throughput", f"2-{ar}")
    if one in rows and two in rows:
        print(f"batch 64 decode throughput TP=2 ({ar}) / TP=1: {rows[two][1] / rows[one][1]:.3f}x")
EOF
  tar czf "$OUT/bench.tgz" -C "$W/bundle" $(cd "$W/bundle" && ls *.json side-by-side.md 2>/dev/null)
fi

if want nsys; then
  echo "== 4. roseprof nsys of the TP=2 B=1 command [${SECONDS}s]"
  STORE="--traces-dir $W/tr --dashboards-dir $W/dash"
  timeout "$(cap 200)" python3 -m roseprof nsys $STORE --name tp2-b1 --trace cuda,nvtx -- $B --num-requests 1 \
    --max-batch-size 1 --prefill-max-batch-size 1 --max-new-tokens 256 --warmup-runs 0 --repeat-runs 1 \
    --tensor-parallel-size 2 --tp-allreduce "${NSYS_ALLREDUCE:-nccl}" > "$W/bundle/nsys.log" 2>&1
  echo "capture rc=$?"; tail -20 "$W/bundle/nsys.log"
  run=$(ls -d "$W"/tr/*tp2-b1* 2>/dev/null | head -1)
  if [ -n "$run" ]; then
    cp "$run/summary.json" "$OUT/tp2-nsys-summary.json"
    python3 - "$run/summary.json" <<'EOF' | tee "$OUT/allreduce.txt"
import json, sys
s = json.load(open(sys.argv[1]))
regions = {r["name"]: r for r in s.get("regions", [])}
# Decode step ranges of both ranks (each rank opens one per step): per-rank figures divide by this count.
n = (regions.get("roseinfer.decode_step") or {}).get("count") or 0
steps = s.get("steps") or {}
print(f"decode_step ranges (all ranks) {n}; step p50 {(steps.get('p50_ns') or 0) / 1e3:.1f} us")
for name in ("roseinfer.decode_step", "roseinfer.model.forward", "roseinfer.layer.attention", "roseinfer.layer.mlp",
             "roseinfer.layer.allreduce", "roseinfer.lm_head"):
    r = regions.get(name)
    if r is None:
        print(name, "absent"); continue
    keys = ("total_ns", "gpu_graph_ns", "gpu_kernel_ns", "gpu_proj_ns")  # total_ns: host time (capture-time only)
    per = {k: f"{r[k] / max(n, 1) / 1e3:.1f} us/step/rank" for k in keys if r.get(k)}
    print(name, "count", r["count"], per)
nccl = [k for k in s.get("kernels", []) if "nccl" in k["name"].lower()]
tot = sum(k["total_ns"] for k in nccl)
print(f"NCCL kernels: {sum(k['count'] for k in nccl)} launches, {tot / 1e6:.2f} ms in all; exposed all-reduce "
      f"time {tot / max(n, 1) / 1e3:.1f} us per decode step per rank (nothing else runs on the GPU during them)")
for k in nccl[:4]:
    print(f"  {k['name'][:90]}: count {k['count']}, p50 {k['p50_ns'] / 1e3:.2f} us, region {k.get('region')}, "
          f"capture_region {k.get('capture_region')}")
print("kernel_attribution", json.dumps(s.get("kernel_attribution"))[:400])
for rank in s.get("ranks", []):
    print("rank", {k: v for k, v in rank.items() if not isinstance(v, (list, dict))})
EOF
    cp "$W/bundle/nsys.log" "$OUT/nsys.log"
  fi
fi
echo "== done [${SECONDS}s]"
}
main 2>&1 | tee "$OUT/report.txt"
ls -la "$OUT"
