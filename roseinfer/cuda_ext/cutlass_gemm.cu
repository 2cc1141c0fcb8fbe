// A decode step's linears from 33 rows as a CUTLASS Hopper GEMM whose weights load before its PDL wait
// (`cutlass_gemm.py` says where the engine runs it; docs/BENCHMARKS.md, session 44).
//
// The kernel is CUTLASS example 63's "GEMM with weight prefetch" (`KernelTmaWarpSpecializedFP8FastAccumWith
// PrefetchAndSplitDMA`, from the pinned `nvidia-cutlass` wheel's headers): TMA loads into a pipeline of shared
// memory stages, wgmma on one consumer warp group, and two producer warps, one for each operand. The weights' warp
// does not wait for the kernel in front (`griddepcontrol.wait`): it fills every stage it can (13 of 64 x 64 tiles,
// all of a 768-deep K) while that kernel still runs. The activations' warp waits, then loads. The example's builder
// takes only fp8, so the mainloop is assembled here for fp16 from the same parts; its collective and kernel are
// the example's, unchanged.
//
// Operands as the kernel wants them (A is the weights): A = W [N, K] row-major (GEMM M = N), B = x [T, K] as a
// column-major K x T, D = y [T, N] as a column-major N x T. So the bias is per row of D, and the tokens are the
// tile's N: 64, one tile along them up to 64 rows, a tile every 64 more (up to MAX_ROWS). Tile 64 x 64 x 64 at 64
// rows: 36 blocks for c_attn, 12 for attn_proj and mlp_proj, 48 for c_fc (GPT-2 small); each block's weight rows
// are 96 KB of a 768-deep K. Beyond 64 rows the token tiles' blocks read the same weights, the second one from L2.
// Larger tiles (64 x 128, 64 x 256, 128 x 128, and CUTLASS's cooperative and ping-pong kernels) were slower for
// attn_proj and mlp_proj at 128 to 512 rows (scripts/probe_cutlass_gemm.py; docs/BENCHMARKS.md, session 47).
//
// The K-split form (`run_parts`) is the same kernel with the GEMM's batch index L picking one of S slices of K: A's
// and B's L strides are K / S elements, D's the [T, N] of one part, and the epilogue writes the float32 product
// alone. mlp_proj at 64 rows in 4 parts is 48 blocks, each down 768 of its 3,072-deep K. Its float32 epilogue
// takes more shared memory, which leaves 12 stages: a part of 768 (12 tiles) still loads whole before the wait.
#include "cutlass/cutlass.h"
#include "cute/tensor.hpp"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/fusion/operations.hpp"
#include "cutlass/epilogue/thread/activation.h"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/util/packed_stride.hpp"

#include "collective/builder.hpp"
#include "collective/dispatch_policy_extra.hpp"
#include "kernel/sm90_gemm_tma_warpspecialized_with_prefetch.hpp"

// Hopper's own instructions only: built for a later GPU, the example's kernel compiles to a stub that returns at once
// (its body needs __CUDA_ARCH_FEAT_SM90_ALL), so its output would be whatever memory held. cutlass_gemm.py builds
// nothing on those GPUs; this makes a build for one fail rather than run.
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "cutlass_gemm.cu: sm_90a only (CUTLASS example 63's kernel is empty on other GPUs)"
#endif

#ifndef ROSEINFER_KERNEL_ONLY  // a compile check of the kernels alone (no torch headers)
#include <cstdint>

#include <torch/extension.h>

