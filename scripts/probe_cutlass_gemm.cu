// Issue 50's probe: the linears at 33 to 64 rows as CUTLASS Hopper GEMMs (TMA + wgmma, warp-specialised) under
// programmatic dependent launch, against cuBLAS (scripts/probe_cutlass_gemm.py drives it; docs/BENCHMARKS.md,
// session 44). Two kernels, both from the `nvidia-cutlass` wheel's headers (pinned in the driver):
// - `ws`: CUTLASS's own non-persistent `KernelTmaWarpSpecialized`, compiled with CUTLASS_ENABLE_GDC_FOR_SM90, so
//   its producer waits (griddepcontrol.wait) before its first TMA load and releases the next grid after its last;
// - `pf`: CUTLASS example 63's "GEMM with weight prefetch" (`KernelTmaWarpSpecializedFP8FastAccumWithPrefetch
//   AndSplitDMA`): one producer warp loads A (the weights) into its pipeline stages *before* the wait, another
//   loads B (the activations) after it. The example's builder accepts only fp8, so the mainloop is assembled here
//   for fp16 from the same parts; its collective and kernel are the example's, unchanged.
// Operands as the kernels want them (A the weights): A = W [N_out, K] row-major (M = N_out), B = x [T, K] as a
// column-major K x T, D = y [T, N_out] as a column-major N_out x T. So the bias is per row of D, and the tokens are
// the tile's N (64: one tile along them at up to 64 rows).
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

using namespace cute;
using f16 = cutlass::half_t;

// Not a member alias of Epilogue: as one, nvcc 13.0 failed ("found previous definition of same function") on the
// same GELU epilogue at two tile shapes in one file.
template <class T>
using Act = cutlass::epilogue::thread::GELU_taylor<T>;  // GPT-2's tanh GELU

template <class TileShape, bool Gelu>
struct Epilogue {
  using Fusion = std::conditional_t<
      Gelu, cutlass::epilogue::fusion::LinCombPerRowBiasEltAct<Act, f16, float, f16, void, float>,
      cutlass::epilogue::fusion::LinCombPerRowBias<f16, float, f16, void, float>>;
  using Op = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, Shape<_1, _1, _1>,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, cutlass::layout::ColumnMajor, 8, f16,
      cutlass::layout::ColumnMajor, 8, cutlass::epilogue::TmaWarpSpecialized, Fusion>::CollectiveOp;
};

// CUTLASS's own non-persistent warp-specialised kernel (the builder's fp16 TN path).
template <class TileShape, bool Gelu>
struct WsGemm {
  using Epi = typename Epilogue<TileShape, Gelu>::Op;
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, f16, cutlass::layout::RowMajor, 8, f16,
      cutlass::layout::ColumnMajor, 8, float, TileShape, Shape<_1, _1, _1>,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epi::SharedStorage))>,
      cutlass::gemm::KernelTmaWarpSpecialized>::CollectiveOp;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, Mainloop, Epi>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
};

// Example 63's kernel for fp16: the builder's steps (collective/builder.hpp) without its fp8-only assertion.
template <class TileShape, bool Gelu>
struct PfGemm {
  using Epi = typename Epilogue<TileShape, Gelu>::Op;
  static constexpr auto MajorA = cute::GMMA::Major::K;
  static constexpr auto MajorB = cute::GMMA::Major::K;
  using TiledMma = decltype(cute::make_tiled_mma(
      cute::GMMA::ss_op_selector<f16, f16, float, TileShape, MajorA, MajorB>(), Layout<Shape<_1, _1, _1>>{}));
  using AtomA = decltype(cutlass::gemm::collective::detail::ss_smem_selector<
                         MajorA, f16, decltype(get<0>(TileShape{})), decltype(get<2>(TileShape{}))>());
  using AtomB = decltype(cutlass::gemm::collective::detail::ss_smem_selector<
                         MajorB, f16, decltype(get<1>(TileShape{})), decltype(get<2>(TileShape{}))>());
  static constexpr int Stages = cutlass::gemm::collective::detail::compute_stage_count_or_override_prefetch<
      cutlass::gemm::collective::detail::sm90_smem_capacity_bytes, f16, f16, TileShape>(
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epi::SharedStorage))>{});
  using Policy = cutlass::gemm::MainloopSm90TmaGmmaWarpSpecializedWithPrefetch<
      Stages, Shape<_1, _1, _1>, cutlass::gemm::KernelTmaWarpSpecializedFP8FastAccumWithPrefetchAndSplitDMA>;
  using Mainloop = cutlass::gemm::collective::CollectiveMma<
      Policy, TileShape, f16, cutlass::gemm::TagToStrideA_t<cutlass::layout::RowMajor>, f16,
      cutlass::gemm::TagToStrideB_t<cutlass::layout::ColumnMajor>, TiledMma, cute::SM90_TMA_LOAD, AtomA, void,
      cute::identity, cute::SM90_TMA_LOAD, AtomB, void, cute::identity>;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, Mainloop, Epi>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
};

