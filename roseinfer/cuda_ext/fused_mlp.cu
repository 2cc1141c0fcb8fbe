// The MLP of one GPT-2 block at one row (decode batch 1) as one kernel, split over K with no grid barrier:
//   s = x + delta;  h = LayerNorm(s);  g = gelu_tanh(h @ W_fc^T + b_fc);  out += g @ W_proj^T (+ b_proj)
// (roseinfer/cuda_ext/fused_mlp.py launches it; the Triton path is two kernels: the norm GEMV for c_fc and the
// GEMV for mlp_proj). On an H200 the step's MLP region went from 65.2 to 49.6 us a step (docs/BENCHMARKS.md,
// issue 50, session 24).
//
// Block b owns g rows [24 b, 24 b + 24), 3 per warp: their rows of W_fc [4C, C] and the same rows of W_proj^T (a
// [4C, C] copy of mlp_proj's weight, so that a row is contiguous), all in registers, loaded before the kernel
// waits for the one in front (a programmatic dependent launch). After the wait every warp normalises the row
// (common.cuh), computes its g values, then its share of every output column (the sum over its 24 rows of g[r]
// W_proj[:, r]); the block sums that over its warps in shared memory and adds it into its row of `out` (float32
// [out_rows, C]: one row, or a split sum of SPLIT_ROWS (common.cuh), block b adding into row b % out_rows) with
// 16-byte atomics. No block waits for another: the kernel after this one reads the finished sum once this grid
// has completed. (A first design computed mlp_proj's rows after a grid barrier instead: the barrier cost what the
// kernel boundary it removed does, ~2 us, and the kernel lost to the Triton path; session 19 in docs/BENCHMARKS.md.)
//
// `out` must be zero on entry: each launch zeroes `clear` (clear_n floats), the buffer the next launch adds into,
// whose last reader finished before this launch's wait returned (fused_mlp.MlpScratch keeps one buffer per layer).
// delta (float32) may itself be a split sum of SPLIT_ROWS rows: the LayerNorm's add sums them.
//
// Regions: in the STAMPS instantiation (launched where `stamps` is non-empty) thread 0 of every block writes
// %globaltimer at the phase boundaries (NSTAMP per block: start, after the wait, after the LayerNorm, after c_fc,
// after the block's share of mlp_proj, end once its adds have landed; stamp-major, [NSTAMP, blocks]: the host
// reduces each stamp over the blocks without a copy); the other instantiation has no stamp code. A test build
// (-DFUSED_KERNEL_STAMP_DELAY) can plant a spin of delay_ns in one phase, so that tests can check the stamps place it.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include "common.cuh"
#ifndef ROSEINFER_KERNEL_ONLY  // a compile check of the kernels alone (no torch headers)
#include <torch/extension.h>

#include "common_check.cuh"
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAGuard.h>
#endif

namespace {

using namespace roseinfer_ext;

constexpr int THREADS = 256;
constexpr int WARPS = THREADS / 32;
constexpr int ROWS = 3;  // g rows per warp
constexpr int NSTAMP = 6;

// The end of the split-K down projection: thread t < C / 4 sums columns 4 t .. 4 t + 3 of the block's share over
// its warps' rows of ps, adds `bias` (zero but in the block that adds it) and adds that into `out` (its row of the
// output, float32 [C]) with one 16-byte reduction.
template <typename T, int C, int WARPS>
__device__ __forceinline__ void add_block_share(const float (&ps)[WARPS][C], const T (&bias)[4], float* out) {
  if (threadIdx.x < C / 4) {
    const int c4 = threadIdx.x;
    float4 acc = make_float4(to_f<T>(bias[0]), to_f<T>(bias[1]), to_f<T>(bias[2]), to_f<T>(bias[3]));
#pragma unroll
    for (int w = 0; w < WARPS; ++w) {
      const float4 v = reinterpret_cast<const float4*>(ps[w])[c4];
      acc.x += v.x; acc.y += v.y; acc.z += v.z; acc.w += v.w;
    }
#if __CUDA_ARCH__ >= 900  // a reduction without a return value: the SM does not wait for it
    asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(out + 4 * c4), "f"(acc.x), "f"(acc.y),
                 "f"(acc.z), "f"(acc.w) : "memory");
#else
    atomicAdd(out + 4 * c4, acc.x); atomicAdd(out + 4 * c4 + 1, acc.y);
    atomicAdd(out + 4 * c4 + 2, acc.z); atomicAdd(out + 4 * c4 + 3, acc.w);
#endif
  }
}