#include "common_check.cuh"
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace cutlass_gemm {

using namespace cute;
using f16 = cutlass::half_t;
using Tile = Shape<_64, _64, _64>;  // M (the weights' rows) x N (tokens) x K
constexpr int MAX_ROWS = 512;       // cutlass_gemm.py's MAX_ROWS: the largest bucket it was measured at

// GPT-2's tanh GELU. At namespace scope: as a member alias template of a class template, nvcc 13.0 failed
// ("found previous definition of same function") on one GELU epilogue at two tile shapes in one file.
template <class T>
using Gelu = cutlass::epilogue::thread::GELU_taylor<T>;

// Pipeline stages of the shallow form (`run`'s and `run_parts`' `shallow`): 4 of 64 x 64 x 64 (64 KB of tiles, 73
// KB with the epilogue's) where the deep form's fill the shared memory (13 or 12, one block an SM), so that several
// of its blocks, or the paged attention's, share an SM. At 512 rows c_attn and c_fc are 288 and 384 blocks: three
// waves of the deep form, one of this.
constexpr int SHALLOW_STAGES = 4;

template <class Epilogue>
using AsBuilt = Epilogue;

// One GEMM: the example's mainloop (fp16 operands, fp32 accumulators) under an epilogue `Fusion` writing ElementD,
// on as many stages as fit in shared memory (Stages 0) or on `FixedStages`; `Wrap` wraps the built epilogue.
template <class Fusion, class ElementD, int FixedStages = 0, template <class> class Wrap = AsBuilt>
struct Gemm {
  using Epilogue = Wrap<typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Tile, Shape<_1, _1, _1>,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, cutlass::layout::ColumnMajor,
      16 / sizeof(ElementD), ElementD, cutlass::layout::ColumnMajor, 16 / sizeof(ElementD),
      cutlass::epilogue::TmaWarpSpecialized, Fusion>::CollectiveOp>;
  // The example's builder's steps (its collective/builder.hpp) without its fp8-only assertion.
  static constexpr auto MajorK = cute::GMMA::Major::K;
  using TiledMma = decltype(cute::make_tiled_mma(cute::GMMA::ss_op_selector<f16, f16, float, Tile, MajorK, MajorK>(),
                                                 Layout<Shape<_1, _1, _1>>{}));
  using AtomA = decltype(cutlass::gemm::collective::detail::ss_smem_selector<MajorK, f16, _64, _64>());
  using AtomB = AtomA;
  static constexpr int Stages =
      FixedStages > 0
          ? FixedStages
          : cutlass::gemm::collective::detail::compute_stage_count_or_override_prefetch<
                cutlass::gemm::collective::detail::sm90_smem_capacity_bytes, f16, f16, Tile>(
                cutlass::gemm::collective::StageCountAutoCarveout<
                    static_cast<int>(sizeof(typename Epilogue::SharedStorage))>{});
  using Policy = cutlass::gemm::MainloopSm90TmaGmmaWarpSpecializedWithPrefetch<
      Stages, Shape<_1, _1, _1>, cutlass::gemm::KernelTmaWarpSpecializedFP8FastAccumWithPrefetchAndSplitDMA>;
  using Mainloop = cutlass::gemm::collective::CollectiveMma<
      Policy, Tile, f16, cutlass::gemm::TagToStrideA_t<cutlass::layout::RowMajor>, f16,
      cutlass::gemm::TagToStrideB_t<cutlass::layout::ColumnMajor>, TiledMma, cute::SM90_TMA_LOAD, AtomA, void,
      cute::identity, cute::SM90_TMA_LOAD, AtomB, void, cute::identity>;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, Mainloop, Epilogue>;
  using Device = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
};

// act(acc + bias) in float16 (act: GPT-2's GELU or none)
using BiasFusion = cutlass::epilogue::fusion::LinCombPerRowBias<f16, float, f16, void, float>;
using BiasGeluFusion = cutlass::epilogue::fusion::LinCombPerRowBiasEltAct<Gelu, f16, float, f16, void, float>;
// acc alone in float32: one K split's partial product, which the reader adds to the others and the bias
using PartFusion = cutlass::epilogue::fusion::LinearCombination<float, float, void, float>;
template <bool Shallow>
using BiasGemm = Gemm<BiasFusion, f16, Shallow ? SHALLOW_STAGES : 0>;
template <bool Shallow>
using BiasGeluGemm = Gemm<BiasGeluFusion, f16, Shallow ? SHALLOW_STAGES : 0>;
template <bool Shallow>
using PartGemm = Gemm<PartFusion, float, Shallow ? SHALLOW_STAGES : 0>;

// Launches G on A = w (rows lda apart; with L > 1 the L slices of K, K / L apart), B = x (rows ldx apart, likewise),
// D column-major N x T (columns ldd apart, L's ldl apart): problem N x T x K/L, L = splits. Returns "" or what
// failed.
template <class G>
const char* launch(typename G::Device::Arguments& args, const void* x, int64_t ldx, const void* w, int64_t lda,
                   void* d, int64_t ldd, int64_t ldl, int T, int N, int K, int L, bool pdl, cudaStream_t stream) {
  using Kernel = typename G::Kernel;
  auto sa = cutlass::make_cute_packed_stride(typename Kernel::StrideA{}, {N, K / L, L});
  get<0>(sa) = lda;
  auto sb = cutlass::make_cute_packed_stride(typename Kernel::StrideB{}, {T, K / L, L});
  get<0>(sb) = ldx;
  auto sd = cutlass::make_cute_packed_stride(typename Kernel::StrideD{}, {N, T, L});
  get<1>(sd) = ldd;
  if (L > 1) {  // one part: L's strides as packed (0), as before the split existed
    get<2>(sa) = K / L;
    get<2>(sb) = K / L;
    get<2>(sd) = ldl;
  }
  args.mode = cutlass::gemm::GemmUniversalMode::kGemm;
  args.problem_shape = {N, T, K / L, L};
  args.mainloop.ptr_A = static_cast<const f16*>(w);
  args.mainloop.dA = sa;
  args.mainloop.ptr_B = static_cast<const f16*>(x);
  args.mainloop.dB = sb;
  // The next grid is released once half of the weights' K tiles are issued (the example's default), and no
  // warp prefetches further K tiles into L2 (the deep form's stages hold all of K = 768; the shallow form's 4 of
  // its 12 tiles load before the wait, so it reaches the release only after it).
  args.mainloop.overlap_ratio = 0.5f;
  args.mainloop.prefetch_ratio = -1.0f;
  args.epilogue.ptr_C = nullptr;
  args.epilogue.ptr_D = static_cast<typename G::Epilogue::ElementD*>(d);
  args.epilogue.dD = sd;
  args.epilogue.thread.alpha = 1.0f;
  args.epilogue.thread.beta = 0.0f;
  typename G::Device gemm;
  if (gemm.can_implement(args) != cutlass::Status::kSuccess) return "CUTLASS cannot implement this GEMM";
  if (gemm.initialize(args, nullptr, stream) != cutlass::Status::kSuccess) return "CUTLASS initialize failed";
  if (gemm.run(stream, nullptr, pdl) != cutlass::Status::kSuccess) return "CUTLASS launch failed";
  return "";
}

// y [T, N] = act(x [T, K] @ w [N, K]^T + bias [N]), row strides ldx and ldy in elements. pdl: launched as a
// programmatic dependent of the kernel in front (its weights load before the wait either way; without the
// attribute the wait returns at once). Returns "" or what failed.
// Shallow: on SHALLOW_STAGES stages.
template <bool WithGelu, bool Shallow>
const char* run(const void* x, int64_t ldx, const void* w, const void* bias, void* y, int64_t ldy, int T, int N,
                int K, bool pdl, cudaStream_t stream) {
  using G = std::conditional_t<WithGelu, BiasGeluGemm<Shallow>, BiasGemm<Shallow>>;
  typename G::Device::Arguments args{};
  args.epilogue.thread.bias_ptr = static_cast<const f16*>(bias);
  return launch<G>(args, x, ldx, w, K, y, ldy, int64_t(ldy) * T, T, N, K, 1, pdl, stream);
}

// parts [S, T, N] float32 = x [T, K] @ w [N, K]^T split along K in S equal parts (parts[s] the product of K
// elements s*K/S to (s+1)*K/S; they add up to x @ w^T), one grid of N/64 x 1 x S blocks. x's row stride ldx.
template <bool Shallow>
const char* run_parts(const void* x, int64_t ldx, const void* w, void* parts, int T, int N, int K, int S, bool pdl,
                      cudaStream_t stream) {
  typename PartGemm<Shallow>::Device::Arguments args{};
  return launch<PartGemm<Shallow>>(args, x, ldx, w, K, parts, N, int64_t(N) * T, T, N, K, S, pdl, stream);
}

#ifdef ROSEINFER_CUTLASS_FIXUP_PROBE
// A probe (scripts/bench_graph_step.py --probe-fixup): the K-split GEMM whose last part to finish an output tile adds
// the tile's parts, the bias and the residual into s = residual + (parts summed + bias) in float16, rounded as the
// add + LayerNorm kernel rounds them, so that no kernel after it needs to. Each block counts itself on its tile's
// counter once its part's TMA stores are complete; the last of the S resets the counter (for the next launch) and
// sums. What it bounds: the residual add's kernel boundary folded into the GEMM (the LayerNorm is left out).
struct FixupArgs {
  const float* parts;  // [S, T, N]: this launch's D
  const f16* bias;     // [N]
  const f16* residual; // [T, N], rows ldr apart
  int64_t ldr;
  f16* out;            // [T, N], rows ldo apart
  int64_t ldo;
  int* counters;       // [T tiles, N tiles], zero before the launch and after it
  int T, N, S;
};

template <class Base>
struct FixupEpilogue : Base {
  struct Arguments : Base::Arguments {
    FixupArgs fixup;
  };
  struct Params : Base::Params {
    FixupArgs fixup;
  };
  template <class ProblemShape>
  static Params to_underlying_arguments(ProblemShape const& shape, Arguments const& args, void* workspace) {
    return Params{Base::to_underlying_arguments(shape, args, workspace), args.fixup};
  }
  CUTLASS_HOST_DEVICE FixupEpilogue(Params const& params, typename Base::TensorStorage& shared)
      : Base(params, shared), fixup(params.fixup), flag(reinterpret_cast<int*>(&shared)) {}

  // The consumer warp group's last step (the kernel calls it after the epilogue's stores)
  template <class... Ts>
  CUTLASS_DEVICE auto store_tail(Ts... ts) {
    auto out = Base::store_tail(ts...);
    fix();
    return out;
  }

 private:
  FixupArgs fixup;
  // Where the block's count is told to its threads: the epilogue's shared memory, free once its stores are read.
  // (Not a __shared__ variable: static shared memory would move the dynamic one, whose TMA tiles need its 1 KB
  // alignment, and the kernel fails on a misaligned address.)
  int* flag;

  static constexpr int MAX_PARTS = 4;  // the engine's splits (3 and 4): every part's load issued at once

  CUTLASS_DEVICE void fix() const {
    const FixupArgs& f = fixup;
    const int tid = threadIdx.x % 128;
    const int n = blockIdx.x * 64 + (tid % 16) * 4;  // 4 columns a thread, a token row 16 threads
    const int t0 = blockIdx.y * 64 + tid / 16;       // and 8 rows, 8 apart
    // The residual and the bias (earlier kernels' and a parameter) loaded before the count, so that their
    // latency hides behind it; only the last block uses them.
    uint2 r[8];  // 4 float16 a row
#pragma unroll
    for (int j = 0; j < 8; ++j)
      r[j] = t0 + 8 * j < f.T ? __ldcg(reinterpret_cast<const uint2*>(f.residual + (t0 + 8 * j) * f.ldr + n))
                              : make_uint2(0, 0);
    const uint2 braw = *reinterpret_cast<const uint2*>(f.bias + n);
    const cutlass::arch::NamedBarrier group(128, cutlass::arch::ReservedNamedBarriers::EpilogueBarrier);
    // the part's TMA stores written (the epilogue waited only until their shared memory was read), then ordered
    // before the count for every other block's reads
    asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
    asm volatile("fence.proxy.async.global;" ::: "memory");
    __threadfence();
    group.arrive_and_wait();
    if (tid == 0) {
      int* counter = f.counters + blockIdx.y * gridDim.x + blockIdx.x;
      const bool last = atomicAdd(counter, 1) == f.S - 1;
      if (last) atomicExch(counter, 0);
      *flag = last;
    }
    group.arrive_and_wait();
    if (!*flag) return;
    __threadfence();
    const f16* bh = reinterpret_cast<const f16*>(&braw);
    // every part of the thread's 8 rows in flight at once (a loop over rows took one L2 round trip a row)
    float4 p[8][MAX_PARTS];
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int k = 0; k < MAX_PARTS; ++k)
        p[j][k] = k < f.S && t0 + 8 * j < f.T
                      ? __ldcg(reinterpret_cast<const float4*>(f.parts + (int64_t(k) * f.T + t0 + 8 * j) * f.N + n))
                      : make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int t = t0 + 8 * j;
      if (t >= f.T) break;
      // summed in add_layer_norm_kernel's order (the bias, then each part) and rounded as it rounds: the delta to
      // float16, then the sum
      float d[4] = {float(bh[0]), float(bh[1]), float(bh[2]), float(bh[3])};
#pragma unroll
      for (int k = 0; k < MAX_PARTS; ++k) {
        if (k < f.S) {
          d[0] += p[j][k].x;
          d[1] += p[j][k].y;
          d[2] += p[j][k].z;
          d[3] += p[j][k].w;
        }
      }
      const f16* rh = reinterpret_cast<const f16*>(&r[j]);
      uint2 o;
      f16* oh = reinterpret_cast<f16*>(&o);
#pragma unroll
      for (int c = 0; c < 4; ++c) oh[c] = f16(float(rh[c]) + float(f16(d[c])));
      *reinterpret_cast<uint2*>(f.out + t * f.ldo + n) = o;
    }
  }
};

