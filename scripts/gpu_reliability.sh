#!/usr/bin/env bash
# Reliability checks that need a GPU and nsys 2025.3 (docs/RELIABILITY.md), one call, a minute or two:
# 1. the program's output passes through and nsys 2025.3's own lines stay out of the terminal;
# 2. a terminal's Ctrl-C (SIGINT to roseprof's whole process group) keeps what nsys collected;
# 3. a CUDA-only capture (-t cuda, no NVTX range) is summarised, not a crash.
# Run from the repo root on the GPU machine (with .gpu and .whl carried as for scripts/gpu_check.sh):
#   OUT=$OUT bash scripts/gpu_reliability.sh       -> $OUT/reliability.txt and the logs beside it
set -uo pipefail
OUT=${OUT:-/tmp/gpu-out}
mkdir -p "$OUT"
source scripts/gpu_wheels.sh
source .gpu/nsys-on-gpu.sh
R="$OUT/reliability.txt"
nsys --version | tee "$R"
T=/tmp/rel-traces
rm -rf "$T"

echo "== 1. output: the program's lines pass through, nsys' own do not" | tee -a "$R"
PROG="import sys, torch
print('APP-OUT', flush=True); print('APP-ERR', file=sys.stderr, flush=True)
torch.cuda.nvtx.range_push('r'); x = torch.ones(1000, device='cuda') * 2; torch.cuda.synchronize(); torch.cuda.nvtx.range_pop()"
python3 -m roseprof nsys --name out --trace cuda,nvtx --traces-dir "$T" --dashboards-dir "$T/d" -- python3 -c "$PROG" \
  > "$OUT/out.stdout" 2> "$OUT/out.stderr"
echo "rc=$? stderr lines: $(grep -c . "$OUT/out.stderr") (want 1: APP-ERR)" | tee -a "$R"
sed 's/^/  stderr| /' "$OUT/out.stderr" | tee -a "$R"
head -3 "$OUT/out.stdout" | sed 's/^/  stdout| /' | tee -a "$R"
cp "$T"/*-out-*/raw/nsys.log "$OUT/out.nsys.log" 2>/dev/null

echo "== 2. Ctrl-C to the whole process group" | tee -a "$R"
python3 - "$T" <<'PY' 2>&1 | tee -a "$R"
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

echo "== 3. -t cuda only (no NVTX range): summarised" | tee -a "$R"
python3 -m roseprof nsys --name cudaonly --trace cuda --traces-dir "$T" --dashboards-dir "$T/d" -- \
  python3 -c "import torch; x = torch.ones(1000, device='cuda') * 2; torch.cuda.synchronize()" \
  > "$OUT/cudaonly.stdout" 2> "$OUT/cudaonly.stderr"
echo "rc=$? (want 0)" | tee -a "$R"
grep -E "status|top kernels|warning" "$OUT/cudaonly.stdout" "$OUT/cudaonly.stderr" | tee -a "$R"
