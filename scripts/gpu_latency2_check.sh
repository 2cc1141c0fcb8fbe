#!/usr/bin/env bash
# Issue 27, round 2, on the GPU machine: the issue's larger workloads, today's default against the pre-issue path
# (`--no-gemv --no-pdl --no-split-attn --no-norm-gemv`), interleaved rounds in one process
# (scripts/bench_engine_pairs.py: decode tok/s, step p50 and the share of the HBM floor per configuration), then
# Hugging Face static cache + torch.compile (scripts/bench_hf_compiled.py) at the same batch and length.
#   tests  the split attention kernel against its reference, the CUDA-graph decode (HF greedy) (or TESTS)
#   pairs  batch 512 x 128 (GPT-2 small), gpt2-medium 64 x 256, workload (a) 64 x 512 (or WORKLOADS: "model batch
#          tokens;..."; ROUNDS rounds each; the configurations of each in CONFIGS_<n>, n its index from 0, else
#          PAIR_CONFIGS)
#   hf     the three workloads under Hugging Face compiled (HF_LIMIT seconds each)
#   step   scripts/bench_graph_step.py at STEP_RUNS ("batch:variants:pasts[:model]" ...)
# Run from the repo root (or a copy of it) with .whl carried: STAGES=pairs,hf bash scripts/gpu_latency2_check.sh
set -uo pipefail
OUT=${OUT:-/tmp/gpu-out}
STAGES=${STAGES:-pairs,hf}
want() { [[ ",$STAGES," == *",$1,"* ]]; }
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
# model, requests (= the batch), new tokens
IFS=';' read -ra WORKLOADS <<< "${WORKLOADS:-gpt2 512 128;gpt2-medium 64 256;gpt2 64 512}"
main() {
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
date -u
SECONDS=0
if want tests; then
  echo "== tests [${SECONDS}s]"
  timeout ${TEST_LIMIT:-200} python3 -m pytest -p no:cacheprovider -o addopts='' -q -m gpu \
    ${TESTS:-tests/roseinfer/test_split_attention_kernel.py tests/roseinfer/test_cuda_graphs.py} 2>&1 | tail -12
fi
if want pairs; then
  for i in "${!WORKLOADS[@]}"; do
    read -r model n tokens <<< "${WORKLOADS[$i]}"
    configs_var="CONFIGS_$i"
    configs=${!configs_var:-${PAIR_CONFIGS:-default,--no-gemv --no-pdl --no-split-attn --no-norm-gemv}}
    echo "== pairs: $model, $n x $tokens, ${ROUNDS:-5} rounds [${SECONDS}s]"
    timeout ${PAIR_LIMIT:-150} python3 scripts/bench_engine_pairs.py --model "$model" --device cuda --paged-attn \
      --cuda-graph --num-requests "$n" --max-new-tokens "$tokens" --prompt-len 1 --same-prompts \
      --rounds "${ROUNDS:-5}" --no-hf --configs "$configs" 2>&1 | tail -10
  done
fi
if want hf; then
  for w in "${WORKLOADS[@]}"; do
    read -r model n tokens <<< "$w"
    echo "== HF static cache + torch.compile: $model, $n x $tokens [${SECONDS}s]"
    timeout ${HF_LIMIT:-100} python3 scripts/bench_hf_compiled.py --hf-model-id "$model" --batch "$n" \
      --new-tokens "$tokens" --repeat 2 2>&1 | tail -3
  done
fi
if want step; then
  for r in ${STEP_RUNS:-1:12,16:128,256,512}; do
    IFS=: read -r b variants pasts model <<< "$r"
    echo "== graph replay GPU time, ${model:-gpt2}, batch $b [${SECONDS}s]"
    timeout ${STEP_LIMIT:-100} python3 scripts/bench_graph_step.py --model "${model:-gpt2}" --batch "$b" --past "$pasts" --reps 100 \
      --variants "$variants" 2>&1 | tail -6
  done
fi
echo "== done [${SECONDS}s]"
}
main 2>&1 | tee "$OUT/report.txt"
