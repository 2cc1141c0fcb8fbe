// Paged-attention decode (one new token per sequence) with the past K/V brought in by the copy engine: each
// (block, head) of the cache is one contiguous tile ([N, H, BLOCK, D] float16: 8 KB for K, 8 KB for V at 64 x 64),
// so a single bulk copy (cp.async.bulk, the TMA unit's 1-D form: no tensor map) moves it into shared memory, and
// the block's threads issue no loads of their own. roseinfer/cuda_ext/paged_attn.py launches it; the Triton
// kernel it is measured against is roseinfer/kernels/paged_attention.py (same contract, same result).
//
// One block of WARPS warps per (sequence, head):
// - warp 0 reads the sequence's past length and block-table row (lane i holds entry i, 32 at a time) and keeps
//   STAGES tiles in flight: stage s holds a tile's K and V, `full[s]` counts their bytes in (only the live rows of
//   a partly filled block are copied), `empty[s]` the warps done reading it;
// - in a tile of BLOCK tokens warp w takes rows [w * BLOCK / WARPS, ...); a lane holds 8 of the head's 64 dims of
//   4 tokens at once (a quarter warp reads one 128-byte row: no bank conflicts), so a score is a sum over 8 lanes
//   and each warp keeps its own online softmax (max, normaliser, weighted sum of V) in registers;
// - warp 0 starts its softmax from the new token (as the Triton kernel does), and the warps' partials are merged
//   through shared memory at the end.
// Everything before griddepcontrol.wait reads only what the step does not write (the past length and table are the
// step's inputs, staged before the graph's first kernel; the past K/V was written by earlier steps), so as a
// programmatic dependent launch the first STAGES tiles load while the kernel in front (c_attn) still runs. After
// the wait: q and the new token's k and v (that kernel's output), written into the token's slot (position `past`,
// which no copy reads) where `append`.
#include <cuda_fp16.h>
#include <atomic>
#include <cstdint>
#include "common.cuh"
#include "common_mbarrier.cuh"
#ifndef ROSEINFER_KERNEL_ONLY  // a compile check of the kernels alone (no torch headers)
#include <torch/extension.h>

#include "common_check.cuh"
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAGuard.h>
#endif

namespace {

using namespace roseinfer_ext;

constexpr int D = 64;       // head dim: 8 lanes of 8 dims
constexpr int BLOCK = 64;   // tokens a cache block
constexpr int WARPS = 4;    // BLOCK / WARPS rows a warp a tile
constexpr int THREADS = WARPS * 32;
constexpr int ROWS = BLOCK / WARPS;  // 16
constexpr float LOG2E = 1.4426950408889634f;
static_assert(ROWS % 4 == 0, "a warp reads 4 rows at a time");

#ifdef PAGED_ATTN_PROBE_SKIP_WAIT
// A probe build, never the engine's (`paged_attn.load(probe_skip_wait=True)`): while this is set the kernel does
// not wait for the kernel in front, so it runs beside c_attn on whatever q, k and v hold as it reads them (an
// earlier replay's values, or another tensor's of the graph's pool: its output is a timing's, not a result). The
// replay's time then bounds what the attention's wait for c_attn costs a step (scripts/bench_graph_step.py
// --probe-attention-no-wait).
__device__ int probe_skip_wait = 0;
#endif

// by value: a reference into memory let the compiler split the 16-byte load into four 4-byte ones, whose lanes of
// one dim chunk in four rows then hit the same bank (4-way conflicts in shared memory)
__device__ __forceinline__ void unpack8(const uint4 v, float* f) {
  const __half2* h = reinterpret_cast<const __half2*>(&v);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 x = __half22float2(h[i]);
    f[2 * i] = x.x;
    f[2 * i + 1] = x.y;
  }
}

template <int STAGES>
struct Shared {
  __align__(128) __half k[STAGES][BLOCK * D];  // [STAGES, BLOCK, D]
  __align__(128) __half v[STAGES][BLOCK * D];
  uint64_t full[STAGES];
  uint64_t empty[STAGES];
  float acc[WARPS][D];  // the warps' partials, merged at the end
  float m[WARPS];
  float l[WARPS];
};

