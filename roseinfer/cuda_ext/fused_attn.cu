// The attention half of one GPT-2 block at one row (decode batch 1) as one kernel, each head on a cluster of
// blocks whose only dependencies are on each other:
//   s = x + delta;  h = LayerNorm(s);  q, k, v = h @ W_attn^T + b_attn  (k, v also into the paged cache)
//   o = softmax(q K^T * scale) V over the past tokens and the new one;  out += o @ W_proj^T (+ b_proj)
// (roseinfer/cuda_ext/fused_attn.py launches it; the Triton path is three kernels: the norm GEMV for c_attn, the
// split paged attention, the GEMV for attn_proj, each waiting for the whole grid before it.)
//
// Head h is the cluster of CLUSTER blocks h * CLUSTER .. h * CLUSTER + CLUSTER - 1; block `rank` of it owns:
// - c_attn: dims rank * WARPS + w of the head's q, k and v (warp w, 3 rows of W_attn in registers);
// - attention: past tokens [rank * per, rank * per + per) of the head, per = ceil(past / CLUSTER), copied from
//   the cache into shared memory (cp.async); the last rank also takes the new token;
// - attn_proj: output columns [rank * C / CLUSTER, ...) of the head's share (W_proj[c, h * D .. h * D + D), in
//   registers), added into `out` (float32 [C]) with atomics: every head adds its share, no block waits for another
//   head. The kernel after this one (the MLP) reads the finished sum once this grid has completed.
// Everything a block reads that the step does not write (weights, ln_1's weights, attn_proj's bias, the past tokens'
// K/V, the block table, the past length) is loaded before the PDL wait, while the kernel in front still runs. After
// the wait: the LayerNorm (every warp its own, common.cuh), its 24 q/k/v values, pushed into every block of the
// cluster (distributed shared memory, counted on the receiver's mbarrier); its tokens' partial softmax (max, sum,
// sum of p v) pushed the same way once it has all 192; then every block combines the partials into o and computes
// its columns of attn_proj. Each of the two dependencies is a block waiting on its own mbarrier for the bytes the
// cluster pushes into it (hardware, within one GPC), not a grid-wide wait.
//
// `out` must be zero on entry: each launch zeroes `clear`, the buffer the next layer's launch adds into, whose
// last reader (that layer's MLP, a step before) finished before this launch's wait returned
// (fused_attn.AttnScratch keeps one buffer per layer).
//
// Regions: in the STAMPS instantiation thread 0 of every block writes %globaltimer at the phase boundaries
// (NSTAMP per block: start, after the wait, after ln_1, after c_attn and its exchange, after the attention and
// its exchange, end once its adds have landed), stamp-major ([NSTAMP, blocks]: the host reduces each stamp over the
// blocks without a copy).
// A test build (-DFUSED_KERNEL_STAMP_DELAY) can plant a spin of delay_ns in one phase.
#include <cooperative_groups.h>
#include <cuda_fp16.h>
#include <cstdint>
#include "common.cuh"
#include "common_mbarrier.cuh"
#ifndef ROSEINFER_KERNEL_ONLY  // a compile check of the kernels alone (no torch headers)
#include <torch/extension.h>

#include "common_check.cuh"
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAGuard.h>
#endif

namespace cg = cooperative_groups;

