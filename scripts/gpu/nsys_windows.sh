# nsys capture windows on a live server (issue 49, item 2; sourced by scripts/gpu_check.sh): roseinfer serve gpt2
# (fp16, paged attention, CUDA graphs) under `roseprof nsys --capture-range nvtx --capture-range-end repeat`, at 64
# concurrent streams. Needs nsys (.gpu carried: nsys-on-gpu.sh, the 2025.3 inside Nsight Compute). Results under $S:
# cost.txt (the same load on a plain server and on one under nsys before any window, and their diff), window-K.txt
# (each `roseprof live --tool nsys` run's show), windows.txt (per window: steps, kernels per step, the loop's pause),
# serve.log, and the runs in $S/traces (roseprof nsys' own run, every window's report in its raw/, in $S/nsys).

stage nsys-windows "nsys capture windows on roseinfer serve under roseprof nsys --capture-range nvtx --capture-range-end \
repeat at 64 streams of GPT-2 small: what the server pays under nsys outside windows (a load on a plain server vs one \
under nsys, diffed), then WINDOWS (2) roseprof live --tool nsys windows of STEPS (32) steps, each one nsys report \
with the steps' regions and kernels"
stage_nsys_windows() {
  local port=${PORT:-8767} url log=$S/serve.log rc=0 k
  url=http://127.0.0.1:$port
  command -v nsys >/dev/null || { echo "nsys-windows: no nsys on PATH (carry .gpu: shared/gpu/README.md)"; return 1; }
  local serve=(python3 -m roseinfer.serve gpt2 --device cuda --dtype float16 --paged-attn --cuda-graph
    --max-batch-size 256 --enable-profiling --port "$port")
  local load=(python3 -m roseprof load "$url" --traces-dir "$S/traces" --concurrency 64 --requests 512
    --prompt-len 32 --output-len 256)

  # 1. the plain server: a warm-up load, then the load the server under nsys is compared with
  "${serve[@]}" >"$log.plain" 2>&1 &
  local server=$!
  _nsys_windows_ready "$log.plain" || { kill $server; return 1; }
  "${load[@]}" --name warm >/dev/null || rc=1
  "${load[@]}" --name plain >"$S/plain.txt" || rc=1
  kill -INT $server; wait $server 2>/dev/null

  # 2. the same server under nsys, recording nothing until a window opens
  python3 -m roseprof nsys --capture-range nvtx --capture-range-end repeat --traces-dir "$S/nsys" \
    --dashboards-dir "$S/dashboards" -- "${serve[@]}" >"$log" 2>&1 &
  local prof=$!
  _nsys_windows_ready "$log" || { kill -INT $prof; wait $prof; return 1; }
  "${load[@]}" --name warm-under-nsys >/dev/null || rc=1
  "${load[@]}" --name under-nsys >"$S/under-nsys.txt" || rc=1
  python3 -m roseprof diff plain under-nsys --traces-dir "$S/traces" | tee "$S/cost.txt" || rc=1

  # 3. the windows: each one report (imported, exported to SQLite) joined to the load's requests
  for k in $(seq "${WINDOWS:-2}"); do
    python3 -m roseprof live "$url" --steps "${STEPS:-32}" --tool nsys --concurrency 64 --requests 512 \
      --prompt-len 32 --output-len 256 --traces-dir "$S/traces" --name "nsys-window-$k" >"$S/window-$k.txt" || rc=1
  done
  python3 - "$S/traces" <<'EOF' | tee "$S/windows.txt" || rc=1
import json, sys
from pathlib import Path
bad = 0
for run in sorted(Path(sys.argv[1]).glob("*nsys-window-*")):
    s = json.loads((run / "summary.json").read_text())
    cap, detail = s["live"]["capture"], s["live"]["step_detail"]
    kinds = {d["kernel_kind"] for d in detail.values()}
    with_kernels = sum(1 for d in detail.values() if d["kernels"])
    p = cap["pause"]
    print(f"{run.name}: steps {cap['steps']} of {cap['asked']}, steps with kernels {with_kernels}/{len(detail)} "
          f"({'/'.join(sorted(kinds))}), kernels {len(s.get('kernels') or [])} names; loop: start "
          f"{p.get('start_ms') or 0:.1f} ms, stop {p.get('stop_ms') or 0:.1f} ms, export {p.get('export_ms') or 0:.1f} ms"
          f" (median step {p.get('median_step_ms') or 0:.2f} ms)")
    bad += cap["steps"] != cap["asked"] or with_kernels != len(detail) or kinds != {"gpu"}
sys.exit(1 if bad else 0)
EOF
  kill -INT $prof; wait $prof  # nsys writes every window's report into roseprof nsys' run
  ls -l "$S"/nsys/*/raw/ || rc=1
  return $rc
}

_nsys_windows_ready() {  # LOG: the server's ready line within 5 minutes
  local _
  for _ in $(seq 300); do grep -q "ready at" "$1" && return 0; sleep 1; done
  echo "nsys-windows: the server did not start"; tail -20 "$1"; return 1
}