// One warp's share of a tile (rows r0 .. r0 + ROWS of stage k/v, `live` rows valid in the tile) into its online
// softmax: m (base-2 exponent units, uniform over the warp), l and acc (the lane's 8 dims, over its tokens).
__device__ __forceinline__ void attend_rows(const __half* k, const __half* v, int r0, int live, const float* q,
                                            float& m, float& l, float* acc) {
  const int lane = threadIdx.x % 32, g = lane / 8, c = lane % 8;
  float s[ROWS / 4];
#pragma unroll
  for (int j = 0; j < ROWS / 4; ++j) {
    const int row = r0 + 4 * j + g;
    float kf[8];
    unpack8(*reinterpret_cast<const uint4*>(k + row * D + c * 8), kf);
    float d = 0.f;
#pragma unroll
    for (int e = 0; e < 8; ++e) d += q[e] * kf[e];
#pragma unroll
    for (int o = 1; o < 8; o <<= 1) d += __shfl_xor_sync(0xffffffffu, d, o);  // the 8 lanes of this row
    s[j] = row < live ? d : -INFINITY;
  }
  float tile_max = s[0];
#pragma unroll
  for (int j = 1; j < ROWS / 4; ++j) tile_max = fmaxf(tile_max, s[j]);
  tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 8));
  tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 16));
  const float m_new = fmaxf(m, tile_max);
  const float base = m_new == -INFINITY ? 0.f : m_new;  // no live row yet: nothing to scale (no inf - inf)
  const float alpha = exp2f(m - base);
  l *= alpha;
#pragma unroll
  for (int e = 0; e < 8; ++e) acc[e] *= alpha;
#pragma unroll
  for (int j = 0; j < ROWS / 4; ++j) {
    const int row = r0 + 4 * j + g;
    if (row < live) {  // a row past the live ones may hold anything (never copied): not even 0 * it
      const float p = exp2f(s[j] - base);
      float vf[8];
      unpack8(*reinterpret_cast<const uint4*>(v + row * D + c * 8), vf);
      l += p;
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[e] += p * vf[e];
    }
  }
  m = m_new;
}

