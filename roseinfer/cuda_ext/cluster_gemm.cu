// out = act(x @ W^T + b) for up to 64 rows of x (decode buckets of 33 to 64 rows), on tensor cores, split over K
// across the blocks of a thread-block cluster that sum their partial products in distributed shared memory.
// (roseinfer/cuda_ext/cluster_gemm.py launches it; the path it replaces is cuBLAS and the Triton skinny GEMM.)
//
// At 64 rows a GPT-2 small linear is still a weight stream (1.2 to 4.7 MB, 0.3 to 1.1 us at an H200's copy
// bandwidth), yet cuBLAS took 4.7 to 8.5 us for each and the Triton skinny GEMM under PDL 4.0 to 7.4 us
// (docs/BENCHMARKS.md, session 41): what the step pays is the chain after each kernel's wait, not the bytes.
// This kernel keeps that chain short:
// - block (s, t) of the grid [S, N / BN] owns output columns [t BN, t BN + BN) and slice s of K (KS = K / S wide).
//   Its weight tile W[t BN : t BN + BN, s KS : s KS + KS] goes into shared memory (cp.async) before the kernel
//   waits for the one in front (a programmatic dependent launch: while that kernel still runs);
// - after the wait it copies its slice of x [64, KS] (from L2: the kernel in front just wrote it) in two halves,
//   multiplying the first (mma.sync m16n8k16, fp32 accumulators) while the second arrives;
// - the S blocks of a column tile are one cluster (S = 1, 2, 4 or 8), and block r owns rows [r 64 / S, (r + 1)
//   64 / S) of the tile: every block stores its partial products of those rows into block r's shared memory
//   (distributed shared memory), the cluster meets at one barrier, and each block sums what it received in slice
//   order (deterministic), adds the bias, applies GPT-2's tanh GELU for c_fc and stores. No scratch in global
//   memory, no counters, no reduce kernel, no atomics.
// Rows of x past M are zeros (never read) and never stored.
#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <type_traits>
#include "common.cuh"
#ifndef ROSEINFER_KERNEL_ONLY  // a compile check of the kernels alone (no torch headers)
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAGuard.h>
#endif

namespace roseinfer_ext {  // bfloat16's conversions beside common.cuh's float16 ones
template <> __device__ __forceinline__ float to_f<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
}  // namespace roseinfer_ext

namespace {

using namespace roseinfer_ext;
namespace cg = cooperative_groups;

constexpr int BM = 64, LOG_BM = 6;  // rows of x a block multiplies (M <= BM)
constexpr int ROW_PAD = 8;   // elements after each shared row of x and W: 16 bytes, so ldmatrix's 8 rows hit 8 banks
constexpr int PART_PAD = 4;  // floats after each row of the partial: 16-byte aligned rows, fewer bank conflicts

__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], const void* smem) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s));
}

// d += a b: one m16n8k16 product, fp32 accumulators
template <typename T>
__device__ __forceinline__ void mma16816(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  if constexpr (std::is_same_v<T, __half>) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                 "{%8, %9}, {%0, %1, %2, %3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                 "{%8, %9}, {%0, %1, %2, %3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// 16 bytes from global into shared memory, or 16 zero bytes where !valid (nothing read: gmem need only be mapped)
__device__ __forceinline__ void cp_async16_or_zero(void* smem, const void* gmem, bool valid) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(s), "l"(gmem), "r"(valid ? 16 : 0) : "memory");
}

// Copy rows [0, rows) x columns [c0, c1) of a row-major global matrix (row stride ld elements) into shared memory
// rows of stride sld, 16 bytes a cp.async, spread over the block; rows from `valid_rows` on are zeros (not read:
// 32 rows of the same clamped address cost a 32-row GEMM more than its other 32 rows, session 41).
template <typename T, int THREADS>
__device__ __forceinline__ void copy_tile(T* sm, int sld, const T* g, long long ld, int rows, int valid_rows, int c0,
                                          int c1) {
  constexpr int V = 16 / sizeof(T);  // elements a copy
  // copy e = threadIdx.x + i THREADS is (row r, chunk c) of per_row chunks a row, stepped without a division (two
  // a copy were most of the kernel's instructions)
  const int per_row = (c1 - c0) / V, dr = THREADS / per_row, dc = THREADS % per_row;
  int r = threadIdx.x / per_row, c = threadIdx.x % per_row;
  for (; r < rows; r += dr, c += dc) {
    if (c >= per_row) c -= per_row, ++r;
    if (r >= rows) break;
    const bool valid = r < valid_rows;
    cp_async16_or_zero(sm + r * sld + c0 + c * V, g + (valid ? (long long)r * ld : 0) + c0 + c * V, valid);
  }
}

