#!/usr/bin/env bash
# Issue 21 on the GPU machine, in one call (~7 minutes on an H100): does `roseprof diff` name the change on the
# fast path, and what does same code look like there (the GPU noise floors)?
#   captures  the default GPU demo (GPT-2 small, 64 requests, --paged-attn --cuda-graph; TOKENS new tokens each,
#             default 128 instead of the demo's 256 to fit the call) under nsys, RUNS (3) rounds, each round
#             interleaving: same-a, same-b (the default, same code), and one capture per earlier-design switch
#             that applies with --cuda-graph: --no-overlap-decode, --no-blocks-ahead, --no-block-table-cache
#             (--no-batched-kv-append and --no-batched-rollover are refused with --cuda-graph: config.py).
#             No new capture starts after BUDGET seconds (default 400), so the diffs always run.
#   diffs     same-a vs same-b (same code, 3 runs a side), same-a vs each switch (3 a side), and same-a vs same-b
#             with one run a side; terminal and --json
#   calibrate scripts/noise_floor_calibration.py on same-a and same-b: how far same-code intervals reach beyond 0
#             per metric family on the GPU, and one-run-a-side false alarms
# Results under $OUT (5 files): report.txt (everything printed), diffs.json ({label: diff --json}), calibration.txt,
# calibration.json, runs.tgz (the stored runs without raw/: re-diffable with roseprof --traces-dir).
# Run from the repo root with .gpu (nsys-on-gpu.sh) and .whl (nvtx, plotly, msgspec wheels) carried:
#   bash scripts/gpu_gate_check.sh
set -uo pipefail
OUT=${OUT:-/tmp/gpu-out}
RUNS=${RUNS:-3}
TOKENS=${TOKENS:-128}
BUDGET=${BUDGET:-400}
DEVICE=${DEVICE:-cuda}  # cpu: a dry run of this script's plumbing on a machine without a GPU
W=/tmp/gate21
rm -rf "$W"  # a fresh store: runs of an earlier call would join the groups
mkdir -p "$OUT" "$W"
export PYTHONUNBUFFERED=1
SWITCHES=(--no-overlap-decode --no-blocks-ahead --no-block-table-cache)
main() {
source scripts/gpu_wheels.sh
[ -f .gpu/nsys-on-gpu.sh ] && source .gpu/nsys-on-gpu.sh
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>/dev/null
nsys --version
git log --oneline -1 2>/dev/null
rp() { local verb=$1; shift; python3 -m roseprof "$verb" --traces-dir "$W/tr" --dashboards-dir "$W/dash" "$@"; }
# The GPU demo command roseprof runs with no command, with TOKENS new tokens.
mapfile -t demo < <(python3 -c "
from roseprof.workload.roseinfer import default_command
cmd = default_command('$DEVICE')
cmd[cmd.index('--max-new-tokens') + 1] = '$TOKENS'
print('\n'.join(cmd))")
echo "demo command: ${demo[*]}"
SECONDS=0
capture() {  # capture NAME [FLAG]
  local name=$1; shift
  if [ "$SECONDS" -ge "$BUDGET" ]; then echo "skip $name $* (budget ${BUDGET}s spent)"; return; fi
  timeout 150 python3 -m roseprof nsys --traces-dir "$W/tr" --dashboards-dir "$W/dash" --name "$name" \
    -- "${demo[@]}" "$@" > "$W/capture.log" 2>&1
  echo "capture $name $* rc=$? [${SECONDS}s]"; grep -E "decode step|ITL|error" "$W/capture.log" | head -3
}
echo "== 1. captures, $RUNS rounds [${SECONDS}s]"
for r in $(seq "$RUNS"); do
  capture same-a; capture same-b
  for s in "${SWITCHES[@]}"; do capture "${s#--}" "$s"; done
done
echo "== 2. diffs [${SECONDS}s]"
mkdir -p "$W/json"
n=0
diff_both() {  # diff_both LABEL ARGS...: terminal output here, --json kept for diffs.json
  local label=$1; shift
  echo "-- roseprof diff $* [${SECONDS}s]"
  rp diff "$@" --top 12 --fail-on-regression 10; echo "exit $?"
  n=$((n + 1)); echo "$label" > "$W/json/$n.label"
  rp diff "$@" --json --fail-on-regression 10 > "$W/json/$n.json"
}
diff_both "same-code, 3 a side" same-a same-b
for s in "${SWITCHES[@]}"; do diff_both "default -> $s, 3 a side" same-a "${s#--}"; done
diff_both "same-code, one run a side" --latest same-a same-b
python3 - "$W/json" "$OUT/diffs.json" <<'PY'
import json, pathlib, sys
d = pathlib.Path(sys.argv[1])
out = {}
for label in sorted(d.glob("*.label"), key=lambda p: int(p.stem)):
    text = label.with_suffix(".json").read_text()
    out[label.read_text().strip()] = json.loads(text) if text.strip() else None  # None: the diff refused
pathlib.Path(sys.argv[2]).write_text(json.dumps(out, indent=1))
PY
echo "== 3. calibration [${SECONDS}s]"
python3 scripts/noise_floor_calibration.py "$W/tr" same-a same-b --json "$OUT/calibration.json" \
  2>&1 | tee "$OUT/calibration.txt"
tar czf "$OUT/runs.tgz" -C "$W" --exclude=raw tr
echo "== done [${SECONDS}s]"
}
main 2>&1 | tee "$OUT/report.txt"
ls -la "$OUT"
