#!/usr/bin/env bash
# `roseprof import` against `nsys stats` (NVTX, kernel and NVTX-kernel summaries) on one large nsys export,
# side by side; wall time and peak memory of each (GNU time). Usage: scripts/bench_import.sh [copies] [nvtx-threads]
set -euo pipefail
cd "$(dirname "$0")/.."
copies=${1:-36}
threads=${2:-5}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
.venv/bin/python scripts/make_big_nsys_sqlite.py tests/data/nsys/h100-nsys2025.3-roseinfer-decode.sqlite "$work/big.sqlite" \
  --copies "$copies" --nvtx-threads "$threads"
cp "$work/big.sqlite" "$work/stats.sqlite"
nsys=$(.venv/bin/python -c "from roseprof.drivers.nsys.capture import find_nsys; print(find_nsys())")
"$nsys" --version
# Report names of nsys 2022.4; 2023+ calls them nvtx_sum, cuda_gpu_kern_sum, nvtx_kern_sum.
reports=nvtxsum,gpukernsum,nvtxkernsum
"$nsys" --version | grep -q "2022" || reports=nvtx_sum,cuda_gpu_kern_sum,nvtx_kern_sum
/usr/bin/time -f "nsys stats: %e s wall, %M KB peak RSS" "$nsys" stats -q -r "$reports" -f csv -o "$work/oracle" \
  --force-export=false "$work/stats.sqlite" > /dev/null
/usr/bin/time -f "roseprof import: %e s wall, %M KB peak RSS" .venv/bin/roseprof import "$work/big.sqlite" \
  --traces-dir "$work/traces" --dashboards-dir "$work/dashboards" > /dev/null
