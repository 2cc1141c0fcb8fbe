#!/usr/bin/env bash
# Everything the GPU machine is needed for, in one call (see docs/BENCHMARKS.md for how it is run):
# CUDA correctness tests, an nsys 2025.3 capture of the engine with the tool's own reports as oracles,
# and the NVTX on/off overhead of the engine benchmark. Results go under $OUT.
# STAGES picks what runs (default: all): tests, fixture, demo, nvtx, kernels, hf (the eager engine, session 1),
# gputests, graphtests, a, b, c, nvtxfast, nvtxab, host, attn, capturefast (the CUDA-graph fast path, issue 6),
# steptests, step (fused kernels and overlapped decode, session 3).
set -uo pipefail
OUT=${OUT:-/tmp/gpu-out}
STAGES=${STAGES:-tests,fixture,demo,nvtx,kernels,hf,gputests,a,b,c,nvtxfast,nvtxab,host,attn,capturefast}
want() { [[ ",$STAGES," == *",$1,"* ]]; }
mkdir -p "$OUT" /tmp/bundle
export PYTHONUNBUFFERED=1
source scripts/gpu_wheels.sh
source .gpu/nsys-on-gpu.sh
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; nsys --version; python3 -c "import torch, triton, transformers; print(torch.__version__, triton.__version__, transformers.__version__)"; } | tee /tmp/bundle/machine.txt

if want tests; then
echo "== 1. CUDA tests"
python3 -m pytest -p no:cacheprovider -o addopts='' tests/roseinfer/test_engine_cuda.py tests/roseinfer/test_kv_append_kernels.py 2>&1 | tail -25 | tee /tmp/bundle/gpu-tests.log
fi

if want fixture; then
echo "== 2. a small capture of the engine as a fixture, with nsys stats oracles"
python3 -m roseprof nsys --traces-dir /tmp/tr --name gpu-fixture --trace cuda,nvtx python3 -m roseinfer.benchmark_streaming \
  --device cuda --hf-model-id gpt2 --num-requests 8 --max-batch-size 8 --max-new-tokens 72 --warmup-runs 0 --repeat-runs 1 \
  --no-stop-on-eos > /tmp/bundle/capture-fixture.log 2>&1; echo "capture rc=$?"
