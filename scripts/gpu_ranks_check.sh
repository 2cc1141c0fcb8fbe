#!/usr/bin/env bash
# Issue 41 (every rank's GPU work in the run) on 4 GPUs (`nvidia-h100-x4`; 2 suffice for `tests`), results under $OUT.
# Stages (STAGES=a,b picks; each stage's timeout is cut to what is left of BUDGET seconds):
#   tests     the GPU test that fails on a rank that loses its kernels (tests/roseprof/test_ranks_gpu.py) and the
#             NCCL TP tests
#   fixtures  three small TP=4 captures kept under tests/data (fixtures.tar.xz); nsys records CUDA and NVTX only
#             (`--trace cuda,nvtx`: the OS-runtime table of NCCL's polling threads is 90% of a default capture):
#             nsys-graphs  roseprof nsys, GPT-2 small, --paged-attn --cuda-graph, 2 requests x 24 tokens
#             nsys-slow    roseprof nsys, gpt2-tiny, eager, 4 requests x 24 tokens, rank 2 made late: it sleeps
#                          1 ms on every entry into roseinfer.layer.mlp
#             torch        roseprof torch of the nsys-graphs command: one Kineto file per rank
#   scale     gpt2-xl (bfloat16, --paged-attn --cuda-graph) at TP=1, 2 and 4: B=1 x 256 TPOT and 64 x 512 decode
#             tok/s (benchmark_scheduler --json), then one roseprof nsys capture of B=1 x 64 tokens at each TP,
#             kept as scale.tar.xz (SQLite exports, step logs, summaries, bench JSONs)
# Run from the repo root with .gpu (shared/gpu's nsys) and .whl (plotly, nvtx, msgspec wheels) carried:
#   STAGES=tests,fixtures bash scripts/gpu_ranks_check.sh
set -uo pipefail
OUT=${OUT:-/tmp/gpu-out}
STAGES=${STAGES:-tests,fixtures}
want() { [[ ",$STAGES," == *",$1,"* ]]; }
cap() { local left=$(( ${BUDGET:-570} - SECONDS )); (( left < 5 )) && left=5; echo $(( $1 < left ? $1 : left )); }
W=/tmp/ranks41
mkdir -p "$OUT" "$W"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