using FixupGemm = Gemm<PartFusion, float, 0, FixupEpilogue>;

// out [T, N] = residual + (x @ w^T + bias), as run_parts' parts (written too) summed by the last part of each tile.
const char* run_parts_fixup(const void* x, int64_t ldx, const void* w, void* parts, const FixupArgs& fixup, int T,
                            int N, int K, int S, bool pdl, cudaStream_t stream) {
  typename FixupGemm::Device::Arguments args{};
  args.epilogue.fixup = fixup;
  return launch<FixupGemm>(args, x, ldx, w, K, parts, N, int64_t(N) * T, T, N, K, S, pdl, stream);
}
#endif

// (the GELU form's mainloop is BiasGemm's: same tile, same epilogue storage)
int stages(bool shallow) { return shallow ? BiasGemm<true>::Stages : BiasGemm<false>::Stages; }
// its float32 epilogue's larger shared memory leaves the deep form one stage fewer
int part_stages(bool shallow) { return shallow ? PartGemm<true>::Stages : PartGemm<false>::Stages; }

}  // namespace cutlass_gemm

#ifdef ROSEINFER_KERNEL_ONLY  // every instantiation the launcher uses
#define ROSEINFER_CUTLASS_RUN(GELU, SHALLOW)                                                                       \
  template const char* cutlass_gemm::run<GELU, SHALLOW>(const void*, int64_t, const void*, const void*, void*,     \
                                                        int64_t, int, int, int, bool, cudaStream_t);
