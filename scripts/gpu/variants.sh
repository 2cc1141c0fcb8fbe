# Sourced by scripts/gpu_check.sh: kernel variants side by side (issue 50).

stage variants "kernel variants side by side (issue 50): batch 1 for each tree of VARIANTS ('NAME=DIR ...', default \
'main=.'; NAME letters, digits, _.-; DIR without spaces, a copy of the repo's roseinfer/ with one edit, e.g. under \
.gpu/v/, carried with .gpu), each built first in a cache folder of its own, then ROUNDS (3) rounds running each \
variant once (--repeat-runs RUNS, 3), each round starting one variant later, then a stamped run of each; \
scripts/variant_summary.py prints each round's TPOT, the kernels' phases and the handoffs between them"
stage_variants() {
  local spec name dir kernel names=()
  declare -A tree
  for spec in ${VARIANTS-main=.}; do
    name=${spec%%=*} dir=${spec#*=}
    if [[ $spec != *=* || ! $name =~ ^[A-Za-z0-9_.-]+$ || -n ${tree[$name]+x} ]]; then
      echo "variants: '$spec' is not NAME=DIR with a new NAME of letters, digits, _.- (VARIANTS=\"${VARIANTS-}\")"
      return 1
    fi
    [ -d "$dir/roseinfer" ] || { echo "variants: $dir has no roseinfer/ (VARIANTS=\"${VARIANTS-}\")"; return 1; }
    names+=("$name"); tree[$name]=$(cd "$dir" && pwd)
  done
  S=$(cd "$S" && pwd)  # the runs cd into their trees
  # This call's files only: the stamps are appended to, and the summary reads every b1-*.json here.
  rm -f "$S"/b1-*.json "$S"/b1-*.log "$S"/st-*.json "$S"/st-*.log "$S"/stamps-*.jsonl "$S"/summary.txt
  printf '%s\n' "${names[@]}" > "$S/variants.txt"  # the summary's order
  # Each tree builds every CUDA module the engine loads (MODULE.FUNCTION that builds it) into its own cache (two
  # trees never build one folder at once) before anything is timed: a first use inside a timed run would spend
  # its limit compiling (the CUTLASS GEMM alone takes longer than a run's 90 s).
  declare -A built
  local entry
  for name in "${names[@]}"; do
    for entry in fused_mlp.load fused_attn.load paged_attn.load cutlass_gemm.module; do
      kernel=${entry%.*}
      ( cd "${tree[$name]}" && PYTHONPATH=$PWD:${PYTHONPATH:-} ROSEINFER_CUDA_EXT_CACHE=/tmp/variants-cache/$name \
        timeout 600 python3 -c "from roseinfer import cuda_ext; from roseinfer.cuda_ext import $kernel as m
if m.${entry#*.}() is None: raise SystemExit(cuda_ext.why_not_built(m.NAME))" ) &
      built[$!]="$name's $kernel"
    done
  done
  local pid rc failed=0
  for pid in "${!built[@]}"; do
    wait "$pid"; rc=$?
    [ $rc = 0 ] || { echo "variants: building ${built[$pid]} failed (exit $rc$([ $rc = 124 ] && echo ': over 600 s'))"; failed=1; }
  done
  [ $failed = 0 ] || return 1
  one() {  # one NAME TAG RUNS [ENV...]: a batch-1 run of NAME's tree, its JSON and log under $S
    local name=$1 tag=$2 runs=$3 rc; shift 3
    ( cd "${tree[$name]}" && env PYTHONPATH=$PWD:${PYTHONPATH:-} \
      ROSEINFER_CUDA_EXT_CACHE=/tmp/variants-cache/$name "$@" timeout 90 python3 -m roseinfer.benchmark_streaming \
      $B1 --repeat-runs "$runs" --json "$S/$tag.json" > "$S/$tag.log" 2>&1 ); rc=$?
    [ $rc = 0 ] && return 0
    echo "variants: $tag exited $rc$([ $rc = 124 ] && echo ' (over its 90 s)'); its log's end:"
    tail -3 "$S/$tag.log"
    return 1
  }
  local round k n=${#names[@]}
  for round in $(seq 1 "${ROUNDS:-3}"); do
    for k in $(seq 0 $((n - 1))); do  # round r starts at variant r - 1: no variant is always the first run
      name=${names[$(((round - 1 + k) % n))]}
      one "$name" "b1-$name-$round" "${RUNS:-3}" || return 1
    done
  done
  for name in "${names[@]}"; do
    one "$name" "st-$name" 1 ROSEINFER_RECORD_FUNCTION=1 ROSEINFER_KERNEL_STAMPS="$S/stamps-$name.jsonl" || return 1
  done
  python3 scripts/variant_summary.py "$S" | tee "$S/summary.txt"
}
