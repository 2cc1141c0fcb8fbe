// A decode step's linears at 33 to 64 rows as a CUTLASS Hopper GEMM whose weights load before its PDL wait
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
// tile's N: 64, one tile along them up to 64 rows. Tile 64 x 64 x 64: 36 blocks for c_attn, 12 for attn_proj and
// mlp_proj, 48 for c_fc (GPT-2 small); each block's weight rows are 96 KB of a 768-deep K.
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
#include <torch/extension.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace cutlass_gemm {

using namespace cute;
using f16 = cutlass::half_t;
using Tile = Shape<_64, _64, _64>;  // M (the weights' rows) x N (tokens) x K

// GPT-2's tanh GELU. At namespace scope: as a member alias template of a class template, nvcc 13.0 failed
// ("found previous definition of same function") on one GELU epilogue at two tile shapes in one file.
template <class T>
using Gelu = cutlass::epilogue::thread::GELU_taylor<T>;

template <bool WithGelu>
struct Gemm {
  using Fusion = std::conditional_t<
      WithGelu, cutlass::epilogue::fusion::LinCombPerRowBiasEltAct<Gelu, f16, float, f16, void, float>,
      cutlass::epilogue::fusion::LinCombPerRowBias<f16, float, f16, void, float>>;
  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Tile, Shape<_1, _1, _1>,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, cutlass::layout::ColumnMajor, 8, f16,
      cutlass::layout::ColumnMajor, 8, cutlass::epilogue::TmaWarpSpecialized, Fusion>::CollectiveOp;
  // The example's builder's steps (its collective/builder.hpp) without its fp8-only assertion.
  static constexpr auto MajorK = cute::GMMA::Major::K;
  using TiledMma = decltype(cute::make_tiled_mma(cute::GMMA::ss_op_selector<f16, f16, float, Tile, MajorK, MajorK>(),
                                                 Layout<Shape<_1, _1, _1>>{}));
  using AtomA = decltype(cutlass::gemm::collective::detail::ss_smem_selector<MajorK, f16, _64, _64>());
  using AtomB = AtomA;
  static constexpr int Stages = cutlass::gemm::collective::detail::compute_stage_count_or_override_prefetch<
      cutlass::gemm::collective::detail::sm90_smem_capacity_bytes, f16, f16, Tile>(
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>{});
  using Policy = cutlass::gemm::MainloopSm90TmaGmmaWarpSpecializedWithPrefetch<
      Stages, Shape<_1, _1, _1>, cutlass::gemm::KernelTmaWarpSpecializedFP8FastAccumWithPrefetchAndSplitDMA>;
  using Mainloop = cutlass::gemm::collective::CollectiveMma<
      Policy, Tile, f16, cutlass::gemm::TagToStrideA_t<cutlass::layout::RowMajor>, f16,
      cutlass::gemm::TagToStrideB_t<cutlass::layout::ColumnMajor>, TiledMma, cute::SM90_TMA_LOAD, AtomA, void,
      cute::identity, cute::SM90_TMA_LOAD, AtomB, void, cute::identity>;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, Mainloop, Epilogue>;
  using Device = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
};