// TI: the block table's and past lengths' integer type (the engine's are int64).
template <int STAGES, typename TI>
__global__ void __launch_bounds__(THREADS) paged_attn_kernel(
    // q, k_new, v_new: not __restrict__ (no read-only-cache loads): the kernel in front writes them while this one
    // may already run (PDL); they are read after the wait
    const __half* q, const __half* k_new, const __half* v_new, __half* k_cache, __half* v_cache,
    const TI* __restrict__ table, const TI* __restrict__ lens, __half* __restrict__ out, int heads, int width,
    int64_t stride_qb, int64_t stride_qh, int64_t stride_kb, int64_t stride_kh, int64_t stride_vb, int64_t stride_vh,
    int64_t stride_cn, int64_t stride_ch, int64_t stride_tb, int64_t stride_ob, int64_t stride_oh, float scale,
    bool append) {
  extern __shared__ __align__(128) unsigned char raw[];
  Shared<STAGES>& sh = *reinterpret_cast<Shared<STAGES>*>(raw);
  const int b = blockIdx.x / heads, h = blockIdx.x % heads;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 8, c = lane % 8;

  if (threadIdx.x == 0) {
#pragma unroll
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(&sh.full[s], 1);
      mbar_init(&sh.empty[s], WARPS);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();

  const TI* row = table + b * stride_tb;
  TI entry = 0;  // warp 0, lane i: table entry 32 * chunk + i (the first 32 read beside the length, not after it)
  if (warp == 0 && lane < width) entry = row[lane];
  const int past = static_cast<int>(lens[b]);
  const int n_tiles = (past + BLOCK - 1) / BLOCK;
  const int64_t head_off = h * stride_ch;
  // warp 0: tile `i` of the past into stage i % STAGES (its table entry in lane i % 32 of `entry`)
  auto issue = [&](int i) {
    const int64_t blk = static_cast<int64_t>(__shfl_sync(0xffffffffu, static_cast<long long>(entry), i % 32));
    if (lane == 0) {
      const int s = i % STAGES;
      const uint32_t bytes = static_cast<uint32_t>(min(BLOCK, past - i * BLOCK)) * D * 2;
      mbar_expect_tx(&sh.full[s], 2 * bytes);
      const int64_t off = blk * stride_cn + head_off;
      bulk_copy(sh.k[s], k_cache + off, bytes, &sh.full[s]);
      bulk_copy(sh.v[s], v_cache + off, bytes, &sh.full[s]);
    }
  };
  if (warp == 0) {
    for (int i = 0; i < min(STAGES, n_tiles); ++i) issue(i);
  }

#ifdef PAGED_ATTN_PROBE_SKIP_WAIT
  if (!*reinterpret_cast<volatile int*>(&probe_skip_wait))
#endif
  asm volatile("griddepcontrol.wait;" ::: "memory");  // q, k_new, v_new: the kernel in front's output
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");

  float qf[8];  // this lane's 8 dims of q, scaled so that exp2 of a score is exp of the softmax's
  unpack8(*reinterpret_cast<const uint4*>(q + b * stride_qb + h * stride_qh + c * 8), qf);
#pragma unroll
  for (int e = 0; e < 8; ++e) qf[e] *= scale * LOG2E;
  const uint4 kn = *reinterpret_cast<const uint4*>(k_new + b * stride_kb + h * stride_kh + c * 8);
  const uint4 vn = *reinterpret_cast<const uint4*>(v_new + b * stride_vb + h * stride_vh + c * 8);
  if (append && warp == 0 && g == 0) {  // the new token into its slot, which no copy above reads
    const int64_t blk = static_cast<int64_t>(row[past / BLOCK]);
    const int64_t slot = blk * stride_cn + head_off + (past % BLOCK) * D + c * 8;
    *reinterpret_cast<uint4*>(k_cache + slot) = kn;
    *reinterpret_cast<uint4*>(v_cache + slot) = vn;
  }
  // The running softmax: warp 0 starts from the new token (its lanes of row group 0 hold its V), the others empty.
  float m = -INFINITY, l = 0.f, acc[8];
#pragma unroll
  for (int e = 0; e < 8; ++e) acc[e] = 0.f;
  if (warp == 0) {
    float kf[8];
    unpack8(kn, kf);
    float d = 0.f;
#pragma unroll
    for (int e = 0; e < 8; ++e) d += qf[e] * kf[e];
#pragma unroll
    for (int o = 1; o < 8; o <<= 1) d += __shfl_xor_sync(0xffffffffu, d, o);
    m = d;
    if (g == 0) {
      l = 1.f;
      unpack8(vn, acc);
    }
  }

  for (int i = 0; i < n_tiles; ++i) {
    const int s = i % STAGES;
    const uint32_t parity = (i / STAGES) & 1;
    mbar_wait(&sh.full[s], parity);
    attend_rows(sh.k[s], sh.v[s], warp * ROWS, min(BLOCK, past - i * BLOCK), qf, m, l, acc);
    __syncwarp();
    if (lane == 0) mbar_arrive(&sh.empty[s]);
    if (warp == 0 && i + STAGES < n_tiles) {  // refill this stage once every warp has read it
      if ((i + STAGES) % 32 == 0) entry = (i + STAGES + lane < n_tiles) ? row[i + STAGES + lane] : TI(0);
      mbar_wait(&sh.empty[s], parity);
      issue(i + STAGES);
    }
  }

  // The warps' partials: l and acc summed over the 4 row groups of a warp (each lane's tokens), then merged.
  l += __shfl_xor_sync(0xffffffffu, l, 8);
  l += __shfl_xor_sync(0xffffffffu, l, 16);
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    acc[e] += __shfl_xor_sync(0xffffffffu, acc[e], 8);
    acc[e] += __shfl_xor_sync(0xffffffffu, acc[e], 16);
  }
  if (g == 0) {
#pragma unroll
    for (int e = 0; e < 8; ++e) sh.acc[warp][c * 8 + e] = acc[e];
  }
  if (lane == 0) {
    sh.m[warp] = m;
    sh.l[warp] = l;
  }
  __syncthreads();
  if (threadIdx.x < D) {
    float m_all = sh.m[0];  // finite: warp 0 holds the new token
#pragma unroll
    for (int w = 1; w < WARPS; ++w) m_all = fmaxf(m_all, sh.m[w]);
    float num = 0.f, den = 0.f;
#pragma unroll
    for (int w = 0; w < WARPS; ++w) {
      const float f = exp2f(sh.m[w] - m_all);  // 0 for a warp that saw no live row (m = -inf)
      num += sh.acc[w][threadIdx.x] * f;
      den += sh.l[w] * f;
    }
    out[b * stride_ob + h * stride_oh + threadIdx.x] = __float2half_rn(num / den);
  }
}

