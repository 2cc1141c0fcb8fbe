// Issue 50's probe: what the fused kernels' first reads after their PDL wait cost, whether bringing the row to a
// cluster once (distributed shared memory, or one TMA multicast) instead of to every block is cheaper, and what
// the LayerNorm itself costs once its row is there. Session 58's
// stamps put 2.7 us of each layer's chain after the waits in the two LayerNorms, and session 62 found their
// arithmetic is not it (a faster reduction gained nothing): what is left is reading the residual row and the split
// sum that every block of the kernel in front wrote. This measures that read outside the engine, in the engine's
// own LayerNorm (common.cuh's residual_layernorm), before any kernel is rebuilt on it
// (scripts/probe_row_read.py times it; docs/BENCHMARKS.md, session 63).
//
// Every variant is a chain of P programmatic dependent launches (PDL, the engine's chain) of 128 blocks of 256
// threads, C = 768. Launch p waits (griddepcontrol.wait), then every block reads the residual row x[p - 1]
// (float16 [C]) and the split sum d[p - 1] (float32 [4, C]), both written by the launch before, and runs the
// residual add and LayerNorm on them (block 0 also writes x[p] = s there, as the engine's kernels do); then it
// releases the next launch, spins `spin` clock cycles (the work the attention kernel does after its LayerNorm), and
// writes its 6 columns of the 4 rows of d[p], so that every block of the next launch reads what every block of this
// one wrote, as the engine's kernels read the atomics of every block in front. (Released before the wait, as the
// first build did, every launch's last block started 1-2 us after the launch before ended; released after the
// LayerNorm with no work after it, the next launch started only as this one ended: either way the chain timed
// launch latency, not the reads. The engine's MLP kernel releases before its wait, behind 72 KB of weight loads,
// which this probe does not have.) The variants differ only in how the 13.5 KB reach the block:
//   global     every block loads them itself, as the engine's kernels do (x and the 4 rows: the attention's ln_1);
//   global1    x and one row of d (1.5 + 3 KB: the MLP's ln_2, which reads the attention's one-row output);
//   bulk       every block copies them into its own shared memory by bulk copy (TMA, no tensor map), then runs the
//              LayerNorm from shared memory: the TMA path without the multicast;
//   mc2/4/8    clusters of 2, 4 or 8 blocks; each block copies its 1/n of the bytes by one multicast bulk copy into
//              the shared memory of every block of its cluster (L2 serves each byte once a cluster, not a block);
//   dsmem4     clusters of 4; each block loads its quarter into registers and pushes it into every block of the
//              cluster (st.async, counted on the receiver's mbarrier, as fused_attn.cu exchanges q/k/v);
//   global_cl8, none_cl8   global and none launched in clusters of 8, meeting as mc8 does (a barrier before the
//              wait, an arrive after the reads, a wait before exit): what the attention kernel, which is launched in
//              clusters of 8, pays already, so mc8 against these is its comparison;
//   no_norm    as none, and no LayerNorm either: s into shared memory (block 0 also into x[p]) behind one barrier;
//   none       no read after the wait: x[0] and d[0] (never written) are copied into shared memory before it; the
//              LayerNorm's own cost after the wait, the floor under the others.
// For the cluster variants every mbarrier is set, and the cluster has met, before the wait (off the chain, as
// fused_attn.cu sets its own; the cluster variants also pay a cluster launch and its barriers, which the engine's
// attention kernel, launched in clusters of 8, pays already and the other variants do not). The check: a block
// writes d[p] = 0.25 (s - prev) / incr at its columns, s as its LayerNorm left it in shared memory, plus its lanes'
// sums of LayerNorm(s) (zero for the constant rows the chain carries; they keep the LayerNorm's work live), where
// prev is x[p - 1] as it should be and incr the sum of the rows read (1, or 0.25 for global1). A read that ran before
// its producer's write, or took the wrong bytes, leaves that block's columns off (a whole row off by one amount),
// or its normalised row non-zero (a row off in some columns), from then on, and the rows show it.
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <cstdint>
#ifndef PROBE_KERNEL_ONLY  // a compile check of the kernels alone (nvcc -DPROBE_KERNEL_ONLY -c: no torch headers)
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAGuard.h>
#endif