// k-steps [k0, k1) (multiples of 16) of the warp's [16, WCOLS] piece of the tile: A from xs (its rows m0..m0+15),
// B from ws (the tile's W rows n0..n0+WCOLS-1, i.e. output columns, K contiguous: the .col operand as stored).
template <typename T, int WCOLS>
__device__ __forceinline__ void mma_steps(float (&acc)[WCOLS / 8][4], const T* xs, const T* ws, int sld, int m0,
                                          int n0, int k0, int k1) {
  const int lane = threadIdx.x % 32;
  // ldmatrix: lane l names row l % 8 of matrix l / 8. A's matrices: rows +0 / +8 (bit 0), k +0 / +8 (bit 1);
  // B's, for two n8 tiles at once: k +0 / +8 (bit 0), n +0 / +8 (bit 1).
  const int j = lane / 8, r = lane % 8;
  const T* a_row = xs + (m0 + r + (j & 1) * 8) * sld + (j >> 1) * 8;
  const T* b_row = ws + (n0 + r + (j >> 1) * 8) * sld + (j & 1) * 8;
#pragma unroll 2
  for (int k = k0; k < k1; k += 16) {
    unsigned a[4];
    ldmatrix_x4(a, a_row + k);
#pragma unroll
    for (int p = 0; p < WCOLS / 16; ++p) {
      unsigned b[4];
      ldmatrix_x4(b, b_row + p * 16 * sld + k);
      mma16816<T>(acc[2 * p], a, b[0], b[1]);
      mma16816<T>(acc[2 * p + 1], a, b[2], b[3]);
    }
  }
}