# keep RUN_NAME: the SQLite export and step logs of a stored run into DEST/RUN_NAME.*
keep() {
  local run; run=$(ls -d "$W"/tr/*-"$1"-* 2>/dev/null | head -1)
  [ -n "$run" ] || { echo "no run $1"; return; }
  mkdir -p "$2"
  [ -f "$run/raw/trace.sqlite" ] && cp "$run/raw/trace.sqlite" "$2/$1.sqlite"
  for f in "$run"/steplog*.jsonl; do cp "$f" "$2/$1.$(basename "$f")"; done
  cp "$run/summary.json" "$2/$1.summary.json"
  find "$run/raw" -name '*.json.gz' | while read -r t; do cp "$t" "$2/$1.$(basename "$t")"; done
  COLUMNS=80 python3 -m roseprof show --traces-dir "$W/tr" "$1" > "$2/$1.show.txt" 2>&1
  head -60 "$2/$1.show.txt"
}

main() {
source scripts/gpu_wheels.sh
[ -f .gpu/nsys-on-gpu.sh ] && source .gpu/nsys-on-gpu.sh
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
nvidia-smi topo -m 2>/dev/null | head -6
python3 -c "import torch, triton; print(torch.__version__, triton.__version__, 'nccl', torch.cuda.nccl.version(), 'gpus', torch.cuda.device_count())"
nsys --version 2>&1 | tail -1
git log --oneline -1 2>/dev/null
SECONDS=0
STORE="--traces-dir $W/tr --dashboards-dir $W/dash"
if want tests; then
  echo "== tests [${SECONDS}s]"
  timeout "$(cap 300)" python3 -m pytest -p no:cacheprovider -o addopts='' -q -rs --durations=6 \
    tests/roseprof/test_ranks_gpu.py tests/roseinfer/test_tensor_parallel_cuda.py 2>&1 | tail -15
  echo "tests rc=$? [${SECONDS}s]"
fi
SMALL="python3 -m roseinfer.benchmark_streaming --device cuda --dtype bfloat16 --no-stop-on-eos --prompt x
--max-new-tokens 24 --warmup-runs 0 --repeat-runs 1 --tensor-parallel-size 4"
if want fixtures; then
  echo "== fixtures: nsys TP=4 graphs [${SECONDS}s]"
  timeout "$(cap 150)" python3 -m roseprof nsys $STORE --trace cuda,nvtx --name nsys-graphs -- $SMALL --hf-model-id gpt2 --num-requests 2 \
    --max-batch-size 2 --prefill-max-batch-size 2 --paged-attn --cuda-graph > "$W/a.log" 2>&1
  echo "rc=$? [${SECONDS}s]"; tail -5 "$W/a.log"; keep nsys-graphs "$W/fix"
  echo "== fixtures: nsys TP=4 eager, rank 2 late in roseinfer.layer.mlp [${SECONDS}s]"
  ROSEINFER_TEST_SLEEP_REGION=roseinfer.layer.mlp:1 ROSEINFER_TEST_SLEEP_RANK=2 \
    timeout "$(cap 150)" python3 -m roseprof nsys $STORE --trace cuda,nvtx --name nsys-slow -- $SMALL --hf-model-id gpt2-tiny --num-requests 4 \
    --max-batch-size 4 --prefill-max-batch-size 4 > "$W/b.log" 2>&1
  echo "rc=$? [${SECONDS}s]"; tail -5 "$W/b.log"; keep nsys-slow "$W/fix"
  echo "== fixtures: torch TP=4 graphs [${SECONDS}s]"
  timeout "$(cap 150)" python3 -m roseprof torch $STORE --name torch-graphs --active 16 -- $SMALL --hf-model-id gpt2 --num-requests 2 \
    --max-batch-size 2 --prefill-max-batch-size 2 --paged-attn --cuda-graph > "$W/c.log" 2>&1
  echo "rc=$? [${SECONDS}s]"; tail -5 "$W/c.log"; keep torch-graphs "$W/fix"
  ls -la "$W/fix"; tar cf - -C "$W/fix" . | xz -T0 -6 > "$OUT/fixtures.tar.xz"; ls -la "$OUT"
fi
if want keep; then  # the fixtures stage's runs, kept again (a stage run earlier on this machine)
  for r in nsys-graphs nsys-slow torch-graphs; do keep $r "$W/fix" > /dev/null; done
  ls -la "$W/fix"; tar cf - -C "$W/fix" . | xz -T0 -6 > "$OUT/fixtures.tar.xz"
fi
XL="python3 -m roseinfer.benchmark_scheduler --device cuda --dtype bfloat16 --hf-model-id gpt2-xl --paged-attn
--cuda-graph --no-stop-on-eos --prompt x"
if want scale; then
  mkdir -p "$W/scale"
  for tp in 1 2 4; do
    echo "== scale: gpt2-xl B=1 x 256, TP=$tp [${SECONDS}s]"
    timeout "$(cap 90)" $XL --num-requests 1 --max-batch-size 1 --prefill-max-batch-size 1 --max-new-tokens 256 \
      --warmup-runs 1 --repeat-runs 3 --tensor-parallel-size $tp --json "$W/scale/lat-tp$tp.json" 2>&1 | tail -6
    echo "== scale: gpt2-xl 64 x 512, TP=$tp [${SECONDS}s]"
    timeout "$(cap 90)" $XL --num-requests 64 --max-batch-size 64 --prefill-max-batch-size 64 --max-new-tokens 512 \
      --warmup-runs 1 --repeat-runs 1 --tensor-parallel-size $tp --json "$W/scale/thr-tp$tp.json" 2>&1 | tail -6
  done
  for tp in 1 2 4; do
    echo "== scale: roseprof nsys gpt2-xl B=1 x 64, TP=$tp [${SECONDS}s]"
    timeout "$(cap 120)" python3 -m roseprof nsys $STORE --name xl-tp$tp -- $XL --num-requests 1 --max-batch-size 1 \
      --prefill-max-batch-size 1 --max-new-tokens 64 --warmup-runs 0 --repeat-runs 1 --tensor-parallel-size $tp \
      > "$W/xl$tp.log" 2>&1
    echo "rc=$? [${SECONDS}s]"; tail -3 "$W/xl$tp.log"; keep xl-tp$tp "$W/scale"
  done
  ls -la "$W/scale"; tar cf - -C "$W/scale" . | xz -T0 -6 > "$OUT/scale.tar.xz"; ls -la "$OUT"
fi
echo "== done [${SECONDS}s]"
}
main 2>&1 | tee "$OUT/report.txt"