#include "../roseinfer/cuda_ext/common.cuh"
#include "../roseinfer/cuda_ext/common_mbarrier.cuh"

namespace {

using namespace roseinfer_ext;

constexpr int THREADS = 256;
constexpr int C = 768;
constexpr int ROWS = SPLIT_ROWS;  // 4: the MLP kernel's split sum
constexpr int X_BYTES = C * 2, D_BYTES = ROWS * C * 4, BYTES = X_BYTES + D_BYTES;  // 1.5 KB + 12 KB
constexpr int COLS = 6;  // columns of d a block writes: 128 blocks x 6 = C

enum Mode { NONE = 0, GLOBAL = 1, GLOBAL1 = 2, BULK = 3, MULTICAST = 4, DSMEM = 5, NO_NORM = 6 };

// The row as it lands in shared memory: x, then d's 4 rows (one block of bytes, so that a cluster can split it).
struct __align__(16) RowShared {
  __half x[C];
  float d[ROWS * C];
};
static_assert(sizeof(RowShared) == BYTES, "x and d back to back");

// `bytes` from global `src` to the same offset of `dst` in every block of the cluster in `mask` (or, mask 0, in this
// block only), counted on each receiver's mbarrier at `bar`'s offset.
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, unsigned bytes, uint64_t* bar, uint16_t mask) {
  if (mask == 0)
    roseinfer_ext::bulk_copy(dst, src, bytes, bar);
  else
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
                 " [%0], [%1], %2, [%3], %4;"
                 ::"r"(smem_addr(dst)), "l"(src), "r"(bytes), "r"(smem_addr(bar)), "h"(mask) : "memory");
}

// 16 bytes into `dst` (this block's address) in block `rank` of the cluster, counted on its `bar`.
__device__ __forceinline__ void push16(void* dst, uint64_t* bar, int rank, uint4 v) {
  const unsigned rd = cluster_addr(dst, rank), rb = cluster_addr(bar, rank);
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32 [%0], {%1, %2, %3, %4}, [%5];"
               ::"r"(rd), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w), "r"(rb) : "memory");
}

__device__ __forceinline__ unsigned cluster_rank() {
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}

// The 16-byte piece i of the row (x's 96, then d's 768) in global memory.
__device__ __forceinline__ const uint4* piece(const __half* x, const float* d, int i) {
  constexpr int XP = X_BYTES / 16;
  return i < XP ? reinterpret_cast<const uint4*>(x) + i : reinterpret_cast<const uint4*>(d) + (i - XP);
}

