#!/usr/bin/env bash
# `roseprof import` of N per-rank Kineto files as one run against one file: wall time, peak memory and MB/s of
# JSON read, for 1 file, then a folder of 2 and of 4 copies of it (HTA's layout: rank-N.pt.trace.json).
# Last, one file as large as the most ranks together, for the per-byte speed of one file of that size.
# Usage: [RANKS="1 2 4"] scripts/bench_rank_import.sh [copies-per-file]
#   (the file: HTA's V100 trace repeated by make_big_kineto.py; 23 copies make a 300 MB rank: RANKS="1 8" ... 23)
set -euo pipefail
cd "$(dirname "$0")/.."
copies=${1:-5}
py=${PYTHON:-.venv/bin/python}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
src=tests/data/torch/facebookresearch__HolisticTraceAnalysis__rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz
"$py" scripts/make_big_kineto.py "$src" "$work/one.pt.trace.json" --copies "$copies"
bytes=$(stat -c %s "$work/one.pt.trace.json")
echo "one rank's file: $(awk -v b="$bytes" 'BEGIN {printf "%.1f", b / 1e6}') MB; load average $(cut -d' ' -f1-3 /proc/loadavg)"
ranks_list=${RANKS:-1 2 4}
for ranks in $ranks_list; do
  mkdir "$work/ranks$ranks"
  for ((r = 0; r < ranks; r++)); do ln "$work/one.pt.trace.json" "$work/ranks$ranks/rank-$r.pt.trace.json"; done
  /usr/bin/time -o "$work/time" -f "%e %M" "$py" -m roseprof import "$work/ranks$ranks" \
    --traces-dir "$work/traces" --dashboards-dir "$work/dashboards" > /dev/null
  read -r wall rss < "$work/time"
  awk -v n="$ranks" -v w="$wall" -v m="$rss" -v b="$bytes" 'BEGIN {
    printf "%d rank(s): %.1f MB, %.2f s wall, %.1f MB/s, peak RSS %.0f MB (%.2fx the JSON)\n",
      n, n * b / 1e6, w, n * b / 1e6 / w, m / 1024, m * 1024 / (n * b) }'
done
"$py" scripts/make_big_kineto.py "$src" "$work/big.pt.trace.json" --copies $((copies * ${ranks_list##* }))
bytes=$(stat -c %s "$work/big.pt.trace.json")
/usr/bin/time -o "$work/time" -f "%e %M" "$py" -m roseprof import "$work/big.pt.trace.json" \
  --traces-dir "$work/traces" --dashboards-dir "$work/dashboards" > /dev/null
read -r wall rss < "$work/time"
awk -v w="$wall" -v m="$rss" -v b="$bytes" 'BEGIN {
  printf "one file of '"${ranks_list##* }"' ranks'"'"' size: %.1f MB, %.2f s wall, %.1f MB/s, peak RSS %.0f MB (%.2fx the JSON)\n",
    b / 1e6, w, b / 1e6 / w, m / 1024, m * 1024 / b }'
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
