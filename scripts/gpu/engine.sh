# The engine's GPU stages (sourced by scripts/gpu_check.sh): its tests and the benchmarks whose figures
# docs/BENCHMARKS.md records. Each stage runs from the repo root in a subshell, its files under $S.

stage tests "every GPU-marked test (pytest -m gpu; TESTS narrows it, TEST_K selects, TEST_LIMIT seconds, 420)"
stage_tests() {
  timeout "${TEST_LIMIT:-420}" python3 -m pytest -p no:cacheprovider -o addopts='' -q -rs -m gpu ${TEST_K:+-k "$TEST_K"} \
    ${TESTS:-tests/} 2>&1 | tail -30
}

stage b1 "batch 1, 256 new tokens, --paged-attn --cuda-graph, 5 runs: decode tok/s, TPOT and the HBM floor (FLAGS: \
';'-separated configurations, default 'default')"
stage_b1() {
  configs "${FLAGS:-default}" | while IFS= read -r flag; do
    echo "-- b1 ${flag:-(default)}"
    timeout 150 python3 -m roseinfer.benchmark_streaming $B1 --repeat-runs 5 $flag --json "$S/b1${flag// /}.json" \
      2>&1 | tail -12
  done
}

stage a "workload (a): 64 requests x 512 new tokens, batch 64, --paged-attn --cuda-graph, 3 runs (FLAGS as for b1; \
HF=1 adds Hugging Face generate beside it)"
stage_a() {
  configs "${FLAGS:-default}" | while IFS= read -r flag; do
    echo "-- (a) ${flag:-(default)}"
    timeout 240 python3 -m roseinfer.benchmark_scheduler $A --repeat-runs 3 ${HF:+--compare-hf} $flag \
      --json "$S/a${flag// /}.json" 2>&1 | tail -14
  done
}

stage workloads "issue 6's workloads beside Hugging Face generate (fp16, same weights): (a) eager paged and with \
CUDA graphs, (b) 256 x 64 at batch 256, (c) streaming, 128 requests of 1 and 4 prompt repeats x 128"
stage_workloads() {
  local fast="--device cuda --hf-model-id gpt2 --no-stop-on-eos --paged-attn --compare-hf --warmup-runs 1 --repeat-runs 3"
  local a="--num-requests 64 --prompt x --max-new-tokens 512 --max-batch-size 64 --prefill-max-batch-size 64"
  echo "-- (a), CUDA graphs"
  python3 -m roseinfer.benchmark_scheduler $fast --cuda-graph $a --json "$S/workload-a.json" 2>&1 | tail -14
  echo "-- (a), eager"
  python3 -m roseinfer.benchmark_scheduler $fast $a --json "$S/workload-a-eager.json" 2>&1 | tail -14
  echo "-- (b)"
  python3 -m roseinfer.benchmark_scheduler $fast --cuda-graph --num-requests 256 --max-new-tokens 64 \
    --max-batch-size 256 --prefill-max-batch-size 256 --json "$S/workload-b.json" 2>&1 | tail -14
  echo "-- (c)"
  python3 -m roseinfer.benchmark_streaming $fast --cuda-graph --num-requests 128 --prompt-repeats 1,4 \
    --max-new-tokens 128 --max-batch-size 128 --prefill-max-batch-size 128 --json "$S/workload-c.json" 2>&1 | tail -14
}

stage pairs "configurations side by side in one process, interleaved rounds (scripts/bench_engine_pairs.py): \
WORKLOADS 'model batch tokens;...' (default gpt2 1 256;gpt2 64 512), CONFIGS (default default,--no-block-table-cache; \
CONFIGS_<n> for the n-th workload), ROUNDS (5)"
stage_pairs() {
  local i model n tokens configs_var
  IFS=';' read -ra workloads <<< "${WORKLOADS:-gpt2 1 256;gpt2 64 512}"
  for i in "${!workloads[@]}"; do
    read -r model n tokens <<< "${workloads[$i]}"
    configs_var="CONFIGS_$i"
    echo "-- pairs: $model, $n x $tokens, ${ROUNDS:-5} rounds [${SECONDS}s]"
    timeout "${PAIR_LIMIT:-200}" python3 scripts/bench_engine_pairs.py --model "$model" --device cuda --paged-attn \
      --cuda-graph --num-requests "$n" --max-new-tokens "$tokens" --prompt-len 1 --same-prompts \
      --rounds "${ROUNDS:-5}" --no-hf --configs "${!configs_var:-${CONFIGS:-default,--no-block-table-cache}}" 2>&1 | tail -10
  done
}