// One launch: reads row p - 1 of x [P + 1, C] and d [P + 1, ROWS, C], writes row p. CL: the cluster's blocks.
template <int MODE, int CL>
__global__ void __launch_bounds__(THREADS) row_kernel(const __half* __restrict__ x_all, const float* __restrict__ d_all,
                                                     __half* __restrict__ x_out_all, float* __restrict__ d_out_all,
                                                     const __half* __restrict__ ln_w, const __half* __restrict__ ln_b,
                                                     int p, long long spin, unsigned long long* __restrict__ stamps) {
  // stamps (or null): [P + 1, 3, G] globaltimer of thread 0 at the start, after the wait, at the end (all warps)
  unsigned long long* st = stamps ? stamps + (static_cast<size_t>(p) * 3) * gridDim.x + blockIdx.x : nullptr;
  if (st && threadIdx.x == 0) st[0] = globaltimer();
  __shared__ LayerNormShared<__half, C> lns;
  __shared__ RowShared row;
  __shared__ __align__(8) uint64_t bar;
  const unsigned rank = CL > 1 ? cluster_rank() : 0;
  constexpr bool COPIES = MODE == BULK || MODE == MULTICAST || MODE == DSMEM;  // the row lands on an mbarrier
  if constexpr (COPIES) {
    if (threadIdx.x == 0) {
      mbar_init(&bar, 1);
      mbar_expect_tx(&bar, BYTES);
      // the init seen by the bulk copies' complete_tx (the async proxy), and by the cluster's peers
      asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    if constexpr (CL == 1) __syncthreads();
  }
  if constexpr (CL > 1) {
    // every block of the cluster started (its mbarrier set, where it has one) before any writes into it: met
    // before the wait (the global and none variants in clusters meet too, so that they pay what the copies do)
    asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
    asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
  }
  stage_layernorm_params<__half, C, THREADS>(lns, ln_w, ln_b);
  constexpr bool ROW0 = MODE == NONE || MODE == NO_NORM;  // reads row 0, which no launch writes
  const int src = ROW0 ? 0 : p - 1;
  const __half* x = x_all + static_cast<size_t>(src) * C;
  const float* d = d_all + static_cast<size_t>(src) * ROWS * C;
  if constexpr (MODE == NONE || MODE == NO_NORM) {  // the row into shared memory before the wait: no read after it
    for (int i = threadIdx.x; i < BYTES / 16; i += THREADS)
      cp_async16(reinterpret_cast<uint4*>(&row) + i, piece(x, d, i));
    asm volatile("cp.async.commit_group;" ::: "memory");
    asm volatile("cp.async.wait_all;" ::: "memory");  // landed, and seen by every thread, before the wait
    __syncthreads();
  }
  asm volatile("griddepcontrol.wait;" ::: "memory");
  if (st && threadIdx.x == 0) st[gridDim.x] = globaltimer();

  uint4 h[C / 256] = {};
  if constexpr (MODE == NO_NORM) {  // s alone, no LayerNorm: block 0 stores it, every block keeps it for its columns
    for (int k = threadIdx.x; k < C; k += THREADS) {
      float v = __half2float(row.x[k]);
#pragma unroll
      for (int r = 0; r < ROWS; ++r) v += row.d[r * C + k];
      lns.s[k] = __float2half_rn(v);
      if (blockIdx.x == 0) x_out_all[static_cast<size_t>(p) * C + k] = lns.s[k];
    }
    __syncthreads();
  } else if constexpr (MODE == GLOBAL) {
    residual_layernorm<__half, float, C, THREADS, 0, ROWS>(x, d, lns, 1e-5f, x_out_all + static_cast<size_t>(p) * C, h);
    if constexpr (CL > 1) asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");  // as the copies
  } else if constexpr (MODE == GLOBAL1) {
    residual_layernorm<__half, float, C, THREADS, 0, 1>(x, d, lns, 1e-5f, x_out_all + static_cast<size_t>(p) * C, h);
  } else {
    if constexpr (MODE == BULK) {
      if (threadIdx.x == 0) {
        bulk_copy(row.x, x, X_BYTES, &bar, 0);
        bulk_copy(row.d, d, D_BYTES, &bar, 0);
      }
    } else if constexpr (MODE == MULTICAST) {
      // this block's 1/CL of the bytes, in each of the two pieces (x, d) it overlaps, into every block of the cluster
      if (threadIdx.x == 0) {
        constexpr unsigned SHARE = BYTES / CL;
        static_assert(BYTES % (16 * CL) == 0, "whole 16-byte pieces a block");
        const unsigned lo = rank * SHARE, hi = lo + SHARE;
        const uint16_t mask = static_cast<uint16_t>((1u << CL) - 1);
        if (lo < X_BYTES)
          bulk_copy(reinterpret_cast<char*>(row.x) + lo, reinterpret_cast<const char*>(x) + lo,
                    min(hi, static_cast<unsigned>(X_BYTES)) - lo, &bar, mask);
        if (hi > X_BYTES) {
          const unsigned a = max(lo, static_cast<unsigned>(X_BYTES)) - X_BYTES;
          bulk_copy(reinterpret_cast<char*>(row.d) + a, reinterpret_cast<const char*>(d) + a, hi - X_BYTES - a, &bar,
                    mask);
        }
      }
    } else if constexpr (MODE == DSMEM) {
      // this block's quarter, 16 bytes a thread (216 of them), pushed into every block of the cluster
      constexpr int SHARE = BYTES / 16 / CL;
      static_assert(SHARE <= THREADS, "one piece a thread");
      if (threadIdx.x < SHARE) {
        const int i = rank * SHARE + threadIdx.x;
        const uint4 v = *piece(x, d, i);
#pragma unroll
        for (int r = 0; r < CL; ++r) push16(reinterpret_cast<uint4*>(&row) + i, &bar, r, v);
      }
    }
    if constexpr (COPIES) mbar_wait<true>(&bar, 0);  // every byte of the row has landed here
    // every byte this block expects has arrived: its peers may leave once every block's have (the wait is at the end)
    if constexpr (CL > 1) asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
    residual_layernorm<__half, float, C, THREADS, 0, ROWS>(
        row.x, row.d, lns, 1e-5f, x_out_all + static_cast<size_t>(p) * C, h);
  }

  // Release the next launch once this block's reads are done, as fused_attn.cu does after its LayerNorm (released
  // before the wait, the last block of a launch started 1-2 us after the launch before ended: session 63's calls 1
  // and 2).
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  // The work a fused kernel does after its LayerNorm (the attention's q/k/v, attention and attn_proj: about 3.6 us
  // on an H200, session 58), as `spin` clock cycles: the time in which the next launch's blocks start and load
  // what they load before their wait, so that they wait there when this launch ends, as in the engine. Without it
  // the next launch started only as this one ended (session 63's call 3).
  const long long t0 = clock64();
  while (clock64() - t0 < spin) {
  }

  // This block's 6 columns of the 4 rows of d[p], from s at those columns and this lane's sum of LayerNorm(s).
  float hs = 0.f;
#pragma unroll
  for (int j = 0; j < C / 256; ++j) {
    const __half* v = reinterpret_cast<const __half*>(&h[j]);
#pragma unroll
    for (int e = 0; e < 8; ++e) hs += __half2float(v[e]);
  }
  // x[p - 1] as it should be, and the sum of the rows of d read (each 0.25): what the check's d[p] is built from
  constexpr float INCR = MODE == GLOBAL1 ? 0.25f : 1.f;
  const float prev = ROW0 ? 0.f : INCR * (p - 1);
  if (threadIdx.x < ROWS * COLS) {
    const int r = threadIdx.x / COLS, k = blockIdx.x * COLS + threadIdx.x % COLS;
    d_out_all[(static_cast<size_t>(p) * ROWS + r) * C + k] = 0.25f * (__half2float(lns.s[k]) - prev) / INCR + hs;
  }
  // No block leaves while a copy it issued into its peers may be in flight: each peer has had all its bytes.
  if constexpr (CL > 1) asm volatile("barrier.cluster.wait.aligned;" ::: "memory");
  if (st) {
    __syncthreads();
    if (threadIdx.x == 0) st[2 * gridDim.x] = globaltimer();
  }
}

// One launch of row_kernel<MODE, CL> as a programmatic dependent launch (in clusters of CL where CL > 1).
template <int MODE, int CL>
cudaError_t launch(int64_t blocks, cudaStream_t stream, const __half* x, const float* d, __half* xo, float* dout,
                   const __half* w, const __half* b, int p, long long spin, unsigned long long* stamps) {
  cudaLaunchAttribute attr[2];
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(blocks));
  cfg.blockDim = dim3(THREADS);
  cfg.stream = stream;
  cfg.attrs = attr;
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.numAttrs = 1;
  if (CL > 1) {
    attr[1].id = cudaLaunchAttributeClusterDimension;
    attr[1].val.clusterDim.x = CL;
    attr[1].val.clusterDim.y = 1;
    attr[1].val.clusterDim.z = 1;
    cfg.numAttrs = 2;
  }
  return cudaLaunchKernelEx(&cfg, row_kernel<MODE, CL>, x, d, xo, dout, w, b, p, spin, stamps);
}

