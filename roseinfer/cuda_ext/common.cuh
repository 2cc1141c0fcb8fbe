// What the one-row fused kernels share (fused_mlp.cu, fused_attn.cu): their region stamps, phase barriers and test
// builds' planted delays, warp and block sums, the residual add and LayerNorm statistics they start with (every warp
// its own; the normalisation folded into the GEMV after it),
// the split sum's rows and the instantiations by delta, cp.async, the weights' streaming load, and a launch as a
// programmatic dependent launch (PDL).
// roseinfer/cuda_ext/__init__.py hashes this header into every kernel's build: an edit here rebuilds them all.
#pragma once
#include <cuda_fp16.h>
#include <cuda_runtime.h>

namespace roseinfer_ext {

// The compiler moves no memory access across a stamp (a load placed before the kernel's first stamp and waited
// for there would be outside every region).
__device__ __forceinline__ unsigned long long globaltimer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t) : : "memory");
  return t;
}

// The kernels' regions (docs/ROSEPROF.md): in the STAMPS instantiation thread 0 of every block writes
// %globaltimer at phase boundary k, stamp-major ([NSTAMP, blocks]: the host reduces each stamp over the blocks
// without a copy). STAMPS is a template parameter, not a null check at run time: with the code present but off, the
// first design ran 11% slower (7.87 against 7.09 us per MLP on an H200, docs/BENCHMARKS.md), so stamps off is the
// other kernel. -DFUSED_KERNEL_NO_STAMPS builds without the stamp code at all, to check that off costs nothing.
template <bool STAMPS>
__device__ __forceinline__ void stamp(unsigned long long* stamps, int k) {
#ifndef FUSED_KERNEL_NO_STAMPS
  if constexpr (STAMPS) {
    if (threadIdx.x == 0) stamps[k * gridDim.x + blockIdx.x] = globaltimer();  // [NSTAMP, blocks]
  }
#endif
}

// The end of a phase that the next phase does not read from shared memory: the warps of the stamped build meet
// there, so that the phase's stamp is its last warp's end; in the unstamped build each warp goes on.
template <bool STAMPS>
__device__ __forceinline__ void phase_barrier() {
  if constexpr (STAMPS) __syncthreads();
}

// Test builds (-DFUSED_KERNEL_STAMP_DELAY) plant a spin of delay_ns by thread 0 in one phase, so that tests can check
// that the stamps place it; other builds have no spin.
__device__ __forceinline__ void plant_delay(int phase, int delay_phase, long long delay_ns) {
#ifdef FUSED_KERNEL_STAMP_DELAY
  if (phase == delay_phase && threadIdx.x == 0) {
    const unsigned long long t0 = globaltimer();
    while (globaltimer() - t0 < (unsigned long long)delay_ns) {
    }
  }
#endif
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

template <int WARPS>
__device__ float block_sum(float v, float* red) {  // red: WARPS floats of shared memory
  v = warp_sum(v);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();
  if (lane == 0) red[warp] = v;
  __syncthreads();
  return warp_sum(lane < WARPS ? red[lane] : 0.f);
}

template <typename T> __device__ __forceinline__ float to_f(T v);
template <> __device__ __forceinline__ float to_f<__half>(__half v) { return __half2float(v); }
template <> __device__ __forceinline__ float to_f<float>(float v) { return v; }
template <typename T> __device__ __forceinline__ T from_f(float v);
template <> __device__ __forceinline__ __half from_f<__half>(float v) { return __float2half_rn(v); }

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(gmem) : "memory");
}

// What a block's LayerNorm keeps in shared memory: its weight and bias (copied there before the kernel's PDL wait,
// with cp.async: no registers held across the wait; the step does not write them) and the row s = x + delta.
template <typename T, int C>
struct LayerNormShared {
  __align__(16) T w[C];
  __align__(16) T b[C];
  __align__(16) T s[C];
};

