// The MLP of one GPT-2 block at one row (decode batch 1) as one persistent kernel:
//   s = x + delta;  h = LayerNorm(s);  g = gelu_tanh(h @ W_fc^T + b_fc);  out = g @ W_proj^T + b_proj
// (roseinfer/cuda_ext/fused_mlp.py launches it; the Triton path is two kernels: the norm GEMV for c_fc and the
// GEMV for mlp_proj). Measured slower than that path on an H200 (docs/BENCHMARKS.md, issue 50), so the engine does
// not run it: it stays as the toolchain's first kernel and the one that carries region stamps.
//
// One block per SM, 8 warps each, every warp owning whole weight rows: up to MAX_FC rows of W_fc [4C, C] and one
// row of W_proj [C, 4C]. Before it waits for the kernel in front (a programmatic dependent launch), every warp
// loads all of its weights of both linears into registers, so both weight streams are in flight at once and the
// second GEMV does not wait for a launch; a grid-wide barrier (a counter and a generation word, which the last
// block to arrive resets) stands between c_fc's output g and mlp_proj, which reads all of it.
//
// Regions: in the STAMPS instantiation (launched where `stamps` is non-empty) thread 0 of every block writes
// %globaltimer at the phase boundaries (NSTAMP per block: start, after the wait, after the LayerNorm, after c_fc,
// after the barrier, end); the other instantiation has no stamp code. A test build (-DFUSED_MLP_STAMP_DELAY) can plant a spin of delay_ns in one
// phase, so that tests can check the stamps place it.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#ifndef ROSEINFER_KERNEL_ONLY  // a compile check of the kernels alone (no torch headers): see tests/roseinfer
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAGuard.h>
#endif

