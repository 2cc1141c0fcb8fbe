// Issue 50's probe: what one grid-wide dependency costs on the GPU, by the means a decode step could use for it.
// Sessions 31 to 57 put what is left of the step (batch 1 and 64 rows alike) on chains of dependent launches, not
// bytes, and named a persistent kernel whose phases wait on flags, or K parts reduced inside a cluster, as the
// designs that would remove them. This measures the primitive each design pays for one dependency, outside the
// engine (scripts/probe_dependency_cost.py times it; docs/BENCHMARKS.md, session 58).
//
// Every variant runs P phases over G blocks of 256 threads. Phase 0 writes 1 into its slot; phase p reads the
// slot that block src(b) wrote in phase p - 1 (1 KB: a float a thread) and writes it plus one into its own, so
// that every phase depends on another block's previous phase. buf is [P, G, 256] float32, one slot a phase and
// block, never reused within a run (no phase can overwrite what a slower block has still to read); after a run
// every slot of phase P - 1 holds P.
//   kernels  one launch a phase (src = b + 1 mod G), in stream order, optionally as programmatic dependent
//            launches (PDL: each launch starts while the one in front runs, griddepcontrol.wait before its read):
//            what the engine's step pays today at every kernel boundary;
//   counter  one persistent launch; after each phase every block adds one to a counter in global memory and
//            waits until it reaches (p + 1) G (src = b + 1 mod G): a grid-wide barrier by a flag;
//   flag     one persistent launch; each block publishes its phase in its own flag, and the reader of its slot
//            waits for that flag alone (src = b + 1 mod G): a tile-level dependency, as a persistent layer would
//            wait on the one tile it reads;
//   cluster  one persistent launch in clusters of 8; the slot also goes into shared memory and the reader takes
//            its neighbour's from distributed shared memory after a cluster barrier (src = the next rank of the
//            same cluster): the dependency a K-split reduced inside a cluster would pay;
//   grid     one cooperative launch, cooperative_groups' grid.sync() between phases (src = b + 1 mod G);
//   ll       one persistent launch, no barrier and no fence: each thread stores its value with a tag in one 8-byte
//            word (NCCL's LL protocol; the engine's TP all-reduce pushes so), and each reader thread polls the
//            word it needs until the tag is the phase's (src = b + 1 mod G; `ll_fanin8`: the words of the 8 blocks
//            b + 1 .. b + 8, all polled at once, as a reader of a row that 8 blocks wrote; `_backoff`: a 100 ns
//            pause after each poll that missed). The tag counts runs too (each block's epoch, kept in
//            `stuck[2 + b]`, is also its phase 0's value, so the last phase holds epoch + P), so a word from an
//            earlier replay never passes for this one's, and one that did would leave the last phase short;
//   none     one persistent launch, no wait at all (src = b): the phases' own cost, the floor under the others.
// Spins give up after 2 s (a flag `stuck[0]` says so, and later waits end soon) rather than hang the device; the
// clock and that flag are read only after a poll missed, every 256 misses, never in front of the first poll.
#include <cooperative_groups.h>
#include <cuda_runtime.h>
#include <cstdint>
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAGuard.h>

namespace cg = cooperative_groups;

