# Capture windows under tensor parallelism on 2 GPUs (issue 49; sourced by scripts/gpu_check.sh; run on
# nvidia-h200-x2): roseinfer serve --tensor-parallel-size 2 --enable-profiling (GPT-2 small, bfloat16, paged
# attention, CUDA graphs, NCCL) under 64 streams; a torch window and a steps window of STEPS decode steps, each
# stored by roseprof live as ONE run of both ranks, checked by scripts/check_tp_window.py (the ranks' step counts
# agree, each rank's kernels its own, no kernel of no rank, the collectives matched in every step). Results under
# $S: serve.log, live-TOOL.txt (roseprof live's output), check-TOOL.txt, the runs in $S/traces.

stage windows-tp "capture windows on every rank of a TP=2 server (2 GPUs): roseprof live --tool torch and --tool \
steps, each one run of both ranks, checked by scripts/check_tp_window.py (STEPS, default 32)"
stage_windows_tp() {
  # MODEL, SERVE_FLAGS and KERNELS (the checker's --gpu) let the same stage run on a CPU box: MODEL=gpt2-tiny
  # SERVE_FLAGS="--device cpu" KERNELS= (gloo, CPU operators instead of kernels)
  local port=${PORT:-8767} log=$S/serve.log steps=${STEPS:-32} url rc=0 model=${MODEL:-gpt2}
  local flags=${SERVE_FLAGS:---device cuda --dtype bfloat16 --paged-attn --cuda-graph} kernels=${KERNELS---gpu}
  url="http://127.0.0.1:$port"
  # shellcheck disable=SC2086
  NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 python3 -m roseinfer.serve "$model" $flags \
    --tensor-parallel-size 2 --max-batch-size 256 --enable-profiling --profile-dir "$S/profile" --port "$port" \
    >"$log" 2>&1 &
  local server=$!
  for _ in $(seq 300); do grep -q "ready at" "$log" && break; kill -0 $server 2>/dev/null || break; sleep 1; done
  grep -q "ready at" "$log" || { echo "windows-tp: the server did not start"; tail -20 "$log"; kill $server; return 1; }
  # a first (discarded) torch window: CUDA graphs, the allocator and Kineto's own setup warm
  python3 -m roseprof live "$url" --steps 16 --tool torch --concurrency 64 --requests 128 --output-len 64 \
    --traces-dir "$S/warm" --name warm >/dev/null || rc=1
  local tool
  for tool in torch steps; do
    COLUMNS=100 python3 -m roseprof live "$url" --steps "$steps" --tool $tool --concurrency 64 --requests 256 \
      --output-len 128 --traces-dir "$S/traces" --name "tp2-$tool" >"$S/live-$tool.txt" 2>&1 || rc=1
    head -40 "$S/live-$tool.txt"
    echo "== tp2-$tool: scripts/check_tp_window.py"
    # shellcheck disable=SC2046
    python3 scripts/check_tp_window.py "$S/traces" "tp2-$tool" --ranks 2 $([ $tool = torch ] && echo "$kernels") \
      >"$S/check-$tool.txt" 2>&1 || rc=1
    cat "$S/check-$tool.txt"
  done
  kill $server; wait $server 2>/dev/null
  return $rc
}