// Before the wait: the LayerNorm's weight and bias into `sh`, as one cp.async group of their own (committed here).
template <typename T, int C, int THREADS>
__device__ __forceinline__ void stage_layernorm_params(LayerNormShared<T, C>& sh, const T* ln_w, const T* ln_b) {
  static_assert(C * sizeof(T) % 16 == 0, "whole 16-byte copies (the pointers' alignment: cuda_ext.layer_norm_fits)");
  constexpr int CHUNKS = C * sizeof(T) / 16;  // 16-byte pieces of one of them
  for (int e = threadIdx.x; e < 2 * CHUNKS; e += THREADS) {
    if (e < CHUNKS)
      cp_async16(sh.w + e * (16 / sizeof(T)), ln_w + e * (16 / sizeof(T)));
    else
      cp_async16(sh.b + (e - CHUNKS) * (16 / sizeof(T)), ln_b + (e - CHUNKS) * (16 / sizeof(T)));
  }
  asm volatile("cp.async.commit_group;" ::: "memory");
}

// The residual add every one-row kernel runs first: the block writes s = x + delta (rounded to T as torch's add
// rounds it; block 0 also stores it in s_out) into shared memory behind one barrier, after which every warp reads
// the row on its own. PENDING: cp.async groups committed after the LayerNorm's own (stage_layernorm_params), which
// need not have landed. DELTA_ROWS: delta is that many [C] rows whose sum is the delta (1, or SPLIT_ROWS:
// fused_mlp.cu's split output). Every load (x and each row of delta at the thread's columns) is issued before the
// first store: written with each element's loads after the store of the one before, the compiler kept that order,
// and batch 1 lost 12 us a step (docs/BENCHMARKS.md, session 35).
template <typename T, typename TD, int C, int THREADS, int PENDING, int DELTA_ROWS>
__device__ __forceinline__ void residual_row(const T* x, const TD* delta, LayerNormShared<T, C>& sh, T* s_out) {
  static_assert(C % THREADS == 0 && C % 256 == 0, "whole columns per thread, whole vectors per lane");
  constexpr int PER_THREAD = C / THREADS;
  float xs[PER_THREAD], d[PER_THREAD];
#pragma unroll
  for (int i = 0; i < PER_THREAD; ++i) {
    const int k = threadIdx.x + i * THREADS;
    xs[i] = to_f<T>(x[k]);
    d[i] = to_f<TD>(delta[k]);
#pragma unroll
    for (int r = 1; r < DELTA_ROWS; ++r) d[i] += to_f<TD>(delta[r * C + k]);
  }
#pragma unroll
  for (int i = 0; i < PER_THREAD; ++i) {
    const int k = threadIdx.x + i * THREADS;
    const T s = from_f<T>(xs[i] + d[i]);
    sh.s[k] = s;
    if (blockIdx.x == 0) s_out[k] = s;
  }
  asm volatile("cp.async.wait_group %0;" ::"n"(PENDING) : "memory");  // the LayerNorm's weights have landed
  __syncthreads();
}

