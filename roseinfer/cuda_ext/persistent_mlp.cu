// A MEASUREMENT, not used by the engine (issue 50; scripts/bench_cuda_mlp.py --persistent): the MLPs of a chain of
// layers at one row (decode batch 1) in one persistent launch, one block per SM, where fused_mlp.cu is one launch a
// layer under PDL. Session 34 measured (docs/BENCHMARKS.md) that a layer's kernels lose 2.1 us after their waits to
// the next kernel's blocks, which start on the same SMs and load their weights just as this kernel's first reads
// after its wait go out. Here each block orders its own loads: layer l+1's weights are copied into shared memory
// (cp.async, two buffers) once layer l's first reads after its wait (x and delta) have landed, and a layer waits for
// the one before on a counter in global memory, not on a kernel boundary.
//
// Block b owns g rows [24 b, 24 b + 24) of every layer, 3 per warp, as in fused_mlp.cu. Layer l:
//   wait until every block has added its share of layer l-1 (done[l-1] == blocks);
//   s = x + delta (block 0 stores it in s_bufs[l]), h = LayerNorm(s) (every warp its own, common.cuh),
//   copy layer l+1's weights into the other buffer (layer l-1 read it last, before its end);
//   g = gelu_tanh(h W_fc^T + b_fc) at its rows, its share of out = g W_proj^T (+ b_proj in block 0) summed over its
//   warps and added into outs[l] (float32 [C]) with atomics; then thread 0, after a barrier, fences and adds 1 to
//   done[l] (the cooperative groups grid barrier's release: the fence is cumulative over the block's adds).
// x of layer l is s_bufs[l-1] and delta outs[l-1]; layer 0 reads x0 and delta0 (float16). outs and done must be
// zero on entry. No block may wait for a block that is not resident: the launcher checks that every block fits at
// once (one per SM), and a wait that lasts SPIN_LIMIT_NS traps (an error, not a hung GPU).
//
// Regions: in the STAMPS instantiation thread 0 of every block writes %globaltimer at NSTAMP boundaries a layer
// (start, after the wait, after ln_2, after c_fc and issuing the next layer's copies, after its share of mlp_proj,
// after its adds and count), layer-major then stamp-major ([L, NSTAMP, blocks]), as fused_mlp.cu's phases.
#include <cuda_fp16.h>
#include "common.cuh"
#ifndef ROSEINFER_KERNEL_ONLY  // a compile check of the kernels alone (no torch headers)
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAGuard.h>
#endif

