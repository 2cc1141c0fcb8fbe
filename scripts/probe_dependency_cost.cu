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
//   none     one persistent launch, no wait at all (src = b): the phases' own cost, the floor under the others.
// Spins give up after 2 s (a flag `stuck` says so, and no later wait spins) rather than hang the device.
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
  NONE = 0, COUNTER = 1, FLAG = 2, CLUSTER_BARRIER = 3, GRID_SYNC = 4, COUNTER_NO_FENCE = 5, FLAG_NO_FENCE = 6
};

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

__device__ __forceinline__ void red_release_add(unsigned* p, unsigned v) {
  asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

// Thread 0 spins until *p >= target (or gives up and raises *stuck); the block's barrier after it passes the
// acquire on to the other threads.
__device__ __forceinline__ void wait_at_least(const unsigned* p, unsigned target, unsigned* stuck) {
  if (threadIdx.x == 0 && *reinterpret_cast<volatile unsigned*>(stuck) == 0) {  // one give-up ends every wait
    const uint64_t t0 = globaltimer();
    while (ld_acquire(p) < target) {
      if (globaltimer() - t0 > SPIN_LIMIT_NS) {
        atomicExch(stuck, 1u);
        break;
      }
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

void check_blocks(int blocks) {
  TORCH_CHECK(blocks > 0 && blocks % CLUSTER == 0, "blocks must be a positive multiple of 8");
}

// `phases` launches of one phase each on the current stream.
void kernels(torch::Tensor buf, int64_t phases, int64_t blocks, bool pdl) {
  check_blocks(static_cast<int>(blocks));
  TORCH_CHECK(buf.is_cuda() && buf.scalar_type() == torch::kFloat32 && buf.numel() >= phases * blocks * THREADS,
              "buf must be float32 [phases, blocks, 256] on the GPU");
  const c10::cuda::CUDAGuard guard(buf.device());
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = pdl ? 1 : 0;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(blocks));
  cfg.blockDim = dim3(THREADS);
  cfg.stream = stream;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  for (int p = 0; p < phases; ++p) {
    cudaError_t err = cudaLaunchKernelEx(&cfg, phase_kernel, buf.data_ptr<float>(), p, static_cast<int>(blocks));
    TORCH_CHECK(err == cudaSuccess, cudaGetErrorString(err));
  }
}

// One launch of every phase; flags (uint32 as int32, [blocks]) and stuck ([1]) are zeroed on the stream first.
void persistent(torch::Tensor buf, int64_t phases, int64_t blocks, int64_t mode, torch::Tensor flags,
                torch::Tensor stuck) {
  check_blocks(static_cast<int>(blocks));
  TORCH_CHECK(buf.is_cuda() && buf.scalar_type() == torch::kFloat32 && buf.numel() >= phases * blocks * THREADS,
              "buf must be float32 [phases, blocks, 256] on the GPU");
  TORCH_CHECK(flags.scalar_type() == torch::kInt32 && flags.numel() >= blocks, "flags must be int32 [blocks]");
  const c10::cuda::CUDAGuard guard(buf.device());
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  cudaMemsetAsync(flags.data_ptr(), 0, flags.numel() * 4, stream);
  cudaLaunchAttribute attr[1];
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(blocks));
  cfg.blockDim = dim3(THREADS);
  cfg.stream = stream;
  cfg.attrs = attr;
  cfg.numAttrs = 0;
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
    default: TORCH_CHECK(false, "mode must be 0 to 6");
  }
  TORCH_CHECK(err == cudaSuccess, cudaGetErrorString(err));
}

// Blocks of the persistent kernel that fit at once on this GPU (the flag and counter modes need every block
// resident, or they wait forever on one that never starts).
int64_t resident_blocks() {
  int per_sm = 0, device = 0, sms = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, persistent_kernel<COUNTER>, THREADS, 0);
  return static_cast<int64_t>(per_sm) * sms;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("kernels", &kernels, "phases as launches");
  m.def("persistent", &persistent, "phases in one launch (mode: the enum Mode)");
  m.def("resident_blocks", &resident_blocks);
}