ROSEINFER_CUTLASS_RUN(false, false)
ROSEINFER_CUTLASS_RUN(true, false)
ROSEINFER_CUTLASS_RUN(false, true)
ROSEINFER_CUTLASS_RUN(true, true)
template const char* cutlass_gemm::run_parts<false>(const void*, int64_t, const void*, void*, int, int, int, int, bool,
                                                    cudaStream_t);
template const char* cutlass_gemm::run_parts<true>(const void*, int64_t, const void*, void*, int, int, int, int, bool,
                                                   cudaStream_t);
#else

// What TMA needs of x [T, K] and w [N, K] (`cutlass_gemm.shapes_fit` says the same): float16 on one GPU, 1 to 512
// rows, w contiguous, x's rows 16-byte aligned (its row stride and K multiples of 8, N too). Built with NDEBUG,
// CUTLASS only prints a descriptor it cannot encode, so these are checked here.
void check_operands(const torch::Tensor& x, const torch::Tensor& w) {
  TORCH_CHECK(x.scalar_type() == torch::kHalf && w.scalar_type() == torch::kHalf, "cutlass_gemm: float16 only");
  TORCH_CHECK(x.is_cuda() && w.device() == x.device(), "cutlass_gemm: x and w on one GPU");
  TORCH_CHECK(x.dim() == 2 && w.dim() == 2 && x.stride(1) == 1 && w.is_contiguous(),
              "cutlass_gemm: x [T, K] with unit column stride, w [N, K] contiguous");
  TORCH_CHECK(x.size(1) == w.size(1), "cutlass_gemm: shapes do not agree");
  TORCH_CHECK(x.size(0) > 0 && x.size(0) <= cutlass_gemm::MAX_ROWS, "cutlass_gemm: 1 to 512 rows");
  TORCH_CHECK(w.size(0) > 0 && w.size(1) > 0, "cutlass_gemm: w [N, K] empty");
  TORCH_CHECK(x.stride(0) >= x.size(1) && x.stride(0) % 8 == 0 && w.size(1) % 8 == 0 && w.size(0) % 8 == 0,
              "cutlass_gemm: row strides, K and N multiples of 8");
  TORCH_CHECK(reinterpret_cast<std::uintptr_t>(x.data_ptr()) % 16 == 0 &&
                  reinterpret_cast<std::uintptr_t>(w.data_ptr()) % 16 == 0,
              "cutlass_gemm: x and w 16-byte aligned");
}

