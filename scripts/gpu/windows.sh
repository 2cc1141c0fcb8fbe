# Capture windows on a live server (issue 49; sourced by scripts/gpu_check.sh): what a torch window costs the engine
# loop and the streams at 64 concurrent requests of GPT-2 small (fp16, paged attention, CUDA graphs). Results under
# $S: windows.txt (one row per window length), windows.json, serve.log, and the live runs in $S/traces.

stage windows "a torch capture window on roseinfer serve --enable-profiling at 64 streams (scripts/bench_profile_window.py): \
the engine loop's pause (profiler start/stop, dump, export) and TTFT before/after the window; STEPS (32,128) window lengths"
stage_windows() {
  local port=${PORT:-8766} log=$S/serve.log
  python3 -m roseinfer.serve gpt2 --device cuda --dtype float16 --paged-attn --cuda-graph --max-batch-size 256 \
    --flight-recorder-steps 16384 --enable-profiling --profile-dir "$S/profile" --port "$port" >"$log" 2>&1 &
  local server=$!
  for _ in $(seq 300); do grep -q "ready at" "$log" && break; kill -0 $server 2>/dev/null || break; sleep 1; done
  grep -q "ready at" "$log" || { echo "windows: the server did not start"; tail -20 "$log"; kill $server; return 1; }
  local rc=0
  # a short load first: CUDA graphs and the allocator warm, and a first (discarded) torch window: Kineto's own setup
  python3 -m roseprof live "http://127.0.0.1:$port" --steps 16 --tool torch --concurrency 64 --requests 128 \
    --output-len 64 --traces-dir "$S/warm" --name warm >/dev/null || rc=1
  python3 scripts/bench_profile_window.py "http://127.0.0.1:$port" --steps "${STEPS:-32,128}" --concurrency 64 \
    --requests 1024 --output-len 256 --traces-dir "$S/traces" --json "$S/windows.json" | tee "$S/windows.txt" || rc=1
  kill $server; wait $server 2>/dev/null
  return $rc
}
