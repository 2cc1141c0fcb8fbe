// Issue 50's probe: a GPT-2 MLP at up to 64 rows as ONE kernel (c_fc + GELU + mlp_proj), where the engine runs
// two cuBLAS GEMMs and cuBLASLt's split-K reduce. Session 42 found that a linear at 64 rows, one launch each, costs
// a chain of dependent phases (a ~1 us dependency, the x load, the products, the cross-block sum) that neither its
// cluster GEMM nor cuBLAS gets below 4.5-8.4 us; paid once for two linears they may cost half. This measures that
// (scripts/probe_mlp64.py), outside the engine.
//
//   g = gelu_tanh(x @ W_fc^T + b_fc)  (rounded to fp16, as the engine stores it);  out += g @ W_proj^T (+ b_proj)
//
// Grid: 128 blocks in clusters of 8 (16 clusters), 256 threads, one block an SM (~200 KB of shared memory).
// Cluster c owns the hidden columns [192 c, 192 c + 192); its block r computes g's 24 columns 192 c + 24 r .. on
// mma.sync m16n8k16 over K = 768 (x whole in shared memory, copied in four quarters so that the products start
// on the first), then the cluster's blocks exchange their g slices through distributed shared memory, and block r
// computes the cluster's share of out's 96 columns 96 r .. over K = 192 and adds it into out (float32) with
// 8-byte reductions: out is a split sum of `split` copies [split, 64, 768], cluster c adding into copy c % split
// (the next kernel would sum them as it reads them, as the one-row kernels' readers do). Weights (both slices, 72
// KB a block) are copied before the programmatic-dependent-launch wait; x after it.
#include <cooperative_groups.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#ifndef ROSEINFER_KERNEL_ONLY
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAGuard.h>
#endif

namespace cg = cooperative_groups;

namespace {

constexpr int C = 768, H = 4 * C, M = 64;
constexpr int CLUSTER = 8, CLUSTERS = 16, BLOCKS = CLUSTER * CLUSTERS, THREADS = 256;
constexpr int HC = H / CLUSTERS;   // 192 hidden columns a cluster
constexpr int HB = HC / CLUSTER;   // 24 of them a block (c_fc's N)
constexpr int OB = C / CLUSTER;    // 96 output columns a block (mlp_proj's N)
constexpr int PAD = 8;             // halves a row of shared memory is padded by: ldmatrix rows 16 bytes apart in banks
constexpr int XS = C + PAD, WFS = C + PAD, HS = HC + PAD, WPS = HC + PAD;  // row strides (halves)
constexpr int NSTAMP = 7;

struct Shared {
  __half x[M * XS];      // x, 64 rows (rows past `rows` zero)
  __half wf[HB * WFS];   // W_fc's 24 rows of this block
  __half wp[OB * WPS];   // W_proj's 96 rows (output columns) of this block, at the cluster's 192 hidden columns
  __half g[M * HS];      // g at the cluster's 192 hidden columns
  float red[4 * 3 * 32 * 4];  // the c_fc's second K half, [m tile][n tile][lane][4]
};

__device__ __forceinline__ unsigned long long globaltimer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t) : : "memory");
  return t;
}

template <bool STAMPS>
__device__ __forceinline__ void stamp(unsigned long long* stamps, int k) {
  if constexpr (STAMPS) {
    __syncthreads();
    if (threadIdx.x == 0) stamps[k * gridDim.x + blockIdx.x] = globaltimer();
  }
}