// y [T, N] = act(x [T, K] @ w [N, K]^T + bias [N]); row strides in elements. Returns 0 on success, else a
// cutlass::Status (as int) or, past 1000, 1000 + a cudaError_t.
template <class G, bool Prefetch>
int run(const void* x, int64_t ldx, const void* w, const void* bias, void* y, int64_t ldy, int T, int N, int K,
        bool pdl, float overlap, float prefetch, cudaStream_t stream) {
  using Gemm = typename G::Gemm;
  using Kernel = typename G::Kernel;
  typename Kernel::StrideA sa = cutlass::make_cute_packed_stride(typename Kernel::StrideA{}, {N, K, 1});
  typename Kernel::StrideB sb = cutlass::make_cute_packed_stride(typename Kernel::StrideB{}, {T, K, 1});
  get<0>(sb) = ldx;  // x's rows may be a wider buffer's
  typename Kernel::StrideD sd = cutlass::make_cute_packed_stride(typename Kernel::StrideD{}, {N, T, 1});
  get<1>(sd) = ldy;
  typename Gemm::Arguments args{};
  args.mode = cutlass::gemm::GemmUniversalMode::kGemm;
  args.problem_shape = {N, T, K, 1};
  args.mainloop.ptr_A = static_cast<const f16*>(w);
  args.mainloop.dA = sa;
  args.mainloop.ptr_B = static_cast<const f16*>(x);
  args.mainloop.dB = sb;
  if constexpr (Prefetch) {
    args.mainloop.overlap_ratio = overlap;
    args.mainloop.prefetch_ratio = prefetch;
  }
  args.epilogue.ptr_C = nullptr;
  args.epilogue.dC = typename Kernel::StrideC{};
  args.epilogue.ptr_D = static_cast<f16*>(y);
  args.epilogue.dD = sd;
  args.epilogue.thread.alpha = 1.0f;
  args.epilogue.thread.beta = 0.0f;
  args.epilogue.thread.bias_ptr = static_cast<const f16*>(bias);
  Gemm gemm;
  cutlass::Status st = gemm.can_implement(args);
  if (st != cutlass::Status::kSuccess) return int(st);
  st = gemm.initialize(args, nullptr, stream);
  if (st != cutlass::Status::kSuccess) return int(st);
  st = gemm.run(stream, nullptr, pdl);
  if (st != cutlass::Status::kSuccess) return int(st);
  cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? 0 : 1000 + int(e);
}

using T64x64x64 = Shape<_64, _64, _64>;
using T64x64x128 = Shape<_64, _64, _128>;
using T128x64x64 = Shape<_128, _64, _64>;

template <class Tile, bool Pf>
int dispatch(int gelu, const void* x, int64_t ldx, const void* w, const void* bias, void* y, int64_t ldy, int T,
             int N, int K, int pdl, float overlap, float prefetch, cudaStream_t s) {
  if constexpr (Pf) {
    return gelu ? run<PfGemm<Tile, true>, true>(x, ldx, w, bias, y, ldy, T, N, K, pdl, overlap, prefetch, s)
                : run<PfGemm<Tile, false>, true>(x, ldx, w, bias, y, ldy, T, N, K, pdl, overlap, prefetch, s);
  } else {
    return gelu ? run<WsGemm<Tile, true>, false>(x, ldx, w, bias, y, ldy, T, N, K, pdl, overlap, prefetch, s)
                : run<WsGemm<Tile, false>, false>(x, ldx, w, bias, y, ldy, T, N, K, pdl, overlap, prefetch, s);
  }
}

// kind: 0 ws 64x64x64, 1 ws 64x64x128, 2 ws 128x64x64, 3 pf 64x64x64, 4 pf 64x64x128, 5 pf 128x64x64
// (tile M x N x K: M along the weights' rows, N along the tokens)
extern "C" int probe_gemm(int kind, int gelu, const void* x, int64_t ldx, const void* w, const void* bias, void* y,
                          int64_t ldy, int T, int N, int K, int pdl, float overlap, float prefetch,
                          cudaStream_t s) {
  switch (kind) {
    case 0: return dispatch<T64x64x64, false>(gelu, x, ldx, w, bias, y, ldy, T, N, K, pdl, overlap, prefetch, s);
    case 1: return dispatch<T64x64x128, false>(gelu, x, ldx, w, bias, y, ldy, T, N, K, pdl, overlap, prefetch, s);
    case 2: return dispatch<T128x64x64, false>(gelu, x, ldx, w, bias, y, ldy, T, N, K, pdl, overlap, prefetch, s);
    case 3: return dispatch<T64x64x64, true>(gelu, x, ldx, w, bias, y, ldy, T, N, K, pdl, overlap, prefetch, s);
    case 4: return dispatch<T64x64x128, true>(gelu, x, ldx, w, bias, y, ldy, T, N, K, pdl, overlap, prefetch, s);
    case 5: return dispatch<T128x64x64, true>(gelu, x, ldx, w, bias, y, ldy, T, N, K, pdl, overlap, prefetch, s);
    default: return -1;
  }
}

// Pipeline stages each kind's mainloop has (how many of its K tiles the weights' producer can load before the wait).
extern "C" int probe_stages(int kind) {
  switch (kind) {
    case 0: return WsGemm<T64x64x64, false>::Mainloop::DispatchPolicy::Stages;
    case 1: return WsGemm<T64x64x128, false>::Mainloop::DispatchPolicy::Stages;
    case 2: return WsGemm<T128x64x64, false>::Mainloop::DispatchPolicy::Stages;
    case 3: return PfGemm<T64x64x64, false>::Stages;
    case 4: return PfGemm<T64x64x128, false>::Stages;
    case 5: return PfGemm<T128x64x64, false>::Stages;
    default: return -1;
  }
}