// T: the activations' and weights' dtype; TD: delta's (T, or float32 where it is the output of this kernel's
// launch for the layer before); C: the model's width (a multiple of 256; the grid is 4C / (WARPS * ROWS) blocks)
// At most 128 registers a thread (no spills at that: ptxas -v): a layer's attention and MLP blocks, 256 threads
// each, then fit one SM together, so that under PDL the next kernel's blocks load their weights while this one
// runs. Above it (168-180 registers, docs/BENCHMARKS.md session 31) the next blocks waited for these to leave.
// DELTA_ROWS: delta's rows, 1 or SPLIT_ROWS (a split sum: this kernel's own output, in a chain of MLPs).
template <typename T, typename TD, int C, bool STAMPS, int DELTA_ROWS>
__global__ void __maxnreg__(128) fused_mlp_kernel(
    const T* __restrict__ x, const TD* __restrict__ delta, const T* __restrict__ ln_w, const T* __restrict__ ln_b,
    float eps, const T* __restrict__ w_fc, const float* __restrict__ fold_w, const float* __restrict__ fold_b,
    const T* __restrict__ w_proj_t,
    const T* __restrict__ b_proj, T* __restrict__ s_out, float* __restrict__ out, int out_rows,
    float* __restrict__ clear, int clear_n, unsigned long long* stamps, int delay_phase, long long delay_ns) {
  constexpr int N_FC = 4 * C;
  constexpr int VECS = C / 256;  // 16-byte vectors of one C-long row per lane
  __shared__ LayerNormShared<T, C> lns;         // ln_2's weights and the row s
  __shared__ __align__(16) float ps[WARPS][C];  // each warp's share of the output columns
  stamp<STAMPS>(stamps, 0);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int row0 = (blockIdx.x * WARPS + warp) * ROWS;

  // Phase 0: ln_2's weights, this warp's rows of both weights, c_fc's bias and (block 0) mlp_proj's bias, none
  // written by the step: loaded before the wait. ln_2's first (3 KB a block, needed first after the wait), ahead
  // of the 72 KB of rows; issued after them, batch 1 was no slower (docs/BENCHMARKS.md, session 32).
  stage_layernorm_params<T, C, THREADS>(lns, ln_w, ln_b);
  uint4 wf[ROWS][VECS], wp[ROWS][VECS];
  float fw[ROWS], fb[ROWS];  // the folded LayerNorm's per-row constants (c_fc's bias in fb)
#pragma unroll
  for (int i = 0; i < ROWS; ++i) {
    const int r = row0 + i;
    fw[i] = fb[i] = 0.f;
    if (r < N_FC) {
#pragma unroll
      for (int j = 0; j < VECS; ++j) {
        wf[i][j] = load_weights(w_fc + (size_t)r * C + (j * 32 + lane) * 8);
        wp[i][j] = load_weights(w_proj_t + (size_t)r * C + (j * 32 + lane) * 8);
      }
      fw[i] = fold_w[r];
      fb[i] = fold_b[r];
    } else {
#pragma unroll
      for (int j = 0; j < VECS; ++j) wf[i][j] = wp[i][j] = make_uint4(0, 0, 0, 0);
    }
  }
  // block 0 adds mlp_proj's bias with its share: thread t's 4 columns from 4 t (C / 4 <= THREADS), kept in T
  static_assert(C / 4 <= THREADS, "one float4 of output columns per thread");
  T bias[4] = {};
  if (blockIdx.x == 0 && threadIdx.x < C / 4)
#pragma unroll
    for (int e = 0; e < 4; ++e) bias[e] = b_proj[4 * threadIdx.x + e];
  // release the next kernel (it too loads before its wait only what the step does not write), then wait for the
  // one before
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  asm volatile("griddepcontrol.wait;" ::: "memory");
  stamp<STAMPS>(stamps, 1);
  if (clear != nullptr)  // the next launch's buffer: its last reader has finished
    for (int k = blockIdx.x * THREADS + threadIdx.x; k < clear_n; k += gridDim.x * THREADS) clear[k] = 0.f;

  // Phase 1: s = x + delta (rounded like torch's add; block 0 stores it) and its mean and rstd, in every block;
  // the LayerNorm itself is folded into phase 2's dot products (residual_stats, dot_rows_w).
  uint4 h[VECS];  // s at this lane's columns (j * 32 + lane) * 8 + e, 8 T a vector
  float mean, rstd;
  residual_stats<T, TD, C, THREADS, 0, DELTA_ROWS>(x, delta, lns, eps, s_out, h, mean, rstd);
  plant_delay(1, delay_phase, delay_ns);
  phase_barrier<STAMPS>();  // phase 2 reads h from registers
  stamp<STAMPS>(stamps, 2);

  // Phase 2: this warp's g values (c_fc rows, bias, GPT-2's tanh GELU), rounded to T as the Triton path stores g.
  float gv[ROWS], dots[ROWS];
  dot_rows_w<T>(wf, h, lns.w, dots);
#pragma unroll
  for (int i = 0; i < ROWS; ++i) {
    const float acc = rstd * (warp_sum(dots[i]) - mean * fw[i]) + fb[i];
    const float u = 0.7978845608028654f * (acc + 0.044715f * acc * acc * acc);
    gv[i] = row0 + i < N_FC ? to_f<T>(from_f<T>(0.5f * acc * (1.f + tanhf(u)))) : 0.f;
  }
  plant_delay(2, delay_phase, delay_ns);
  phase_barrier<STAMPS>();  // phase 3 reads g from registers and writes its warp's own row of ps
  stamp<STAMPS>(stamps, 3);

  // Phase 3: this warp's share of output columns (j * 32 + lane) * 8 + e, into shared memory.
#pragma unroll
  for (int j = 0; j < VECS; ++j) {
    float p[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int i = 0; i < ROWS; ++i) {
      const T* wv = reinterpret_cast<const T*>(&wp[i][j]);
#pragma unroll
      for (int e = 0; e < 8; ++e) p[e] += gv[i] * to_f<T>(wv[e]);
    }
    float4* dst = reinterpret_cast<float4*>(&ps[warp][(j * 32 + lane) * 8]);
    dst[0] = make_float4(p[0], p[1], p[2], p[3]);
    dst[1] = make_float4(p[4], p[5], p[6], p[7]);
  }
  plant_delay(3, delay_phase, delay_ns);
  __syncthreads();
  stamp<STAMPS>(stamps, 4);

  // Phase 4: the block's share, summed over its warps, added into its row of out: one 16-byte atomic per 4
  // columns (the bias is zero but in block 0).
  add_block_share<T, C, WARPS>(ps, bias, out + (blockIdx.x % out_rows) * C);
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
  template __global__ void fused_mlp_kernel<__half, TD, 768, STAMPS, ROWS_>(                                       \
      const __half*, const TD*, const __half*, const __half*, float, const __half*, const float*, const float*,   \
      const __half*, const __half*, __half*, float*, int, float*, int, unsigned long long*, int, long long);
ROSEINFER_EACH_DELTA(INSTANCE)
}  // namespace
#else
}  // namespace