// 16 bytes global -> shared; zero-filled where `valid` is false (rows past `rows`)
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid = true) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  const int n = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(s), "l"(gmem), "r"(n) : "memory");
}
__device__ __forceinline__ void commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wait_group() { asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory"); }

__device__ __forceinline__ void ldsm_x4(unsigned (&r)[4], const __half* p) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s));
}
__device__ __forceinline__ void ldsm_x2(unsigned (&r)[2], const __half* p) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];" : "=r"(r[0]), "=r"(r[1]) : "r"(s));
}
__device__ __forceinline__ void mma(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// A's 16x16 tile at (row m0, column k0) of a row-major [.., stride] half matrix, as m16n8k16's A fragment
__device__ __forceinline__ void load_a(unsigned (&a)[4], const __half* base, int stride, int m0, int k0) {
  const int l = threadIdx.x % 32;
  ldsm_x4(a, base + (m0 + l % 16) * stride + k0 + (l / 16) * 8);
}
// B for two n-tiles (rows n0 .. n0 + 15 of a [N, stride] matrix, K contiguous) at k0: b[0..1] tile 0, b[2..3] tile 1
__device__ __forceinline__ void load_b2(unsigned (&b)[4], const __half* base, int stride, int n0, int k0) {
  const int l = threadIdx.x % 32;
  ldsm_x4(b, base + (n0 + l % 8 + (l / 16) * 8) * stride + k0 + ((l / 8) % 2) * 8);
}
__device__ __forceinline__ void load_b1(unsigned (&b)[2], const __half* base, int stride, int n0, int k0) {
  const int l = threadIdx.x % 32;
  ldsm_x2(b, base + (n0 + l % 8) * stride + k0 + ((l / 8) % 2) * 8);
}

__device__ __forceinline__ float gelu_tanh(float v) {
  const float u = 0.7978845608028654f * (v + 0.044715f * v * v * v);
  return 0.5f * v * (1.f + tanhf(u));
}

template <bool STAMPS>
__global__ void __cluster_dims__(CLUSTER, 1, 1) __launch_bounds__(THREADS, 1)
    mlp64_kernel(const __half* __restrict__ x, int rows, const __half* __restrict__ w_fc,
                 const __half* __restrict__ b_fc, const __half* __restrict__ w_proj,
                 const __half* __restrict__ b_proj, float* __restrict__ out, int split, float* __restrict__ clear,
                 int clear_n, unsigned long long* stamps) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  Shared& sh = *reinterpret_cast<Shared*>(smem_raw);
  cg::cluster_group cluster = cg::this_cluster();
  const int r = static_cast<int>(cluster.block_rank());
  const int c = blockIdx.x / CLUSTER;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g0 = HC * c + HB * r;  // this block's first hidden column
  if constexpr (STAMPS) if (threadIdx.x == 0) stamps[blockIdx.x] = globaltimer();

  // Phase 0, before the wait: both weight slices (the step never writes them), one cp.async group.
  for (int e = threadIdx.x; e < HB * (C / 8); e += THREADS) {  // W_fc rows g0 .. g0 + 23, all of K
    const int n = e / (C / 8), k8 = e % (C / 8);
    cp_async16(sh.wf + n * WFS + k8 * 8, w_fc + (size_t)(g0 + n) * C + k8 * 8);
  }
  for (int e = threadIdx.x; e < OB * (HC / 8); e += THREADS) {  // W_proj rows 96 r .., the cluster's columns
    const int n = e / (HC / 8), k8 = e % (HC / 8);
    cp_async16(sh.wp + n * WPS + k8 * 8, w_proj + (size_t)(OB * r + n) * H + HC * c + k8 * 8);
  }
  commit();
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  asm volatile("griddepcontrol.wait;" ::: "memory");
  stamp<STAMPS>(stamps, 1);

  // x in four quarters of K, a group each
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    for (int e = threadIdx.x; e < M * (C / 32); e += THREADS) {  // 64 rows x 24 16-byte pieces a quarter
      const int m = e / (C / 32), k8 = q * (C / 32) + e % (C / 32);
      const bool valid = m < rows;
      cp_async16(sh.x + m * XS + k8 * 8, x + (size_t)(valid ? m : 0) * C + k8 * 8, valid);
    }
    commit();
  }
  if (clear != nullptr)  // the buffer the next launch adds into: its readers finished before this launch's wait
    for (int k = blockIdx.x * THREADS + threadIdx.x; k < clear_n; k += gridDim.x * THREADS) clear[k] = 0.f;

  // Phase 1: c_fc. Warp w: m tile w % 4, the k steps of parity w / 4, all three n tiles.
  const int mt = warp % 4, kh = warp / 4;
  float acc[3][4] = {};
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    if (q == 0) wait_group<3>();
    if (q == 1) wait_group<2>();
    if (q == 2) wait_group<1>();
    if (q == 3) wait_group<0>();
    __syncthreads();