// x [T, K] (rows may be a wider buffer's), w [N, K], bias [N] (`check_operands`; `cutlass_gemm.fits` checks):
// y [T, N], new. shallow: on SHALLOW_STAGES stages.
torch::Tensor gemm(torch::Tensor x, torch::Tensor w, torch::Tensor bias, bool gelu, bool pdl, bool shallow) {
  check_operands(x, w);
  TORCH_CHECK(bias.scalar_type() == torch::kHalf && bias.device() == x.device() && bias.dim() == 1 &&
                  bias.is_contiguous() && bias.size(0) == w.size(0) &&
                  reinterpret_cast<std::uintptr_t>(bias.data_ptr()) % 16 == 0,
              "cutlass_gemm: bias [N] float16, contiguous, 16-byte aligned");
  const c10::cuda::CUDAGuard guard(x.device());
  const int T = x.size(0), N = w.size(0), K = w.size(1);
  auto y = torch::empty({T, N}, x.options());
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
  auto run = gelu ? (shallow ? cutlass_gemm::run<true, true> : cutlass_gemm::run<true, false>)
                  : (shallow ? cutlass_gemm::run<false, true> : cutlass_gemm::run<false, false>);
  const char* err = run(x.data_ptr(), x.stride(0), w.data_ptr(), bias.data_ptr(), y.data_ptr(), y.stride(0), T, N,
                        K, pdl, stream);
  ROSEINFER_CHECK(err[0] == '\0', "cutlass_gemm: %s", err);
  return y;
}