namespace {

using namespace roseinfer_ext;

constexpr int THREADS = 256;
constexpr int WARPS = THREADS / 32;
constexpr int CLUSTER = 8;  // blocks per head
constexpr int D = 64;       // head dim: a head's q, k and v are 3 * D rows of c_attn, CLUSTER * WARPS * 3
constexpr int TILE = 128;   // past tokens a block holds: GPT-2's 1,024 positions over CLUSTER blocks
constexpr int KROW = D + 8; // a K/V row in shared memory, padded: 16-byte reads of 8 rows hit distinct banks
constexpr int NSTAMP = 6;
static_assert(CLUSTER * WARPS == D, "one q/k/v dim per warp");

__device__ __forceinline__ float round_h(float v) { return __half2float(__float2half_rn(v)); }

// dot of 8 packed float16 weights with 8 floats of shared memory
__device__ __forceinline__ float dot8(const uint4& w, const float* v) {
  const __half2* h = reinterpret_cast<const __half2*>(&w);
  float4 a = *reinterpret_cast<const float4*>(v);
  float4 b = *reinterpret_cast<const float4*>(v + 4);
  float2 w0 = __half22float2(h[0]), w1 = __half22float2(h[1]), w2 = __half22float2(h[2]), w3 = __half22float2(h[3]);
  return w0.x * a.x + w0.y * a.y + w1.x * a.z + w1.y * a.w + w2.x * b.x + w2.y * b.y + w3.x * b.z + w3.y * b.w;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

__device__ float block_max(float v, float* red) {
  v = warp_max(v);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();
  if (lane == 0) red[warp] = v;
  __syncthreads();
  return warp_max(lane < WARPS ? red[lane] : -INFINITY);
}

// The cluster's two exchanges go through mbarriers: each block pushes its values into the others' shared memory
// with st.async, which counts their bytes on the receiver's mbarrier, and a block waits on its own mbarrier for the
// bytes it expects. Each was a cluster barrier before (cg's cluster.sync), whose release at cluster scope compiles
// to a MEMBAR.GPU: 19% of ncu's warp samples after the kernel's wait sat on those two fences and barriers, and
// with the mbarriers batch 1 on an H200 went from 0.1412 to 0.1393 ms (docs/BENCHMARKS.md, session 37). The
// mbarriers are set before the kernel's one cluster barrier (arrive at the start, wait before the first push), so
// no push reaches one unset; a push may land before its receiver's own arrive.expect_tx (PTX allows the
// transaction count below zero, and the phase cannot complete without that arrival); a receiver waits for all its
// bytes, so none lands in a block that has left. The acquire at cluster scope (`mbar_wait<true>`,
// common_mbarrier.cuh) pairs with st.async's release.

// v into `dst` (this block's address of a variable) in block `rank` of the cluster, counted on its `bar`
__device__ __forceinline__ void push(float* dst, uint64_t* bar, int rank, float v) {
  const unsigned rd = cluster_addr(dst, rank), rb = cluster_addr(bar, rank);
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];" ::"r"(rd),
               "r"(__float_as_uint(v)), "r"(rb) : "memory");
}

