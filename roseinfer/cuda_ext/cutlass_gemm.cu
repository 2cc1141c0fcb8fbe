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

// One GEMM: the example's mainloop (fp16 operands, fp32 accumulators) under an epilogue `Fusion` writing ElementD,
// on as many stages as fit in shared memory (Stages 0) or on `FixedStages`.
template <class Fusion, class ElementD, int FixedStages = 0>
struct Gemm {
  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Tile, Shape<_1, _1, _1>,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, cutlass::layout::ColumnMajor,
      16 / sizeof(ElementD), ElementD, cutlass::layout::ColumnMajor, 16 / sizeof(ElementD),
      cutlass::epilogue::TmaWarpSpecialized, Fusion>::CollectiveOp;
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

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("gemm", &gemm, "act(x @ w^T + bias) at up to 512 rows, weights loaded before the PDL wait (cutlass_gemm.cu)");
  m.def("gemm_parts", &gemm_parts, "x @ w^T split along K into float32 parts [S, T, N] (cutlass_gemm.cu)");
  m.def("stages", &cutlass_gemm::stages, "the mainloop's shared-memory stages (64-deep K tiles)",
        pybind11::arg("shallow") = false);
  m.def("part_stages", &cutlass_gemm::part_stages, "likewise, of the K-split form", pybind11::arg("shallow") = false);
}
#endif
