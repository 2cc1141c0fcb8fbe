# roseinfer serve on one GPU (sourced by scripts/gpu_check.sh). Runs scripts/gpu_serve_check.sh as it is, results
# under $S; .whl must hold the server's wheels (the list is in that script's header).

stage serve "roseinfer serve against the offline engine (scripts/gpu_serve_check.sh: TPOT at B=1 x 256, tok/s at \
64 and 256 streams x 512, metrics on/off pairs; BENCH_FLAGS passes flags to scripts/bench_serve.py)"
stage_serve() {
  OUT=$S bash scripts/gpu_serve_check.sh
}