// TD: delta's dtype (float16 embeddings at the first layer, float32 where it is the MLP kernel's output);
// C: the model's width (H = C / D heads, the grid H * CLUSTER blocks).
// At most 128 registers a thread (no spills at that: ptxas -v): a layer's attention and MLP blocks, 256 threads
// each, then fit one SM together, so that under PDL the next kernel's blocks load their weights while this one
// runs. Above it (168-180 registers, docs/BENCHMARKS.md session 31) the next blocks waited for these to leave.
// DELTA_ROWS: delta's rows, 1 or SPLIT_ROWS (float32: the MLP kernel's split sum).
template <typename TD, int C, bool STAMPS, int DELTA_ROWS>
__global__ void __cluster_dims__(CLUSTER, 1, 1) __maxnreg__(128) fused_attn_kernel(
    const __half* __restrict__ x, const TD* __restrict__ delta, const int64_t* __restrict__ x_row,
    const int64_t* __restrict__ delta_row, const __half* __restrict__ ln_w, const __half* __restrict__ ln_b,
    float eps, const __half* __restrict__ w_attn, const float* __restrict__ fold_w, const float* __restrict__ fold_b,
    const __half* __restrict__ w_proj, const __half* __restrict__ b_proj, __half* __restrict__ k_cache,
    __half* __restrict__ v_cache, const int64_t* __restrict__ table, const int64_t* __restrict__ past_len,
    int block_size, float scale, __half* __restrict__ s_out, float* __restrict__ out, float* __restrict__ clear,
    unsigned long long* stamps, int delay_phase, long long delay_ns) {
  constexpr int H = C / D;
  constexpr int VECS = C / 256;        // 16-byte vectors of one C-long row per lane
  constexpr int COLS = C / CLUSTER;    // attn_proj's output columns per block
  constexpr int WCOLS = COLS / WARPS;  // ... per warp: WCOLS rows of D weights = VECS 16-byte vectors a lane
  static_assert(WCOLS * (D / 8) == VECS * 32, "attn_proj's columns split evenly over the lanes");
  __shared__ __align__(16) __half ks[TILE + 1][KROW];  // this block's past tokens (+ the new one on the last rank)
  __shared__ __align__(16) __half vs[TILE + 1][KROW];
  __shared__ LayerNormShared<__half, C> lns;  // ln_1's weights and the row s
  __shared__ __align__(16) float qkv[3][D];   // the head's new q, k, v (pushed here by every block of the cluster)
  __shared__ float sc[TILE + 1];              // scores, then probabilities
  __shared__ float pv[4][D];                  // the P V partial sums of 4 groups of tokens
  __shared__ float parts[CLUSTER][D + 2];     // every block's (sum p v [D], max, sum p), pushed by that block
  __shared__ __align__(16) float os[D];       // o, the head's attention output
  __shared__ float red[WARPS];
  __shared__ __align__(8) uint64_t bars[2];   // the q/k/v exchange's, the partials'
  stamp<STAMPS>(stamps, 0);
  cg::cluster_group cluster = cg::this_cluster();
  const int rank = static_cast<int>(cluster.block_rank());
  const int h = blockIdx.x / CLUSTER;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int dim = rank * WARPS + warp;  // this warp's q/k/v dim
  if (threadIdx.x == 0) {
    mbar_init(&bars[0], 1);
    mbar_expect_tx(&bars[0], 3 * D * sizeof(float));  // every dim's q, k and v
    mbar_init(&bars[1], 1);
    mbar_expect_tx(&bars[1], CLUSTER * (D + 2) * sizeof(float));  // every block's partials
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  // This block has started (and its mbarriers are set): no block of the cluster writes into another's shared
  // memory before all have.
  asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");

  // Phase 0, before the wait: ln_1's weights (first, as the LayerNorm after the wait needs them first; issued
  // after the rows, batch 1 was no slower: session 32), the weights and attn_proj's bias, the past tokens' K/V and
  // where the new token goes.
  stage_layernorm_params<__half, C, THREADS>(lns, ln_w, ln_b);  // its cp.async group before the K/V's
  uint4 wa[3][VECS];
  float fw[3], fb[3];  // the folded LayerNorm's per-row constants (c_attn's bias in fb)
#pragma unroll
  for (int i = 0; i < 3; ++i) {
    const int r = i * C + h * D + dim;
#pragma unroll
    for (int j = 0; j < VECS; ++j) wa[i][j] = load_weights(w_attn + (size_t)r * C + (j * 32 + lane) * 8);
    fw[i] = fold_w[r];
    fb[i] = fold_b[r];
  }
  uint4 wp[VECS];  // lane's vector t: column warp * WCOLS + t * 4 + lane / 8, dims (lane % 8) * 8 .. + 8
  const int col0 = rank * COLS + warp * WCOLS;
#pragma unroll
  for (int t = 0; t < VECS; ++t)
    wp[t] = load_weights(w_proj + (size_t)(col0 + t * 4 + lane / 8) * C + h * D + (lane % 8) * 8);
  __half bias[VECS];  // head 0 adds attn_proj's bias with its share (lane's columns col0 + t * 4 + lane / 8)
#pragma unroll
  for (int t = 0; t < VECS; ++t)
    bias[t] = h == 0 && lane % 8 == 0 ? b_proj[col0 + t * 4 + lane / 8] : __ushort_as_half(0);
  const int past = static_cast<int>(*past_len);
  const int per = (past + CLUSTER - 1) / CLUSTER;
  const int t0 = min(past, rank * per), t1 = min(past, t0 + per);
  const int n_past = t1 - t0;  // this block's past tokens (<= TILE: the caller checks past < CLUSTER * TILE)
  for (int e = threadIdx.x; e < n_past * (D / 8) * 2; e += THREADS) {
    const int row = (e >> 1) / (D / 8), part = (e >> 1) % (D / 8), t = t0 + row;
    const size_t at =
        ((size_t)table[t / block_size] * H + h) * block_size * D + (size_t)(t % block_size) * D + part * 8;
    if (e & 1)
      cp_async16(&vs[row][part * 8], v_cache + at);
    else
      cp_async16(&ks[row][part * 8], k_cache + at);
  }
  asm volatile("cp.async.commit_group;" ::: "memory");
  const size_t slot = ((size_t)table[past / block_size] * H + h) * block_size * D + (size_t)(past % block_size) * D;
  asm volatile("griddepcontrol.wait;" ::: "memory");
  stamp<STAMPS>(stamps, 1);
  if (clear != nullptr)  // the next layer's buffer: its last reader has finished
    for (int k = blockIdx.x * THREADS + threadIdx.x; k < C; k += gridDim.x * THREADS) clear[k] = 0.f;

  // Phase 1: s = x + delta (rounded like torch's add; block 0 stores it) and its mean and rstd, in every block;
  // the LayerNorm itself is folded into phase 2's dot products (residual_stats, dot_rows_w).
  const __half* xr = x_row != nullptr ? x + (size_t)(*x_row) * C : x;
  const TD* dr = delta_row != nullptr ? delta + (size_t)(*delta_row) * C : delta;
  uint4 hv[VECS];  // s at this lane's columns (j * 32 + lane) * 8 + e, 8 float16 a vector
  float mean, rstd;
  residual_stats<__half, TD, C, THREADS, 1, DELTA_ROWS>(xr, dr, lns, eps, s_out, hv, mean, rstd);  // K/V in flight
  // Release the next kernel (the MLP; it too loads before its wait only what the step does not write) once this
  // block's first reads after the wait are done: released before the wait, the MLP's blocks, which start as the
  // kernel two launches back leaves, loaded their 72 KB of weights during this LayerNorm, and batch 1 took 1.5%
  // longer (docs/BENCHMARKS.md, session 37; releasing the MLP's own next kernel later lost).
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  plant_delay(1, delay_phase, delay_ns);
  phase_barrier<STAMPS>();  // phase 2 reads h from registers
  stamp<STAMPS>(stamps, 2);

  // Phase 2: this warp's q, k and v at `dim` (rounded to float16 as the GEMV stores them), into every block of
  // the cluster; the new k and v into the cache.
  float mine[3];
  dot_rows_w<__half>(wa, hv, lns.w, mine);
#pragma unroll
  for (int i = 0; i < 3; ++i) mine[i] = round_h(rstd * (warp_sum(mine[i]) - mean * fw[i]) + fb[i]);
  // Every block of the cluster has started (the arrive before the wait): its shared memory may be written.
  asm volatile("barrier.cluster.wait.aligned;" ::: "memory");
  if (lane < CLUSTER * 3) {  // lane -> (block of the cluster, q/k/v)
    const int i = lane % 3;
    push(&qkv[i][dim], &bars[0], lane / 3, i == 0 ? mine[0] : (i == 1 ? mine[1] : mine[2]));
  }
  if (lane == 0) {
    k_cache[slot + dim] = __float2half_rn(mine[1]);
    v_cache[slot + dim] = __float2half_rn(mine[2]);
  }
  asm volatile("cp.async.wait_all;" ::: "memory");
  plant_delay(2, delay_phase, delay_ns);
  mbar_wait<true>(&bars[0], 0);  // every block's q/k/v arrived
  __syncthreads();      // this block's K/V copies landed
  stamp<STAMPS>(stamps, 3);

  // Phase 3: this block's tokens' partial softmax: scores, their max m, p = exp(score - m), sum p, sum p v.
  const bool takes_new = rank == CLUSTER - 1;
  const int n = n_past + (takes_new ? 1 : 0);
  if (takes_new && threadIdx.x < D) {
    ks[n_past][threadIdx.x] = __float2half_rn(qkv[1][threadIdx.x]);
    vs[n_past][threadIdx.x] = __float2half_rn(qkv[2][threadIdx.x]);
  }
  __syncthreads();
  float score = -INFINITY;
  if (threadIdx.x < n) {
    float acc = 0.f;
#pragma unroll
    for (int p8 = 0; p8 < D / 8; ++p8) {
      const uint4 kv8 = *reinterpret_cast<const uint4*>(&ks[threadIdx.x][p8 * 8]);
      acc += dot8(kv8, &qkv[0][p8 * 8]);
    }
    score = acc * scale;
  }
  const float m = block_max(score, red);
  const float p = threadIdx.x < n ? __expf(score - m) : 0.f;
  if (threadIdx.x < TILE + 1) sc[threadIdx.x] = p;
  const float l = block_sum<WARPS>(p, red);  // its barriers also publish sc
  {
    const int d = threadIdx.x % D, g = threadIdx.x / D;  // 4 groups of tokens
    float acc = 0.f;
    for (int j = g; j < n; j += 4) acc += sc[j] * __half2float(vs[j][d]);
    pv[g][d] = acc;
  }
  __syncthreads();
  if (threadIdx.x < D) {
    const float acc = pv[0][threadIdx.x] + pv[1][threadIdx.x] + pv[2][threadIdx.x] + pv[3][threadIdx.x];
    for (int r = 0; r < CLUSTER; ++r) push(&parts[rank][threadIdx.x], &bars[1], r, acc);
  } else if (threadIdx.x < D + CLUSTER) {
    const int r = threadIdx.x - D;
    push(&parts[rank][D], &bars[1], r, m);
    push(&parts[rank][D + 1], &bars[1], r, l);
  }
  plant_delay(3, delay_phase, delay_ns);
  mbar_wait<true>(&bars[1], 0);  // every block's partials arrived (no block reads another's shared memory)
  stamp<STAMPS>(stamps, 4);

  // Phase 4: o from the partials (rounded to float16, as the attention kernel stores it), then this block's
  // columns of attn_proj: each lane a dot of 8 dims, summed over the 8 lanes of a column, added into out.
  if (threadIdx.x < D) {
    float mx = -INFINITY;
#pragma unroll
    for (int r = 0; r < CLUSTER; ++r) mx = fmaxf(mx, parts[r][D]);
    float num = 0.f, den = 0.f;
#pragma unroll
    for (int r = 0; r < CLUSTER; ++r) {
      const float w = parts[r][D + 1] > 0.f ? __expf(parts[r][D] - mx) : 0.f;  // an empty block's max is -inf
      num += w * parts[r][threadIdx.x];
      den += w * parts[r][D + 1];
    }
    os[threadIdx.x] = round_h(num / den);
  }
  __syncthreads();
#pragma unroll
  for (int t = 0; t < VECS; ++t) {
    float acc = dot8(wp[t], &os[(lane % 8) * 8]);
    acc += __shfl_xor_sync(0xffffffffu, acc, 1);
    acc += __shfl_xor_sync(0xffffffffu, acc, 2);
    acc += __shfl_xor_sync(0xffffffffu, acc, 4);
    if (lane % 8 == 0) {
      const int c = col0 + t * 4 + lane / 8;
      acc += to_f(bias[t]);  // zero but in head 0
      asm volatile("red.global.add.f32 [%0], %1;" ::"l"(out + c), "f"(acc) : "memory");
    }
  }
  plant_delay(4, delay_phase, delay_ns);
  // The last stamp once the block's adds have landed (on these GPUs the fence waits for them; the truth tests
  // check it): without it their drain, when every block adds into the same columns at once, ends the kernel after
  // every stamp.
  if constexpr (STAMPS) __threadfence();
  phase_barrier<STAMPS>();
  stamp<STAMPS>(stamps, 5);
}

#ifdef ROSEINFER_KERNEL_ONLY  // every instantiation the launcher uses
#define INSTANCE(TD, STAMPS, ROWS_)                                                                                \
  template __global__ void fused_attn_kernel<TD, 768, STAMPS, ROWS_>(                                              \
      const __half*, const TD*, const int64_t*, const int64_t*, const __half*, const __half*, float,          \
      const __half*, const float*, const float*, const __half*, const __half*, __half*, __half*, const int64_t*, \
      const int64_t*, int, float, __half*, float*, float*, unsigned long long*, int, long long);
ROSEINFER_EACH_DELTA(INSTANCE)
}  // namespace
#else
}  // namespace