// The variants, indexed as probe_row_read.py's VARIANTS numbers them: none, global, global1, bulk, mc2, mc4, mc8,
// dsmem4, no_norm, global_cl8, none_cl8 (the table also instantiates every kernel, for the compile check too).
using Launch = cudaError_t (*)(int64_t, cudaStream_t, const __half*, const float*, __half*, float*, const __half*,
                               const __half*, int, long long, unsigned long long*);
[[maybe_unused]] constexpr Launch LAUNCHES[] = {  // unused where only the kernels are compiled
    launch<NONE, 1>,      launch<GLOBAL, 1>,    launch<GLOBAL1, 1>, launch<BULK, 1>,    launch<MULTICAST, 2>,
    launch<MULTICAST, 4>, launch<MULTICAST, 8>, launch<DSMEM, 4>,   launch<NO_NORM, 1>, launch<GLOBAL, 8>,
    launch<NONE, 8>,
};

#ifdef PROBE_KERNEL_ONLY
}  // namespace
#else
// Launches 1 .. phases of `variant` (an index of LAUNCHES) on the current stream. x: float16 [phases + 1, C]; d:
// float32 [phases + 1, 4, C]; row 0 of each is the input; ln_w, ln_b float16 [C]. stamps: int64
// [phases + 1, 3, blocks], or an empty tensor for no stamps. spin: clock cycles of work after the LayerNorm.
void chain(torch::Tensor x, torch::Tensor d, torch::Tensor ln_w, torch::Tensor ln_b, int64_t phases,
           int64_t variant, int64_t spin, torch::Tensor stamps) {
  const int64_t blocks = C / COLS;
  TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat16 && x.numel() == (phases + 1) * C,
              "x must be float16 [phases + 1, 768] on the GPU");
  TORCH_CHECK(d.is_cuda() && d.scalar_type() == torch::kFloat32 && d.numel() == (phases + 1) * ROWS * C,
              "d must be float32 [phases + 1, 4, 768] on the GPU");
  TORCH_CHECK(ln_w.scalar_type() == torch::kFloat16 && ln_b.scalar_type() == torch::kFloat16 && ln_w.numel() == C &&
                  ln_b.numel() == C, "ln_w, ln_b must be float16 [768]");
  const c10::cuda::CUDAGuard guard(x.device());
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  auto* xp = reinterpret_cast<__half*>(x.data_ptr());
  auto* dp = d.data_ptr<float>();
  auto* w = reinterpret_cast<const __half*>(ln_w.data_ptr());
  auto* b = reinterpret_cast<const __half*>(ln_b.data_ptr());
  TORCH_CHECK(stamps.numel() == 0 ||
                  (stamps.scalar_type() == torch::kInt64 && stamps.numel() == (phases + 1) * 3 * blocks),
              "stamps must be int64 [phases + 1, 3, 128] or empty");
  auto* st = stamps.numel() ? reinterpret_cast<unsigned long long*>(stamps.data_ptr()) : nullptr;
  constexpr int64_t variants = sizeof(LAUNCHES) / sizeof(LAUNCHES[0]);
  TORCH_CHECK(variant >= 0 && variant < variants, "variant must be 0 to ", variants - 1);
  for (int p = 1; p <= phases; ++p) {
    const cudaError_t err = LAUNCHES[variant](blocks, stream, xp, dp, xp, dp, w, b, p, spin, st);
    TORCH_CHECK(err == cudaSuccess, cudaGetErrorString(err));
  }
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("chain", &chain, "a PDL chain of row reads + LayerNorms"); }
#endif