// The residual add and a LayerNorm that every warp computes on its own, as the one-row kernels ran it before the
// LayerNorm was folded into their GEMVs (residual_stats); scripts/probe_row_read.cu still measures it. A lane takes
// the columns it multiplies with its weights, (j * 32 + lane) * 8 + e (j < C / 256, e < 8), so the mean and
// variance are two warp sums (no block reduction) and h = LayerNorm(s), rounded to T as the unfused kernel writes
// it, stays in the lane's registers (h[j]: 8 T a vector).
template <typename T, typename TD, int C, int THREADS, int PENDING, int DELTA_ROWS = 1>
__device__ __forceinline__ void residual_layernorm(const T* x, const TD* delta, LayerNormShared<T, C>& sh,
                                                   float eps, T* s_out, uint4* h) {
  constexpr int VECS = C / 256;
  residual_row<T, TD, C, THREADS, PENDING, DELTA_ROWS>(x, delta, sh, s_out);
  const int lane = threadIdx.x % 32;
  float part = 0.f;
#pragma unroll
  for (int j = 0; j < VECS; ++j) {
    h[j] = *reinterpret_cast<const uint4*>(sh.s + (j * 32 + lane) * 8);
    const T* v = reinterpret_cast<const T*>(&h[j]);
#pragma unroll
    for (int e = 0; e < 8; ++e) part += to_f<T>(v[e]);
  }
  const float mean = warp_sum(part) / C;
  part = 0.f;
#pragma unroll
  for (int j = 0; j < VECS; ++j) {
    const T* v = reinterpret_cast<const T*>(&h[j]);
#pragma unroll
    for (int e = 0; e < 8; ++e) part += (to_f<T>(v[e]) - mean) * (to_f<T>(v[e]) - mean);
  }
  const float rstd = rsqrtf(warp_sum(part) / C + eps);
#pragma unroll
  for (int j = 0; j < VECS; ++j) {
    // One vector of the weights at a time (a compiler barrier a vector): loaded all at once they held 16 more
    // registers, and the kernel's registers decide whether the next kernel's blocks fit beside its own (PDL).
    asm volatile("" ::: "memory");
    const uint4 w4 = *reinterpret_cast<const uint4*>(sh.w + (j * 32 + lane) * 8);
    const uint4 b4 = *reinterpret_cast<const uint4*>(sh.b + (j * 32 + lane) * 8);
    const T* w = reinterpret_cast<const T*>(&w4);
    const T* b = reinterpret_cast<const T*>(&b4);
    T* v = reinterpret_cast<T*>(&h[j]);
#pragma unroll
    for (int e = 0; e < 8; ++e) v[e] = from_f<T>((to_f<T>(v[e]) - mean) * rstd * to_f<T>(w[e]) + to_f<T>(b[e]));
  }
}

// The residual add and the LayerNorm's statistics, with the normalisation itself folded into the GEMV after it
// (dot_rows_w, and the caller's last step): LN(s) . W_j = rstd (sum_k s_k w_k W_jk - mean sum_k w_k W_jk) +
// sum_k b_k W_jk, where the two sums of weights alone are per-row constants made once at load
// (cuda_ext.ln_fold). After residual_row every lane takes s (rounded to T) at the columns it multiplies with its
// weights into h[j], unnormalised; the row's mean and rstd come from one pass of shifted sums (the shift s[0])
// beside that, so the dot products need not wait for them: only each output's last step does.
template <typename T, typename TD, int C, int THREADS, int PENDING, int DELTA_ROWS = 1>
__device__ __forceinline__ void residual_stats(const T* x, const TD* delta, LayerNormShared<T, C>& sh, float eps,
                                               T* s_out, uint4* h, float& mean, float& rstd) {
  constexpr int VECS = C / 256;
  residual_row<T, TD, C, THREADS, PENDING, DELTA_ROWS>(x, delta, sh, s_out);
  const int lane = threadIdx.x % 32;
  const float shift = to_f<T>(sh.s[0]);
  float sum = 0.f, sq = 0.f;
#pragma unroll
  for (int j = 0; j < VECS; ++j) {
    h[j] = *reinterpret_cast<const uint4*>(sh.s + (j * 32 + lane) * 8);
    const T* v = reinterpret_cast<const T*>(&h[j]);
    float dv[8], qv[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      dv[e] = to_f<T>(v[e]) - shift;
      qv[e] = dv[e] * dv[e];
    }
#pragma unroll
    for (int w = 4; w > 0; w >>= 1)
#pragma unroll
      for (int e = 0; e < w; ++e) {
        dv[e] += dv[e + w];
        qv[e] += qv[e + w];
      }
    sum += dv[0];
    sq += qv[0];
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    sum += __shfl_xor_sync(0xffffffffu, sum, o);
    sq += __shfl_xor_sync(0xffffffffu, sq, o);
  }
  const float dmean = sum / C;
  mean = shift + dmean;
  rstd = rsqrtf(fmaxf(sq / C - dmean * dmean, 0.f) + eps);
}

