# Sourced by scripts/gpu_check.sh (run from the repo root): what every GPU stage shares.

# The engine's fast-path commands whose figures docs/BENCHMARKS.md records (flags of roseinfer's benchmarks):
# batch 1 with 256 new tokens, and workload (a), 64 one-token requests x 512 new tokens at batch 64.
B1="--device cuda --hf-model-id gpt2 --paged-attn --cuda-graph --no-stop-on-eos --num-requests 1 --max-batch-size 1 \
--prefill-max-batch-size 1 --max-new-tokens 256 --warmup-runs 1"
A="--device cuda --hf-model-id gpt2 --no-stop-on-eos --paged-attn --cuda-graph --num-requests 64 --prompt x \
--max-new-tokens 512 --max-batch-size 64 --prefill-max-batch-size 64 --warmup-runs 1"

gpu_env() {  # the wheels carried in .whl (the machine has no internet) and nsys 2025.3 where it was carried
  source scripts/gpu_wheels.sh
  local f
  for f in ../shared/gpu/nsys-on-gpu.sh shared/gpu/nsys-on-gpu.sh .gpu/nsys-on-gpu.sh; do
    [ -f "$f" ] && { source "$f"; break; }
  done
  export PYTHONUNBUFFERED=1
  # The CUDA modules' builds in a git-ignored folder of the tree: the device keeps ignored files there between the
  # calls of one warm machine, where its home folder starts fresh each call (cutlass_gemm was built in each of
  # session 62's calls, 105-140 s, under the same key).
  export ROSEINFER_CUDA_EXT_CACHE=${ROSEINFER_CUDA_EXT_CACHE:-$PWD/.cuda_ext_cache}
}

machine() {  # what the figures were measured on
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null
  nsys --version 2>/dev/null
  python3 -c "import torch, triton, transformers; print('torch', torch.__version__, 'triton', triton.__version__, \
'transformers', transformers.__version__)" 2>/dev/null
  git log --oneline -1 2>/dev/null
  # The device's git metadata can be older than the files that travelled (the working tree): this hash of the
  # sources themselves is the one to compare with `source_hash` run here.
  echo "sources $(source_hash)"
  date -u
}

source_hash() {  # one hash of every Python and CUDA source of the package and scripts, as they are on disk
  find roseinfer roseprof scripts -type f \( -name '*.py' -o -name '*.cu' -o -name '*.cuh' -o -name '*.sh' \) \
    -not -path '*/__pycache__/*' | LC_ALL=C sort | xargs sha1sum | sha1sum | cut -c1-12
}

configs() {  # configs LIST: the ';'-separated configurations of LIST, one a line ('default': no flag)
  local c
  IFS=';' read -ra _cfgs <<< "$1"
  for c in "${_cfgs[@]}"; do [ "$c" = default ] && echo "" || echo "$c"; done
}