#pragma unroll
    for (int s = kh; s < 12; s += 2) {
      const int k0 = (q * 12 + s) * 16;
      unsigned a[4], b[4], b2[2];
      load_a(a, sh.x, XS, 16 * mt, k0);
      load_b2(b, sh.wf, WFS, 0, k0);
      load_b1(b2, sh.wf, WFS, 16, k0);
      mma(acc[0], a, b[0], b[1]);
      mma(acc[1], a, b[2], b[3]);
      mma(acc[2], a, b2[0], b2[1]);
    }
  }
  stamp<STAMPS>(stamps, 2);
  // the two K halves summed: warps 4..7 hand theirs to warps 0..3
  float* red = sh.red + ((mt * 3) * 32 + lane) * 4;
  if (kh == 1)
#pragma unroll
    for (int n = 0; n < 3; ++n)
#pragma unroll
      for (int i = 0; i < 4; ++i) red[n * 32 * 4 + i] = acc[n][i];
  __syncthreads();
  if (kh == 0) {
    const int row = 16 * mt + lane / 4;
#pragma unroll
    for (int n = 0; n < 3; ++n) {
      const int col = 8 * n + (lane % 4) * 2;  // of this block's 24
      const float bias0 = __half2float(b_fc[g0 + col]), bias1 = __half2float(b_fc[g0 + col + 1]);
      float v[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) v[i] = acc[n][i] + red[n * 32 * 4 + i];
      const __half2 lo = __floats2half2_rn(gelu_tanh(v[0] + bias0), gelu_tanh(v[1] + bias1));
      const __half2 hi = __floats2half2_rn(gelu_tanh(v[2] + bias0), gelu_tanh(v[3] + bias1));
      *reinterpret_cast<__half2*>(sh.g + row * HS + HB * r + col) = lo;
      *reinterpret_cast<__half2*>(sh.g + (row + 8) * HS + HB * r + col) = hi;
    }
  }
  stamp<STAMPS>(stamps, 3);
  // Phase 2: the cluster's g slices exchanged: each block pulls the other seven's 24 columns
  cluster.sync();
  stamp<STAMPS>(stamps, 4);
  for (int e = threadIdx.x; e < (CLUSTER - 1) * M * (HB / 8); e += THREADS) {
    const int q = (r + 1 + e / (M * (HB / 8))) % CLUSTER, m = (e / (HB / 8)) % M, k8 = e % (HB / 8);
    __half* local = sh.g + m * HS + HB * q + k8 * 8;
    const __half* remote = cluster.map_shared_rank(local, q);
    *reinterpret_cast<uint4*>(local) = *reinterpret_cast<const uint4*>(remote);
  }
  __syncthreads();
  // this block has read the others' shared memory: it may leave once they have read its own (below)
  asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
  stamp<STAMPS>(stamps, 5);

  // Phase 3: mlp_proj's share. Warp w: m tile w % 4, n tiles 6 (w / 4) .. + 6 of the block's 12, K = 192.
  float acc2[6][4] = {};
  const int nb = 6 * kh;
#pragma unroll
  for (int s = 0; s < HC / 16; ++s) {
    unsigned a[4];
    load_a(a, sh.g, HS, 16 * mt, 16 * s);
#pragma unroll
    for (int p = 0; p < 3; ++p) {
      unsigned b[4];
      load_b2(b, sh.wp, WPS, 8 * (nb + 2 * p), 16 * s);
      mma(acc2[2 * p], a, b[0], b[1]);
      mma(acc2[2 * p + 1], a, b[2], b[3]);
    }
  }
  // add into out's copy c % split; the bias by cluster 0
  float* dst = out + (size_t)(c % split) * M * C;
  const int row = 16 * mt + lane / 4;
