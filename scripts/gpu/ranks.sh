# Tensor parallelism on 2 GPUs (sourced by scripts/gpu_check.sh; run on nvidia-h200-x2 or nvidia-h100-x2). The two
# stages run scripts/gpu_tp_check.sh and scripts/gpu_tp_fixtures.sh as they are, with their own parts (TP_PARTS:
# their STAGES) and results under $S.

stage tp "tensor parallelism on 2 GPUs (scripts/gpu_tp_check.sh): the TP tests on NCCL, gpt2-xl B=1 latency and \
workload (a) at TP=1 and TP=2, one roseprof nsys capture of TP=2 (TP_PARTS: tests,latency,throughput,nsys)"
stage_tp() {
  NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 OUT=$S STAGES=${TP_PARTS:-tests,latency,throughput,nsys} \
    bash scripts/gpu_tp_check.sh
}

stage tp-fixtures "on 2 GPUs (scripts/gpu_tp_fixtures.sh): every GPU test, then TP=2 captures kept as fixtures \
(TP_PARTS: suite,nsys,torch,tpbench)"
stage_tp_fixtures() {
  NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 OUT=$S STAGES=${TP_PARTS:-suite,nsys,torch,tpbench} \
    bash scripts/gpu_tp_fixtures.sh
}

stage ranks "every rank's GPU work on 4 GPUs (scripts/gpu_ranks_check.sh, issue 41): the rank-kernel GPU test, the \
TP=4 fixtures, the gpt2-xl TP=1/2/4 scale table and captures (RANKS_PARTS: tests,fixtures,scale)"
stage_ranks() {
  OUT=$S STAGES=${RANKS_PARTS:-tests,fixtures,scale} bash scripts/gpu_ranks_check.sh
}