namespace {

using namespace roseinfer_ext;

constexpr int C = 768;  // GPT-2 small's width, the one built
constexpr int THREADS = 256;
constexpr int WARPS = THREADS / 32;
constexpr int ROWS = 3;                       // g rows per warp
constexpr int BLOCK_ROWS = WARPS * ROWS;      // 24 a block
constexpr int BLOCKS = 4 * C / BLOCK_ROWS;    // 128
constexpr int VECS = C / 256;                 // 16-byte vectors of one C-long row per lane
constexpr int NSTAMP = 6;
constexpr unsigned long long SPIN_LIMIT_NS = 1000000000ull;  // 1 s: far beyond any layer, short of a hung call
static_assert(BLOCKS * BLOCK_ROWS == 4 * C, "every g row owned by one block");

// One layer's weights as a block holds them: ln_2's (and the row s, written at its LayerNorm), its 24 rows of W_fc
// and of W_proj^T.
struct LayerBuffer {
  LayerNormShared<__half, C> ln;
  __align__(16) __half fc[BLOCK_ROWS][C];
  __align__(16) __half proj[BLOCK_ROWS][C];
};

struct Shared {  // 181,248 bytes: one block an SM
  LayerBuffer buf[2];                // layers l and l+1 (l % 2)
  __align__(16) float ps[WARPS][C];  // each warp's share of the output columns
};

// A layer's tensors (device pointers; the launcher's int64 [L, 6] table).
struct MlpLayer {
  const __half* ln_w;
  const __half* ln_b;
  const __half* w_fc;      // [4C, C]
  const __half* b_fc;      // [4C]
  const __half* w_proj_t;  // [4C, C], mlp_proj's weight transposed
  const __half* b_proj;    // [C]
};

// Layer `layer`'s weights into `buf`, as two cp.async groups (ln_2's, then the rows'; both committed here; none
// where there is no such layer): when a layer waits for its own, they are the last ones committed.
__device__ __forceinline__ void stage_layer(LayerBuffer& buf, const MlpLayer* layers, int layer, int n_layers,
                                            int row0) {
  if (layer >= n_layers) return;
  const MlpLayer L = layers[layer];
  stage_layernorm_params<__half, C, THREADS>(buf.ln, L.ln_w, L.ln_b);  // commits a group of its own
  constexpr int CHUNKS = BLOCK_ROWS * C * 2 / 16;  // 16-byte pieces of the block's rows of one weight
  const __half* fc = L.w_fc + static_cast<size_t>(row0) * C;  // the block's rows are contiguous
  const __half* proj = L.w_proj_t + static_cast<size_t>(row0) * C;
  for (int e = threadIdx.x; e < 2 * CHUNKS; e += THREADS) {
    if (e < CHUNKS)
      cp_async16(&buf.fc[0][0] + e * 8, fc + e * 8);
    else
      cp_async16(&buf.proj[0][0] + (e - CHUNKS) * 8, proj + (e - CHUNKS) * 8);
  }
  asm volatile("cp.async.commit_group;" ::: "memory");
}

__device__ __forceinline__ unsigned ld_acquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

template <bool STAMPS>
__global__ void __launch_bounds__(THREADS, 1) persistent_mlp_kernel(
    const __half* __restrict__ x0, const __half* __restrict__ delta0, const MlpLayer* __restrict__ layers,
    int n_layers, float eps, __half* s_bufs, float* outs, unsigned* done, unsigned long long* stamps) {
  extern __shared__ __align__(16) unsigned char smem[];
  Shared& sh = *reinterpret_cast<Shared*>(smem);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int row0 = blockIdx.x * BLOCK_ROWS;
  stage_layer(sh.buf[0], layers, 0, n_layers, row0);
  for (int l = 0; l < n_layers; ++l) {
    LayerBuffer& buf = sh.buf[l & 1];
    unsigned long long* st = STAMPS ? stamps + static_cast<size_t>(l) * NSTAMP * gridDim.x : nullptr;
    stamp<STAMPS>(st, 0);
    const MlpLayer L = layers[l];
    float bf[ROWS];  // c_fc's bias at this warp's rows; block 0 adds mlp_proj's bias (thread t: columns 4t..4t+3)
#pragma unroll
    for (int i = 0; i < ROWS; ++i) bf[i] = to_f<__half>(L.b_fc[row0 + warp * ROWS + i]);
    __half bias[4] = {};
    if (blockIdx.x == 0 && threadIdx.x < C / 4)
#pragma unroll
      for (int e = 0; e < 4; ++e) bias[e] = L.b_proj[4 * threadIdx.x + e];
    if (l > 0) {  // every block's adds into outs[l-1] (and block 0's s) have landed
      if (threadIdx.x == 0) {
        const unsigned long long t0 = globaltimer();
        while (ld_acquire(done + l - 1) < gridDim.x)
          if (globaltimer() - t0 > SPIN_LIMIT_NS) __trap();  // a block that never ran: fail, do not hang
      }
      __syncthreads();
    }
    stamp<STAMPS>(st, 1);

    // s = x + delta, h = LayerNorm(s): thread 0's acquire and the barrier make the other blocks' writes of
    // s_bufs[l-1] and outs[l-1] visible to the block's plain (not read-only) loads. PENDING 0: this layer's copies
    // are the last committed.
    uint4 h[VECS];
    if (l == 0)
      residual_layernorm<__half, __half, C, THREADS, 0>(x0, delta0, buf.ln, eps, s_bufs, h);
    else
      residual_layernorm<__half, float, C, THREADS, 0>(s_bufs + static_cast<size_t>(l - 1) * C,
                                                       outs + static_cast<size_t>(l - 1) * C, buf.ln, eps,
                                                       s_bufs + static_cast<size_t>(l) * C, h);
    phase_barrier<STAMPS>();
    stamp<STAMPS>(st, 2);
    // Layer l+1's weights into the other buffer, now that this layer's reads after its wait have landed (the point
    // of the design): they have the rest of this layer to arrive.
    stage_layer(sh.buf[(l + 1) & 1], layers, l + 1, n_layers, row0);

    // c_fc + GELU at this warp's rows, from shared memory, rounded to float16 as the Triton path stores g
    float gv[ROWS];
    {
      uint4 wf[ROWS][VECS];
#pragma unroll
      for (int i = 0; i < ROWS; ++i)
#pragma unroll
        for (int j = 0; j < VECS; ++j)
          wf[i][j] = *reinterpret_cast<const uint4*>(&buf.fc[warp * ROWS + i][(j * 32 + lane) * 8]);
      float dots[ROWS];
      dot_rows<__half>(wf, h, dots);
#pragma unroll
      for (int i = 0; i < ROWS; ++i) {
        const float acc = warp_sum(dots[i]) + bf[i];
        const float u = 0.7978845608028654f * (acc + 0.044715f * acc * acc * acc);
        gv[i] = to_f<__half>(from_f<__half>(0.5f * acc * (1.f + tanhf(u))));
      }
    }
    phase_barrier<STAMPS>();
    stamp<STAMPS>(st, 3);

    // this warp's share of every output column, into ps
#pragma unroll
    for (int j = 0; j < VECS; ++j) {
      float p[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
#pragma unroll
      for (int i = 0; i < ROWS; ++i) {
        const uint4 w4 = *reinterpret_cast<const uint4*>(&buf.proj[warp * ROWS + i][(j * 32 + lane) * 8]);
        const __half* wv = reinterpret_cast<const __half*>(&w4);
#pragma unroll
        for (int e = 0; e < 8; ++e) p[e] += gv[i] * to_f<__half>(wv[e]);
      }
      float4* dst = reinterpret_cast<float4*>(&sh.ps[warp][(j * 32 + lane) * 8]);
      dst[0] = make_float4(p[0], p[1], p[2], p[3]);
      dst[1] = make_float4(p[4], p[5], p[6], p[7]);
    }
    __syncthreads();  // ps whole; no warp reads this buffer again (layer l+1 copies layer l+2's weights into it)
    stamp<STAMPS>(st, 4);

    // the block's share summed over its warps, added into outs[l]; then counted once every add has landed
    add_block_share<__half, C, WARPS>(sh.ps, bias, outs + static_cast<size_t>(l) * C);
    __syncthreads();  // the block's adds (and block 0's stores of s) issued
    if (threadIdx.x == 0) {
      __threadfence();
      atomicAdd(done + l, 1u);
    }
    phase_barrier<STAMPS>();
    stamp<STAMPS>(st, 5);
  }
}

#ifdef ROSEINFER_KERNEL_ONLY  // every instantiation the launcher uses
template __global__ void persistent_mlp_kernel<false>(const __half*, const __half*, const MlpLayer*, int, float,
                                                      __half*, float*, unsigned*, unsigned long long*);
template __global__ void persistent_mlp_kernel<true>(const __half*, const __half*, const MlpLayer*, int, float,
                                                     __half*, float*, unsigned*, unsigned long long*);
}  // namespace
#else
}  // namespace