#pragma unroll
  for (int n = 0; n < 6; ++n) {
    const int col = OB * r + 8 * (nb + n) + (lane % 4) * 2;
    float bias0 = 0.f, bias1 = 0.f;
    if (c == 0) bias0 = __half2float(b_proj[col]), bias1 = __half2float(b_proj[col + 1]);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int m = row + 8 * h;
      if (m < rows)
        asm volatile("red.global.add.v2.f32 [%0], {%1, %2};" ::"l"(dst + (size_t)m * C + col),
                     "f"(acc2[n][2 * h] + bias0), "f"(acc2[n][2 * h + 1] + bias1)
                     : "memory");
    }
  }
  if constexpr (STAMPS) __threadfence();
  stamp<STAMPS>(stamps, 6);
  asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
}


// v2: shared memory for two blocks an SM (107 KB), so that under PDL the next launch's blocks copy their weights
// while this one computes: x is not staged in shared memory (each warp reads its A fragments from global memory, 8
// k steps ahead), and each block pushes its g slice into the cluster's blocks (stores, no dependent remote loads).
struct Shared2 {
  __half wf[HB * WFS];
  __half wp[OB * WPS];
  __half g[M * HS];
  float red[4 * 3 * 32 * 4];
};

// m16n8k16's A fragment straight from global x ([rows, C] row-major): rows m0 + l / 4 and + 8, columns
// k0 + 2 (l % 4) (+ 1) and + 8 (rows past `rows` read as zero)
__device__ __forceinline__ void load_a_global(unsigned (&a)[4], const __half* x, int rows, int m0, int k0) {
  const int l = threadIdx.x % 32;
  const int r0 = m0 + l / 4, r1 = r0 + 8, k = k0 + 2 * (l % 4);
  const unsigned* p0 = reinterpret_cast<const unsigned*>(x + (size_t)(r0 < rows ? r0 : 0) * C + k);
  const unsigned* p1 = reinterpret_cast<const unsigned*>(x + (size_t)(r1 < rows ? r1 : 0) * C + k);
  const unsigned u0 = p0[0], u1 = p1[0], u2 = p0[4], u3 = p1[4];
  a[0] = r0 < rows ? u0 : 0u;
  a[1] = r1 < rows ? u1 : 0u;
  a[2] = r0 < rows ? u2 : 0u;
  a[3] = r1 < rows ? u3 : 0u;
}

// v3: v2 with the partial sums added 16 bytes at a time (lane pairs swap halves), half the reductions; v4: v3
// with x's fragments read 12 k steps ahead; v5: v3 with each cluster's partial STORED into a copy of its own (out
// [16, 64, 768]: no reductions at L2; the reader would sum the 16 copies).
template <bool STAMPS, int AHEAD, int MODE>
__global__ void __cluster_dims__(CLUSTER, 1, 1) __launch_bounds__(THREADS, 2)
    mlp64_v2_kernel(const __half* __restrict__ x, int rows, const __half* __restrict__ w_fc,
                    const __half* __restrict__ b_fc, const __half* __restrict__ w_proj,
                    const __half* __restrict__ b_proj, float* __restrict__ out, int split, float* __restrict__ clear,
                    int clear_n, unsigned long long* stamps) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  Shared2& sh = *reinterpret_cast<Shared2*>(smem_raw);
  cg::cluster_group cluster = cg::this_cluster();
  const int r = static_cast<int>(cluster.block_rank());
  const int c = blockIdx.x / CLUSTER;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g0 = HC * c + HB * r;
  if constexpr (STAMPS) if (threadIdx.x == 0) stamps[blockIdx.x] = globaltimer();
  // This block has started: the others may write into its shared memory once they have waited for this (before
  // their first push, below).
  asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");

  for (int e = threadIdx.x; e < HB * (C / 8); e += THREADS) {
    const int n = e / (C / 8), k8 = e % (C / 8);
    cp_async16(sh.wf + n * WFS + k8 * 8, w_fc + (size_t)(g0 + n) * C + k8 * 8);
  }
  for (int e = threadIdx.x; e < OB * (HC / 8); e += THREADS) {
    const int n = e / (HC / 8), k8 = e % (HC / 8);
    cp_async16(sh.wp + n * WPS + k8 * 8, w_proj + (size_t)(OB * r + n) * H + HC * c + k8 * 8);
  }
  commit();
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  asm volatile("griddepcontrol.wait;" ::: "memory");
  stamp<STAMPS>(stamps, 1);

  // Phase 1: c_fc. Warp w: m tile w % 4, the k steps of parity w / 4 (24 of them), all three n tiles.
  const int mt = warp % 4, kh = warp / 4;
  constexpr int STEPS = C / 32;
  unsigned ar[AHEAD][4];
