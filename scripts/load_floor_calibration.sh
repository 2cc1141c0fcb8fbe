#!/usr/bin/env bash
# The noise floors of a load diff (roseprof/analysis/noise_floor.py: SERVING_FLOORS): N same-code loads of one
# server, every pair diffed one run a side, and per metric the largest and p95 distance its interval reached beyond 0.
#   bash scripts/load_floor_calibration.sh URL [N=5] [load options...]
# (default load: --requests 40 --concurrency 4 --output-len 32)
set -euo pipefail
URL=${1:?usage: load_floor_calibration.sh URL [N] [load options]}
N=${2:-5}
shift $(( $# >= 2 ? 2 : 1 ))
OPTS=("$@")
[ ${#OPTS[@]} -eq 0 ] && OPTS=(--requests 40 --concurrency 4 --output-len 32)
PY=${PYTHON:-python}
T=$(mktemp -d)
for i in $(seq "$N"); do "$PY" -m roseprof load "$URL" "${OPTS[@]}" --name "same$i" --traces-dir "$T" >/dev/null; done
mapfile -t ids < <(ls "$T" | grep -- -same)
for ((a = 0; a < ${#ids[@]}; a++)); do for ((b = a + 1; b < ${#ids[@]}; b++)); do
  "$PY" -m roseprof diff "${ids[$a]}" "${ids[$b]}" --json --traces-dir "$T" --dashboards-dir "$T/d" >"$T/pair-$a-$b.json" || true
done; done
"$PY" - "$T" <<'PYEOF'
import collections, glob, json, sys
reach = collections.defaultdict(list)
for f in glob.glob(sys.argv[1] + "/pair-*.json"):
    for m in json.load(open(f))["metrics"]:
        lo, hi = m.get("ci_low_pct"), m.get("ci_high_pct")
        if lo is not None and m["name"].startswith("serving."):
            reach[m["name"]].append(max(lo, 0.0, -hi))
for name, v in sorted(reach.items()):
    v = sorted(v)
    print(f"{name:28} pairs {len(v):3}  largest beyond 0 {v[-1]:6.1f}%  p95 {v[int(0.95 * (len(v) - 1))]:6.1f}%")
PYEOF
