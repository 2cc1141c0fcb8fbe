// The mbarrier helpers (PTX, sm_90) of the code that waits for bytes rather than for threads, with the bulk copy
// and the cluster address that bring those bytes: fused_attn.cu's cluster exchanges (st.async into another block's
// shared memory), paged_attn.cu's bulk copies of K/V tiles, and scripts/probe_row_read.cu. A phase completes when
// its `count` arrivals have come and every byte their expect_tx announced has landed (bytes may land before the
// arrival that announces them: PTX lets the transaction count go below zero, and the phase cannot complete without
// that arrival).
// roseinfer/cuda_ext/__init__.py hashes this header into every kernel's build: an edit here rebuilds them all.
#pragma once
#include <cstdint>

namespace roseinfer_ext {

// A shared-memory address as PTX's shared state space takes it.
__device__ __forceinline__ unsigned smem_addr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// One thread, before any arrival or byte can reach it (fence.mbarrier_init, then a barrier, publishes it).
__device__ __forceinline__ void mbar_init(uint64_t* bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}

// An arrival that also says how many bytes this phase's copies or pushes bring.
__device__ __forceinline__ void mbar_expect_tx(uint64_t* bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes)
               : "memory");
}

__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar)) : "memory");
}

// Until phase `parity` (0, 1, 0, ...) completes. CLUSTER: acquire at cluster scope, for bytes that other blocks of
// the cluster pushed (st.async releases at cluster scope); otherwise at this block's (a bulk copy's bytes).
template <bool CLUSTER = false>
__device__ __forceinline__ void mbar_wait(uint64_t* bar, unsigned parity) {
  unsigned done;
  do {
    if constexpr (CLUSTER) {
      asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2; "
                   "selp.u32 %0, 1, 0, p; }" : "=r"(done) : "r"(smem_addr(bar)), "r"(parity) : "memory");
    } else {
      asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; "
                   "selp.u32 %0, 1, 0, p; }" : "=r"(done) : "r"(smem_addr(bar)), "r"(parity) : "memory");
    }
  } while (!done);
}

// `bytes` (a multiple of 16) from global `src` to this block's shared `dst` (both 16-byte aligned) by the copy
// engine, counted on `bar` as they land.
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, unsigned bytes, uint64_t* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
               ::"r"(smem_addr(dst)), "l"(src), "r"(bytes), "r"(smem_addr(bar)) : "memory");
}

// This block's shared address `p` as block `rank` of the cluster sees it (where st.async writes into that block).
__device__ __forceinline__ unsigned cluster_addr(const void* p, int rank) {
  unsigned r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(smem_addr(p)), "r"(rank));
  return r;
}

}  // namespace roseinfer_ext