#pragma unroll
  for (int j = 0; j < AHEAD; ++j) load_a_global(ar[j], x, rows, 16 * mt, 16 * (kh + 2 * j));
  if (clear != nullptr)
    for (int k = blockIdx.x * THREADS + threadIdx.x; k < clear_n; k += gridDim.x * THREADS) clear[k] = 0.f;
  wait_group<0>();
  __syncthreads();  // every thread's weight copies have landed
  float acc[3][4] = {};
#pragma unroll
  for (int j = 0; j < STEPS; ++j) {
    const int k0 = (kh + 2 * j) * 16;
    unsigned a[4] = {ar[j % AHEAD][0], ar[j % AHEAD][1], ar[j % AHEAD][2], ar[j % AHEAD][3]};
    if (j + AHEAD < STEPS) load_a_global(ar[j % AHEAD], x, rows, 16 * mt, 16 * (kh + 2 * (j + AHEAD)));
    unsigned b[4], b2[2];
    load_b2(b, sh.wf, WFS, 0, k0);
    load_b1(b2, sh.wf, WFS, 16, k0);
    mma(acc[0], a, b[0], b[1]);
    mma(acc[1], a, b[2], b[3]);
    mma(acc[2], a, b2[0], b2[1]);
  }
  stamp<STAMPS>(stamps, 2);
  float* red = sh.red + ((mt * 3) * 32 + lane) * 4;
  if (kh == 1)
#pragma unroll
    for (int n = 0; n < 3; ++n)
#pragma unroll
      for (int i = 0; i < 4; ++i) red[n * 32 * 4 + i] = acc[n][i];
  __syncthreads();
  asm volatile("barrier.cluster.wait.aligned;" ::: "memory");  // every block of the cluster has started
  if (kh == 0) {  // g's 64 x 24 values of this block, pushed into every block of the cluster (itself included)
    const int row = 16 * mt + lane / 4;
    __half2 lo[3], hi[3];
#pragma unroll
    for (int n = 0; n < 3; ++n) {
      const int col = 8 * n + (lane % 4) * 2;
      const float bias0 = __half2float(b_fc[g0 + col]), bias1 = __half2float(b_fc[g0 + col + 1]);
      float v[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) v[i] = acc[n][i] + red[n * 32 * 4 + i];
      lo[n] = __floats2half2_rn(gelu_tanh(v[0] + bias0), gelu_tanh(v[1] + bias1));
      hi[n] = __floats2half2_rn(gelu_tanh(v[2] + bias0), gelu_tanh(v[3] + bias1));
    }
#pragma unroll
    for (int q = 0; q < CLUSTER; ++q) {
      __half* dst = cluster.map_shared_rank(sh.g, q);
#pragma unroll
      for (int n = 0; n < 3; ++n) {
        const int col = HB * r + 8 * n + (lane % 4) * 2;
        *reinterpret_cast<__half2*>(dst + row * HS + col) = lo[n];
        *reinterpret_cast<__half2*>(dst + (row + 8) * HS + col) = hi[n];
      }
    }
  }
  stamp<STAMPS>(stamps, 3);
  cluster.sync();  // every block's slice has landed everywhere (and no block reads or writes another's after this)
  stamp<STAMPS>(stamps, 4);

  float acc2[6][4] = {};
  const int nb = 6 * kh;
