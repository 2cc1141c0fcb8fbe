#!/usr/bin/env bash
# `roseprof import` against Holistic Trace Analysis' kernel breakdown on one large Kineto trace, in one run:
# wall time and peak memory of each (GNU time), and both tools' kernel totals.
# Usage: scripts/bench_kineto_import.sh [copies]   (HTA lives in its own throwaway venv: HTA_PYTHON, default
# /tmp/hta-venv/bin/python, made with `python3 -m venv /tmp/hta-venv && /tmp/hta-venv/bin/pip install
# HolisticTraceAnalysis`; it is never a dependency of this project)
#   TRACE=FOLDER: a folder holding rank-0.pt.trace.json made before (copies is then ignored); HTA=0: roseprof only
#   (a trace larger than HTA can hold in this machine's memory). CPU time (user + sys) is printed beside the wall:
#   on a shared machine it is the steadier figure.
set -euo pipefail
cd "$(dirname "$0")/.."
copies=${1:-20}
py=${PYTHON:-.venv/bin/python}
hta=${HTA_PYTHON:-/tmp/hta-venv/bin/python}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
trace=${TRACE:-$work/trace}
if [ -z "${TRACE:-}" ]; then
  mkdir "$trace"
  src=tests/data/torch/facebookresearch__HolisticTraceAnalysis__rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz
  "$py" scripts/make_big_kineto.py "$src" "$trace/rank-0.pt.trace.json" --copies "$copies"
fi
ls -l "$trace/rank-0.pt.trace.json" | awk '{printf "trace: %.1f MB uncompressed\n", $5 / 1e6}'
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
if [ "${HTA:-1}" != 0 ]; then
  /usr/bin/time -f "HTA load + kernel breakdown: %e s wall, %U+%S s CPU, %M KB peak RSS" "$hta" \
    scripts/bench_hta_kernels.py "$trace" 2>&1 | grep -v -e "^Parsed" -e "^Overall" -e "^leaving" -e "Rounding down"
fi
/usr/bin/time -f "roseprof import: %e s wall, %U+%S s CPU, %M KB peak RSS" "$py" -m roseprof import \
  "$trace/rank-0.pt.trace.json" --traces-dir "$work/traces" --dashboards-dir "$work/dashboards" > /dev/null
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
# Our totals: every kernel (exact ns), and HTA's own rule applied to our ops so the totals can be compared:
# HTA keeps GPU work whose launching call starts before the last ProfilerStep starts (it drops the last
# iteration) and rounds each ns-resolution event in float64 us: ts up, ts + dur down (trace_parser.py,
# round_down_time_stamps). The us value is rebuilt from exact ns (int64 -> float64 directly would lose 256 ns).
"$py" - "$work/traces" <<'PY'
import sys
from pathlib import Path
import numpy as np
from roseprof.run.tables import read_trace
run = next(p for p in Path(sys.argv[1]).iterdir() if not p.name.startswith("."))
t = read_trace(run)
r, o = t.ranges, t.ops
last = r.start[r.name == t.names.find("ProfilerStep")].max()
hta_keeps = (o.api_start >= 0) & (o.api_start < last)
ts_us = (o.start // 1000).astype(np.float64) + (o.start % 1000) / 1000.0
dur_us = (o.end - o.start) / 1000.0
hta_dur = np.floor(ts_us + dur_us) - np.ceil(ts_us)
for kinds, label in (((0,), "kernels (HTA: COMPUTATION)"), ((1, 2), "memcpy + memset (HTA: MEMORY)")):
    m = np.isin(o.kind, kinds)
    print(f"roseprof {label}: {int(m.sum())} ops, {(o.end - o.start)[m].sum() / 1e3:.3f} us exact; "
          f"by HTA's rule {int((m & hta_keeps).sum())} ops, {hta_dur[m & hta_keeps].sum():.0f} us")
PY