namespace {

constexpr int THREADS = 256;
constexpr int WARPS = THREADS / 32;
constexpr int NSTAMP = 6;

__device__ __forceinline__ unsigned long long globaltimer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// STAMPS is a template parameter, not a null check at run time: with the code present but off, the kernel ran
// 11% slower (7.87 against 7.09 us per MLP on an H200, docs/BENCHMARKS.md), so stamps off is the other kernel.
template <bool STAMPS>
__device__ __forceinline__ void stamp(unsigned long long* stamps, int k) {
#ifndef FUSED_MLP_NO_STAMPS  // a build without the stamp code at all, to check that off costs nothing
  if constexpr (STAMPS) {
    if (threadIdx.x == 0) stamps[blockIdx.x * NSTAMP + k] = globaltimer();
  }
#endif
}

__device__ __forceinline__ void plant_delay(int phase, int delay_phase, long long delay_ns) {
#ifdef FUSED_MLP_STAMP_DELAY
  if (phase == delay_phase && threadIdx.x == 0) {
    unsigned long long t0 = globaltimer();
    while (globaltimer() - t0 < (unsigned long long)delay_ns) {
    }
  }
#endif
}

template <typename T> __device__ __forceinline__ float to_f(T v);
template <> __device__ __forceinline__ float to_f<__half>(__half v) { return __half2float(v); }
template <> __device__ __forceinline__ float to_f<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T> __device__ __forceinline__ T from_f(float v);
template <> __device__ __forceinline__ __half from_f<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

// dot of 8 packed weights with 8 floats of shared memory
template <typename T>
__device__ __forceinline__ float dot8(const uint4& w, const float* v) {
  const T* wv = reinterpret_cast<const T*>(&w);
  float4 a = *reinterpret_cast<const float4*>(v);
  float4 b = *reinterpret_cast<const float4*>(v + 4);
  return to_f<T>(wv[0]) * a.x + to_f<T>(wv[1]) * a.y + to_f<T>(wv[2]) * a.z + to_f<T>(wv[3]) * a.w +
         to_f<T>(wv[4]) * b.x + to_f<T>(wv[5]) * b.y + to_f<T>(wv[6]) * b.z + to_f<T>(wv[7]) * b.w;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ float block_sum(float v, float* red) {  // red: WARPS floats of shared memory
  v = warp_sum(v);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();
  if (lane == 0) red[warp] = v;
  __syncthreads();
  float t = lane < WARPS ? red[lane] : 0.f;
  return warp_sum(t);
}

__device__ __forceinline__ uint4 load_weights(const void* p) {  // streamed once: no L1 allocation
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}

// C: the model's width (a multiple of 256); MAX_FC: c_fc rows per warp (the host checks gridDim * WARPS covers
// 4C in MAX_FC rows each and C in one)
template <typename T, int C, int MAX_FC, bool STAMPS>
__global__ void __launch_bounds__(THREADS, 1) fused_mlp_kernel(
    const T* __restrict__ x, const T* __restrict__ delta, const T* __restrict__ ln_w, const T* __restrict__ ln_b,
    float eps, const T* __restrict__ w_fc, const T* __restrict__ b_fc, const T* __restrict__ w_proj,
    const T* __restrict__ b_proj, T* __restrict__ s_out, T* __restrict__ g, T* __restrict__ out,
    unsigned* barrier, unsigned long long* stamps, int delay_phase, long long delay_ns) {
  constexpr int N_FC = 4 * C;
  constexpr int FC_VECS = C / 256;      // 16-byte vectors of one W_fc row per lane
  constexpr int PROJ_VECS = N_FC / 256;  // ... of one W_proj row per lane
  __shared__ __align__(16) float hs[C];      // LayerNorm(s)
  __shared__ __align__(16) float gs[N_FC];   // g, for mlp_proj
  __shared__ float red[WARPS];
  stamp<STAMPS>(stamps, 0);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int gw = blockIdx.x * WARPS + warp, nw = gridDim.x * WARPS;

  // Phase 0: this warp's weights and biases, none written by the step: loaded before the wait.
  uint4 wf[MAX_FC][FC_VECS];
  float bf[MAX_FC];
#pragma unroll
  for (int i = 0; i < MAX_FC; ++i) {
    const int r = gw + i * nw;
    bf[i] = 0.f;
    if (r < N_FC) {
#pragma unroll
      for (int j = 0; j < FC_VECS; ++j) wf[i][j] = load_weights(w_fc + (size_t)r * C + (j * 32 + lane) * 8);
      bf[i] = to_f<T>(b_fc[r]);
    }
  }
  uint4 wp[PROJ_VECS];
  float bp = 0.f;
  if (gw < C) {
#pragma unroll
    for (int j = 0; j < PROJ_VECS; ++j) wp[j] = load_weights(w_proj + (size_t)gw * N_FC + (j * 32 + lane) * 8);
    bp = to_f<T>(b_proj[gw]);
  }
  // release the next kernel (it too loads only weights before its wait), then wait for the one before
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  asm volatile("griddepcontrol.wait;" ::: "memory");
  stamp<STAMPS>(stamps, 1);

  // Phase 1: s = x + delta (rounded like torch's add; block 0 stores it), h = LayerNorm(s), in every block.
  constexpr int PER_THREAD = C / THREADS;
  float sv[PER_THREAD];
  float part = 0.f;
#pragma unroll
  for (int i = 0; i < PER_THREAD; ++i) {
    const int k = threadIdx.x + i * THREADS;
    T s = from_f<T>(to_f<T>(x[k]) + to_f<T>(delta[k]));
    if (blockIdx.x == 0) s_out[k] = s;
    sv[i] = to_f<T>(s);
    part += sv[i];
  }
  const float mean = block_sum(part, red) / C;
  part = 0.f;
#pragma unroll
  for (int i = 0; i < PER_THREAD; ++i) part += (sv[i] - mean) * (sv[i] - mean);
  const float rstd = rsqrtf(block_sum(part, red) / C + eps);
#pragma unroll
  for (int i = 0; i < PER_THREAD; ++i) {
    const int k = threadIdx.x + i * THREADS;  // rounded to the activation dtype, as the unfused kernel writes it
    hs[k] = to_f<T>(from_f<T>((sv[i] - mean) * rstd * to_f<T>(ln_w[k]) + to_f<T>(ln_b[k])));
  }
  plant_delay(1, delay_phase, delay_ns);
  __syncthreads();
  stamp<STAMPS>(stamps, 2);

  // Phase 2: c_fc rows with the bias and GPT-2's tanh GELU; g to global memory for every block.
#pragma unroll
  for (int i = 0; i < MAX_FC; ++i) {
    const int r = gw + i * nw;
    if (r < N_FC) {
      float acc = 0.f;
#pragma unroll
      for (int j = 0; j < FC_VECS; ++j) acc += dot8<T>(wf[i][j], hs + (j * 32 + lane) * 8);
      acc = warp_sum(acc) + bf[i];
      const float u = 0.7978845608028654f * (acc + 0.044715f * acc * acc * acc);
      if (lane == 0) g[r] = from_f<T>(0.5f * acc * (1.f + tanhf(u)));
    }
  }
  plant_delay(2, delay_phase, delay_ns);
  __syncthreads();
  stamp<STAMPS>(stamps, 3);

  // Phase 3: grid barrier (every block is resident: one per SM), then g into shared memory.
  if (threadIdx.x == 0) {
    volatile unsigned* gen_word = barrier + 1;
    const unsigned gen = *gen_word;
    __threadfence();
    if (atomicAdd(barrier, 1u) == gridDim.x - 1) {
      barrier[0] = 0;
      __threadfence();
      atomicAdd(barrier + 1, 1u);
    } else {
      while (*gen_word == gen) {
      }
    }
    __threadfence();
  }
  __syncthreads();
  for (int k = threadIdx.x * 8; k < N_FC; k += THREADS * 8) {
    const uint4 v = __ldcg(reinterpret_cast<const uint4*>(g + k));  // L2: written by other SMs in this launch
    const T* tv = reinterpret_cast<const T*>(&v);
#pragma unroll
    for (int e = 0; e < 8; ++e) gs[k + e] = to_f<T>(tv[e]);
  }
  __syncthreads();
  stamp<STAMPS>(stamps, 4);

  // Phase 4: mlp_proj's row of this warp, with the bias.
  if (gw < C) {
    float acc = 0.f;
#pragma unroll
    for (int j = 0; j < PROJ_VECS; ++j) acc += dot8<T>(wp[j], gs + (j * 32 + lane) * 8);
    acc = warp_sum(acc) + bp;
    if (lane == 0) out[gw] = from_f<T>(acc);
  }
  plant_delay(4, delay_phase, delay_ns);
  __syncthreads();
  stamp<STAMPS>(stamps, 5);
}

#ifdef ROSEINFER_KERNEL_ONLY
template __global__ void fused_mlp_kernel<__half, 768, 3, true>(const __half*, const __half*, const __half*, const __half*,
    float, const __half*, const __half*, const __half*, const __half*, __half*, __half*, __half*, unsigned*,
    unsigned long long*, int, long long);
template __global__ void fused_mlp_kernel<__half, 768, 3, false>(const __half*, const __half*, const __half*, const __half*,
    float, const __half*, const __half*, const __half*, const __half*, __half*, __half*, __half*, unsigned*,
    unsigned long long*, int, long long);
template __global__ void fused_mlp_kernel<__nv_bfloat16, 768, 3, false>(const __nv_bfloat16*, const __nv_bfloat16*,
    const __nv_bfloat16*, const __nv_bfloat16*, float, const __nv_bfloat16*, const __nv_bfloat16*,
    const __nv_bfloat16*, const __nv_bfloat16*, __nv_bfloat16*, __nv_bfloat16*, __nv_bfloat16*, unsigned*,
    unsigned long long*, int, long long);
}  // namespace
#else
template <typename T, int C, int MAX_FC>
void launch(int blocks, bool pdl, const torch::Tensor& x, const torch::Tensor& delta, const torch::Tensor& ln_w,
            const torch::Tensor& ln_b, double eps, const torch::Tensor& w_fc, const torch::Tensor& b_fc,
            const torch::Tensor& w_proj, const torch::Tensor& b_proj, torch::Tensor& s, torch::Tensor& g,
            torch::Tensor& out, torch::Tensor& barrier, unsigned long long* stamps, int delay_phase,
            long long delay_ns) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(blocks);
  cfg.blockDim = dim3(THREADS);
  cfg.dynamicSmemBytes = 0;
  cfg.stream = c10::cuda::getCurrentCUDAStream();
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = pdl ? 1 : 0;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  auto p = [](const torch::Tensor& t) { return reinterpret_cast<const T*>(t.data_ptr()); };
  auto q = [](torch::Tensor& t) { return reinterpret_cast<T*>(t.data_ptr()); };
  auto kernel = stamps != nullptr ? fused_mlp_kernel<T, C, MAX_FC, true> : fused_mlp_kernel<T, C, MAX_FC, false>;
  C10_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, p(x), p(delta), p(ln_w), p(ln_b), (float)eps, p(w_fc), p(b_fc),
                                    p(w_proj), p(b_proj), q(s), q(g), q(out),
                                    reinterpret_cast<unsigned*>(barrier.data_ptr()), stamps, delay_phase,
                                    delay_ns));
}