#pragma unroll
  for (int s = 0; s < HC / 16; ++s) {
    unsigned a[4];
    load_a(a, sh.g, HS, 16 * mt, 16 * s);
#pragma unroll
    for (int p = 0; p < 3; ++p) {
      unsigned b[4];
      load_b2(b, sh.wp, WPS, 8 * (nb + 2 * p), 16 * s);
      mma(acc2[2 * p], a, b[0], b[1]);
      mma(acc2[2 * p + 1], a, b[2], b[3]);
    }
  }
  stamp<STAMPS>(stamps, 5);  // v2 on: stamp 5 is the end of mlp_proj's products (v1: the end of the pull)
  float* dst = out + (size_t)(c % split) * M * C;
  const int row = 16 * mt + lane / 4;
  if constexpr (MODE >= 1) {
    // lanes l and l ^ 1 hold columns 2 (l % 4) .. + 1 of rows `row` and `row` + 8: the even lane adds four columns
    // of `row`, the odd one four of `row` + 8
    const bool even = (lane & 1) == 0;
    const int m = even ? row : row + 8;
#pragma unroll
    for (int n = 0; n < 6; ++n) {
      const float o0 = __shfl_xor_sync(0xffffffffu, acc2[n][0], 1), o1 = __shfl_xor_sync(0xffffffffu, acc2[n][1], 1);
      const float o2 = __shfl_xor_sync(0xffffffffu, acc2[n][2], 1), o3 = __shfl_xor_sync(0xffffffffu, acc2[n][3], 1);
      const int col = OB * r + 8 * (nb + n) + 2 * ((lane & ~1) % 4);
      float v[4];
      if (even) v[0] = acc2[n][0], v[1] = acc2[n][1], v[2] = o0, v[3] = o1;
      else v[0] = o2, v[1] = o3, v[2] = acc2[n][2], v[3] = acc2[n][3];
      if (c == 0)
#pragma unroll
        for (int e = 0; e < 4; ++e) v[e] += __half2float(b_proj[col + e]);
      if (m < rows) {
        if constexpr (MODE == 2)
          *reinterpret_cast<float4*>(dst + (size_t)m * C + col) = make_float4(v[0], v[1], v[2], v[3]);
        else
          asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(dst + (size_t)m * C + col), "f"(v[0]),
                       "f"(v[1]), "f"(v[2]), "f"(v[3])
                       : "memory");
      }
    }
  } else {
#pragma unroll
    for (int n = 0; n < 6; ++n) {
      const int col = OB * r + 8 * (nb + n) + (lane % 4) * 2;
      float bias0 = 0.f, bias1 = 0.f;
      if (c == 0) bias0 = __half2float(b_proj[col]), bias1 = __half2float(b_proj[col + 1]);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int m = row + 8 * h;
        if (m < rows)
          asm volatile("red.global.add.v2.f32 [%0], {%1, %2};" ::"l"(dst + (size_t)m * C + col),
                       "f"(acc2[n][2 * h] + bias0), "f"(acc2[n][2 * h + 1] + bias1)
                       : "memory");
      }
    }
  }
  if constexpr (STAMPS) __threadfence();
  stamp<STAMPS>(stamps, 6);
}

#ifdef ROSEINFER_KERNEL_ONLY
template __global__ void mlp64_v2_kernel<false, 8, 2>(const __half*, int, const __half*, const __half*,
    const __half*, const __half*, float*, int, float*, int, unsigned long long*);
template __global__ void mlp64_v2_kernel<true, 8, 2>(const __half*, int, const __half*, const __half*,
    const __half*, const __half*, float*, int, float*, int, unsigned long long*);
template __global__ void mlp64_v2_kernel<false, 8, 0>(const __half*, int, const __half*, const __half*,
    const __half*, const __half*, float*, int, float*, int, unsigned long long*);
template __global__ void mlp64_v2_kernel<true, 8, 0>(const __half*, int, const __half*, const __half*,
    const __half*, const __half*, float*, int, float*, int, unsigned long long*);
template __global__ void mlp64_v2_kernel<false, 8, 1>(const __half*, int, const __half*, const __half*,
    const __half*, const __half*, float*, int, float*, int, unsigned long long*);
template __global__ void mlp64_v2_kernel<true, 8, 1>(const __half*, int, const __half*, const __half*,
    const __half*, const __half*, float*, int, float*, int, unsigned long long*);
template __global__ void mlp64_v2_kernel<false, 12, 1>(const __half*, int, const __half*, const __half*,
    const __half*, const __half*, float*, int, float*, int, unsigned long long*);
