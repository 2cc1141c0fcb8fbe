#!/usr/bin/env bash
# On 2 GPUs (`nvidia-h200-x2`), one call: the whole GPU test suite (the two-GPU NCCL tests included), then two
# small TP=2 captures of the engine kept as test fixtures (tests/data/README.md says what each is):
#   nsys   roseprof nsys (2025.3, .gpu carried) of GPT-2 small, TP=2, --paged-attn --cuda-graph, 4 requests x 48
#          tokens: both ranks' NVTX regions, CUDA graphs with the NCCL all-reduces inside, both step logs
#   torch  roseprof torch of the same command: one Kineto file per rank
# Results under $OUT: suite.txt, report.txt, nsys/ (sqlite + step logs), torch/ (traces + step logs).
#   NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 bash scripts/gpu_tp_fixtures.sh   (STAGES=suite,nsys,torch)
set -uo pipefail
OUT=${OUT:-/tmp/gpu-out}
STAGES=${STAGES:-suite,nsys,torch,tpbench}
want() { [[ ",$STAGES," == *",$1,"* ]]; }
cap() { local left=$(( ${BUDGET:-570} - SECONDS )); (( left < 5 )) && left=5; echo $(( $1 < left ? $1 : left )); }
W=/tmp/tpfix
mkdir -p "$OUT" "$W"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
main() {
source scripts/gpu_wheels.sh
[ -f .gpu/nsys-on-gpu.sh ] && source .gpu/nsys-on-gpu.sh
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
python3 -c "import torch, triton; print(torch.__version__, triton.__version__, 'nccl', torch.cuda.nccl.version(), 'gpus', torch.cuda.device_count())"
nsys --version 2>&1 | tail -1
SECONDS=0
if want suite; then
  echo "== 1. every GPU test [${SECONDS}s]"
  timeout "$(cap 380)" python3 -m pytest -p no:cacheprovider -o addopts='' -q -rs --durations=8 -m gpu ${TESTS:-tests/} \
    > "$OUT/suite.txt" 2>&1
  echo "suite rc=$? [${SECONDS}s]"; tail -12 "$OUT/suite.txt"
fi
CMD="python3 -m roseinfer.benchmark_streaming --device cuda --hf-model-id gpt2 --paged-attn --cuda-graph --no-stop-on-eos
--num-requests 2 --max-batch-size 2 --prefill-max-batch-size 2 --max-new-tokens 24 --warmup-runs 0 --repeat-runs 1
--tensor-parallel-size 2"
STORE="--traces-dir $W/tr --dashboards-dir $W/dash"
if want nsys; then
  echo "== 2. roseprof nsys, TP=2 [${SECONDS}s]"
  timeout "$(cap 120)" python3 -m roseprof nsys $STORE --name tp2 -- $CMD > "$W/nsys.log" 2>&1
  echo "nsys rc=$? [${SECONDS}s]"; tail -30 "$W/nsys.log"
  run=$(ls -d "$W"/tr/*tp2* 2>/dev/null | grep -v torch | head -1)
  if [ -n "$run" ]; then
    mkdir -p "$OUT/nsys"; find "$run" -maxdepth 3 -type f | sed "s|$run/||" | sort
    cp "$run/summary.json" "$OUT/nsys/"
    cp "$run"/steplog*.jsonl "$OUT/nsys/"; ls -la "$run/raw"
    xz -T0 -6 -c "$run/raw/trace.sqlite" > "$OUT/nsys/trace.sqlite.xz"  # the files that come back are 16 MiB at most
    COLUMNS=80 python3 -m roseprof show --traces-dir "$W/tr" tp2 > "$OUT/nsys/show.txt" 2>&1; echo "show rc=$?"
    cat "$OUT/nsys/show.txt" | head -120
  fi
fi
if want torch; then
  echo "== 3. roseprof torch, TP=2 [${SECONDS}s]"
  timeout "$(cap 120)" python3 -m roseprof torch $STORE --name tp2-torch --active 32 -- $CMD > "$W/torch.log" 2>&1
  echo "torch rc=$? [${SECONDS}s]"; tail -20 "$W/torch.log"
  run=$(ls -d "$W"/tr/*tp2-torch* 2>/dev/null | head -1)
  if [ -n "$run" ]; then
    mkdir -p "$OUT/torch"; find "$run" -maxdepth 3 -type f | sed "s|$run/||" | sort
    mkdir -p "$W/t"; find "$run" -name '*.json.gz' -o -name 'steplog*.jsonl' | xargs -r cp -t "$W/t/"
    tar cf "$OUT/torch/traces.tar" -C "$W/t" .
    cp "$run/summary.json" "$OUT/torch/"
    COLUMNS=80 python3 -m roseprof show --traces-dir "$W/tr" tp2-torch > "$OUT/torch/show.txt" 2>&1; echo "show rc=$?"
    head -80 "$OUT/torch/show.txt"
  fi
fi
if want tpbench; then  # what is left of the call: issue 25's gpt2-xl B=1 latency, TP=1 against TP=2
  echo "== 4. gpu_tp_check.sh latency [${SECONDS}s]"
  OUT="$OUT/tp" BUDGET=$(( ${BUDGET:-570} - SECONDS )) STAGES=${TP_STAGES:-latency} bash scripts/gpu_tp_check.sh > /dev/null 2>&1
  tail -30 "$OUT/tp/report.txt"
fi
echo "== done [${SECONDS}s]"
}
main 2>&1 | tee "$OUT/report.txt"
ls -laR "$OUT" | head -40; grep -c . "$OUT/suite.txt"