// T: fp16 or bf16; BN: output columns a block; WN: warps along those columns (4 WN warps: 4 along the 64 rows).
// Grid [S, N / BN], cluster [S, 1, 1], dynamic shared memory `smem_bytes(BN, KS)`.
template <typename T, int BN, int WN>
__global__ void __launch_bounds__(128 * WN) cluster_gemm_kernel(const T* __restrict__ x, long long ldx,
                                                                const T* __restrict__ w, const T* __restrict__ bias,
                                                                T* __restrict__ out, int M, int N, int K, int KS,
                                                                bool gelu) {
  constexpr int THREADS = 128 * WN, WCOLS = BN / WN;
  static_assert(WCOLS % 16 == 0, "two n8 tiles a B load");
  extern __shared__ __align__(16) unsigned char smem[];
  const int sld = KS + ROW_PAD;
  T* ws = reinterpret_cast<T*>(smem);                          // [BN, sld]
  T* xs = ws + BN * sld;                                       // [BM, sld]
  // what the cluster's blocks send this one: their partial sums of its rows [S, BM / S, BN + PART_PAD]
  float* recv = reinterpret_cast<float*>(xs + BM * sld);
  __shared__ __align__(16) T bias_s[BN];
  const int s = blockIdx.x, S = gridDim.x, n_tile = blockIdx.y * BN;
  const T* w_tile = w + (long long)n_tile * K + (long long)s * KS;
  const T* x_tile = x + (long long)s * KS;

  // Every block of the cluster has started before any writes into another's shared memory: arrive now, wait
  // before the first such store (long after every block arrived).
  asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
  // Before the wait: the weight tile and the bias (not written by the step).
  copy_tile<T, THREADS>(ws, sld, w_tile, K, BN, BN, 0, KS);
  asm volatile("cp.async.commit_group;" ::: "memory");
  if (threadIdx.x < BN) bias_s[threadIdx.x] = bias != nullptr ? bias[n_tile + threadIdx.x] : from_f<T>(0.f);
  // release the next kernel (it too loads only what the step does not write before its wait), then wait for x
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  asm volatile("griddepcontrol.wait;" ::: "memory");

  // x's slice in two halves, the first multiplied while the second arrives
  const int half = KS / 2;
  copy_tile<T, THREADS>(xs, sld, x_tile, ldx, BM, M, 0, half);
  asm volatile("cp.async.commit_group;" ::: "memory");
  copy_tile<T, THREADS>(xs, sld, x_tile, ldx, BM, M, half, KS);
  asm volatile("cp.async.commit_group;" ::: "memory");
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int m0 = (warp % 4) * 16, n0 = (warp / 4) * WCOLS;
  float acc[WCOLS / 8][4] = {};
  asm volatile("cp.async.wait_group 1;" ::: "memory");  // the weights and x's first half
  __syncthreads();
  mma_steps<T, WCOLS>(acc, xs, ws, sld, m0, n0, 0, half);
  asm volatile("cp.async.wait_group 0;" ::: "memory");
  __syncthreads();
  mma_steps<T, WCOLS>(acc, xs, ws, sld, m0, n0, half, KS);

  // Each accumulator goes to the block that owns its row (block r: rows [r BM / S, (r + 1) BM / S)), into that
  // block's recv[s] (remote stores: fire and forget, where loads from the other blocks would each wait); c0, c1 are
  // (row g, columns 2q, 2q + 1), c2, c3 row g + 8.
  constexpr int PLD = BN + PART_PAD;
  // S is a power of two: block r owns rows [r rows_each, (r + 1) rows_each), row's owner is row >> log2(rows_each)
  const int log_rows = LOG_BM - (__ffs(S) - 1), rows_each = 1 << log_rows, g = lane / 4, q = lane % 4;
  cg::cluster_group cluster = cg::this_cluster();
  asm volatile("barrier.cluster.wait.aligned;" ::: "memory");  // every block started
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = m0 + g + 8 * h;
    float* dst = cluster.map_shared_rank(recv, row >> log_rows) + (s * rows_each + (row & (rows_each - 1))) * PLD;
#pragma unroll
    for (int t = 0; t < WCOLS / 8; ++t)
      *reinterpret_cast<float2*>(dst + n0 + t * 8 + 2 * q) = make_float2(acc[t][2 * h], acc[t][2 * h + 1]);
  }
  // every partial of this block's rows has landed (release / acquire across the cluster); no block reads another's
  // shared memory after this, so none waits for the others before it leaves
  asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
  asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");

  // This block's rows, summed over the S partials in slice order (deterministic), 4 columns a step.
  for (int v = threadIdx.x; v < rows_each * (BN / 4); v += THREADS) {
    const int lr = v / (BN / 4), col = (v % (BN / 4)) * 4, row = s * rows_each + lr;
    if (row >= M) break;
    float4 sum = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int r = 0; r < S; ++r) {
      const float4 u = *reinterpret_cast<const float4*>(recv + (r * rows_each + lr) * PLD + col);
      sum.x += u.x; sum.y += u.y; sum.z += u.z; sum.w += u.w;
    }
    float o[4] = {sum.x, sum.y, sum.z, sum.w};
    T res[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      float a = o[e] + to_f<T>(bias_s[col + e]);
      if (gelu) {  // GPT-2's gelu_new, as the other kernels' epilogues
        const float u = 0.7978845608028654f * (a + 0.044715f * a * a * a);
        a = 0.5f * a * (1.f + tanhf(u));
      }
      res[e] = from_f<T>(a);
    }
    *reinterpret_cast<uint2*>(out + (long long)row * N + n_tile + col) = *reinterpret_cast<const uint2*>(res);
  }
}

#ifdef ROSEINFER_KERNEL_ONLY  // every instantiation the launcher uses
#define INSTANCE(T, BN_, WN_)                                                                                     \
  template __global__ void cluster_gemm_kernel<T, BN_, WN_>(const T*, long long, const T*, const T*, T*, int, int, \
                                                            int, int, bool);
