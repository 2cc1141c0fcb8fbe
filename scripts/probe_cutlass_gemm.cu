// Issue 50's probe: the linears at 33 to 512 rows as CUTLASS Hopper GEMMs (TMA + wgmma, warp-specialised) under
// programmatic dependent launch, against cuBLAS (scripts/probe_cutlass_gemm.py drives it; docs/BENCHMARKS.md,
// sessions 44 and 47). The kernels, all from the `nvidia-cutlass` wheel's headers (pinned in the driver):
// - `ws`: CUTLASS's own non-persistent `KernelTmaWarpSpecialized`, compiled with CUTLASS_ENABLE_GDC_FOR_SM90, so
//   its producer waits (griddepcontrol.wait) before its first TMA load and releases the next grid after its last;
// - `coop` / `pp`: CUTLASS's persistent `KernelTmaWarpSpecializedCooperative` (two consumer warp groups on one
//   tile) and `...Pingpong` (two consumer warp groups on alternate tiles). (The stream-K tile scheduler does not
//   compile with nvcc 13.0 in CUTLASS 4.2: a const binding in sm90_tile_scheduler_stream_k.hpp's is_last_tile.)
// - `pf`: CUTLASS example 63's "GEMM with weight prefetch" (`KernelTmaWarpSpecializedFP8FastAccumWithPrefetch
//   AndSplitDMA`): one producer warp loads A (the weights) into its pipeline stages *before* the wait, another
//   loads B (the activations) after it. The example's builder accepts only fp8, so the mainloop is assembled here
//   for fp16 from the same parts; its collective and kernel are the example's, unchanged.
// Operands as the kernels want them (A the weights): A = W [N_out, K] row-major (M = N_out), B = x [T, K] as a
// column-major K x T, D = y [T, N_out] as a column-major N_out x T. So the bias is per row of D, and the tokens are
// the tile's N. The `pf` kinds also run K-split into S float32 parts (mode 2, the engine's `run_parts`): the
// GEMM's batch index picks a slice of K.
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

// Mode: 0 bias, 1 bias + GELU (f16 out), 2 the product alone in float32 (one K split's part).
template <int Mode>
using FusionOf = std::conditional_t<
    Mode == 2, cutlass::epilogue::fusion::LinearCombination<float, float, void, float>,
    std::conditional_t<Mode == 1, cutlass::epilogue::fusion::LinCombPerRowBiasEltAct<Act, f16, float, f16, void, float>,
                       cutlass::epilogue::fusion::LinCombPerRowBias<f16, float, f16, void, float>>>;
template <int Mode>
using OutOf = std::conditional_t<Mode == 2, float, f16>;

template <class TileShape, int Mode, class EpiSchedule = cutlass::epilogue::TmaWarpSpecialized>
struct Epilogue {
  using Op = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, Shape<_1, _1, _1>,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, cutlass::layout::ColumnMajor,
      16 / sizeof(OutOf<Mode>), OutOf<Mode>, cutlass::layout::ColumnMajor, 16 / sizeof(OutOf<Mode>), EpiSchedule,
      FusionOf<Mode>>::CollectiveOp;
};

// CUTLASS's own warp-specialised kernels (the builder's fp16 TN path): Schedule picks the non-persistent one, the
// cooperative or the ping-pong; Scheduler the persistent kernels' tile scheduler (void: the default).
template <class TileShape, int Mode, class Schedule = cutlass::gemm::KernelTmaWarpSpecialized,
          class EpiSchedule = cutlass::epilogue::TmaWarpSpecialized, class Scheduler = void>
struct WsGemm {
  using Epi = typename Epilogue<TileShape, Mode, EpiSchedule>::Op;
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, f16, cutlass::layout::RowMajor, 8, f16,
      cutlass::layout::ColumnMajor, 8, float, TileShape, Shape<_1, _1, _1>,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epi::SharedStorage))>,
      Schedule>::CollectiveOp;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, Mainloop, Epi, Scheduler>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
  static constexpr int Stages = Mainloop::DispatchPolicy::Stages;
};
template <class TileShape, int Mode>
using CoopGemm = WsGemm<TileShape, Mode, cutlass::gemm::KernelTmaWarpSpecializedCooperative,
                        cutlass::epilogue::TmaWarpSpecializedCooperative>;
