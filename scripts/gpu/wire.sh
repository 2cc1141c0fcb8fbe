# roseprof load against the wire (issue 48; sourced by scripts/gpu_check.sh): one `roseinfer serve gpt2` (float16,
# paged attention, CUDA graphs), warmed, then scripts/wire_agreement.py at SIZES (streams:requests:tokens, default
# 1:128:32 8:256:32 64:1024:64): the same requests timed by roseprof's client and by the kernel's packet stamps on
# lo (root); WIRE_FLAGS: more flags of wire_agreement.py (e.g. --gc-off). Results under $S: wire.txt, wire-C-N-L.json, serve.log.

stage wire "roseprof load's TTFT and ITL against the kernel's packet stamps of the same requests (scripts/\
wire_agreement.py; root), at SIZES (streams:requests:tokens, default 1:128:32 8:256:32 64:1024:64)"
stage_wire() {
  local port=${PORT:-8768} log=$S/serve.log url rc=0 size C N L
  url="http://127.0.0.1:$port"
  python3 -m roseinfer.serve gpt2 --device cuda --dtype float16 --paged-attn --cuda-graph --max-batch-size 256 \
    --port "$port" >"$log" 2>&1 &
  local server=$!
  for _ in $(seq 180); do grep -q "ready at" "$log" && break; kill -0 $server 2>/dev/null || break; sleep 1; done
  grep -q "ready at" "$log" || { echo "wire: the server did not start"; tail -20 "$log"; kill $server; return 1; }
  python3 -m roseprof load "$url" --concurrency 64 --requests 256 --output-len 64 --traces-dir "$S/warm" \
    >/dev/null || rc=1  # CUDA graphs of every bucket and the allocator warm
  for size in ${SIZES:-1:128:32 8:256:32 64:1024:64}; do
    IFS=: read -r C N L <<< "$size"
    echo "== $C streams x $N requests x $L tokens" | tee -a "$S/wire.txt"
    timeout 150 python3 scripts/wire_agreement.py "$url" --concurrency "$C" --requests "$N" --output-len "$L" \
      --json "$S/wire-$C-$N-$L.json" ${WIRE_FLAGS:-} 2>&1 | tee -a "$S/wire.txt" || rc=1
  done
  rm -rf "$S/warm"
  kill $server; wait $server 2>/dev/null
  return $rc
}