// x0, delta0: [C] float16; layers: int64 [L, 6] on the device, each row a layer's (ln_w, ln_b, w_fc, b_fc, w_proj_t,
// b_proj) device pointers; s_bufs: [L, C] float16 out; outs: float32 [L, C] and done: int32 [L], zero on entry;
// stamps: int64 [L * NSTAMP * blocks] or empty.
void persistent_mlp(torch::Tensor x0, torch::Tensor delta0, torch::Tensor layers, double eps, torch::Tensor s_bufs,
                    torch::Tensor outs, torch::Tensor done, torch::Tensor stamps) {
  const c10::cuda::CUDAGuard guard(x0.device());
  const int n_layers = static_cast<int>(layers.size(0));
  TORCH_CHECK(x0.numel() == C && delta0.numel() == C && x0.scalar_type() == at::kHalf &&
                  delta0.scalar_type() == at::kHalf, "persistent_mlp: x0, delta0 float16 [768]");
  TORCH_CHECK(layers.scalar_type() == at::kLong && layers.size(1) == 6, "persistent_mlp: layers int64 [L, 6]");
  TORCH_CHECK(outs.scalar_type() == at::kFloat && outs.numel() == (int64_t)n_layers * C, "outs: float32 [L, C]");
  TORCH_CHECK(s_bufs.scalar_type() == at::kHalf && s_bufs.numel() == (int64_t)n_layers * C, "s_bufs: [L, C]");
  TORCH_CHECK(done.scalar_type() == at::kInt && done.numel() == n_layers, "done: int32 [L]");
  for (const torch::Tensor* t : {&x0, &delta0, &layers, &s_bufs, &outs, &done, &stamps})
    TORCH_CHECK(t->numel() == 0 || (t->is_cuda() && t->is_contiguous()), "persistent_mlp: contiguous CUDA tensors");
  TORCH_CHECK(stamps.numel() == 0 || stamps.scalar_type() == at::kLong, "persistent_mlp: stamps int64");
  unsigned long long* st = stamps.numel() ? reinterpret_cast<unsigned long long*>(stamps.data_ptr()) : nullptr;
  if (st) TORCH_CHECK(stamps.numel() >= (int64_t)n_layers * NSTAMP * BLOCKS, "persistent_mlp: stamps too small");
  auto kernel = st ? persistent_mlp_kernel<true> : persistent_mlp_kernel<false>;
  const int smem = static_cast<int>(sizeof(Shared));
  C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  // Every block resident at once, or a block would wait for one that cannot start.
  int per_sm = 0, sms = 0;
  C10_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, THREADS, smem));
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, x0.device().index()));
  TORCH_CHECK(per_sm * sms >= BLOCKS, "persistent_mlp: ", BLOCKS, " blocks do not fit at once (", sms, " SMs x ",
              per_sm, ")");
  kernel<<<BLOCKS, THREADS, smem, c10::cuda::getCurrentCUDAStream()>>>(
      reinterpret_cast<const __half*>(x0.data_ptr()), reinterpret_cast<const __half*>(delta0.data_ptr()),
      reinterpret_cast<const MlpLayer*>(layers.data_ptr()), n_layers, static_cast<float>(eps),
      reinterpret_cast<__half*>(s_bufs.data_ptr()), outs.data_ptr<float>(),
      reinterpret_cast<unsigned*>(done.data_ptr()), st);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("persistent_mlp", &persistent_mlp, "a chain of one-row MLPs in one persistent launch (persistent_mlp.cu)");
  m.attr("NSTAMP") = NSTAMP;
  m.attr("BLOCKS") = BLOCKS;
}
#endif