run=$(ls -d /tmp/tr/*gpu-fixture*)
cp "$run/raw/trace.sqlite" /tmp/bundle/h100-nsys2025.3-roseinfer-decode.sqlite
cp "$run/steplog.jsonl" /tmp/bundle/h100-nsys2025.3-roseinfer-decode.steplog.jsonl
cp "$run/summary.json" /tmp/bundle/gpu-fixture-summary.json
for f in /tmp/bundle/h100-nsys2025.3-roseinfer-decode.sqlite tests/data/nsys/h100-nsys2025.3-matmul-nvtx.sqlite; do
  base=/tmp/bundle/$(basename "$f" .sqlite)
  nsys stats -q --force-export=false -r nvtx_sum,cuda_gpu_kern_sum,nvtx_gpu_proj_sum,nvtx_kern_sum --format csv -o "$base.stats" "$f" > /dev/null 2>&1
done
ls /tmp/bundle
fi

if want demo; then
echo "== 3. the default GPU demo capture"
python3 -m roseprof nsys --traces-dir /tmp/tr --name gpu-demo 2>&1 | tail -45 | tee /tmp/bundle/gpu-demo.log
demo=$(ls -d /tmp/tr/*gpu-demo*)
tar czf /tmp/bundle/gpu-demo-run.tgz -C "$(dirname "$demo")" --exclude=raw --exclude='*.npz' "$(basename "$demo")"
fi

if want nvtx; then
echo "== 4. NVTX overhead on GPU (no profiler attached), interleaved"
for i in 1 2 3; do
  for nvtx in 0 1; do
    ROSEINFER_NVTX=$nvtx python3 -m roseinfer.benchmark_streaming --device cuda --hf-model-id gpt2 --num-requests 64 \
      --max-batch-size 64 --max-new-tokens 256 --no-stop-on-eos --warmup-runs 1 --repeat-runs 3 \
      --json /tmp/bundle/nvtx$nvtx-$i.json > /dev/null 2>&1
    python3 -c "import json; r=json.load(open('/tmp/bundle/nvtx$nvtx-$i.json')); print('nvtx=$nvtx', [round(x['decode_tok_s']) for x in r['runs']])"
  done
done | tee /tmp/bundle/nvtx-overhead.log
fi

if want kernels; then
echo "== 5. KV append kernels"
python3 scripts/bench_kv_append.py --batch-sizes 128,256,512,1024,2048 2>&1 | tee /tmp/bundle/bench-kv-append.md
fi

if want hf; then
echo "== 6. workload (a) against Hugging Face, plain torch paths"
python3 -m roseinfer.benchmark_scheduler --device cuda --hf-model-id gpt2 --num-requests 64 --prompt "x" \
  --max-new-tokens 512 --max-batch-size 64 --prefill-max-batch-size 64 --no-stop-on-eos --warmup-runs 1 \
  --repeat-runs 1 --compare-hf 2>&1 | tail -14 | tee /tmp/bundle/workload-a.log
fi

if want graphtests; then
echo "== 7b. the engine's GPU tests (CUDA graphs, engine vs Hugging Face)"
timeout 300 python3 -m pytest -p no:cacheprovider -o addopts='' tests/roseinfer/test_cuda_graphs.py tests/roseinfer/test_engine_cuda.py \
  tests/roseinfer/test_paged_attention_kernel.py 2>&1 | tail -4 | tee /tmp/bundle/graph-tests.log
fi

if want steptests; then
echo "== 7c. the fused kernels' tests, CUDA graphs (overlapped decode), engine and paged attention"
timeout 400 python3 -m pytest -p no:cacheprovider -o addopts='' tests/roseinfer/test_fused_kernels.py tests/roseinfer/test_cuda_graphs.py \
  tests/roseinfer/test_engine_cuda.py tests/roseinfer/test_paged_attention_kernel.py 2>&1 | tail -25 | tee /tmp/bundle/step-tests.log
fi

if want step; then
echo "== 13. GPU time of one graph replay, the kernel changes added one at a time"
python3 scripts/bench_graph_step.py --batch 64 --past 128,256,512 2>&1 | tail -8 | tee /tmp/bundle/graph-step.md
fi

if want gputests; then
echo "== 7. every GPU-marked test (kernels, engine on CUDA, CUDA graphs)"
timeout 420 python3 -m pytest -p no:cacheprovider -o addopts='' -m gpu tests 2>&1 | tail -25 | tee /tmp/bundle/gpu-tests-all.log
fi

# The issue's three workloads, each in one run with Hugging Face generate (fp16, same weights) measured beside it.
FAST="--device cuda --hf-model-id gpt2 --no-stop-on-eos --paged-attn --compare-hf"
if want a; then
echo "== 8a. workload (a): 64 requests, one-token prompt, 512 new tokens, batch 64"
python3 -m roseinfer.benchmark_scheduler $FAST --cuda-graph --num-requests 64 --prompt x --max-new-tokens 512 \
  --max-batch-size 64 --prefill-max-batch-size 64 --warmup-runs 1 --repeat-runs 3 --json /tmp/bundle/workload-a.json \
  2>&1 | tail -14 | tee /tmp/bundle/workload-a.log
python3 -m roseinfer.benchmark_scheduler $FAST --num-requests 64 --prompt x --max-new-tokens 512 \
  --max-batch-size 64 --prefill-max-batch-size 64 --warmup-runs 1 --repeat-runs 3 --json /tmp/bundle/workload-a-nograph.json \
  2>&1 | tail -14 | tee /tmp/bundle/workload-a-nograph.log
echo "-- (a) again, the host waiting for each step's tokens before preparing the next (--no-overlap-decode)"
python3 -m roseinfer.benchmark_scheduler $FAST --cuda-graph --no-overlap-decode --num-requests 64 \
  --prompt x --max-new-tokens 512 --max-batch-size 64 --prefill-max-batch-size 64 --warmup-runs 1 --repeat-runs 3 \
  --json /tmp/bundle/workload-a-sync.json 2>&1 | tail -14 | tee /tmp/bundle/workload-a-sync.log
fi
if want b; then
echo "== 8b. workload (b): 256 requests, 64 new tokens, batch 256"
python3 -m roseinfer.benchmark_scheduler $FAST --cuda-graph --num-requests 256 --max-new-tokens 64 \
  --max-batch-size 256 --prefill-max-batch-size 256 --warmup-runs 1 --repeat-runs 3 --json /tmp/bundle/workload-b.json \
  2>&1 | tail -14 | tee /tmp/bundle/workload-b.log
fi
if want c; then
echo "== 8c. workload (c): streaming, 128 requests, prompts of 1 and 4 repeats, 128 new tokens"
python3 -m roseinfer.benchmark_streaming $FAST --cuda-graph --num-requests 128 --prompt-repeats 1,4 \
  --max-new-tokens 128 --max-batch-size 128 --prefill-max-batch-size 128 --warmup-runs 1 --repeat-runs 3 \
  --json /tmp/bundle/workload-c.json 2>&1 | tail -14 | tee /tmp/bundle/workload-c.log
fi

if want nvtxfast; then
echo "== 9. NVTX overhead of the fast path (no profiler attached), interleaved"
for i in 1 2 3; do
  for nvtx in 0 1; do
    ROSEINFER_NVTX=$nvtx python3 -m roseinfer.benchmark_scheduler --device cuda --hf-model-id gpt2 --no-stop-on-eos \
      --paged-attn --cuda-graph --num-requests 64 --prompt x --max-new-tokens 512 --max-batch-size 64 \
      --prefill-max-batch-size 64 --warmup-runs 1 --repeat-runs 3 --json /tmp/bundle/fast-nvtx$nvtx-$i.json > /dev/null 2>&1
    python3 -c "import json; r=json.load(open('/tmp/bundle/fast-nvtx$nvtx-$i.json')); print('nvtx=$nvtx', [round(x['decode_tok_s']) for x in r['runs']])"
  done
done | tee /tmp/bundle/fast-nvtx-overhead.log
fi

if want nvtxab; then
echo "== 9b. NVTX overhead of the fast path, on/off interleaved in one process"
python3 scripts/bench_nvtx_overhead_ab.py --device cuda --model gpt2 --batch 64 --new-tokens 256 --pairs 8 \
  --paged-attn --cuda-graph 2>&1 | tail -4 | tee /tmp/bundle/fast-nvtx-ab.log
fi

if want host; then
echo "== 11. host time per part of a graph decode step, no profiler"
python3 scripts/bench_decode_host.py --device cuda --model gpt2 --batch 64 --new-tokens 256 2>&1 | tail -14 \
  | tee /tmp/bundle/decode-host.md
fi

if want attn; then
echo "== 12. paged-attention kernel bandwidth"
python3 scripts/bench_paged_attention.py --batch 64 --past 128,256,512 2>&1 | tee /tmp/bundle/paged-attn.md
fi

if want capturefast; then
echo "== 10. roseprof nsys capture of the fast engine"
python3 -m roseprof nsys --traces-dir /tmp/tr --name gpu-fast python3 -m roseinfer.benchmark_scheduler --device cuda \
  --hf-model-id gpt2 --no-stop-on-eos --paged-attn --cuda-graph --num-requests 64 --prompt x --max-new-tokens 512 \
  --max-batch-size 64 --prefill-max-batch-size 64 --warmup-runs 1 --repeat-runs 1 2>&1 | tail -45 | tee /tmp/bundle/gpu-fast.log
fast=$(ls -d /tmp/tr/*gpu-fast*)
tar czf /tmp/bundle/gpu-fast-run.tgz -C "$(dirname "$fast")" --exclude=raw "$(basename "$fast")"
cp dashboards/*gpu-fast*.html /tmp/bundle/ 2>/dev/null
fi
tar czf "$OUT/bundle.tgz" -C /tmp/bundle .
ls -la "$OUT"
