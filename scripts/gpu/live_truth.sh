# Issue 49's truth on the GPU (sourced by scripts/gpu_check.sh): `roseinfer serve gpt2` (float16, paged attention,
# CUDA graphs) with a planted cause, under `roseprof live` at 8 streams, checked by scripts/check_live_truth.py:
# (1) the decode-step region slowed by BUSY_MS (20) ms of CPU time on one step in 50 (ROSEINFER_TEST_BUSY_REGION); (2) a
# ~800-token prompt in every 4 requests (a dataset). CASES: which (region prefill). SERVER_ENV: more VAR=value for the servers. KEEP=1: the runs
# kept as runs.tgz. Results under $S: live-*.txt, check-*.txt.

stage live-truth "roseprof live names the planted cause first and blames no other on the GPU: a region slowed on \
one step in 50, then a long prompt in every 4 requests (scripts/check_live_truth.py)"
stage_live_truth() {
  local port=${PORT:-8769} url rc=0 name
  url="http://127.0.0.1:$port"
  local tag file
  for tag in "" w; do  # the load's prompts, and the warm-up's (other long ones, or the prefix cache would hold these)
    file=$S/${tag}prompts.jsonl
    python3 - "$file" "$tag" <<'PY'
import json, sys
with open(sys.argv[1], "w") as fh:
    for i in range(64):  # one long prompt in 4, ~800 tokens (96 more within GPT-2's 1,024), each its own from its
        # first block on: identical ones would be the prefix cache's after the first, and cost no prefill
        long = f"{sys.argv[2]}{i:03d} " + "x " * 398
        fh.write(json.dumps({"prompt": long if i % 4 == 0 else f"short prompt {i}", "output_len": 96}) + "\n")
PY
  done
  for name in ${CASES:-region prefill}; do
    local env=() args=() warm=()
    if [ $name = region ]; then
      env=(ROSEINFER_TEST_BUSY_REGION=roseinfer.decode_step:${BUSY_MS:-20} ROSEINFER_TEST_SLOW_EVERY=50)
      args=(--requests 64 --prompt-len 16 --output-len 96)
      warm=("${args[@]}")
    else
      args=(--requests 64 --dataset "$S/prompts.jsonl")
      warm=(--requests 64 --dataset "$S/wprompts.jsonl")
    fi
    # shellcheck disable=SC2086
    env "${env[@]}" ${SERVER_ENV:-} python3 -m roseinfer.serve gpt2 --device cuda --dtype float16 --paged-attn --cuda-graph \
      --max-batch-size 64 --enable-profiling --port "$port" >"$S/serve-$name.log" 2>&1 &
    local server=$!
    for _ in $(seq 180); do grep -q "ready at" "$S/serve-$name.log" && break; kill -0 $server 2>/dev/null || break; sleep 1; done
    grep -q "ready at" "$S/serve-$name.log" || { echo "live-truth: the server did not start"; tail -5 "$S/serve-$name.log"; rc=1; continue; }
    # a load of the same shape once before: CUDA graphs of every bucket and the allocator warm (prefills of short
    # batches stalled 50-160 ms with it and without it: session 21, docs/BENCHMARKS.md)
    python3 -m roseprof load "$url" --concurrency 8 "${warm[@]}" --traces-dir "$S/warm" >/dev/null
    COLUMNS=100 python3 -m roseprof live "$url" --steps 4000 --concurrency 8 "${args[@]}" --traces-dir "$S/traces" \
      --name "truth-$name" >"$S/live-$name.txt" 2>&1 || rc=1
    head -12 "$S/live-$name.txt"
    if [ $name = region ]; then
      python3 scripts/check_live_truth.py "$S/traces" truth-region --region roseinfer.decode_step --every 50
    else
      python3 scripts/check_live_truth.py "$S/traces" truth-prefill --prefill-tokens 700
    fi > "$S/check-$name.txt" 2>&1 || rc=1
    cat "$S/check-$name.txt"
    kill $server; wait $server 2>/dev/null
  done
  [ -n "${KEEP:-}" ] && tar czf "$S/runs.tgz" -C "$S" --exclude=raw traces warm  # the runs, to read elsewhere
  rm -rf "$S/warm" "$S/traces"
  return $rc
}