#define ROSEINFER_PAGED_ATTN_EACH(INSTANCE) \
  INSTANCE(1, int64_t)                      \
  INSTANCE(2, int64_t)                      \
  INSTANCE(3, int64_t)                      \
  INSTANCE(1, int32_t)                      \
  INSTANCE(2, int32_t)                      \
  INSTANCE(3, int32_t)

#ifdef ROSEINFER_KERNEL_ONLY
#define ROSEINFER_INSTANTIATE(S, TI)                                                                            \
  template __global__ void paged_attn_kernel<S, TI>(const __half*, const __half*, const __half*, __half*,      \
                                                    __half*, const TI*, const TI*, __half*, int, int,         \
                                                    int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,       \
                                                    int64_t, int64_t, int64_t, int64_t, int64_t, float, bool);
ROSEINFER_PAGED_ATTN_EACH(ROSEINFER_INSTANTIATE)
#endif

}  // namespace

#ifndef ROSEINFER_KERNEL_ONLY

template <int STAGES, typename TI>
void launch(const torch::Tensor& q, const torch::Tensor& k_new, const torch::Tensor& v_new, torch::Tensor& k_cache,
            torch::Tensor& v_cache, const torch::Tensor& table, const torch::Tensor& lens, torch::Tensor& out,
            double scale, bool append, bool pdl) {
  auto kernel = paged_attn_kernel<STAGES, TI>;
  constexpr int smem = sizeof(Shared<STAGES>);
  // per instantiation and device (the attribute is a device's: two engines may run on two GPUs of one process)
  static std::atomic<bool> configured[256];
  const int device = q.get_device();
  if (device >= 0 && device < 256 && !configured[device].load()) {
    C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    configured[device].store(true);
  } else if (device >= 256) {
    C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  }
  const int batch = q.size(0), heads = q.size(1);
  cudaLaunchAttribute attr[1];
  cudaLaunchConfig_t cfg = pdl_launch(batch * heads, THREADS, c10::cuda::getCurrentCUDAStream(), pdl, attr);
  cfg.dynamicSmemBytes = smem;
  auto h = [](const torch::Tensor& t) { return reinterpret_cast<__half*>(t.data_ptr()); };
  C10_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, h(q), h(k_new), h(v_new), h(k_cache), h(v_cache),
                                    table.data_ptr<TI>(), lens.data_ptr<TI>(), h(out), heads, (int)table.size(1),
                                    q.stride(0), q.stride(1), k_new.stride(0), k_new.stride(1), v_new.stride(0),
                                    v_new.stride(1), k_cache.stride(0),
                                    k_cache.stride(1), table.stride(0), out.stride(0), out.stride(1), (float)scale,
                                    append));
}