namespace {

constexpr int THREADS = 256;
constexpr int CLUSTER = 8;
constexpr uint64_t SPIN_LIMIT_NS = 2000000000ull;

// COUNTER_NO_FENCE and FLAG_NO_FENCE: the same without the __threadfence before the release; the block barrier and
// the release's cumulativity order the block's stores (CUTLASS's generic barrier arrives so: an acq_rel fence and a
// relaxed add, which is what red.release is).
enum Mode {
  NONE = 0, COUNTER = 1, FLAG = 2, CLUSTER_BARRIER = 3, GRID_SYNC = 4, COUNTER_NO_FENCE = 5, FLAG_NO_FENCE = 6,
  LL = 7, LL_FANIN8 = 8, LL_BACKOFF = 9, LL_FANIN8_BACKOFF = 10
};
// LL's readers back off this long after each poll that missed (the _BACKOFF modes): every thread of every block
// polling without a pause puts its reads in front of the producers' stores at L2.
constexpr unsigned BACKOFF_NS = 100;

__device__ __forceinline__ uint64_t globaltimer() {
  uint64_t t;
  asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ unsigned ld_acquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ void st_release(unsigned* p, unsigned v) {
  asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ unsigned long long ld_relaxed_u64(const unsigned long long* p) {
  unsigned long long v;
  asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ void st_relaxed_u64(unsigned long long* p, unsigned long long v) {
  asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

__device__ __forceinline__ void red_release_add(unsigned* p, unsigned v) {
  asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

// After the poll numbered `misses` missed: whether to stop waiting (the spin passed 2 s, raising *stuck, or another
// already gave up). Off the fast path: the clock at the first miss, the flag and the clock every 256 after it.
__device__ __forceinline__ bool give_up(unsigned misses, uint64_t& t0, unsigned* stuck) {
  if (misses == 0) {
    t0 = globaltimer();
    return false;
  }
  if (misses % 256 != 0) return false;
  if (*reinterpret_cast<volatile unsigned*>(stuck) != 0) return true;
  if (globaltimer() - t0 <= SPIN_LIMIT_NS) return false;
  atomicExch(stuck, 1u);
  return true;
}

// Thread 0 spins until *p >= target; the block's barrier after it passes the acquire on to the other threads.
__device__ __forceinline__ void wait_at_least(const unsigned* p, unsigned target, unsigned* stuck) {
  if (threadIdx.x == 0) {
    unsigned misses = 0;
    uint64_t t0 = 0;
    while (ld_acquire(p) < target && !give_up(misses++, t0, stuck)) {
    }
  }
  __syncthreads();
}

__device__ __forceinline__ float* slot(float* buf, int phase, int block, int blocks) {
  return buf + (static_cast<int64_t>(phase) * blocks + block) * THREADS;
}

// One phase as its own launch.
__global__ void __launch_bounds__(THREADS) phase_kernel(float* buf, int phase, int blocks) {
  asm volatile("griddepcontrol.launch_dependents;");
  const int b = blockIdx.x;
  float v = 0.f;
  asm volatile("griddepcontrol.wait;" ::: "memory");  // a no-op unless launched as a PDL
  if (phase > 0) v = __ldcg(slot(buf, phase - 1, (b + 1) % blocks, blocks) + threadIdx.x);
  slot(buf, phase, b, blocks)[threadIdx.x] = v + 1.f;
}

// Every phase in one launch. flags: [G] (FLAG) or [1] (COUNTER), zero on entry.
template <int MODE>
__global__ void __launch_bounds__(THREADS) persistent_kernel(float* buf, int phases, unsigned* flags,
                                                              unsigned* stuck) {
  __shared__ float mine[2][THREADS];  // CLUSTER_BARRIER: this phase's slot, read by the previous rank
  const int b = blockIdx.x, blocks = gridDim.x;
  for (int p = 0; p < phases; ++p) {
    float v = 0.f;
    if (p > 0) {
      if constexpr (MODE == NONE) {
        v = __ldcg(slot(buf, p - 1, b, blocks) + threadIdx.x);
      } else if constexpr (MODE == COUNTER || MODE == COUNTER_NO_FENCE) {
        wait_at_least(flags, static_cast<unsigned>(p) * blocks, stuck);
        v = __ldcg(slot(buf, p - 1, (b + 1) % blocks, blocks) + threadIdx.x);
      } else if constexpr (MODE == FLAG || MODE == FLAG_NO_FENCE) {
        wait_at_least(flags + (b + 1) % blocks, static_cast<unsigned>(p), stuck);
        v = __ldcg(slot(buf, p - 1, (b + 1) % blocks, blocks) + threadIdx.x);
      } else if constexpr (MODE == CLUSTER_BARRIER) {
        cg::cluster_group cluster = cg::this_cluster();
        const unsigned next = (cluster.block_rank() + 1) % CLUSTER;
        v = cluster.map_shared_rank(&mine[(p - 1) & 1][0], next)[threadIdx.x];
      } else {  // GRID_SYNC: the sync is at the end of the phase before
        v = __ldcg(slot(buf, p - 1, (b + 1) % blocks, blocks) + threadIdx.x);
      }
    }
    v += 1.f;
    slot(buf, p, b, blocks)[threadIdx.x] = v;
    if constexpr (MODE == COUNTER || MODE == COUNTER_NO_FENCE) {
      __syncthreads();  // every thread's store before thread 0's release
      if (threadIdx.x == 0) {
        if constexpr (MODE == COUNTER) __threadfence();
        red_release_add(flags, 1u);
      }
    } else if constexpr (MODE == FLAG || MODE == FLAG_NO_FENCE) {
      __syncthreads();
      if (threadIdx.x == 0) {
        if constexpr (MODE == FLAG) __threadfence();
        st_release(flags + b, static_cast<unsigned>(p + 1));
      }
    } else if constexpr (MODE == CLUSTER_BARRIER) {
      mine[p & 1][threadIdx.x] = v;
      cg::this_cluster().sync();  // arrive.release + wait.acquire: the neighbour's slot is there to read
    } else if constexpr (MODE == GRID_SYNC) {
      cg::this_grid().sync();
    }
  }
  if constexpr (MODE == CLUSTER_BARRIER) cg::this_cluster().sync();  // no block exits while its slot is read
}

// LL: lines [P, G, 256] of (tag << 32 | float bits); state[0] the give-up flag, state[2 + b] block b's epoch (its
// runs so far: every run bumps every block's once, so the blocks' epochs agree without any block reading another's).
template <int FANIN, bool BACKOFF>
__global__ void __launch_bounds__(THREADS) ll_kernel(float* buf, unsigned long long* lines, int phases,
                                                      unsigned* state) {
  const int b = blockIdx.x, blocks = gridDim.x;
  // Written by this block's thread 0 in an earlier launch only: a plain load sees it.
  const unsigned epoch = state[2 + b];
  const unsigned base = epoch * static_cast<unsigned>(phases);
  for (int p = 0; p < phases; ++p) {
    float v = static_cast<float>(epoch);  // phase 0's value: the last phase holds epoch + P
    if (p > 0) {
      const unsigned want = base + p;  // phase p - 1's tag
      const unsigned long long* line[FANIN];
      unsigned long long w[FANIN];
#pragma unroll
      for (int f = 0; f < FANIN; ++f) {  // every word's load at once
        line[f] = lines + (static_cast<int64_t>(p - 1) * blocks + (b + 1 + f) % blocks) * THREADS + threadIdx.x;
        w[f] = ld_relaxed_u64(line[f]);
      }
      unsigned misses = 0;
      uint64_t t0 = 0;
      for (;;) {
        bool all = true;
#pragma unroll
        for (int f = 0; f < FANIN; ++f) all = all && static_cast<unsigned>(w[f] >> 32) == want;
        if (all || give_up(misses++, t0, state)) break;
        if constexpr (BACKOFF) __nanosleep(BACKOFF_NS);
#pragma unroll
        for (int f = 0; f < FANIN; ++f)  // the missing words polled again, at once
          if (static_cast<unsigned>(w[f] >> 32) != want) w[f] = ld_relaxed_u64(line[f]);
      }
      v = __uint_as_float(static_cast<unsigned>(w[0]));
#pragma unroll
      for (int f = 1; f < FANIN; ++f) v = fminf(v, __uint_as_float(static_cast<unsigned>(w[f])));  // a stale one shows
    }
    v += 1.f;
    slot(buf, p, b, blocks)[threadIdx.x] = v;
    st_relaxed_u64(lines + (static_cast<int64_t>(p) * blocks + b) * THREADS + threadIdx.x,
                   (static_cast<unsigned long long>(base + p + 1) << 32) | __float_as_uint(v));
  }
  if (threadIdx.x == 0) state[2 + b] = epoch + 1;  // read by this block's next launch
}

void check_blocks(int blocks) {
  TORCH_CHECK(blocks > 0 && blocks % CLUSTER == 0, "blocks must be a positive multiple of 8");
}

// What both entry points check: the grid, and buf float32 [phases, blocks, 256] on the GPU.
void check_buf(const torch::Tensor& buf, int64_t phases, int64_t blocks) {
  check_blocks(static_cast<int>(blocks));
  TORCH_CHECK(buf.is_cuda() && buf.scalar_type() == torch::kFloat32 && buf.numel() >= phases * blocks * THREADS,
              "buf must be float32 [phases, blocks, 256] on the GPU");
}

// A launch of `blocks` x THREADS on `stream` with no attribute set yet: the caller fills `attr` (which must outlive
// the launch) and sets numAttrs.
cudaLaunchConfig_t launch_config(int64_t blocks, cudaStream_t stream, cudaLaunchAttribute* attr) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(blocks));
  cfg.blockDim = dim3(THREADS);
  cfg.stream = stream;
  cfg.attrs = attr;
  cfg.numAttrs = 0;
  return cfg;
}

// `phases` launches of one phase each on the current stream.
void kernels(torch::Tensor buf, int64_t phases, int64_t blocks, bool pdl) {
  check_buf(buf, phases, blocks);
  const c10::cuda::CUDAGuard guard(buf.device());
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = pdl ? 1 : 0;
  cudaLaunchConfig_t cfg = launch_config(blocks, stream, attr);
  cfg.numAttrs = 1;
  for (int p = 0; p < phases; ++p) {
    cudaError_t err = cudaLaunchKernelEx(&cfg, phase_kernel, buf.data_ptr<float>(), p, static_cast<int>(blocks));
    TORCH_CHECK(err == cudaSuccess, cudaGetErrorString(err));
  }
}

// One launch of every phase; flags (uint32 as int32, [blocks]) are zeroed on the stream first. stuck: int32
// [2 + blocks], the give-up flag and LL's epochs (stuck[1] unused). lines: int64 [phases, blocks, 256] for LL.
void persistent(torch::Tensor buf, int64_t phases, int64_t blocks, int64_t mode, torch::Tensor flags,
                torch::Tensor stuck, torch::Tensor lines) {
  check_buf(buf, phases, blocks);
  TORCH_CHECK(flags.scalar_type() == torch::kInt32 && flags.numel() >= blocks, "flags must be int32 [blocks]");
  TORCH_CHECK(stuck.scalar_type() == torch::kInt32 && stuck.numel() >= 2 + blocks, "stuck must be int32 [2 + blocks]");
  TORCH_CHECK(mode < LL || (lines.scalar_type() == torch::kInt64 && lines.numel() >= phases * blocks * THREADS),
              "lines must be int64 [phases, blocks, 256]");
  const c10::cuda::CUDAGuard guard(buf.device());
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  cudaMemsetAsync(flags.data_ptr(), 0, flags.numel() * 4, stream);
  cudaLaunchAttribute attr[1];
  cudaLaunchConfig_t cfg = launch_config(blocks, stream, attr);
  if (mode == CLUSTER_BARRIER) {
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = CLUSTER;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    cfg.numAttrs = 1;
  } else if (mode == GRID_SYNC) {
    attr[0].id = cudaLaunchAttributeCooperative;
    attr[0].val.cooperative = 1;
    cfg.numAttrs = 1;
  }
  float* b = buf.data_ptr<float>();
  unsigned* f = reinterpret_cast<unsigned*>(flags.data_ptr());
  unsigned* s = reinterpret_cast<unsigned*>(stuck.data_ptr());
  const int n = static_cast<int>(phases);
  cudaError_t err;
  switch (mode) {
    case NONE: err = cudaLaunchKernelEx(&cfg, persistent_kernel<NONE>, b, n, f, s); break;
    case COUNTER: err = cudaLaunchKernelEx(&cfg, persistent_kernel<COUNTER>, b, n, f, s); break;
    case FLAG: err = cudaLaunchKernelEx(&cfg, persistent_kernel<FLAG>, b, n, f, s); break;
    case CLUSTER_BARRIER: err = cudaLaunchKernelEx(&cfg, persistent_kernel<CLUSTER_BARRIER>, b, n, f, s); break;
    case GRID_SYNC: err = cudaLaunchKernelEx(&cfg, persistent_kernel<GRID_SYNC>, b, n, f, s); break;
    case COUNTER_NO_FENCE: err = cudaLaunchKernelEx(&cfg, persistent_kernel<COUNTER_NO_FENCE>, b, n, f, s); break;
    case FLAG_NO_FENCE: err = cudaLaunchKernelEx(&cfg, persistent_kernel<FLAG_NO_FENCE>, b, n, f, s); break;
    case LL:
    case LL_FANIN8:
    case LL_BACKOFF:
    case LL_FANIN8_BACKOFF: {
      auto* l = reinterpret_cast<unsigned long long*>(lines.data_ptr());
      if (mode == LL) err = cudaLaunchKernelEx(&cfg, ll_kernel<1, false>, b, l, n, s);
      if (mode == LL_FANIN8) err = cudaLaunchKernelEx(&cfg, ll_kernel<8, false>, b, l, n, s);
      if (mode == LL_BACKOFF) err = cudaLaunchKernelEx(&cfg, ll_kernel<1, true>, b, l, n, s);
      if (mode == LL_FANIN8_BACKOFF) err = cudaLaunchKernelEx(&cfg, ll_kernel<8, true>, b, l, n, s);
      break;
    }
    default: TORCH_CHECK(false, "mode must be 0 to 10");
  }
  TORCH_CHECK(err == cudaSuccess, cudaGetErrorString(err));
}

// Blocks of the persistent kernel that fit at once on this GPU (the flag and counter modes need every block
// resident, or they wait forever on one that never starts).
int64_t resident_blocks() {
  int per_sm = 0, device = 0, sms = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  int fewest = 1 << 30;
  cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, persistent_kernel<COUNTER>, THREADS, 0);
  fewest = per_sm < fewest ? per_sm : fewest;
  cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, persistent_kernel<FLAG>, THREADS, 0);
  fewest = per_sm < fewest ? per_sm : fewest;
  cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, ll_kernel<8, true>, THREADS, 0);
  fewest = per_sm < fewest ? per_sm : fewest;
  return static_cast<int64_t>(fewest) * sms;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("kernels", &kernels, "phases as launches");
  m.def("persistent", &persistent, "phases in one launch (mode: the enum Mode)");
  m.def("resident_blocks", &resident_blocks);
}