template __global__ void mlp64_v2_kernel<true, 12, 1>(const __half*, int, const __half*, const __half*,
    const __half*, const __half*, float*, int, float*, int, unsigned long long*);
template __global__ void mlp64_kernel<false>(const __half*, int, const __half*, const __half*, const __half*,
                                            const __half*, float*, int, float*, int, unsigned long long*);
template __global__ void mlp64_kernel<true>(const __half*, int, const __half*, const __half*, const __half*,
                                           const __half*, float*, int, float*, int, unsigned long long*);
}  // namespace
#else
}  // namespace

// x [rows <= 64, 768] fp16; w_fc [3072, 768], b_fc [3072], w_proj [768, 3072], b_proj [768] fp16;
// out float32 [split, 64, 768], zero on entry; clear float32 (zeroed) or empty; stamps int64 [7 * 128] or empty.
void mlp64(torch::Tensor x, torch::Tensor w_fc, torch::Tensor b_fc, torch::Tensor w_proj, torch::Tensor b_proj,
           torch::Tensor out, torch::Tensor clear, torch::Tensor stamps, bool pdl, int64_t version) {
  const c10::cuda::CUDAGuard guard(x.device());
  TORCH_CHECK(x.dim() == 2 && x.size(1) == C && x.size(0) <= M && x.is_contiguous(), "mlp64: x [<=64, 768]");
  TORCH_CHECK(w_fc.size(0) == H && w_fc.size(1) == C && w_proj.size(0) == C && w_proj.size(1) == H, "mlp64: shapes");
  TORCH_CHECK(out.scalar_type() == at::kFloat && out.numel() % (M * C) == 0, "mlp64: out float32 [split, 64, 768]");
  const int split = static_cast<int>(out.numel() / (M * C));
  TORCH_CHECK(CLUSTERS % split == 0, "mlp64: split must divide 16");
  unsigned long long* st = stamps.numel() ? reinterpret_cast<unsigned long long*>(stamps.data_ptr()) : nullptr;
  if (st) TORCH_CHECK(stamps.numel() >= NSTAMP * BLOCKS, "mlp64: stamps too small");
  float* cl = clear.numel() ? clear.data_ptr<float>() : nullptr;
  TORCH_CHECK(version != 5 || split == CLUSTERS, "mlp64: v5 stores a copy a cluster: out [16, 64, 768]");
  auto kernel = version == 2   ? (st ? mlp64_v2_kernel<true, 8, 0> : mlp64_v2_kernel<false, 8, 0>)
                : version == 3 ? (st ? mlp64_v2_kernel<true, 8, 1> : mlp64_v2_kernel<false, 8, 1>)
                : version == 4 ? (st ? mlp64_v2_kernel<true, 12, 1> : mlp64_v2_kernel<false, 12, 1>)
                : version == 5 ? (st ? mlp64_v2_kernel<true, 8, 2> : mlp64_v2_kernel<false, 8, 2>)
                               : (st ? mlp64_kernel<true> : mlp64_kernel<false>);
  const int bytes = version >= 2 ? sizeof(Shared2) : sizeof(Shared);
  C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(BLOCKS);
  cfg.blockDim = dim3(THREADS);
  cfg.dynamicSmemBytes = bytes;
  cfg.stream = c10::cuda::getCurrentCUDAStream();
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = pdl ? 1 : 0;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  auto h = [](const torch::Tensor& t) { return reinterpret_cast<const __half*>(t.data_ptr()); };
  C10_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, h(x), (int)x.size(0), h(w_fc), h(b_fc), h(w_proj), h(b_proj),
                                    out.data_ptr<float>(), split, cl, (int)clear.numel(), st));
}

int64_t shared_bytes(int64_t version) { return version >= 2 ? sizeof(Shared2) : sizeof(Shared); }

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("mlp64", &mlp64, "GPT-2's MLP at <= 64 rows as one kernel (scripts/probe_mlp64.cu)");
  m.def("shared_bytes", &shared_bytes);
  m.attr("NSTAMP") = NSTAMP;
}
#endif
