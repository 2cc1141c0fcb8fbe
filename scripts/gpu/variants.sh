# Sourced by scripts/gpu_check.sh: kernel variants side by side (issue 50).

stage variants "kernel variants side by side (issue 50): batch 1 for each tree of VARIANTS ('NAME=DIR ...', default \
'main=.'; a tree is a copy of the repo's roseinfer/ with one edit, e.g. under .gpu/v/, carried with .gpu), each \
built first in a cache folder of its own, then ROUNDS (3) rounds running each variant once in turn (--repeat-runs \
RUNS, 3), then a stamped run of each; scripts/variant_summary.py prints each round's TPOT and the kernels' phases"
stage_variants() {
  local spec name dir names=() pids=()
  declare -A tree
  for spec in ${VARIANTS:-main=.}; do
    name=${spec%%=*} dir=${spec#*=}
    [ -d "$dir/roseinfer" ] || { echo "variants: $dir has no roseinfer/ (VARIANTS=\"$VARIANTS\")"; return 1; }
    names+=("$name"); tree[$name]=$(cd "$dir" && pwd)
  done
  # Each tree builds into its own cache (two trees never build one folder at once) before anything is timed: a
  # first use inside a timed run would spend its limit compiling.
  for name in "${names[@]}"; do
    for kernel in fused_mlp fused_attn; do
      ( cd "${tree[$name]}" && PYTHONPATH=$PWD:${PYTHONPATH:-} ROSEINFER_CUDA_EXT_CACHE=/tmp/variants-cache/$name \
        python3 -c "from roseinfer import cuda_ext; from roseinfer.cuda_ext import $kernel as m
assert m.load() is not None, cuda_ext.why_not_built(m.NAME)" ) &
      pids+=($!)
    done
  done
  local pid rc=0
  for pid in "${pids[@]}"; do wait "$pid" || rc=1; done
  [ $rc = 0 ] || { echo "variants: a build failed (above)"; return 1; }
  one() {  # one NAME TAG RUNS [ENV...]: a batch-1 run of NAME's tree, its JSON and log under $S
    local name=$1 tag=$2 runs=$3; shift 3
    ( cd "${tree[$name]}" && env PYTHONPATH=$PWD:${PYTHONPATH:-} ROSEINFER_CUDA_EXT_CACHE=/tmp/variants-cache/$name "$@" \
      timeout 90 python3 -m roseinfer.benchmark_streaming $B1 --repeat-runs "$runs" --json "$S/$tag.json" \
      > "$S/$tag.log" 2>&1 ) || { echo "variants: $tag failed:"; tail -3 "$S/$tag.log"; return 1; }
  }
  local round
  for round in $(seq 1 "${ROUNDS:-3}"); do
    for name in "${names[@]}"; do one "$name" "b1-$name-$round" "${RUNS:-3}" || return 1; done
  done
  for name in "${names[@]}"; do
    one "$name" "st-$name" 1 ROSEINFER_RECORD_FUNCTION=1 ROSEINFER_KERNEL_STAMPS="$S/stamps-$name.jsonl" || return 1
  done
  python3 scripts/variant_summary.py "$S" | tee "$S/summary.txt"
}