stage hf "Hugging Face with a static cache + torch.compile (scripts/bench_hf_compiled.py) at WORKLOADS (default gpt2 1 256)"
stage_hf() {
  local w model n tokens
  IFS=';' read -ra workloads <<< "${WORKLOADS:-gpt2 1 256}"
  for w in "${workloads[@]}"; do
    read -r model n tokens <<< "$w"
    echo "-- HF compiled: $model, $n x $tokens"
    timeout "${HF_LIMIT:-240}" python3 scripts/bench_hf_compiled.py --hf-model-id "$model" --batch "$n" \
      --new-tokens "$tokens" --repeat 3 2>&1 | tail -4
  done
}

stage step "GPU time of one captured step by kernel design (scripts/bench_graph_step.py; STEP_RUNS \
'batch:variants:pasts[:model] ...', default 1:28,31:65,128,512 64:28,31:65,128,512)"
stage_step() {
  local r b variants pasts model
  for r in ${STEP_RUNS:-1:28,31:65,128,512 64:28,31:65,128,512}; do
    IFS=: read -r b variants pasts model <<< "$r"
    echo "-- graph replay, ${model:-gpt2}, batch $b, variants $variants [${SECONDS}s]"
    timeout "${STEP_LIMIT:-150}" python3 scripts/bench_graph_step.py --model "${model:-gpt2}" --batch "$b" \
      --past "$pasts" --reps 50 --variants "$variants" 2>&1 | tail -8
  done
}

stage gemv "the GEMV and the skinny GEMM against cuBLAS on the decode linears (scripts/bench_gemv.py; SWEEP=--sweep)"
stage_gemv() {
  timeout 200 python3 scripts/bench_gemv.py --rows 1,2,4,8 ${SWEEP-} 2>&1 | tee "$S/gemv.txt" | tail -40
  timeout 200 python3 scripts/bench_gemv.py --skinny --rows 16,32,64 2>&1 | tee "$S/skinny.txt" | tail -30
}

stage attn "the paged-attention kernel against the HBM, tile by tile (scripts/bench_paged_attention.py)"
stage_attn() {
  timeout 240 python3 scripts/bench_paged_attention.py --batch 512,64,8 --past 1,64,65,128,256,512,1000 2>&1 | tail -40
}

stage kv-append "the KV append: torch against each Triton kernel (scripts/bench_kv_append.py)"
stage_kv_append() {
  timeout 200 python3 scripts/bench_kv_append.py --batch-sizes 128,256,512,1024,2048 2>&1 | tail -20
}

stage host "host time per part of a captured decode step, no profiler (scripts/bench_decode_host.py, batch 64)"
stage_host() {
  timeout 200 python3 scripts/bench_decode_host.py --device cuda --model gpt2 --batch 64 --new-tokens 256 2>&1 | tail -20
}

stage nvtx "what the engine's instrumentation costs on the fast path: NVTX and record_function on/off interleaved in \
one process (scripts/bench_nvtx_overhead_ab.py), and per region (scripts/bench_tracing_overhead.py)"
stage_nvtx() {
  local sw
  for sw in nvtx record_function; do
    echo "-- $sw on/off, batch 64"
    timeout 200 python3 scripts/bench_nvtx_overhead_ab.py --device cuda --model gpt2 --batch 64 --new-tokens 256 \
      --pairs 8 --paged-attn --cuda-graph --switch $sw 2>&1 | tail -4
  done
  timeout 200 python3 scripts/bench_tracing_overhead.py 2>&1 | tail -8
}

stage cuda-mlp "the one-row fused MLP CUDA kernel (roseinfer/cuda_ext) against the Triton path in a captured \
12-layer chain: its build time, µs per MLP with stamps off, on, without the stamp code, and with its output one \
row instead of a split sum, the stamps' phases"
stage_cuda_mlp() {
  timeout 400 python3 scripts/bench_cuda_mlp.py --bare --json "$S/cuda-mlp.json"
}

stage kernel-regions "regions inside a fused kernel (issue 50): roseprof torch and nsys captures of the stamped fused \
MLP (scripts/stamped_mlp_program.py, test build), their regions against the kernel's duration and a planted delay \
(the GPU tests of tests/roseprof/test_kernel_stamps.py, printing their figures)"
stage_kernel_regions() {
  timeout 580 python3 -m pytest -p no:cacheprovider -o addopts='' -q -rs -s -m gpu \
    tests/roseprof/test_kernel_stamps.py 2>&1 | tail -40
}
