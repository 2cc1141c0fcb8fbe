#!/usr/bin/env bash
# roseprof ncu on the GPU machine (ncu 2025.3 on PATH), in a few minutes, results under $OUT:
#   1. the paged-attention decode kernel inside roseinfer.model.forward/ (--kernel paged_decode);
#   2. every kernel inside roseinfer.kv.append_token/ (the Triton KV-append kernel at this batch);
#   3. an nsys capture of the same command, then `roseprof ncu --from` it (its top 3 kernels);
#   4. a filter that matches nothing, to keep ncu 2025.3's own "No kernels were profiled" output;
# and, per run: summary.json, ncu's raw and details CSV, the dashboard (HTML and, where Chromium is, a screenshot);
# the attention run's .ncu-rep and CSVs (base and auto units) as fixtures; the fraction of peak DRAM bandwidth the
# attention kernel reaches. Run from the repo root:  OUT=/tmp/ncu-out bash scripts/gpu_ncu_check.sh
set -uo pipefail
OUT=${OUT:-/tmp/ncu-out}
mkdir -p "$OUT/fixture"
export PYTHONUNBUFFERED=1
source scripts/gpu_wheels.sh
for f in ../shared/gpu/nsys-on-gpu.sh shared/gpu/nsys-on-gpu.sh .gpu/nsys-on-gpu.sh; do
  [ -f "$f" ] && { source "$f"; break; }
done
TR=/tmp/ncu-tr
DB=/tmp/ncu-db
rm -rf "$TR" "$DB"
RP="python3 -m roseprof"
{ nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,clocks.max.mem --format=csv
  ncu --version | tail -1; nsys --version 2>/dev/null; date -u; } | tee "$OUT/machine.txt"

echo "== 1. paged-attention decode kernel inside roseinfer.model.forward/"
time timeout 300 $RP ncu --traces-dir $TR --dashboards-dir $DB --name attn --nvtx-include roseinfer.model.forward/ \
  --kernel paged_decode --launch-count 24 2>&1 | tail -25 | tee "$OUT/attn.log"

echo "== 2. kernels inside roseinfer.kv.append_token/"
time timeout 300 $RP ncu --traces-dir $TR --dashboards-dir $DB --name kvappend \
  --nvtx-include roseinfer.kv.append_token/ --launch-count 24 2>&1 | tail -25 | tee "$OUT/kvappend.log"

echo "== 3. nsys capture of the same command, then ncu --from it"
read -r -a CMD <<< "$(python3 -c 'from roseprof.workload.roseinfer import ncu_default_command as c; print(" ".join(c()))')"
time timeout 300 $RP nsys --traces-dir $TR --dashboards-dir $DB --name before --trace cuda,nvtx -- "${CMD[@]}" 2>&1 \
  | tail -20 | tee "$OUT/nsys-before.log"
time timeout 300 $RP ncu --traces-dir $TR --dashboards-dir $DB --name from --from before --top 3 2>&1 | tail -25 \
  | tee "$OUT/from.log"

echo "== 4. a filter that matches nothing (ncu 2025.3's own output kept)"
timeout 120 $RP ncu --traces-dir $TR --dashboards-dir $DB --name nomatch --kernel no_such_kernel_xyz \
  --launch-count 1 -- python3 -c "import torch; torch.ones(4, device='cuda').sum().item()" > "$OUT/nomatch.log" 2>&1
echo "exit code $?" >> "$OUT/nomatch.log"
tail -8 "$OUT/nomatch.log"

echo "== 5. results"
for name in attn kvappend before from; do
  run=$(ls -d $TR/*-"$name"-* 2>/dev/null | head -1)
  [ -n "$run" ] || { echo "no $name run"; continue; }
  mkdir -p "$OUT/$name"
  cp "$run/summary.json" "$run/manifest.json" "$OUT/$name/"
  cp "$run"/raw/report.raw.csv "$run"/raw/report.details.csv "$run"/raw/ncu.log "$OUT/$name/" 2>/dev/null
  cp $DB/"$(basename "$run")".html "$OUT/$name/dashboard.html" 2>/dev/null
  python3 scripts/screenshot_dashboard.py $DB/"$(basename "$run")".html "$OUT/$name/dashboard.png" >/dev/null 2>&1 \
    || echo "$name: no screenshot here (no Chromium); render one from $OUT/$name/dashboard.html elsewhere"
done
attn=$(ls -d $TR/*-attn-* 2>/dev/null | head -1)
if [ -n "$attn" ] && [ -f "$attn/raw/report.ncu-rep" ]; then
  cp "$attn/raw/report.ncu-rep" "$OUT/fixture/h100-ncu2025.3-roseinfer-attn.ncu-rep"
  cp "$attn/raw/report.raw.csv" "$OUT/fixture/h100-ncu2025.3-roseinfer-attn-raw.csv"
  cp "$attn/raw/report.details.csv" "$OUT/fixture/h100-ncu2025.3-roseinfer-attn-details.csv"
  ncu --import "$attn/raw/report.ncu-rep" --csv --page raw --print-units auto \
    > "$OUT/fixture/h100-ncu2025.3-roseinfer-attn-raw-auto.csv"
fi
kv=$(ls -d $TR/*-kvappend-* 2>/dev/null | head -1)
[ -n "$kv" ] && cp "$kv/raw/report.ncu-rep" "$OUT/fixture/h100-ncu2025.3-roseinfer-kvappend.ncu-rep" 2>/dev/null

python3 - "$TR" <<'EOF' | tee "$OUT/numbers.txt"
import json, sys
from pathlib import Path

for run in sorted(Path(sys.argv[1]).iterdir()):
    s = run / "summary.json"
    if not s.is_file() or "ncu" not in json.loads(s.read_text()):
        continue
    summary = json.loads(s.read_text())
    ncu = summary["ncu"]
    dev = ncu["devices"][0] if ncu["devices"] else {}
    peak = dev.get("peak_dram_bytes_per_s")
    print(f"run {run.name}: {len(ncu['launches'])} launches on {dev.get('name')}, peak DRAM "
          f"{peak / 1e12 if peak else float('nan'):.3f} TB/s ({dev.get('peak_sources', {}).get('peak_dram_bytes_per_s')})")
    for k in ncu["kernels"]:
        bw = k["mean_dram_bytes_per_s"]
        frac = f"{100 * bw / peak:.1f}% of peak DRAM bandwidth" if bw and peak else "no DRAM figure"
        print(f"  {k['name'][:70]}: {k['launches']} launches, mean {k['mean_duration_ns'] / 1e3:.2f} us, "
              f"DRAM {bw / 1e9 if bw else float('nan'):.1f} GB/s = {frac} (ncu DRAM throughput "
              f"{k['mean_dram_throughput_pct']}%), SM {k['mean_sm_throughput_pct']}%, "
              f"occupancy {k['mean_achieved_occupancy_pct']}%, regions {k['regions']}")
    first = ncu["launches"][0]
    print(f"  NVTX stack of launch {first['id']} (outermost first): {first['nvtx']}")
    print(f"  top findings: {[(r['rule'], r['speedup_pct']) for r in ncu['rules'][:4]]}")
EOF
ls -la "$OUT" "$OUT/fixture"