// y [T, N] = act(x [T, K] @ w [N, K]^T + bias [N]), row strides ldx and ldy in elements. pdl: launched as a
// programmatic dependent of the kernel in front (its weights load before the wait either way; without the
// attribute the wait returns at once). Returns "" or what failed.
template <bool WithGelu>
const char* run(const void* x, int64_t ldx, const void* w, const void* bias, void* y, int64_t ldy, int T, int N,
                int K, bool pdl, cudaStream_t stream) {
  using G = Gemm<WithGelu>;
  using Kernel = typename G::Kernel;
  auto sa = cutlass::make_cute_packed_stride(typename Kernel::StrideA{}, {N, K, 1});
  auto sb = cutlass::make_cute_packed_stride(typename Kernel::StrideB{}, {T, K, 1});
  get<0>(sb) = ldx;
  auto sd = cutlass::make_cute_packed_stride(typename Kernel::StrideD{}, {N, T, 1});
  get<1>(sd) = ldy;
  typename G::Device::Arguments args{};
  args.mode = cutlass::gemm::GemmUniversalMode::kGemm;
  args.problem_shape = {N, T, K, 1};
  args.mainloop.ptr_A = static_cast<const f16*>(w);
  args.mainloop.dA = sa;
  args.mainloop.ptr_B = static_cast<const f16*>(x);
  args.mainloop.dB = sb;
  // The next grid is released once half of the weights' K tiles are issued (the example's default), and no
  // warp prefetches further K tiles into L2 (every stage holds the rest at K = 768).
  args.mainloop.overlap_ratio = 0.5f;
  args.mainloop.prefetch_ratio = -1.0f;
  args.epilogue.ptr_C = nullptr;
  args.epilogue.ptr_D = static_cast<f16*>(y);
  args.epilogue.dD = sd;
  args.epilogue.thread.alpha = 1.0f;
  args.epilogue.thread.beta = 0.0f;
  args.epilogue.thread.bias_ptr = static_cast<const f16*>(bias);
  typename G::Device gemm;
  if (gemm.can_implement(args) != cutlass::Status::kSuccess) return "CUTLASS cannot implement this GEMM";
  if (gemm.initialize(args, nullptr, stream) != cutlass::Status::kSuccess) return "CUTLASS initialize failed";
  if (gemm.run(stream, nullptr, pdl) != cutlass::Status::kSuccess) return "CUTLASS launch failed";
  return "";
}

int stages() { return Gemm<false>::Stages; }

}  // namespace cutlass_gemm

#ifdef ROSEINFER_KERNEL_ONLY  // every instantiation the launcher uses
template const char* cutlass_gemm::run<false>(const void*, int64_t, const void*, const void*, void*, int64_t, int,
                                              int, int, bool, cudaStream_t);
template const char* cutlass_gemm::run<true>(const void*, int64_t, const void*, const void*, void*, int64_t, int,
                                             int, int, bool, cudaStream_t);
#else

// x [T, K] (rows may be a wider buffer's), w [N, K], bias [N], float16 on one GPU, 16-byte aligned, strides a
// multiple of 8 (`cutlass_gemm.fits` checks): y [T, N], new.
torch::Tensor gemm(torch::Tensor x, torch::Tensor w, torch::Tensor bias, bool gelu, bool pdl) {
  TORCH_CHECK(x.scalar_type() == torch::kHalf && w.scalar_type() == torch::kHalf && bias.scalar_type() == torch::kHalf,
              "cutlass_gemm: float16 only");
  TORCH_CHECK(x.dim() == 2 && w.dim() == 2 && x.stride(1) == 1 && w.is_contiguous() && bias.is_contiguous(),
              "cutlass_gemm: x [T, K] with unit column stride, w [N, K] and bias [N] contiguous");
  TORCH_CHECK(x.size(1) == w.size(1) && bias.size(0) == w.size(0), "cutlass_gemm: shapes do not agree");
  const c10::cuda::CUDAGuard guard(x.device());
  const int T = x.size(0), N = w.size(0), K = w.size(1);
  auto y = torch::empty({T, N}, x.options());
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
  const char* err = gelu ? cutlass_gemm::run<true>(x.data_ptr(), x.stride(0), w.data_ptr(), bias.data_ptr(),
                                                   y.data_ptr(), y.stride(0), T, N, K, pdl, stream)
                         : cutlass_gemm::run<false>(x.data_ptr(), x.stride(0), w.data_ptr(), bias.data_ptr(),
                                                    y.data_ptr(), y.stride(0), T, N, K, pdl, stream);
  TORCH_CHECK(err[0] == '\0', "cutlass_gemm: ", err);
  return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("gemm", &gemm, "act(x @ w^T + bias) at up to 64 rows, weights loaded before the PDL wait (cutlass_gemm.cu)");
  m.def("stages", &cutlass_gemm::stages, "the mainloop's shared-memory stages (64-deep K tiles)");
}
#endif