// x: [C] float16, or the embedding table [V, C] with x_row its row (int64 [1]); delta likewise (float32 [rows, C]:
// the MLP kernel's output, one row or a split sum of SPLIT_ROWS; or float16 [P, C] with delta_row); w_attn [3C, C],
// fold_w, fold_b float32 [3C] (the LayerNorm folded into c_attn, with its bias: cuda_ext.ln_fold), w_proj [C, C],
// b_proj [C]; k_cache, v_cache [N, H, BLOCK, D] (this layer's); table: int64 [M]
// (this layer's row), past_len: int64 [1]; s: [C] float16 out; out: float32 [C], zero on entry; clear: float32 [C]
// or empty; stamps: int64 [NSTAMP * blocks] or empty.
void fused_attn(torch::Tensor x, torch::Tensor delta, torch::Tensor x_row, torch::Tensor delta_row,
                torch::Tensor ln_w, torch::Tensor ln_b, double eps, torch::Tensor w_attn, torch::Tensor fold_w,
                torch::Tensor fold_b,
                torch::Tensor w_proj, torch::Tensor b_proj, torch::Tensor k_cache, torch::Tensor v_cache,
                torch::Tensor table, torch::Tensor past_len, double scale, torch::Tensor s, torch::Tensor out,
                torch::Tensor clear, torch::Tensor stamps, bool pdl, int64_t delay_phase, int64_t delay_ns) {
  const c10::cuda::CUDAGuard guard(x.device());
  constexpr int C = 768;
  ROSEINFER_CHECK(x.size(-1) == C && w_attn.size(0) == 3 * C, "fused_attn: width %lld not built (768 only)",
                  static_cast<long long>(x.size(-1)));
  TORCH_CHECK(x.scalar_type() == at::kHalf, "fused_attn: float16 only");
  ROSEINFER_CHECK(k_cache.size(1) == C / D && k_cache.size(3) == D, "fused_attn: cache must be [N, %d, BLOCK, %d]",
                  C / D, D);
  TORCH_CHECK(out.scalar_type() == at::kFloat && out.numel() == C, "fused_attn: out must be float32 [C]");
  TORCH_CHECK(table.scalar_type() == at::kLong && past_len.scalar_type() == at::kLong, "fused_attn: int64 indices");
  const bool split = delta.scalar_type() == at::kFloat && delta.numel() == SPLIT_ROWS * C &&
                     delta_row.numel() == 0;  // not a table's row
  ROSEINFER_CHECK(delta.scalar_type() != at::kFloat || split || delta.numel() == C,
                  "fused_attn: a float32 delta must be [1 or %d, C]", SPLIT_ROWS);
  TORCH_CHECK(fold_w.scalar_type() == at::kFloat && fold_b.scalar_type() == at::kFloat && fold_w.numel() == 3 * C &&
                  fold_b.numel() == 3 * C, "fused_attn: fold_w, fold_b must be float32 [3C]");
  const int blocks = (C / D) * CLUSTER;
  unsigned long long* st = stamps.numel() ? reinterpret_cast<unsigned long long*>(stamps.data_ptr()) : nullptr;
  if (st) TORCH_CHECK(stamps.numel() >= blocks * NSTAMP, "fused_attn: stamps too small");
  float* cl = clear.numel() ? clear.data_ptr<float>() : nullptr;
  const int64_t* xr = x_row.numel() ? x_row.data_ptr<int64_t>() : nullptr;
  const int64_t* dr = delta_row.numel() ? delta_row.data_ptr<int64_t>() : nullptr;
  cudaLaunchAttribute attr[1];
  cudaLaunchConfig_t cfg = pdl_launch(blocks, THREADS, c10::cuda::getCurrentCUDAStream(), pdl, attr);
  using T = __half;
  auto p = [](const torch::Tensor& t) { return reinterpret_cast<const T*>(t.data_ptr()); };
  T* kc = reinterpret_cast<T*>(k_cache.data_ptr());
  T* vc = reinterpret_cast<T*>(v_cache.data_ptr());
  T* s_ptr = reinterpret_cast<T*>(s.data_ptr());
  const int bs = static_cast<int>(k_cache.size(2));
  const int64_t* tb = table.data_ptr<int64_t>();
  const int64_t* pl = past_len.data_ptr<int64_t>();
  auto launch = [&](auto kernel, const auto* d) {
    C10_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, p(x), d, xr, dr, p(ln_w), p(ln_b), (float)eps, p(w_attn),
                                      fold_w.data_ptr<float>(), fold_b.data_ptr<float>(), p(w_proj), p(b_proj), kc,
                                      vc, tb, pl, bs, (float)scale, s_ptr,
                                      out.data_ptr<float>(), cl, st, (int)delay_phase, (long long)delay_ns));
  };
  if (split)
    launch(st ? fused_attn_kernel<float, C, true, SPLIT_ROWS> : fused_attn_kernel<float, C, false, SPLIT_ROWS>,
           delta.data_ptr<float>());
  else if (delta.scalar_type() == at::kFloat)
    launch(st ? fused_attn_kernel<float, C, true, 1> : fused_attn_kernel<float, C, false, 1>,
           delta.data_ptr<float>());
  else {
    TORCH_CHECK(delta.scalar_type() == at::kHalf, "fused_attn: delta float16 or float32");
    launch(st ? fused_attn_kernel<T, C, true, 1> : fused_attn_kernel<T, C, false, 1>, p(delta));
  }
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("fused_attn", &fused_attn, "one-row ln_1 + c_attn + paged attention + attn_proj, a cluster per head");
  m.attr("NSTAMP") = NSTAMP;
  m.attr("CLUSTER") = CLUSTER;
  m.attr("TILE") = TILE;
}
#endif