template <typename T>
void dispatch_width(int c, int blocks, bool pdl, const torch::Tensor& x, const torch::Tensor& delta,
                    const torch::Tensor& ln_w, const torch::Tensor& ln_b, double eps, const torch::Tensor& w_fc,
                    const torch::Tensor& b_fc, const torch::Tensor& w_proj, const torch::Tensor& b_proj,
                    torch::Tensor& s, torch::Tensor& g, torch::Tensor& out, torch::Tensor& barrier,
                    unsigned long long* stamps, int delay_phase, long long delay_ns) {
  if (c == 768)
    launch<T, 768, 3>(blocks, pdl, x, delta, ln_w, ln_b, eps, w_fc, b_fc, w_proj, b_proj, s, g, out, barrier,
                      stamps, delay_phase, delay_ns);
  else  // at 1,024 wide the registers that hold both linears' rows spill (ptxas: 255 and 136 bytes of stack)
    TORCH_CHECK(false, "fused_mlp: width ", c, " not built (768 only)");
}

}  // namespace

// x, delta, ln_w, ln_b, b_proj, s, out: [C]; w_fc [4C, C], b_fc [4C], g [4C]; w_proj [C, 4C]; barrier: 2 int32
// (zeros before the first launch; the kernel leaves them reusable); stamps: int64 [blocks, 6] or an empty tensor.
void fused_mlp(torch::Tensor x, torch::Tensor delta, torch::Tensor ln_w, torch::Tensor ln_b, double eps,
               torch::Tensor w_fc, torch::Tensor b_fc, torch::Tensor w_proj, torch::Tensor b_proj, torch::Tensor s,
               torch::Tensor g, torch::Tensor out, torch::Tensor barrier, torch::Tensor stamps, int64_t blocks,
               bool pdl, int64_t delay_phase, int64_t delay_ns) {
  const c10::cuda::CUDAGuard guard(x.device());
  const int c = (int)x.numel();
  TORCH_CHECK(blocks * WARPS >= c && blocks * WARPS * (c / 256) >= 4 * c, "fused_mlp: too few blocks");
  unsigned long long* st =
      stamps.numel() ? reinterpret_cast<unsigned long long*>(stamps.data_ptr()) : nullptr;
  if (stamps.numel()) TORCH_CHECK(stamps.numel() >= blocks * NSTAMP, "fused_mlp: stamps too small");
  if (x.scalar_type() == at::kHalf)
    dispatch_width<__half>(c, (int)blocks, pdl, x, delta, ln_w, ln_b, eps, w_fc, b_fc, w_proj, b_proj, s, g,
                           out, barrier, st, (int)delay_phase, delay_ns);
  else if (x.scalar_type() == at::kBFloat16)
    dispatch_width<__nv_bfloat16>(c, (int)blocks, pdl, x, delta, ln_w, ln_b, eps, w_fc, b_fc, w_proj, b_proj,
                                  s, g, out, barrier, st, (int)delay_phase, delay_ns);
  else
    TORCH_CHECK(false, "fused_mlp: float16 or bfloat16 only");
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("fused_mlp", &fused_mlp, "one-row LayerNorm + c_fc + GELU + mlp_proj (roseinfer/cuda_ext/fused_mlp.cu)");
  m.attr("NSTAMP") = NSTAMP;
}
#endif
