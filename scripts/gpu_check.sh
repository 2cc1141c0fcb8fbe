#!/usr/bin/env bash
# The GPU machine's checks, one entry point with named stages:
#   bash scripts/gpu_check.sh STAGE...     run the stages in order (each a function in scripts/gpu/*.sh)
#   bash scripts/gpu_check.sh --list       the stages and what each runs
# Run from the repo root (or a copy of it) with .gpu (nsys-on-gpu.sh) and .whl (the nvtx, plotly and msgspec wheels:
# the machine has no internet) carried. Results under $OUT (default /tmp/gpu-out): $OUT/report.txt (the machine and
# every stage's output), and each stage's files in $OUT/STAGE/. Stages take their settings from the environment,
# e.g. FLAGS="--no-block-table-cache;default" bash scripts/gpu_check.sh b1; --list says which each reads.
# Examples (docs/BENCHMARKS.md names the stage behind each figure):
#   bash scripts/gpu_check.sh tests b1 a               the GPU tests, then the B=1 and workload (a) figures
#   BATCH=64 bash scripts/gpu_check.sh ab              roseprof diff of --no-block-table-cache against the default
set -uo pipefail
cd "$(dirname "$0")/.."

NAMES=()
declare -A HELP
stage() { NAMES+=("$1"); HELP[$1]=$2; }  # stage NAME HELP: declared beside its function stage_NAME (- as _)

source scripts/gpu/common.sh
source scripts/gpu/engine.sh
source scripts/gpu/profiler.sh
source scripts/gpu/fixtures.sh
source scripts/gpu/ranks.sh
source scripts/gpu/serve.sh
source scripts/gpu/windows.sh
source scripts/gpu/windows_tp.sh
source scripts/gpu/nsys_windows.sh
source scripts/gpu/wire.sh
source scripts/gpu/live_truth.sh
source scripts/gpu/prefill_probe.sh
source scripts/gpu/variants.sh

list() {
  local name
  for name in "${NAMES[@]}"; do
    fold -s -w 100 <<< "${HELP[$name]}" | sed "1s/^/$(printf '%-20s' "$name")/; 2,\$s/^/                    /"
  done
}

if [ $# -eq 0 ] || [ "$1" = --help ] || [ "$1" = -h ]; then
  sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'
  echo; echo "stages:"; list; exit 0
fi
if [ "$1" = --list ]; then list; exit 0; fi
for name in "$@"; do
  [ -n "${HELP[$name]+x}" ] || { echo "unknown stage: $name (bash scripts/gpu_check.sh --list)" >&2; exit 2; }
done

OUT=${OUT:-/tmp/gpu-out}
mkdir -p "$OUT"
main() {
  gpu_env
  machine
  local name rc=0
  for name in "$@"; do
    export S=$OUT/$name
    mkdir -p "$S"
    echo "== $name: ${HELP[$name]}"
    SECONDS=0
    ( "stage_${name//-/_}" ) || rc=1
    echo "== $name done [${SECONDS}s]"
  done
  return $rc
}
main "$@" 2>&1 | tee "$OUT/report.txt"
exit "${PIPESTATUS[0]}"