// x, ln_w, ln_b, b_proj, s: [C] float16; delta: [C] float16, or float32 [1 or SPLIT_ROWS, C] (a split sum);
// w_fc [4C, C], w_proj_t [4C, C] (mlp_proj's weight transposed); fold_w, fold_b float32 [4C]: the LayerNorm folded
// into c_fc (cuda_ext.ln_fold: sum_k ln_w[k] w_fc[r, k], and sum_k ln_b[k] w_fc[r, k] + b_fc[r]); out: float32
// [1 or SPLIT_ROWS, C] (a split sum), zero on entry (the launch before cleared it); clear: float32, the buffer the
// next launch adds into (all of it zeroed), or empty; stamps: int64 [NSTAMP * blocks] or empty.
void fused_mlp(torch::Tensor x, torch::Tensor delta, torch::Tensor ln_w, torch::Tensor ln_b, double eps,
               torch::Tensor w_fc, torch::Tensor fold_w, torch::Tensor fold_b, torch::Tensor w_proj_t,
               torch::Tensor b_proj,
               torch::Tensor s, torch::Tensor out, torch::Tensor clear, torch::Tensor stamps, bool pdl,
               int64_t delay_phase, int64_t delay_ns) {
  const c10::cuda::CUDAGuard guard(x.device());
  constexpr int C = 768;  // at 1,024 wide the registers that hold both linears' rows would spill
  ROSEINFER_CHECK(x.numel() == C, "fused_mlp: width %lld not built (768 only)", static_cast<long long>(x.numel()));
  TORCH_CHECK(x.scalar_type() == at::kHalf, "fused_mlp: float16 only");
  // out, and a float32 delta: [rows, C], one row or a split sum of SPLIT_ROWS
  auto rows_of = [](const torch::Tensor& t) {
    return t.numel() == C ? 1 : t.numel() == SPLIT_ROWS * C ? SPLIT_ROWS : 0;
  };
  const int out_rows = rows_of(out);
  ROSEINFER_CHECK(out.scalar_type() == at::kFloat && out_rows, "fused_mlp: out must be float32 [1 or %d, C]",
                  SPLIT_ROWS);
  TORCH_CHECK(clear.numel() == 0 || clear.scalar_type() == at::kFloat, "fused_mlp: clear must be float32");
  const int delta_rows = rows_of(delta);
  ROSEINFER_CHECK(delta.scalar_type() == at::kFloat ? delta_rows : delta.numel() == C,
                  "fused_mlp: delta must be float16 [C] or float32 [1 or %d, C]", SPLIT_ROWS);
  TORCH_CHECK(fold_w.scalar_type() == at::kFloat && fold_b.scalar_type() == at::kFloat && fold_w.numel() == 4 * C &&
                  fold_b.numel() == 4 * C, "fused_mlp: fold_w, fold_b must be float32 [4C]");
  const int blocks = 4 * C / (WARPS * ROWS);
  unsigned long long* st = stamps.numel() ? reinterpret_cast<unsigned long long*>(stamps.data_ptr()) : nullptr;
  if (st) TORCH_CHECK(stamps.numel() >= blocks * NSTAMP, "fused_mlp: stamps too small");
  float* cl = clear.numel() ? clear.data_ptr<float>() : nullptr;
  cudaLaunchAttribute attr[1];
  cudaLaunchConfig_t cfg = pdl_launch(blocks, THREADS, c10::cuda::getCurrentCUDAStream(), pdl, attr);
  using T = __half;
  auto p = [](const torch::Tensor& t) { return reinterpret_cast<const T*>(t.data_ptr()); };
  T* s_ptr = reinterpret_cast<T*>(s.data_ptr());
  auto launch = [&](auto kernel, const auto* d) {
    C10_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, p(x), d, p(ln_w), p(ln_b), (float)eps, p(w_fc),
                                      fold_w.data_ptr<float>(), fold_b.data_ptr<float>(), p(w_proj_t), p(b_proj),
                                      s_ptr, out.data_ptr<float>(), out_rows, cl,
                                      (int)clear.numel(), st, (int)delay_phase, (long long)delay_ns));
  };
  if (delta.scalar_type() == at::kFloat && delta_rows == SPLIT_ROWS)
    launch(st ? fused_mlp_kernel<T, float, C, true, SPLIT_ROWS> : fused_mlp_kernel<T, float, C, false, SPLIT_ROWS>,
           delta.data_ptr<float>());
  else if (delta.scalar_type() == at::kFloat)
    launch(st ? fused_mlp_kernel<T, float, C, true, 1> : fused_mlp_kernel<T, float, C, false, 1>,
           delta.data_ptr<float>());
  else {
    TORCH_CHECK(delta.scalar_type() == at::kHalf, "fused_mlp: delta float16 or float32");
    launch(st ? fused_mlp_kernel<T, T, C, true, 1> : fused_mlp_kernel<T, T, C, false, 1>, p(delta));
  }
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("fused_mlp", &fused_mlp, "one-row LayerNorm + c_fc + GELU + mlp_proj, split over K (fused_mlp.cu)");
  m.attr("NSTAMP") = NSTAMP;
  m.attr("SPLIT_ROWS") = SPLIT_ROWS;
}
#endif
