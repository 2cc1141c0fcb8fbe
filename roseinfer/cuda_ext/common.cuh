// What the one-row fused kernels share (fused_mlp.cu, fused_attn.cu): the GPU's clock for their region stamps,
// warp and block sums, the residual add + LayerNorm they start with, the weights' streaming load, and a launch as
// a programmatic dependent launch (PDL).
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

// A spin of delay_ns by thread 0 (test builds plant one in a phase, to check that the stamps place it)
__device__ __forceinline__ void spin_ns(long long delay_ns) {
  if (threadIdx.x == 0) {
    const unsigned long long t0 = globaltimer();
    while (globaltimer() - t0 < (unsigned long long)delay_ns) {
    }
  }
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

// A LayerNorm's weight and bias as this thread applies them (columns threadIdx.x + i * THREADS), loaded into
// registers before the kernel's PDL wait: the step does not write them, and loaded after the wait each would be a
// read on the way out of the norm. Kept in T and converted to float where used, so that nothing before the wait
// waits for the loads to land.
template <typename T, int C, int THREADS>
struct LayerNormParams {
  static_assert(C % THREADS == 0, "every thread normalises the same number of columns");
  static constexpr int PER_THREAD = C / THREADS;
  T w[PER_THREAD], b[PER_THREAD];
  __device__ __forceinline__ void load(const T* ln_w, const T* ln_b) {
#pragma unroll
    for (int i = 0; i < PER_THREAD; ++i) {
      w[i] = ln_w[threadIdx.x + i * THREADS];
      b[i] = ln_b[threadIdx.x + i * THREADS];
    }
  }
};

// The residual add and LayerNorm every one-row kernel runs first, in every block: s = x + delta, rounded to T as
// torch's add rounds it (block 0 stores it in s_out), and hs = LayerNorm(s), rounded to T as the unfused kernel
// writes it. C a multiple of THREADS; red: THREADS / 32 floats of shared memory; the caller syncs before hs is read.
template <typename T, typename TD, int C, int THREADS>
__device__ __forceinline__ void residual_layernorm(const T* x, const TD* delta,
                                                   const LayerNormParams<T, C, THREADS>& ln, float eps, T* s_out,
                                                   float* hs, float* red) {
  constexpr int PER_THREAD = C / THREADS;
  float sv[PER_THREAD];
  float part = 0.f;
#pragma unroll
  for (int i = 0; i < PER_THREAD; ++i) {
    const int k = threadIdx.x + i * THREADS;
    T s = from_f<T>(to_f<T>(x[k]) + to_f<TD>(delta[k]));
    if (blockIdx.x == 0) s_out[k] = s;
    sv[i] = to_f<T>(s);
    part += sv[i];
  }
  const float mean = block_sum<THREADS / 32>(part, red) / C;
  part = 0.f;
#pragma unroll
  for (int i = 0; i < PER_THREAD; ++i) part += (sv[i] - mean) * (sv[i] - mean);
  const float rstd = rsqrtf(block_sum<THREADS / 32>(part, red) / C + eps);
#pragma unroll
  for (int i = 0; i < PER_THREAD; ++i) {
    const int k = threadIdx.x + i * THREADS;
    hs[k] = to_f<T>(from_f<T>((sv[i] - mean) * rstd * to_f<T>(ln.w[i]) + to_f<T>(ln.b[i])));
  }
}

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
