# Where a slow prefill spends its time (sourced by scripts/gpu_check.sh): scripts/probe_prefill.py's records of
# every prefill (host parts, the stepping thread's CPU time, CUDA events, stacks of any prefill past 25 ms), first
# from an Engine driven directly (a closed loop of 8 requests of 16 tokens, as roseprof load), with and without
# cuDNN's attention, then from the server's engine process under live-truth's load. Results under $S.

stage prefill-probe "where the GPU server's slow prefills (50-160 ms for short batches) spend their time: \
scripts/probe_prefill.py offline and in the server's engine process"
stage_prefill_probe() {
  local port=${PORT:-8771} url="http://127.0.0.1:${PORT:-8771}" rc=0
  python3 scripts/probe_prefill.py --out "$S/offline" || rc=1
  python3 scripts/probe_prefill.py --summarize "$S/offline"
  python3 scripts/probe_prefill.py --out "$S/offline-nocudnn" --no-cudnn-sdp || rc=1
  python3 scripts/probe_prefill.py --summarize "$S/offline-nocudnn"
  mkdir -p "$S/shim"
  echo "import probe_prefill; probe_prefill.install_from_env()" > "$S/shim/sitecustomize.py"
  PYTHONPATH="$S/shim:$PWD/scripts:$PWD:${PYTHONPATH:-}" PREFILL_PROBE="$S/server" python3 -m roseinfer.serve gpt2 \
    --device cuda --dtype float16 --paged-attn --cuda-graph --max-batch-size 64 --port "$port" >"$S/serve.log" 2>&1 &
  local server=$!
  for _ in $(seq 180); do grep -q "ready at" "$S/serve.log" && break; kill -0 $server 2>/dev/null || break; sleep 1; done
  grep -q "ready at" "$S/serve.log" || { echo "prefill-probe: the server did not start"; tail -5 "$S/serve.log"; return 1; }
  local args=(--concurrency 8 --requests 64 --prompt-len 16 --output-len 96)
  python3 -m roseprof load "$url" "${args[@]}" --traces-dir "$S/traces" --name warm | head -4
  python3 -m roseprof load "$url" "${args[@]}" --traces-dir "$S/traces" --name measured | head -4
  COLUMNS=100 python3 -m roseprof live "$url" --steps 4000 "${args[@]}" --traces-dir "$S/traces" --name live \
    2>&1 | head -14
  kill $server; wait $server 2>/dev/null
  python3 scripts/probe_prefill.py --summarize "$S/server"
  rm -rf "$S/traces"
  return $rc
}