// ROWS dot products of packed weights (w[i][j]: 8 T a vector) with the row s * g (s: h, 8 T a vector, VECS vectors;
// g: the LayerNorm's weight in shared memory, at the lane's columns as h), each in float in the unfused GEMV's
// order (acc[i] = 0 + dot of vector 0 + dot of vector 1 + ..., each dot left to right). Vector j of h is unpacked
// and multiplied by g's once for all rows, and only it: unpacked for every row at once it held 24 registers. With
// residual_stats, acc[i] is sum_k s_k g_k W_ik; the caller's rstd (acc - mean fold_w) + fold_b is
// LayerNorm(s) . W_i + its bias.
template <typename T, int ROWS, int VECS>
__device__ __forceinline__ void dot_rows_w(const uint4 (&w)[ROWS][VECS], const uint4 (&h)[VECS], const T* g,
                                           float (&acc)[ROWS]) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int i = 0; i < ROWS; ++i) acc[i] = 0.f;
#pragma unroll
  for (int j = 0; j < VECS; ++j) {
    asm volatile("" ::: "memory");  // one vector of h unpacked at a time
    const uint4 g4 = *reinterpret_cast<const uint4*>(g + (j * 32 + lane) * 8);
    const T* hv = reinterpret_cast<const T*>(&h[j]);
    const T* gv = reinterpret_cast<const T*>(&g4);
    float v[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) v[e] = to_f<T>(hv[e]) * to_f<T>(gv[e]);
#pragma unroll
    for (int i = 0; i < ROWS; ++i) {
      const T* wv = reinterpret_cast<const T*>(&w[i][j]);
      float d = to_f<T>(wv[0]) * v[0];
#pragma unroll
      for (int e = 1; e < 8; ++e) d += to_f<T>(wv[e]) * v[e];
      acc[i] += d;
    }
  }
}

// fused_mlp.cu's output at one row: a split sum, SPLIT_ROWS float32 rows [SPLIT_ROWS, C] whose sum is the MLP's
// output. Its 128 blocks add their shares with atomics; into one row, each address took 128 adds and the adds'
// drain at L2 cost ~0.6 us a layer (docs/BENCHMARKS.md, session 35); block b adds into row b % SPLIT_ROWS, and the
// kernel after it sums the rows as it reads them (residual_row's DELTA_ROWS): 4 rows, where the attention's
// LayerNorm after its wait reads fewer than at 8 (batch 1 1.2% faster; 2 rows no faster than 8: session 38).
constexpr int SPLIT_ROWS = 4;

// The kernels' instantiations by their delta, (TD, STAMPS, DELTA_ROWS): float32 one row (fused_attn's output) or a
// split sum, float16 one row (the Triton path's output, the embedding tables), each with stamps and without. The
// kernel-only compile check instantiates each (ROSEINFER_KERNEL_ONLY); the launchers pick one by delta's dtype and
// size.
#define ROSEINFER_EACH_DELTA(INSTANCE) \
  INSTANCE(float, false, 1)            \
  INSTANCE(float, true, 1)             \
  INSTANCE(float, false, SPLIT_ROWS)   \
  INSTANCE(float, true, SPLIT_ROWS)    \
  INSTANCE(__half, false, 1)           \
  INSTANCE(__half, true, 1)

__device__ __forceinline__ uint4 load_weights(const void* p) {  // streamed once: no L1 allocation
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}

// A launch of `blocks` x `threads` on `stream`, as a programmatic dependent launch where `pdl` (the kernel then
// starts while the one in front finishes and calls griddepcontrol.wait before it reads that kernel's output).
// `attr` must outlive the launch call.
inline cudaLaunchConfig_t pdl_launch(int blocks, int threads, cudaStream_t stream, bool pdl,
                                     cudaLaunchAttribute* attr) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(blocks);
  cfg.blockDim = dim3(threads);
  cfg.stream = stream;
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = pdl ? 1 : 0;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  return cfg;
}

}  // namespace roseinfer_ext
