# Captures kept as test fixtures (sourced by scripts/gpu_check.sh): real nsys 2025.3, ncu 2025.3 and torch.profiler
# files of the engine and of a program that is not the engine, with the tools' own reports as oracles
# (tests/data/README.md says what each fixture is). Each stage's files under $S; copy them into tests/data/.

stage fixture-decode "a small nsys capture of the engine (8 requests x 72 tokens, eager paged) as the decode fixture, \
with nsys stats oracles for it and the matmul fixture"
stage_fixture_decode() {
  local run f base
  python3 -m roseprof nsys --traces-dir "$S/tr" --dashboards-dir "$S/dash" --name gpu-fixture --trace cuda,nvtx \
    python3 -m roseinfer.benchmark_streaming --device cuda --hf-model-id gpt2 --num-requests 8 --max-batch-size 8 \
    --max-new-tokens 72 --warmup-runs 0 --repeat-runs 1 --no-stop-on-eos > "$S/capture-fixture.log" 2>&1
  echo "capture rc=$?"
  run=$(ls -d "$S"/tr/*gpu-fixture* | head -1)
  cp "$run/raw/trace.sqlite" "$S/h100-nsys2025.3-roseinfer-decode.sqlite"
  cp "$run/steplog.jsonl" "$S/h100-nsys2025.3-roseinfer-decode.steplog.jsonl"
  cp "$run/summary.json" "$S/gpu-fixture-summary.json"
  for f in "$S/h100-nsys2025.3-roseinfer-decode.sqlite" tests/data/nsys/h100-nsys2025.3-matmul-nvtx.sqlite; do
    base=$S/$(basename "$f" .sqlite)
    nsys stats -q --force-export=false -r nvtx_sum,cuda_gpu_kern_sum,nvtx_gpu_proj_sum,nvtx_kern_sum --format csv \
      -o "$base.stats" "$f" > /dev/null 2>&1
  done
  ls "$S"
}

stage fixture-graphs "a small capture of the fast path (--paged-attn --cuda-graph, 8 x 72) as the graphs fixture, \
its nsys stats oracles and CUDA_GRAPH_NODE_EVENTS schema; then tests/roseprof/test_graphs_real.py on it and its \
per-region replay time"
stage_fixture_graphs() {
  local base=h100-nsys2025.3-roseinfer-graphs run F=$S/fixture
  mkdir -p "$F"
  timeout 200 python3 -m roseprof nsys --traces-dir "$S/tr" --dashboards-dir "$S/dash" --name gpu-graphs \
    --trace cuda,nvtx -- python3 -m roseinfer.benchmark_streaming --device cuda --hf-model-id gpt2 --paged-attn \
    --cuda-graph --num-requests 8 --max-batch-size 8 --max-new-tokens 72 --warmup-runs 0 --repeat-runs 1 \
    --no-stop-on-eos > "$S/capture-fixture.log" 2>&1
  echo "capture rc=$?"; tail -25 "$S/capture-fixture.log"
  run=$(ls -d "$S"/tr/*gpu-graphs* | head -1)
  cp "$run/raw/trace.sqlite" "$F/$base.sqlite"
  cp "$run/steplog.jsonl" "$F/$base.steplog.jsonl"
  cp "$run/summary.json" "$F/gpu-graphs-summary.json"
  python3 -c "import os; s=os.path.getsize('$F/$base.sqlite')/2**20; print(f'fixture sqlite {s:.2f} MiB', 'OK' if s < 8 else 'OVER 8 MiB')"
  nsys stats -q --force-export=false -r nvtx_sum,cuda_gpu_kern_sum,nvtx_gpu_proj_sum,nvtx_kern_sum --format csv \
    -o "$F/$base.stats" "$F/$base.sqlite" > /dev/null 2>&1; echo "nsys stats rc=$?"
  python3 - "$F/$base.sqlite" > "$F/graph-node-tables.txt" <<'PY'
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
tables = [r[0] for r in c.execute("SELECT name FROM sqlite_master WHERE type='table' ORDER BY name")]
print("tables:", ", ".join(tables))
for t in ("CUDA_GRAPH_NODE_EVENTS", "CUDA_GRAPH_EVENTS", "CUPTI_ACTIVITY_KIND_KERNEL"):
    if t not in tables:
        print(f"\n{t}: absent"); continue
    print(f"\n{t}:", c.execute(f"SELECT sql FROM sqlite_master WHERE name='{t}'").fetchone()[0])
    print("rows:", c.execute(f"SELECT count(*) FROM {t}").fetchone()[0])
    cur = c.execute(f"SELECT * FROM {t} LIMIT 6")
    print([d[0] for d in cur.description])
    for row in cur:
        print(row)
k = c.execute("SELECT count(*), count(graphNodeId), count(graphId) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()
print(f"\nkernels {k[0]}, with graphNodeId {k[1]}, with graphId {k[2]}")
PY
  head -c 4000 "$F/graph-node-tables.txt"; echo
  cp "$F"/$base.* tests/data/nsys/  # this machine's copy only: the real-fixture test runs on it here
  timeout 120 python3 -m pytest -p no:cacheprovider -o addopts='' -q -rs tests/roseprof/test_graphs_real.py 2>&1 | tail -25
  echo "-- per-region GPU time of a graph replay (capture-time regions), fixture run"
  python3 scripts/graph_step_table.py "$run"
  tar czf "$S/fixture.tgz" -C "$F" .
}

stage fixture-pdl "the batch-1 fast path with programmatic dependent launches (48 tokens) as the stream-own-time \
fixture (tests/roseprof/test_stream_time.py), with nsys stats oracles and its per-region replay time"
stage_fixture_pdl() {
  local base=h100-nsys2025.3-roseinfer-pdl run
  timeout 200 python3 -m roseprof nsys --traces-dir "$S/tr" --dashboards-dir "$S/dash" --name b1-pdl \
    --trace cuda,nvtx -- python3 -m roseinfer.benchmark_streaming --device cuda --hf-model-id gpt2 --paged-attn \
    --cuda-graph --no-stop-on-eos --num-requests 1 --max-batch-size 1 --prefill-max-batch-size 1 --max-new-tokens 48 \
    --warmup-runs 0 --repeat-runs 1 > "$S/capture.log" 2>&1
  echo "capture rc=$?"; tail -5 "$S/capture.log"
  run=$(ls -d "$S"/tr/*b1-pdl* | head -1)
  cp "$run/raw/trace.sqlite" "$S/$base.sqlite"
  cp "$run/steplog.jsonl" "$S/$base.steplog.jsonl"
  nsys stats -q --force-export=false -r cuda_gpu_kern_sum --format csv -o "$S/$base.stats" "$S/$base.sqlite" \
    > /dev/null 2>&1; echo "nsys stats rc=$?"
  python3 scripts/graph_step_table.py "$run"
}

stage fixture-halves "the fast path at batch 224 (12 tokens), whose captured step runs as two halves of the batch \
on two streams (two branches of the graph), as the fixture of kernels of two streams running at once \
(tests/roseprof/test_stream_time.py), with its nsys stats oracle; nsys run as roseprof nsys runs it (its flags, the \
engine's NVTX ranges and step log on), so that no wheel need travel"
stage_fixture_halves() { capture_batch_224 h200-nsys2025.3-roseinfer-halves; }

stage fixture-one-stream "fixture-halves's run with --no-cutlass-gemm: the same batch's step on one stream (cuBLAS), \
the before side of tests/roseprof/test_diff_streams.py's diff (its sqlite xz-compressed there)"
stage_fixture_one_stream() { capture_batch_224 h200-nsys2025.3-roseinfer-one-stream --no-cutlass-gemm; }

capture_batch_224() {  # capture_batch_224 BASE [ENGINE FLAG...]
  local base=$1; shift
  ROSEINFER_NVTX=1 ROSEINFER_STEP_LOG="$S/$base.steplog.jsonl" timeout 200 nsys profile --trace=cuda,nvtx \
    --sample=none --cpuctxsw=none --cuda-graph-trace=node --export=sqlite --force-overwrite=true -o "$S/$base" \
    python3 -m roseinfer.benchmark_streaming --device cuda --hf-model-id gpt2 --paged-attn --cuda-graph \
    --no-stop-on-eos --prompt x --num-requests 224 --max-batch-size 224 --prefill-max-batch-size 224 \
    --max-new-tokens 12 --warmup-runs 0 --repeat-runs 1 "$@" > "$S/capture.log" 2>&1
  echo "capture rc=$?"; tail -5 "$S/capture.log"
  rm -f "$S/$base.nsys-rep"
  nsys stats -q --force-export=false -r cuda_gpu_kern_sum --format csv -o "$S/$base.stats" "$S/$base.sqlite" \
    > /dev/null 2>&1; echo "nsys stats rc=$?"
  ls -la "$S"
}

stage fixture-cutlass "the fast path at batch 64 (its CUTLASS GEMMs; 24 tokens) under roseprof torch, whose \
trace has the GEMMs' names as Kineto left them (mangled); ncu's names of the same command's first 600 launches, exported \
demangled and mangled from one report; then roseprof ncu --from the torch run's top 6 kernels (the fixtures of \
roseprof/drivers/demangle.py and roseprof/kernel_names.py, xz-compressed there)"
stage_fixture_cutlass() {
  local TR=$S/tr DB=$S/dash run base
  local engine=(python3 -m roseinfer.benchmark_streaming --hf-model-id gpt2 --device cuda --num-requests 64
    --max-batch-size 64 --prefill-max-batch-size 64 --max-new-tokens 24 --warmup-runs 0 --repeat-runs 1
    --no-stop-on-eos --mode online --paged-attn --cuda-graph)
  echo "-- roseprof torch"
  timeout 200 python3 -m roseprof torch --name cutlass --traces-dir "$TR" --dashboards-dir "$DB" -- "${engine[@]}" \
    > "$S/torch.log" 2>&1; echo "rc=$?"
  run=$(ls -d "$TR"/*-cutlass-* | tail -1)
  cp "$run/raw/torch/trace.json.gz" "$S/h200-torch2.11-roseinfer-cutlass.json.gz"
  cp "$run/steplog.jsonl" "$S/h200-torch2.11-roseinfer-cutlass.steplog.jsonl"
  COLUMNS=80 python3 -m roseprof show cutlass --traces-dir "$TR" --dashboards-dir "$DB" > "$S/show.txt" 2>&1
  sed -n '/^top kernels/,/^decode steps/p' "$S/show.txt"
  echo "-- ncu's names: one report, exported with each kernel-name base"
  timeout 240 ncu --metrics gpu__time_duration.sum --launch-count 600 --export "$S/names" --force-overwrite \
    "${engine[@]}" > "$S/ncu-names.log" 2>&1; echo "rc=$?"
  base=$S/h200-ncu2025.3-roseinfer-names
  ncu --import "$S/names.ncu-rep" --csv --page raw --print-kernel-base demangled > "$base-raw.csv"
  ncu --import "$S/names.ncu-rep" --csv --page details --print-kernel-base demangled > "$base-details.csv"
  ncu --import "$S/names.ncu-rep" --csv --page raw --print-kernel-base mangled > "$base-mangled-raw.csv"
  xz -9e "$base-raw.csv" "$base-details.csv" "$base-mangled-raw.csv"; rm -f "$S/names.ncu-rep"
  ls -la "$S"
  echo "-- roseprof ncu --from the torch run"
  COLUMNS=80 timeout 300 python3 -m roseprof ncu --name from-torch --traces-dir "$TR" --dashboards-dir "$DB" \
    --from cutlass --top 6 > "$S/from-torch.log" 2>&1; echo "rc=$?"
  grep -v "^==PROF== Profiling" "$S/from-torch.log" | tail -30
}

stage fixture-views "a CUDA-graph program that is not the engine (scripts/hf_graph_program.py) under roseprof nsys \
and roseprof torch, and the engine's fast path under roseprof torch, with roseprof show at 80 and 120 columns \
(PARTS: nsys,torch,engine)"
stage_fixture_views() {
  local X=$S/extra store="--traces-dir $S/tr --dashboards-dir $S/dash" run B E
  local parts=${PARTS:-nsys,torch,engine}
  mkdir -p "$X"
  part() { [[ ",$parts," == *",$1,"* ]]; }
  show() {  # show a run at 80 and 120 columns, into the log and the bundle
    local cols
    for cols in 80 120; do
      echo "-- roseprof show $1 (COLUMNS=$cols)"
      COLUMNS=$cols python3 -m roseprof show "$1" $store 2>&1 | tee "$X/show-$2-$cols.txt"
    done
  }
  if part nsys; then
    echo "== the HF CUDA-graph program under roseprof nsys [${SECONDS}s]"
    timeout 240 python3 -m roseprof nsys $store --name hf-graph --trace cuda,nvtx --step-range hf.step -- \
      python3 scripts/hf_graph_program.py > "$X/capture-nsys.log" 2>&1
    echo "capture rc=$?"; tail -30 "$X/capture-nsys.log"
    run=$(ls -d "$S"/tr/*hf-graph* | head -1)
    B=$S/h100-nsys2025.3-hf-graph
    cp "$run/raw/trace.sqlite" "$B.sqlite"
    cp "$run/raw/trace.nsys-rep" "$B.nsys-rep"
    cp "$run/summary.json" "$X/hf-graph-nsys-summary.json"
    python3 -c "import os; s=os.path.getsize('$B.sqlite')/2**20; print(f'fixture sqlite {s:.2f} MiB', 'OK' if s < 10 else 'OVER 10 MiB')"
    nsys stats -q --force-export=false -r nvtx_sum,cuda_gpu_kern_sum,nvtx_gpu_proj_sum,nvtx_kern_sum --format csv \
      -o "$X/h100-nsys2025.3-hf-graph.stats" "$B.sqlite" > /dev/null 2>&1; echo "nsys stats rc=$?"
    python3 - "$B.sqlite" <<'PY'
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
k = c.execute("SELECT count(*), count(graphNodeId) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()
print(f"kernels {k[0]}, with graphNodeId {k[1]}")
print("graph node events", c.execute("SELECT count(*) FROM CUDA_GRAPH_NODE_EVENTS").fetchone()[0])
PY
    show "$(basename "$run")" nsys
  fi
  if part torch; then
    echo "== the HF CUDA-graph program under roseprof torch [${SECONDS}s]"
    timeout 240 python3 -m roseprof torch $store --name hf-graph-torch -- \
      python3 scripts/hf_graph_program.py > "$X/capture-torch.log" 2>&1
    echo "capture rc=$?"; tail -30 "$X/capture-torch.log"
    run=$(ls -d "$S"/tr/*hf-graph-torch* | head -1)
    cp "$run"/raw/torch/trace.json.gz "$S/h100-torch2.11-hf-graph.json.gz"
    cp "$run/summary.json" "$X/hf-graph-torch-summary.json"
    show "$(basename "$run")" torch
  fi
  if part engine; then
    echo "== the engine's fast path under roseprof torch [${SECONDS}s]"
    timeout 240 python3 -m roseprof torch $store --name engine-torch -- python3 -m roseinfer.benchmark_streaming \
      --device cuda --hf-model-id gpt2 --paged-attn --cuda-graph --num-requests 8 --max-batch-size 8 \
      --max-new-tokens 72 --warmup-runs 0 --repeat-runs 1 --no-stop-on-eos > "$X/capture-engine.log" 2>&1
    echo "capture rc=$?"; tail -30 "$X/capture-engine.log"
    run=$(ls -d "$S"/tr/*engine-torch* | head -1)
    E=$S/engine; mkdir -p "$E"
    cp "$run"/raw/torch/*.json* "$E/" 2>/dev/null
    cp "$run/steplog.jsonl" "$run/summary.json" "$run/manifest.json" "$E/" 2>/dev/null
    tar czf "$S/engine-torch.tgz" -C "$E" .
    show "$(basename "$run")" engine
  fi
  tar czf "$S/extra.tgz" -C "$X" .
}

stage ncu "roseprof ncu (ncu 2025.3 on PATH): the paged-attention kernel inside roseinfer.model.forward/ and the \
kernels inside roseinfer.kv.append_token/ (kept as fixtures), ncu --from an nsys capture, a filter that matches \
nothing; each kernel's fraction of peak DRAM bandwidth"
stage_ncu() {
  local TR=$S/tr DB=$S/dash name run
  local rp="python3 -m roseprof"
  mkdir -p "$S/fixture"
  { nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv; ncu --version | tail -1; } | tee "$S/machine.txt"
  echo "== 1. paged-attention decode kernel inside roseinfer.model.forward/"
  timeout 300 $rp ncu --traces-dir "$TR" --dashboards-dir "$DB" --name attn --nvtx-include roseinfer.model.forward/ \
    --kernel paged_decode --launch-count 24 2>&1 | tail -25 | tee "$S/attn.log"
  echo "== 2. kernels inside roseinfer.kv.append_token/"
  timeout 300 $rp ncu --traces-dir "$TR" --dashboards-dir "$DB" --name kvappend \
    --nvtx-include roseinfer.kv.append_token/ --launch-count 24 2>&1 | tail -25 | tee "$S/kvappend.log"
  echo "== 3. nsys capture of the same command, then ncu --from it"
  read -r -a cmd <<< "$(python3 -c 'from roseprof.workload.roseinfer import ncu_default_command as c; print(" ".join(c()))')"
  timeout 300 $rp nsys --traces-dir "$TR" --dashboards-dir "$DB" --name before --trace cuda,nvtx -- "${cmd[@]}" 2>&1 \
    | tail -20 | tee "$S/nsys-before.log"
  timeout 300 $rp ncu --traces-dir "$TR" --dashboards-dir "$DB" --name from --from before --top 3 2>&1 | tail -25 \
    | tee "$S/from.log"
  echo "== 4. a filter that matches nothing (ncu 2025.3's own output kept)"
  timeout 120 $rp ncu --traces-dir "$TR" --dashboards-dir "$DB" --name nomatch --kernel no_such_kernel_xyz \
    --launch-count 1 -- python3 -c "import torch; torch.ones(4, device='cuda').sum().item()" > "$S/nomatch.log" 2>&1
  echo "exit code $?" >> "$S/nomatch.log"
  tail -8 "$S/nomatch.log"
  echo "== 5. results"
  for name in attn kvappend before from; do
    run=$(ls -d "$TR"/*-"$name"-* 2>/dev/null | head -1)
    [ -n "$run" ] || { echo "no $name run"; continue; }
    mkdir -p "$S/$name"
    cp "$run/summary.json" "$run/manifest.json" "$S/$name/"
    cp "$run"/raw/report.raw.csv "$run"/raw/report.details.csv "$run"/raw/ncu.log "$S/$name/" 2>/dev/null
    python3 scripts/screenshot_dashboard.py "$DB/$(basename "$run").html" "$S/$name/dashboard.png" >/dev/null 2>&1 \
      || echo "$name: no screenshot here (no Chromium); render one from $DB/$(basename "$run").html elsewhere"
  done
  run=$(ls -d "$TR"/*-attn-* 2>/dev/null | head -1)
  if [ -n "$run" ] && [ -f "$run/raw/report.ncu-rep" ]; then
    cp "$run/raw/report.ncu-rep" "$S/fixture/h100-ncu2025.3-roseinfer-attn.ncu-rep"
    cp "$run/raw/report.raw.csv" "$S/fixture/h100-ncu2025.3-roseinfer-attn-raw.csv"
    cp "$run/raw/report.details.csv" "$S/fixture/h100-ncu2025.3-roseinfer-attn-details.csv"
    ncu --import "$run/raw/report.ncu-rep" --csv --page raw --print-units auto \
      > "$S/fixture/h100-ncu2025.3-roseinfer-attn-raw-auto.csv"
  fi
  run=$(ls -d "$TR"/*-kvappend-* 2>/dev/null | head -1)
  [ -n "$run" ] && cp "$run/raw/report.ncu-rep" "$S/fixture/h100-ncu2025.3-roseinfer-kvappend.ncu-rep" 2>/dev/null
  python3 - "$TR" <<'PY' | tee "$S/numbers.txt"
import json, sys
from pathlib import Path

for run in sorted(Path(sys.argv[1]).iterdir()):
    s = run / "summary.json"
    if not s.is_file() or "ncu" not in json.loads(s.read_text()):
        continue
    ncu = json.loads(s.read_text())["ncu"]
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
PY
}
