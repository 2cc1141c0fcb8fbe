#!/usr/bin/env bash
# `roseprof import` against Holistic Trace Analysis' kernel breakdown on one large Kineto trace, in one run:
# wall time and peak memory of each (GNU time), and both tools' kernel totals.
# Usage: scripts/bench_kineto_import.sh [copies]   (HTA lives in its own throwaway venv: HTA_PYTHON, default
# /tmp/hta-venv/bin/python, made with `python3 -m venv /tmp/hta-venv && /tmp/hta-venv/bin/pip install
# HolisticTraceAnalysis`; it is never a dependency of this project)
set -euo pipefail
cd "$(dirname "$0")/.."
copies=${1:-20}
py=${PYTHON:-.venv/bin/python}
hta=${HTA_PYTHON:-/tmp/hta-venv/bin/python}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir "$work/trace"
src=tests/data/torch/facebookresearch__HolisticTraceAnalysis__rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz
"$py" scripts/make_big_kineto.py "$src" "$work/trace/rank-0.pt.trace.json" --copies "$copies"
ls -l "$work/trace/rank-0.pt.trace.json" | awk '{printf "trace: %.1f MB uncompressed\n", $5 / 1e6}'
/usr/bin/time -f "HTA load + kernel breakdown: %e s wall, %M KB peak RSS" "$hta" scripts/bench_hta_kernels.py \
  "$work/trace" 2>&1 | grep -v -e "^Parsed" -e "^Overall" -e "^leaving" -e "Rounding down"
/usr/bin/time -f "roseprof import: %e s wall, %M KB peak RSS" "$py" -m roseprof import "$work/trace/rank-0.pt.trace.json" \
  --traces-dir "$work/traces" --dashboards-dir "$work/dashboards" > /dev/null
# Our totals: every kernel (exact ns), and those HTA's iteration window keeps (it drops GPU work that starts outside
# the first-to-last ProfilerStep span); each duration floored to whole us the way HTA rounds ns-resolution traces.
"$py" - "$work/traces" <<'PY'
import json, sys
from pathlib import Path
import numpy as np
from roseprof.run.tables import read_trace
run = next(p for p in Path(sys.argv[1]).iterdir() if not p.name.startswith("."))
t = read_trace(run)
r, o = t.ranges, t.ops
step = r.name == t.names.find("ProfilerStep")
lo, hi = r.start[step].min(), r.end[step].max()
win = (o.start >= lo) & (o.start <= hi)
d = o.end - o.start
for kind, label in ((0, "kernels"), (1, "memcpy"), (2, "memset")):
    m = o.kind == kind
    print(f"roseprof {label}: {int(m.sum())} ops, {d[m].sum() / 1e3:.3f} us; in the step window "
          f"{int((m & win).sum())} ops, {int((d[m & win] // 1000).sum())} us floored")
PY
