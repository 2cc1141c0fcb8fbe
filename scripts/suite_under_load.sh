#!/usr/bin/env bash
# The test suite on a busy machine (issue 21): the README's test command while LOAD (default 2) CPU-bound
# processes compete for the cores; each spinner is bounded by `timeout` and stopped when the suite ends.
#   bash scripts/suite_under_load.sh [LOG]
set -uo pipefail
cd "$(dirname "$0")/.."
LOG=${1:-/tmp/suite-under-load.log}
LOAD=${LOAD:-2}
pids=()
for _ in $(seq "$LOAD"); do
  timeout 3600 python3 -c 'while True: pass' &
  pids+=($!)
done
trap 'kill "${pids[@]}" 2>/dev/null' EXIT
start=$(date +%s)
echo "suite under load: $LOAD spinners on $(nproc) cores, start $(date -u +%H:%M:%S) UTC" | tee "$LOG"
make test >>"$LOG" 2>&1
rc=$?
end=$(date +%s)
echo "suite under load: exit $rc, wall $(((end - start) / 60)) min $(((end - start) % 60)) s," \
  "load average at the end $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$LOG"
tail -3 "$LOG" | head -2
exit $rc
