#!/usr/bin/env bash
# Does `roseprof diff` name the regression on a busy machine? (issue 21; docs/BENCHMARKS.md, session 6)
#   scripts/diff_acceptance.sh capture TRACES   the CPU demo (roseprof's default command) under nsys, RUNS (3) runs
#                                               each of: same-a, same-b, same-c (the default, same code) and kv
#                                               (`--no-batched-kv-append`), interleaved, with LOAD (2) CPU-bound
#                                               processes competing the whole time
#   scripts/diff_acceptance.sh report TRACES    the diffs: same-code group pairs (a-b, a-c, b-c) and the planted
#                                               regression against each (a-kv, b-kv, c-kv), 3 runs a side; then
#                                               (unless ONE_RUN=0) every pair of single same-code runs (one run a
#                                               side), for the gate's false-alarm rate
#   scripts/diff_acceptance.sh calibrate TRACES the noise-floor calibration (scripts/noise_floor_calibration.py)
#   scripts/diff_acceptance.sh capture-w TRACES / report-w TRACES: the same for docs/ROSEPROF.md's worked example W (64
#                                               requests, 400 tokens, equal prompts): same-a and kv, RUNS each
# The load processes are started and stopped by this script (bounded: `timeout`, and killed on exit).
# PYTHON (default .venv/bin/python) runs roseprof and the benchmark.
set -euo pipefail
cd "$(dirname "$0")/.."
what=${1:?capture, report or calibrate}
traces=${2:?traces folder}
dash=$traces/dashboards
py=${PYTHON:-.venv/bin/python}
runs=${RUNS:-3}
load=${LOAD:-2}
rp() { local verb=$1; shift; $py -m roseprof "$verb" --traces-dir "$traces" --dashboards-dir "$dash" "$@"; }
loadavg() { cut -d' ' -f1-3 /proc/loadavg; }
burners=()
start_load() {  # LOAD processes that each spin one core, for at most 40 minutes
  for _ in $(seq "$load"); do
    timeout 2400 $py -c 'while True: pass' & burners+=($!)
  done
}
stop_load() { for pid in "${burners[@]}"; do kill "$pid" 2>/dev/null || true; done; }
trap stop_load EXIT
# roseprof's default command on this machine (the CPU demo), as roseprof nsys runs it with no command.
mapfile -t demo < <($py -c 'from roseprof.workload.roseinfer import default_command; print("\n".join(default_command()))')
# W: docs/ROSEPROF.md's worked example, where the KV append is a larger share of the step.
w=($py -m roseinfer.benchmark_streaming --hf-model-id gpt2-tiny --device cpu --num-requests 64 --max-batch-size 64
  --prefill-max-batch-size 64 --max-new-tokens 400 --prompt abcdefghijklmnop --no-stop-on-eos
  --warmup-runs 0 --repeat-runs 1)
capture() {  # capture NAME [FLAG]: one capture of the demo command
  local name=$1; shift
  echo "$(date -u +%H:%M:%S) load $(loadavg) capture $name $*" >&2
  rp nsys --name "$name" -- "${demo[@]}" "$@" > /dev/null
}
case $what in
capture)
  start_load
  echo "demo command: ${demo[*]}" >&2
  for r in $(seq "$runs"); do
    capture same-a; capture kv --no-batched-kv-append; capture same-b; capture same-c
  done
  echo "$(date -u +%H:%M:%S) load $(loadavg) done" >&2
  ;;
report)
  start_load
  echo "load average now: $(loadavg)"
  for pair in "same-a same-b" "same-a same-c" "same-b same-c" "same-a kv" "same-b kv" "same-c kv"; do
    set -- $pair
    echo "== roseprof diff $1 $2   ($runs runs a side, $load competing processes)"
    rp diff "$1" "$2" --top 10 --fail-on-regression 10 || echo "(exit $?)"
  done
  [ "${ONE_RUN:-1}" = 0 ] && exit 0
  echo "== one run a side: every pair of single same-code runs, default gate at 10%"
  ids=$(rp ls --json | $py -c "import json,sys; print(' '.join(r['id'] for r in json.load(sys.stdin) if r['name'].startswith('same-') and r['status']=='complete'))")
  fired=0 total=0 worded=0
  set -- $ids
  while [ $# -gt 1 ]; do
    a=$1; shift
    for b in "$@"; do
      rc=0; out=$(rp diff "$a" "$b" --top 0 --fail-on-regression 10) || rc=$?
      total=$((total + 1)); [ "$rc" = 1 ] && fired=$((fired + 1))
      echo "$out" | grep -qE '\b(faster|slower)\b' && worded=$((worded + 1))
    done
  done
  echo "one run a side, same code: gate fired in $fired of $total pairs; a faster/slower word in $worded of $total"
  ;;
capture-w)
  start_load
  for r in $(seq "$runs"); do
    for flag in default --no-batched-kv-append; do
      echo "$(date -u +%H:%M:%S) load $(loadavg) capture w-$flag" >&2
      rp nsys --name "w-${flag#--}" -- "${w[@]}" $([ "$flag" = default ] || echo "$flag") > /dev/null
    done
  done
  echo "$(date -u +%H:%M:%S) load $(loadavg) done" >&2
  ;;
report-w)
  start_load
  echo "load average now: $(loadavg)"
  echo "== roseprof diff w-default w-no-batched-kv-append   ($runs runs a side, $load competing processes)"
  rp diff w-default w-no-batched-kv-append --top 10 --fail-on-regression 10 || echo "(exit $?)"
  ;;
calibrate)
  $py scripts/noise_floor_calibration.py "$traces" same-a same-b same-c
  ;;
*) echo "usage: $0 capture|report|calibrate|capture-w|report-w TRACES" >&2; exit 2 ;;
esac