template <class TileShape, int Mode>
using PingpongGemm = WsGemm<TileShape, Mode, cutlass::gemm::KernelTmaWarpSpecializedPingpong>;

// Example 63's kernel for fp16: the builder's steps (collective/builder.hpp) without its fp8-only assertion.
template <class TileShape, int Mode>
struct PfGemm {
  using Epi = typename Epilogue<TileShape, Mode>::Op;
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

// y [T, N] = act(x [T, K] @ w [N, K]^T + bias [N]); row strides in elements. Mode 2: y is float32 parts [L, T, N]
// (ldy = N), part l the product over K's slice l of L (no bias). Returns 0 on success, else a cutlass::Status (as
// int) or, past 1000, 1000 + a cudaError_t; -2 for a kernel that would need a workspace (none of these does).
template <class G, bool Prefetch, int Mode>
int run(const void* x, int64_t ldx, const void* w, const void* bias, void* y, int64_t ldy, int T, int N, int K, int L,
        bool pdl, float overlap, float prefetch, cudaStream_t stream) {
  using Gemm = typename G::Gemm;
  using Kernel = typename G::Kernel;
  auto sa = cutlass::make_cute_packed_stride(typename Kernel::StrideA{}, {N, K / L, L});
  auto sb = cutlass::make_cute_packed_stride(typename Kernel::StrideB{}, {T, K / L, L});
  get<0>(sb) = ldx;  // x's rows may be a wider buffer's
  auto sd = cutlass::make_cute_packed_stride(typename Kernel::StrideD{}, {N, T, L});
  get<1>(sd) = ldy;
  if (L > 1) {  // the batch index walks K's slices of A and B, and D's parts
    get<0>(sa) = K;
    get<2>(sa) = K / L;
    get<2>(sb) = K / L;
    get<2>(sd) = int64_t(ldy) * T;
  }
  typename Gemm::Arguments args{};
  args.mode = cutlass::gemm::GemmUniversalMode::kGemm;
  args.problem_shape = {N, T, K / L, L};
  args.mainloop.ptr_A = static_cast<const f16*>(w);
  args.mainloop.dA = sa;
  args.mainloop.ptr_B = static_cast<const f16*>(x);
  args.mainloop.dB = sb;
  if constexpr (Prefetch) {
    args.mainloop.overlap_ratio = overlap;
    args.mainloop.prefetch_ratio = prefetch;
  }
  args.epilogue.ptr_C = nullptr;
  args.epilogue.ptr_D = static_cast<OutOf<Mode>*>(y);
  args.epilogue.dD = sd;
  args.epilogue.thread.alpha = 1.0f;
  args.epilogue.thread.beta = 0.0f;
  if constexpr (Mode != 2) args.epilogue.thread.bias_ptr = static_cast<const f16*>(bias);
  Gemm gemm;
  if (Gemm::get_workspace_size(args) > 0) return -2;
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
using T64x128x64 = Shape<_64, _128, _64>;
using T64x256x64 = Shape<_64, _256, _64>;
using T128x128x64 = Shape<_128, _128, _64>;
using T128x256x64 = Shape<_128, _256, _64>;
using T64x32x64 = Shape<_64, _32, _64>;  // narrower token tiles: more blocks at 64 rows
using T64x16x64 = Shape<_64, _16, _64>;

struct Call {
  const void *x, *w, *bias;
  void* y;
  int64_t ldx, ldy;
  int T, N, K, L, pdl;
  float overlap, prefetch;
  cudaStream_t s;
};

template <template <class, int> class G, class Tile, bool Pf>
int dispatch(int mode, const Call& c) {
  auto go = [&](auto m) {
    constexpr int M = decltype(m)::value;
    return run<G<Tile, M>, Pf, M>(c.x, c.ldx, c.w, c.bias, c.y, c.ldy, c.T, c.N, c.K, c.L, c.pdl, c.overlap,
                                  c.prefetch, c.s);
  };
  if (mode == 1) return go(std::integral_constant<int, 1>{});
  if constexpr (Pf) {
    if (mode == 2) return go(std::integral_constant<int, 2>{});
  }
  if (mode != 0 || c.L != 1) return -3;  // parts: the prefetch kinds only
  return go(std::integral_constant<int, 0>{});
}

template <class Tile, int Mode>
using Ws = WsGemm<Tile, Mode>;

// kind (tile M x N x K: M along the weights' rows, N along the tokens): 0 ws 64x64x64, 1 ws 64x64x128, 2 ws
// 128x64x64, 3 pf 64x64x64, 4 pf 64x64x128, 5 pf 128x64x64, 6 pf 64x128x64, 7 pf 64x256x64, 8 pf 128x128x64,
// 9 coop 128x128x64, 10 coop 128x256x64, 11 pp 64x128x64, 12 pp 64x256x64, 13 pf 64x32x64, 14 pf 64x16x64
int dispatch_kind(int kind, int mode, const Call& c) {
  switch (kind) {
    case 0: return dispatch<Ws, T64x64x64, false>(mode, c);
    case 1: return dispatch<Ws, T64x64x128, false>(mode, c);
    case 2: return dispatch<Ws, T128x64x64, false>(mode, c);
    case 3: return dispatch<PfGemm, T64x64x64, true>(mode, c);
    case 4: return dispatch<PfGemm, T64x64x128, true>(mode, c);
    case 5: return dispatch<PfGemm, T128x64x64, true>(mode, c);
    case 6: return dispatch<PfGemm, T64x128x64, true>(mode, c);
    case 7: return dispatch<PfGemm, T64x256x64, true>(mode, c);
    case 8: return dispatch<PfGemm, T128x128x64, true>(mode, c);
    case 9: return dispatch<CoopGemm, T128x128x64, false>(mode, c);
    case 10: return dispatch<CoopGemm, T128x256x64, false>(mode, c);
    case 11: return dispatch<PingpongGemm, T64x128x64, false>(mode, c);
    case 12: return dispatch<PingpongGemm, T64x256x64, false>(mode, c);
    case 13: return dispatch<PfGemm, T64x32x64, true>(mode, c);
    case 14: return dispatch<PfGemm, T64x16x64, true>(mode, c);
    default: return -1;
  }
}

// mode: 0 bias, 1 bias + GELU, 2 float32 parts over L slices of K (pf kinds; bias unused)
extern "C" int probe_gemm(int kind, int mode, const void* x, int64_t ldx, const void* w, const void* bias, void* y,
                          int64_t ldy, int T, int N, int K, int L, int pdl, float overlap, float prefetch,
                          cudaStream_t s) {
  return dispatch_kind(kind, mode, Call{x, w, bias, y, ldx, ldy, T, N, K, L, pdl, overlap, prefetch, s});
}

// Pipeline stages each kind's mainloop has (for `pf`: how many of its K tiles the weights' producer loads before
// the wait).
extern "C" int probe_stages(int kind) {
  switch (kind) {
    case 0: return Ws<T64x64x64, 0>::Stages;
    case 1: return Ws<T64x64x128, 0>::Stages;
    case 2: return Ws<T128x64x64, 0>::Stages;
    case 3: return PfGemm<T64x64x64, 0>::Stages;
    case 4: return PfGemm<T64x64x128, 0>::Stages;
    case 5: return PfGemm<T128x64x64, 0>::Stages;
    case 6: return PfGemm<T64x128x64, 0>::Stages;
    case 7: return PfGemm<T64x256x64, 0>::Stages;
    case 8: return PfGemm<T128x128x64, 0>::Stages;
    case 9: return CoopGemm<T128x128x64, 0>::Stages;
    case 10: return CoopGemm<T128x256x64, 0>::Stages;
    case 11: return PingpongGemm<T64x128x64, 0>::Stages;
    case 12: return PingpongGemm<T64x256x64, 0>::Stages;
    case 13: return PfGemm<T64x32x64, 0>::Stages;
    case 14: return PfGemm<T64x16x64, 0>::Stages;
    default: return -1;
  }
}
