#!/usr/bin/env bash
# Does the gate hold on a noisy shared machine? (docs/BENCHMARKS.md, "The gate across runs")
#   scripts/gate_noise.sh capture TRACES   (a) 10 pairs of same-code groups, 3 captures a side; (b) the three
#                                          known regressions and the default, 3 captures each (interleaved)
#   scripts/gate_noise.sh report TRACES    the diffs: groups (hierarchical bootstrap) and first runs only (the
#                                          single-run method); default gate, `regions.*` and every region metric
#                                          (`regions.*` and `steps.*.regions.*`) gated
# Each capture holds /tmp/roseprof-nsys.lock for itself only, so others can use nsys between captures.
# PYTHON (default .venv/bin/python) runs roseprof and the benchmark; PAIRS (default 10) and RUNS (default 3).
set -euo pipefail
cd "$(dirname "$0")/.."
what=${1:?capture or report}
traces=${2:?traces folder}
dash=$traces/dashboards
py=${PYTHON:-.venv/bin/python}
pairs=${PAIRS:-10}
runs=${RUNS:-3}
# One torch thread: on the shared 2-core machine torch's default (2 OpenMP threads) collapses when other
# processes load the cores (the (a) workload: 74 s of decode instead of 2.9 s at load 7); the noise of the
# shared machine stays (docs/BENCHMARKS.md).
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
# (a) the CPU engine benchmark, ~10-15 s a capture on the 2-core machine
same=($py -m roseinfer.benchmark_streaming --hf-model-id gpt2-tiny --device cpu --num-requests 16
  --max-batch-size 16 --max-new-tokens 128 --no-stop-on-eos --warmup-runs 0 --repeat-runs 1)
# (b) docs/ROSEPROF.md's worked example: equal prompts, so all 64 requests roll over in the same steps
w=($py -m roseinfer.benchmark_streaming --hf-model-id gpt2-tiny --device cpu --num-requests 64 --max-batch-size 64
  --prefill-max-batch-size 64 --max-new-tokens 400 --prompt abcdefghijklmnop --no-stop-on-eos
  --warmup-runs 0 --repeat-runs 1)
# Every region metric: each region's time per step, and its median and mean in rollover and in normal steps.
every=(--metric 'regions.*' --metric 'steps.*.regions.*')
rp() { local verb=$1; shift; $py -m roseprof "$verb" --traces-dir "$traces" --dashboards-dir "$dash" "$@"; }
capture() {  # capture NAME CMD...: one capture under the shared lock
  local name=$1; shift
  echo "$(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg) capture $name" >&2
  flock /tmp/roseprof-nsys.lock $py -m roseprof nsys --name "$name" --traces-dir "$traces" \
    --dashboards-dir "$dash" -- "$@" > /dev/null
}
first_run() { rp ls --json | $py -c "import json,sys; print([r['id'] for r in json.load(sys.stdin) if r['name']=='$1' and r['status']=='complete'][0])"; }
count() { rp ls --json | $py -c "import json,sys; print(sum(r['name']=='$1' and r['status']=='complete' for r in json.load(sys.stdin)))"; }
gate() {  # gate LABEL A... --vs B... [options]: prints LABEL and the regressions, never fails the script
  local label=$1; shift
  local out rc=0
  out=$(rp diff "$@" --json) || rc=$?
  echo "$label exit=$rc regressions=$(echo "$out" | $py -c 'import json,sys; print(",".join(json.load(sys.stdin)["regressions"]) or "-")')"
}
case $what in
capture)
  for r in $(seq "$runs"); do
    for flag in default --no-batched-kv-append --no-batched-rollover --no-block-table-cache; do
      capture "known-${flag#--}" "${w[@]}" $([ "$flag" = default ] || echo "$flag")
    done
  done
  for p in $(seq "$pairs"); do
    for side in a b; do
      for r in $(seq "$runs"); do capture "same$p-$side" "${same[@]}"; done
    done
  done
  ;;
report)
  echo "load average now: $(cut -d' ' -f1-3 /proc/loadavg)"
  for p in $(seq "$pairs"); do
    if [ "$(count "same$p-a")" -lt "$runs" ] || [ "$(count "same$p-b")" -lt "$runs" ]; then
      echo "pair $p: fewer than $runs complete runs a side, skipped"; continue
    fi
    gate "pair $p groups default" "same$p-a" --vs "same$p-b" --fail-on-regression 10
    gate "pair $p groups regions" "same$p-a" --vs "same$p-b" --fail-on-regression 10 --metric 'regions.*'
    gate "pair $p groups every-region" "same$p-a" --vs "same$p-b" --fail-on-regression 10 "${every[@]}"
    a1=$(first_run "same$p-a") b1=$(first_run "same$p-b")
    gate "pair $p first-runs default" "$a1" --vs "$b1" --fail-on-regression 10
    gate "pair $p first-runs regions" "$a1" --vs "$b1" --fail-on-regression 10 --metric 'regions.*'
  done
  for before in known-no-batched-kv-append known-no-batched-rollover known-no-block-table-cache; do
    # The earlier design is the regression: default (A) -> earlier design (B) must fire the gate.
    echo "== known-default -> $before, $runs runs a side"
    rp diff known-default "$before" --fail-on-regression 10 --metric 'regions.*' --top 6 || true
    gate "gate default -> $before (default metrics)" known-default --vs "$before" --fail-on-regression 10
    gate "gate default -> $before (every region metric)" known-default --vs "$before" --fail-on-regression 10 \
      "${every[@]}"
  done
  ;;
*) echo "usage: $0 capture|report TRACES" >&2; exit 2 ;;
esac
