# Where a slow prefill spends its time (sourced by scripts/gpu_check.sh): scripts/probe_prefill.py's records of
# every prefill (host parts, the stepping thread's CPU time, CUDA events, stacks of any prefill past 25 ms), first
# from an Engine driven directly (a closed loop of 8 requests, as roseprof load), for the prefill's attention as it
# is and as it was (ARMS: "NAME:flags;..."), then from the server's engine process under live-truth's load.
# Results under $S.

stage prefill-probe "where the GPU server's slow prefills spend their time: scripts/probe_prefill.py offline (the \
prefill attention as it is and as it was, ARMS) and in the server's engine process"
stage_prefill_probe() {
  local port=${PORT:-8771} url="http://127.0.0.1:${PORT:-8771}" rc=0 arm name flags
  local arms=${ARMS:-"now:;grouped:--grouped;cudnn:--grouped --cudnn;now-mixed:--mixed;grouped-mixed:--grouped --mixed;cudnn-mixed:--grouped --cudnn --mixed"}
  IFS=';' read -ra _arms <<< "$arms"
  for arm in "${_arms[@]}"; do
    name=${arm%%:*}; flags=${arm#*:}
    echo "-- $name ($flags)"
    # shellcheck disable=SC2086
    python3 scripts/probe_prefill.py --out "$S/$name" $flags | grep -v "sdp choice" || rc=1
    python3 scripts/probe_prefill.py --summarize "$S/$name" --top 4 2>/dev/null | head -9
  done
  [ -n "${NO_SERVER:-}" ] && return $rc
  mkdir -p "$S/shim"
  echo "import probe_prefill; probe_prefill.install_from_env()" > "$S/shim/sitecustomize.py"
  PYTHONPATH="$S/shim:$PWD/scripts:$PWD:${PYTHONPATH:-}" PREFILL_PROBE="$S/server" python3 -m roseinfer.serve gpt2 \
    --device cuda --dtype float16 --paged-attn --cuda-graph --max-batch-size 64 --port "$port" >"$S/serve.log" 2>&1 &
  local server=$!
  for _ in $(seq 180); do grep -q "ready at" "$S/serve.log" && break; kill -0 $server 2>/dev/null || break; sleep 1; done
  grep -q "ready at" "$S/serve.log" || { echo "prefill-probe: the server did not start"; tail -5 "$S/serve.log"; return 1; }
  local args=(--concurrency 8 --requests 64 --prompt-len 16 --output-len 96)
  python3 -m roseprof load "$url" "${args[@]}" --traces-dir "$S/traces" --name warm | head -2
  python3 -m roseprof load "$url" "${args[@]}" --traces-dir "$S/traces" --name measured | head -2
  kill $server; wait $server 2>/dev/null
  python3 scripts/probe_prefill.py --summarize "$S/server" --top 4 | grep -v "^prefill-.*: 0 prefills"
  rm -rf "$S/traces" "$S/shim"
  return $rc
}
