// What the one-row fused kernels share (fused_mlp.cu, fused_attn.cu): the GPU's clock for their region stamps,
// warp and block sums, the weights' streaming load, and a launch as a programmatic dependent launch (PDL).
// roseinfer/cuda_ext/__init__.py hashes this header into every kernel's build: an edit here rebuilds them all.
#pragma once
#include <cuda_runtime.h>

namespace roseinfer_ext {

__device__ __forceinline__ unsigned long long globaltimer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
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