// q, k_new, v_new [B, H, 64] float16 (last dim contiguous, rows 16-byte aligned); caches [N, H, 64, 64] float16
// contiguous; table [B, M] (unit column stride) and lens [B], both int64 or both int32; out [B, H, 64].
void paged_attn(const torch::Tensor& q, const torch::Tensor& k_new, const torch::Tensor& v_new,
                torch::Tensor k_cache, torch::Tensor v_cache, const torch::Tensor& table, const torch::Tensor& lens,
                torch::Tensor out, double scale, bool append, int64_t stages, bool pdl) {
  TORCH_CHECK(q.is_cuda(), "paged_attn: CUDA tensors only");
  for (const torch::Tensor* t : std::initializer_list<const torch::Tensor*>{&k_new, &v_new, &k_cache, &v_cache,
                                                                           &table, &lens, &out})
    TORCH_CHECK(t->device() == q.device(), "paged_attn: every operand on q's device");
  const c10::cuda::CUDAGuard guard(q.device());
  for (const torch::Tensor* t : std::initializer_list<const torch::Tensor*>{&q, &k_new, &v_new, &out}) {
    TORCH_CHECK(t->scalar_type() == at::kHalf && t->dim() == 3 && t->size(2) == D && t->stride(2) == 1,
                "paged_attn: q, k_new, v_new and out must be float16 [B, H, 64] with contiguous rows");
    TORCH_CHECK(t->size(0) == q.size(0) && t->size(1) == q.size(1), "paged_attn: q, k, v, out shapes differ");
    TORCH_CHECK(reinterpret_cast<uintptr_t>(t->data_ptr()) % 16 == 0 && t->stride(0) % 8 == 0 &&
                    t->stride(1) % 8 == 0,
                "paged_attn: q, k_new, v_new and out rows must be 16-byte aligned");
  }
  for (const auto* t : {&k_cache, &v_cache}) {
    TORCH_CHECK(t->scalar_type() == at::kHalf && t->dim() == 4 && t->size(2) == BLOCK && t->size(3) == D &&
                    t->is_contiguous() && t->size(1) == q.size(1),
                "paged_attn: caches must be contiguous float16 [N, H, 64, 64]");
    TORCH_CHECK(reinterpret_cast<uintptr_t>(t->data_ptr()) % 16 == 0, "paged_attn: caches not 16-byte aligned");
  }
  TORCH_CHECK(table.dim() == 2 && table.size(0) == q.size(0) && table.stride(1) == 1 && lens.numel() == q.size(0) &&
                  lens.is_contiguous() && table.scalar_type() == lens.scalar_type(),
              "paged_attn: table [B, M] (unit column stride) and lens [B] of one integer type");
  if (q.size(0) == 0) return;
  const bool wide = table.scalar_type() == at::kLong;
  TORCH_CHECK(wide || table.scalar_type() == at::kInt, "paged_attn: table and lens int64 or int32");
#define ROSEINFER_DISPATCH(S, TI)                                                                     \
  if (stages == S && std::is_same<TI, int64_t>::value == wide) {                                      \
    launch<S, TI>(q, k_new, v_new, k_cache, v_cache, table, lens, out, scale, append, pdl);           \
    return;                                                                                           \
  }
  ROSEINFER_PAGED_ATTN_EACH(ROSEINFER_DISPATCH)
#undef ROSEINFER_DISPATCH
  ROSEINFER_CHECK(false, "paged_attn: stages must be 1, 2 or 3, not %lld", static_cast<long long>(stages));
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("paged_attn", &paged_attn, "paged-attention decode, K/V tiles by bulk copy (paged_attn.cu)");
  m.attr("BLOCK") = BLOCK;
  m.attr("HEAD_DIM") = D;
#ifdef PAGED_ATTN_PROBE_SKIP_WAIT
  m.def("set_probe_skip_wait", [](bool on) {
    const int value = on;
    C10_CUDA_CHECK(cudaMemcpyToSymbol(probe_skip_wait, &value, sizeof value));
  }, "the probe build: whether the kernel skips its wait for the kernel in front (the current device)");
#endif
}
#endif