#define EACH_TILE(T) INSTANCE(T, 32, 1) INSTANCE(T, 32, 2) INSTANCE(T, 64, 1) INSTANCE(T, 64, 2) INSTANCE(T, 128, 2)
EACH_TILE(__half)
EACH_TILE(__nv_bfloat16)
}  // namespace
#else
}  // namespace

// The shared memory a block of BN columns and slice KS takes (the weight tile, x's slice, the partial).
static int smem_bytes(int bn, int ks, int elem) {
  return (bn + BM) * (ks + ROW_PAD) * elem + BM * (bn + PART_PAD) * 4;
}


// x [M, K] (rows ldx apart, 16-byte aligned), w [N, K], bias [N] or empty, out [M, N] (contiguous), all one dtype;
// M <= 64, N % bn == 0, K % splits == 0, K / splits a multiple of 32. pdl: a programmatic dependent launch.
void cluster_gemm(torch::Tensor x, torch::Tensor w, torch::Tensor bias, torch::Tensor out, bool gelu, int64_t bn,
                  int64_t wn, int64_t splits, bool pdl) {
  const c10::cuda::CUDAGuard guard(x.device());
  const int M = x.size(0), K = x.size(1), N = w.size(0);
  TORCH_CHECK(M >= 1 && M <= BM, "cluster_gemm: 1 to ", BM, " rows, not ", M);
  TORCH_CHECK(N % bn == 0 && K % splits == 0 && (K / splits) % 32 == 0, "cluster_gemm: tile ", bn, " / ", splits,
              " splits does not divide ", N, " x ", K);
  TORCH_CHECK(splits == 1 || splits == 2 || splits == 4 || splits == 8,
              "cluster_gemm: 1, 2, 4 or 8 splits (a portable cluster whose blocks share the 64 rows)");
  const int KS = K / splits;
  const int smem = smem_bytes(bn, KS, x.element_size());
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(splits, N / bn);
  cfg.blockDim = dim3(128 * wn);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = c10::cuda::getCurrentCUDAStream();
  cudaLaunchAttribute attr[2];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = splits;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  attr[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[1].val.programmaticStreamSerializationAllowed = pdl ? 1 : 0;
  cfg.attrs = attr;
  cfg.numAttrs = 2;
  auto launch = [&](auto kernel, auto* t) {
    using T = std::remove_pointer_t<decltype(t)>;
    C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    auto p = [](const torch::Tensor& v) { return reinterpret_cast<T*>(v.data_ptr()); };
    C10_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, (const T*)p(x), (long long)x.stride(0), (const T*)p(w),
                                      (const T*)(bias.numel() ? p(bias) : nullptr), p(out), M, N, K, KS, gelu));
  };
  auto pick = [&](auto* t) {
    using T = std::remove_pointer_t<decltype(t)>;
    if (bn == 32 && wn == 1) launch(cluster_gemm_kernel<T, 32, 1>, t);
    else if (bn == 32 && wn == 2) launch(cluster_gemm_kernel<T, 32, 2>, t);
    else if (bn == 64 && wn == 1) launch(cluster_gemm_kernel<T, 64, 1>, t);
    else if (bn == 64 && wn == 2) launch(cluster_gemm_kernel<T, 64, 2>, t);
    else if (bn == 128 && wn == 2) launch(cluster_gemm_kernel<T, 128, 2>, t);
    else TORCH_CHECK(false, "cluster_gemm: no tile of ", bn, " columns on ", wn, " warps along them");
  };
  if (x.scalar_type() == at::kHalf) pick(static_cast<__half*>(nullptr));
  else {
    TORCH_CHECK(x.scalar_type() == at::kBFloat16, "cluster_gemm: float16 or bfloat16");
    pick(static_cast<__nv_bfloat16*>(nullptr));
  }
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("cluster_gemm", &cluster_gemm, "up to 64 rows: act(x W^T + b), split-K summed in a cluster (cluster_gemm.cu)");
  m.attr("MAX_ROWS") = BM;
}
#endif