// x [T, K] as above, w [N, K]; K a multiple of 64 * splits: parts [splits, T, N] float32, new, whose sum over the
// first dimension is x @ w^T (the bias is the reader's to add). shallow: as gemm's.
torch::Tensor gemm_parts(torch::Tensor x, torch::Tensor w, int64_t splits, bool pdl, bool shallow) {
  check_operands(x, w);
  TORCH_CHECK(splits >= 1 && splits <= w.size(1) / 64 && w.size(1) % (64 * splits) == 0,
              "cutlass_gemm: K is not a multiple of 64 * splits");
  const c10::cuda::CUDAGuard guard(x.device());
  const int T = x.size(0), N = w.size(0), K = w.size(1);
  auto parts = torch::empty({splits, T, N}, x.options().dtype(torch::kFloat));
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
  auto run = shallow ? cutlass_gemm::run_parts<true> : cutlass_gemm::run_parts<false>;
  const char* err = run(x.data_ptr(), x.stride(0), w.data_ptr(), parts.data_ptr(), T, N, K, int(splits), pdl, stream);
  ROSEINFER_CHECK(err[0] == '\0', "cutlass_gemm: %s", err);
  return parts;
}

#ifdef ROSEINFER_CUTLASS_FIXUP_PROBE
// gemm_parts' launch on the deep form whose last part of each tile writes s [T, N] = residual + parts summed + bias
// (`FixupEpilogue`); counters int32, at least as many as tiles, zero (and left zero).
torch::Tensor gemm_parts_fixup(torch::Tensor x, torch::Tensor w, int64_t splits, torch::Tensor bias,
                               torch::Tensor residual, torch::Tensor counters, bool pdl) {
  check_operands(x, w);
  TORCH_CHECK(splits >= 1 && splits <= w.size(1) / 64 && w.size(1) % (64 * splits) == 0,
              "cutlass_gemm: K is not a multiple of 64 * splits");
  const int T = x.size(0), N = w.size(0), K = w.size(1);
  TORCH_CHECK(N % 64 == 0 && splits <= 4, "gemm_parts_fixup: N a multiple of 64, at most 4 parts");
  TORCH_CHECK(bias.scalar_type() == torch::kHalf && bias.is_contiguous() && bias.size(0) == N, "gemm_parts_fixup: bias");
  TORCH_CHECK(residual.scalar_type() == torch::kHalf && residual.dim() == 2 && residual.size(0) == T &&
                  residual.size(1) == N && residual.stride(1) == 1,
              "gemm_parts_fixup: residual [T, N] float16, unit column stride");
  TORCH_CHECK(counters.scalar_type() == torch::kInt && counters.is_contiguous() &&
                  counters.numel() >= int64_t(N / 64) * ((T + 63) / 64),
              "gemm_parts_fixup: counters int32, one a tile");
  const c10::cuda::CUDAGuard guard(x.device());
  auto parts = torch::empty({splits, T, N}, x.options().dtype(torch::kFloat));
  auto out = torch::empty({T, N}, x.options());
  cutlass_gemm::FixupArgs fixup{parts.data_ptr<float>(),
                                static_cast<const cutlass_gemm::f16*>(bias.data_ptr()),
                                static_cast<const cutlass_gemm::f16*>(residual.data_ptr()),
                                residual.stride(0),
                                static_cast<cutlass_gemm::f16*>(out.data_ptr()),
                                out.stride(0),
                                counters.data_ptr<int>(),
                                T,
                                N,
                                int(splits)};
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
  const char* err = cutlass_gemm::run_parts_fixup(x.data_ptr(), x.stride(0), w.data_ptr(), parts.data_ptr(), fixup,
                                                  T, N, K, int(splits), pdl, stream);
  ROSEINFER_CHECK(err[0] == '\0', "cutlass_gemm: %s", err);
  return out;
}
#endif

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("gemm", &gemm, "act(x @ w^T + bias) at up to 512 rows, weights loaded before the PDL wait (cutlass_gemm.cu)");
  m.def("gemm_parts", &gemm_parts, "x @ w^T split along K into float32 parts [S, T, N] (cutlass_gemm.cu)");
  m.def("stages", &cutlass_gemm::stages, "the mainloop's shared-memory stages (64-deep K tiles)",
        pybind11::arg("shallow") = false);
  m.def("part_stages", &cutlass_gemm::part_stages, "likewise, of the K-split form", pybind11::arg("shallow") = false);
#ifdef ROSEINFER_CUTLASS_FIXUP_PROBE
  m.def("gemm_parts_fixup", &gemm_parts_fixup, "gemm_parts whose last part of a tile adds them to the residual (probe)");
#endif
}
#endif
