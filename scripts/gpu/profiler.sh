# roseprof on the GPU machine (sourced by scripts/gpu_check.sh): captures of the engine, `roseprof diff` on the fast
# path, ncu, torch.profiler and the reliability checks that need nsys 2025.3. Each stage's files under $S.

stage demo "the default GPU demo capture (roseprof nsys with no command: GPT-2 small, --paged-attn --cuda-graph)"
stage_demo() {
  timeout 300 python3 -m roseprof nsys --traces-dir "$S/tr" --dashboards-dir "$S/dash" --name gpu-demo 2>&1 | tail -45
  local run
  run=$(ls -d "$S"/tr/*gpu-demo* | tail -1)
  tar czf "$S/gpu-demo-run.tgz" -C "$(dirname "$run")" --exclude=raw --exclude='*.npz' "$(basename "$run")"
}

stage regions "batch 1 under roseprof nsys, then each replay's GPU time by the region that captured each kernel \
(scripts/graph_step_table.py; FLAGS: ';'-separated configurations, default 'default')"
stage_regions() {
  local i=0 flag
  while IFS= read -r flag; do
    i=$((i + 1))
    timeout 150 python3 -m roseprof nsys --traces-dir "$S/tr" --dashboards-dir "$S/dash" --name "b1-v$i" \
      --trace cuda,nvtx -- python3 -m roseinfer.benchmark_streaming $B1 --repeat-runs 1 $flag > "$S/b1-v$i.log" 2>&1
    echo "== v$i: ${flag:-default} rc=$?"
    python3 scripts/graph_step_table.py "$(ls -d "$S"/tr/*b1-v$i-* | tail -1)"  # this run: the newest of the name
  done < <(configs "${FLAGS:-default}")
}

stage ab "a before/after pair under roseprof nsys, RUNS (3) captures a side interleaved, then roseprof diff of the \
two groups and each side's per-region replay time: BATCH requests at batch BATCH (1) x 256 tokens, BEFORE \
(default --no-block-table-cache) against AFTER (default: no flag); SAME=1 adds a third group, BEFORE again \
(b1-same), interleaved, for the same-code diff, both pairs one run a side (--latest) and the noise-floor calibration"
stage_ab() {
  local nb=${BATCH:-1} r design flag run
  local cmd="--device cuda --hf-model-id gpt2 --paged-attn --cuda-graph --no-stop-on-eos --num-requests $nb \
--max-batch-size $nb --prefill-max-batch-size $nb --max-new-tokens 256 --warmup-runs 1 --repeat-runs 1"
  local store="--traces-dir $S/tr --dashboards-dir $S/dash"
  local designs=(before after)
  [ "${SAME:-0}" = 1 ] && designs+=(same)  # the same code as before, interleaved with it: what no change reads as
  for r in $(seq "${RUNS:-3}"); do
    for design in "${designs[@]}"; do
      flag=${BEFORE---no-block-table-cache}; [ "$design" = after ] && flag=${AFTER-}
      timeout 150 python3 -m roseprof nsys $store --name "b$nb-$design" --trace cuda,nvtx -- \
        python3 -m roseinfer.benchmark_streaming $cmd $flag > "$S/nsys-$design-$r.log" 2>&1
      echo "b$nb-$design (${flag:-default}) run $r rc=$? [${SECONDS}s]"
    done
  done
  ab_diff() {  # ab_diff FILE ARGS...: one roseprof diff, gated at 10%, its head and exit status
    timeout 120 python3 -m roseprof diff "${@:2}" $store --fail-on-regression 10 > "$S/$1" 2>&1
    echo "roseprof diff exit $? (--fail-on-regression 10)" >> "$S/$1"
    echo "-- roseprof diff ${*:2}"; head -45 "$S/$1"; tail -1 "$S/$1"
  }
  ab_diff diff.txt "b$nb-before" "b$nb-after"
  if [ "${SAME:-0}" = 1 ]; then
    ab_diff diff-same.txt "b$nb-before" "b$nb-same"
    ab_diff diff-latest.txt --latest "b$nb-before" "b$nb-after"
    ab_diff diff-same-latest.txt --latest "b$nb-before" "b$nb-same"
    python3 scripts/noise_floor_calibration.py "$S/tr" "b$nb-before" "b$nb-same" --json "$S/calibration.json" 2>&1 \
      | tee "$S/calibration.txt"
  fi
  for design in before after; do
    run=$(ls -d "$S"/tr/*b$nb-$design* | tail -1)
    echo "-- per-region GPU time of a graph replay, b$nb $design ($run)"
    python3 scripts/graph_step_table.py "$run"
  done
  tar czf "$S/nsys-b$nb.tgz" -C "$S" --exclude=raw --exclude='*.npz' tr 2>/dev/null
}

stage gate "does roseprof diff name the change on the fast path, and what same code looks like there: the GPU demo \
(TOKENS new tokens, 128) under nsys, RUNS (3) rounds of same-a, same-b and --no-block-table-cache (the one \
earlier-design switch that applies with --cuda-graph), the diffs, and the noise-floor calibration; no capture starts \
after BUDGET seconds (400); DEVICE=cpu is a dry run of the plumbing"
stage_gate() {
  local W=$S/gate n=0 r s
  rm -rf "$W"; mkdir -p "$W/json"  # a fresh store: runs of an earlier call would join the groups
  local switches=(--no-block-table-cache)
  mapfile -t demo < <(python3 -c "
from roseprof.workload.roseinfer import default_command
cmd = default_command('${DEVICE:-cuda}')
cmd[cmd.index('--max-new-tokens') + 1] = '${TOKENS:-128}'
print('\n'.join(cmd))")
  echo "demo command: ${demo[*]}"
  capture() {  # capture NAME [FLAG]
    local name=$1; shift
    if [ "$SECONDS" -ge "${BUDGET:-400}" ]; then echo "skip $name $* (budget spent)"; return; fi
    timeout 150 python3 -m roseprof nsys --traces-dir "$W/tr" --dashboards-dir "$W/dash" --name "$name" \
      -- "${demo[@]}" "$@" > "$W/capture.log" 2>&1
    echo "capture $name $* rc=$? [${SECONDS}s]"; grep -E "decode step|ITL|error" "$W/capture.log" | head -3
  }
  for r in $(seq "${RUNS:-3}"); do
    capture same-a; capture same-b
    for s in "${switches[@]}"; do capture "${s#--}" "$s"; done
  done
  diff_both() {  # diff_both LABEL ARGS...: terminal output here, --json kept for diffs.json
    local label=$1; shift
    echo "-- roseprof diff $* [${SECONDS}s]"
    python3 -m roseprof diff --traces-dir "$W/tr" --dashboards-dir "$W/dash" "$@" --top 12 --fail-on-regression 10
    echo "exit $?"
    n=$((n + 1)); echo "$label" > "$W/json/$n.label"
    python3 -m roseprof diff --traces-dir "$W/tr" --dashboards-dir "$W/dash" "$@" --json --fail-on-regression 10 \
      > "$W/json/$n.json"
  }
  diff_both "same-code, 3 a side" same-a same-b
  for s in "${switches[@]}"; do diff_both "default -> $s, 3 a side" same-a "${s#--}"; done
  diff_both "same-code, one run a side" --latest same-a same-b
  python3 - "$W/json" "$S/diffs.json" <<'PY'
import json, pathlib, sys
d = pathlib.Path(sys.argv[1])
out = {}
for label in sorted(d.glob("*.label"), key=lambda p: int(p.stem)):
    text = label.with_suffix(".json").read_text()
    out[label.read_text().strip()] = json.loads(text) if text.strip() else None  # None: the diff refused
pathlib.Path(sys.argv[2]).write_text(json.dumps(out, indent=1))
PY
  python3 scripts/noise_floor_calibration.py "$W/tr" same-a same-b --json "$S/calibration.json" 2>&1 \
    | tee "$S/calibration.txt"
  tar czf "$S/runs.tgz" -C "$W" --exclude=raw tr
}

stage torch "roseprof torch of the engine with --paged-attn and with --cuda-graph: what torch.profiler shows of \
replayed kernels, the dashboards (and screenshots where Chromium is) and the Perfetto export"
stage_torch() {
  local variant run TR=$S/tr DB=$S/dash
  local engine="python3 -m roseinfer.benchmark_streaming --hf-model-id gpt2 --device cuda --num-requests 64 \
--max-batch-size 64 --max-new-tokens 256 --warmup-runs 0 --repeat-runs 1 --no-stop-on-eos --mode online"
  for variant in paged-attn cuda-graph; do
    echo "-- roseprof torch, --$variant"
    python3 -m roseprof torch --name "torch-$variant" --traces-dir "$TR" --dashboards-dir "$DB" -- $engine --$variant \
      > "$S/torch-$variant.log" 2>&1; echo "rc=$?" | tee -a "$S/torch-$variant.log"
    run=$(ls -d "$TR"/*torch-$variant* | tail -1)
    cp "$run/summary.json" "$S/torch-$variant-summary.json"
    cp "$run"/raw/torch/trace.json.gz "$S/torch-$variant-trace.json.gz"
    python3 -m roseprof export "$(basename "$run")" --traces-dir "$TR" -o "$S/torch-$variant.perfetto.json.gz"
    python3 scripts/screenshot_dashboard.py "$DB/$(basename "$run").html" "$S/dashboard-torch-$variant.png" \
      || echo "no screenshot here (no Chromium): take one from $DB/$(basename "$run").html elsewhere"
    # What torch.profiler shows of graph replays: the launching calls and how many kernels each launched.
    python3 - "$run" <<'PY' | tee "$S/torch-$variant-launches.txt"
import sys, collections
from pathlib import Path
import numpy as np
from roseprof.run.tables import read_trace
t = read_trace(Path(sys.argv[1]))
o = t.ops
calls = collections.Counter(t.names[i] if i >= 0 else "(no launching call)" for i in o.api_name.tolist())
print("GPU ops by launching call:", dict(calls))
launched = o.api_tid >= 0
key = np.stack([o.api_tid, o.api_start], 1)[launched]
_, per_call = np.unique(key, axis=0, return_counts=True)
print("ops per launching call: max", per_call.max() if len(per_call) else 0, "median", np.median(per_call) if len(per_call) else 0)
PY
  done
}

stage reliability "what needs a GPU and nsys 2025.3 in docs/RELIABILITY.md: the program's output passes through and \
nsys' own lines stay out; Ctrl-C to the process group keeps what nsys collected; a CUDA-only capture is summarised"
stage_reliability() {
  local T=$S/traces
  nsys --version
  echo "== 1. output: the program's lines pass through, nsys' own do not"
  local prog="import sys, torch
print('APP-OUT', flush=True); print('APP-ERR', file=sys.stderr, flush=True)
torch.cuda.nvtx.range_push('r'); x = torch.ones(1000, device='cuda') * 2; torch.cuda.synchronize(); torch.cuda.nvtx.range_pop()"
  python3 -m roseprof nsys --name out --trace cuda,nvtx --traces-dir "$T" --dashboards-dir "$T/d" -- python3 -c "$prog" \
    > "$S/out.stdout" 2> "$S/out.stderr"
  echo "rc=$? stderr lines: $(grep -c . "$S/out.stderr") (want 1: APP-ERR)"
  sed 's/^/  stderr| /' "$S/out.stderr"
  head -3 "$S/out.stdout" | sed 's/^/  stdout| /'
  echo "== 2. Ctrl-C to the whole process group"
  python3 - "$T" <<'PY' 2>&1
import json, os, signal, subprocess, sys, time
traces = sys.argv[1] + "/ctrlc"
loop = ("import time, torch\nprint('started', flush=True)\nx = torch.ones(1000, device='cuda')\nwhile True:\n"
        "    torch.cuda.nvtx.range_push('roseinfer.decode_step'); x = x * 1.0; torch.cuda.synchronize()\n"
        "    torch.cuda.nvtx.range_pop(); time.sleep(0.005)\n")
p = subprocess.Popen([sys.executable, "-m", "roseprof", "nsys", "--trace", "cuda,nvtx", "--traces-dir", traces,
                      "--dashboards-dir", traces + "/d", "--", sys.executable, "-c", loop],
                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
print("program says:", p.stdout.readline())
time.sleep(8)
os.killpg(p.pid, signal.SIGINT)
out, err = p.communicate(timeout=600)
print("rc", p.returncode, "(want 130)")
print("stderr:", err.decode()[-600:])
runs = [d for d in os.listdir(traces) if not d.startswith(".") and d != "d"]
m = json.load(open(f"{traces}/{runs[0]}/manifest.json"))
print("status", m["status"], "(want incomplete)")
s = json.load(open(f"{traces}/{runs[0]}/summary.json"))
print("decode_step ranges:", [r["count"] for r in s["regions"] if r["name"] == "roseinfer.decode_step"],
      "kernels:", s["gpu_ops"])
PY
  echo "== 3. -t cuda only (no NVTX range): summarised"
  python3 -m roseprof nsys --name cudaonly --trace cuda --traces-dir "$T" --dashboards-dir "$T/d" -- \
    python3 -c "import torch; x = torch.ones(1000, device='cuda') * 2; torch.cuda.synchronize()" \
    > "$S/cudaonly.stdout" 2> "$S/cudaonly.stderr"
  echo "rc=$? (want 0)"
  grep -E "status|top kernels|warning" "$S/cudaonly.stdout" "$S/cudaonly.stderr"
}
