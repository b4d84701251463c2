// LayerNorm forward, CUDA seed (rows): one DRAM round trip per element wherever the row fits on chip.
// forward() picks a path from (B, N) and the alignment at run time:
//
//  rows     N <= ROW_TMAX * ROW_ELEMS (8192): one launch, no cluster. A group of G threads (a warp, or
//           several) holds a whole row in registers, several rows per block when G is small. When the
//           grid is about one wave (B * threads per row <= SMs * EARLY_THREADS: latency-bound), x, weight
//           and bias are all loaded before the first use (one memory latency); otherwise (bandwidth-
//           bound, 8192x4096) only x is, weight and bias (L1/L2 hits) after the statistics, and a thread
//           holds LATE_ELEMS values: fewer registers, more rows in flight per SM. Per thread, shifted sums
//           s1 = sum d, s2 = sum d*d with d = x - x[row, 0] (float: d is O(std), so the offset init
//           does not cancel), warp shuffles, one __syncthreads across the group's warps, the final
//           var = s2/N - (s1/N)^2 in double. out = (d - s1/N) * rstd * w + b.
//  persist  PERSIST > 0, rows' bandwidth-bound case with float4 and no cluster (8192x4096: 0.94x of compile,
//           92.5% of the floor): the same rows, but a grid of PERSIST blocks per SM (at most what fits) that
//           loop over them: each thread loads its weight and bias slices into registers once (not once per
//           row) and the next row's x (evict-first) while it reduces and stores the current one, so each SM
//           streams with no block boundary. Off by default: not measured on a GPU yet.
//  cluster  N <= CLUSTER_MAX * ROW_TMAX * ROW_ELEMS (131072; 65536 where 16-block clusters cannot be
//           scheduled): one launch, the same kernel, a row per thread-block cluster of cl blocks
//           (cudaLaunchKernelEx, sm_90); each block's (s1, s2) goes to the others through distributed
//           shared memory (one cluster.sync, then an arrive that the block waits on only before it
//           exits). Few rows are spread over more blocks (cl doubled while B * cl <= SMs and each block
//           keeps >= SPREAD_MIN threads). Taken only when cudaOccupancyMaxActiveClusters says such a
//           cluster fits, else the next smaller cl, else split. Under the CPU emulator (no clusters)
//           the cluster is one block of cl * G threads, its ranks the groups, so the indexing is checked.
//  grid     longer rows that fit in the registers of the whole GPU (N <= blocks * GRID_THREADS *
//           GRID_ELEMS, the blocks as many as are co-resident: 4194304 at 2 x 512 per SM on 132 SMs): one
//           cooperative launch (cudaLaunchAttributeCooperative) of a persistent grid that takes the rows
//           one after another, each spread over every thread of the grid (GRID_ELEMS values per thread,
//           coalesced). Per row: x loaded once (evict-first), per-block shifted sums into the workspace,
//           one grid.sync(), every block merges the block sums itself (double, in block order: the same
//           bits everywhere), out written from the registers with weight and bias (kept in L2 across
//           rows; prefetched into L2 before the first row's sync) -- one DRAM round trip per element of x
//           and out. The next row's loads overlap this row's stores. Not compiled under the emulator.
//  split    longer rows (or no cluster, no co-residency): two launches. split_stats: per (tile, row) block shifted
//           sums (float per 4 * STATS_UNROLL values, double beyond) into the workspace; the blocks of
//           all tiles run at once, so what stays in L2 is chosen by priority: tiles of the first
//           columns are read with evict-first loads, those of the last L2_KEEP_MB of columns (all of x
//           when B * N * 4 <= 32 MB) with plain ones.
//           split_norm: a column chunk per block, the last chunk first (its x is still in L2), weight
//           and bias loaded once into registers (overlapping the merge of the row's tile sums, which
//           every block does itself: no third launch), every row of the chunk two at a time; its loads
//           and stores are evict-first, so they do not push the kept x out of L2.
// Vector width V: float4 when N % 4 == 0 and x, weight, bias, out are 16-byte aligned, float2 when
// N % 2 == 0 and 8-byte aligned, else scalar (split_stats reads float4 between a scalar head and tail
// of every tile in any case). Every workspace word read was written earlier in the same call.
//
// Predicted device time per call on an H200 (graph clock; ~0.8 us per dependent DRAM round trip, ~1 us
// per extra launch, ~3.8 TB/s streaming; torch.compile measured in brackets). Not measured yet.
//   1x65536      cluster 16 x 256 thr, V4 S4, w/b early: 1 round trip + cluster sync   ~2.5 us  [3.4]
//   8x65536      cluster 16 x 256, 128 blocks                                          ~3    us  [4.0]
//   1x4194304    split: stats 16 MB (~5) + norm 48 MB DRAM, x from L2 (~13), 2 launches ~19  us  [25.6]
//   8x4194304    split: stats 128 MB (~34) + norm ~255 MB (x 34 MB from L2) (~67)       ~100 us  [163.7]
//   4x100001     cluster 16 x 416, V1 S16 (scalar; odd N)                               ~3.5 us  [6.9]
//   16x8194      cluster 2 x 288, V2 S8                                                 ~2   us  [2.8]
//   32x4100      rows, a block of 288 per row, V4 S4                                    ~1.5 us  [1.4]
//   8192x4096    rows, 256 per row, w/b late, 5 blocks/SM: 256 MB streamed              ~66  us  [65.6]
//   1000x1000    rows, 64 thr per row, 4 rows per block, V4 S4                          ~2   us  [3.0]
//   3x100003     cluster 16 x 416, V1 S16                                               ~3.5 us  [6.6]
// ptxas (sm_90a, defaults): rows_kernel 32-80 registers (<4,4,early> 80, <4,4,late> 42, <1,16,early>
// 128 = the cap of 512 threads), split_norm 108-118, split_stats 32; no spills; <= 768 B static smem.
#include <cstdint>
#include <cuda_runtime.h>
#if defined(__CUDACC__)
#include <cooperative_groups.h>
#define LN_CLUSTERS 1
#define LD_STREAM(p) __ldcs(p)
#define ST_STREAM(p, v) __stcs((p), (v))
#else
#define LN_CLUSTERS 0
#define LD_STREAM(p) (*(p))
#define ST_STREAM(p, v) (*(p) = (v))
#endif

constexpr int ROW_ELEMS = 16;           // knob: 8, 16
constexpr int LATE_ELEMS = 16;          // knob: 16, 32
constexpr int ROW_BLOCK = 256;          // knob: 128, 256, 512
constexpr int ROW_TMAX = 512;           // knob: 256, 512
constexpr int CLUSTER_MAX = 16;         // knob: 8, 16
constexpr int SPREAD_MIN = 256;         // knob: 64, 128, 256, 1024
constexpr int EARLY_THREADS = 2048;     // knob: 0, 1024, 2048, 4096
constexpr int STATS_PER_SM = 4;         // knob: 2, 4, 8
constexpr int STATS_THREADS = 256;      // knob: 256, 512
constexpr int STATS_UNROLL = 4;         // knob: 2, 4, 8
constexpr int NORM_THREADS = 256;       // knob: 128, 256
constexpr int NORM_ELEMS = 16;          // knob: 8, 16
constexpr int NORM_ROWS = 32;           // knob: 4, 8, 32
constexpr int64_t L2_KEEP_MB = 32;      // knob: 0, 16, 32, 40
constexpr int GRID_PATH = 0;            // knob: 0, 1
constexpr int GRID_THREADS = 512;       // knob: 256, 512, 1024
constexpr int GRID_ELEMS = 32;          // knob: 16, 32
constexpr int PERSIST = 0;              // knob: 0, 1, 2, 3, 4
constexpr int64_t MIN_TILE = 4096;      // a split_stats block sums at least this many elements
constexpr int ROW_LB = ROW_TMAX > ROW_BLOCK ? ROW_TMAX : ROW_BLOCK;   // rows_kernel's largest block
constexpr int64_t ROW_MAX_N = (int64_t)CLUSTER_MAX * ROW_TMAX * (ROW_ELEMS > LATE_ELEMS ? ROW_ELEMS : LATE_ELEMS);

struct Pair { double a, b; };           // (sum d, sum d * d), d = x - x[row, 0]

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ double warp_sum(double v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// xv -= k in place (unused slots hold k, so they become 0); s1 = sum, s2 = sum of squares over the warp.
template <int E>
__device__ __forceinline__ void shifted_sums(float* xv, float k, float& s1, float& s2) {
    s1 = 0.f;
    s2 = 0.f;
    #pragma unroll
    for (int e = 0; e < E; ++e) {
        const float d = xv[e] - k;
        xv[e] = d;
        s1 += d;
        s2 += d * d;
    }
    s1 = warp_sum(s1);
    s2 = warp_sum(s2);
}

// V consecutive floats at p (aligned to 4 * V bytes), optionally with an evict-first hint.
template <int V, bool STREAM>
__device__ __forceinline__ void load_vec(const float* p, float* r) {
    if constexpr (V == 4) {
        const float4* q = reinterpret_cast<const float4*>(p);
        float4 a;
        if constexpr (STREAM) a = LD_STREAM(q); else a = *q;
        r[0] = a.x; r[1] = a.y; r[2] = a.z; r[3] = a.w;
    } else if constexpr (V == 2) {
        const float2* q = reinterpret_cast<const float2*>(p);
        float2 a;
        if constexpr (STREAM) a = LD_STREAM(q); else a = *q;
        r[0] = a.x; r[1] = a.y;
    } else {
        if constexpr (STREAM) r[0] = LD_STREAM(p); else r[0] = *p;
    }
}
template <int V, bool STREAM>
__device__ __forceinline__ void store_vec(float* p, const float* r) {
    if constexpr (V == 4) {
        float4* q = reinterpret_cast<float4*>(p);
        const float4 a = make_float4(r[0], r[1], r[2], r[3]);
        if constexpr (STREAM) ST_STREAM(q, a); else *q = a;
    } else if constexpr (V == 2) {
        float2* q = reinterpret_cast<float2*>(p);
        const float2 a = make_float2(r[0], r[1]);
        if constexpr (STREAM) ST_STREAM(q, a); else *q = a;
    } else {
        if constexpr (STREAM) ST_STREAM(p, r[0]); else *p = r[0];
    }
}

// ------------------------------------------------------------------ rows and cluster paths
// G threads per row group (a multiple of 32). cl == 1: blockDim.x / G rows per block, row
// blockIdx.x * (blockDim.x / G) + group. cl > 1: one row per cluster of cl blocks of G threads (on the
// GPU), or per block of cl * G threads (emulator), rank = block in cluster (GPU) or group (emulator).
// Thread gt = rank * G + lane-in-group of TT = cl * G owns vectors s * TT + gt, s < S: coalesced.
template <int V, int S, bool EARLY>
__global__ void __launch_bounds__(ROW_LB) rows_kernel(const float* __restrict__ x, const float* __restrict__ weight,
                                                      const float* __restrict__ bias, float* __restrict__ out,
                                                      int64_t B, int N, double inv_n, float eps, int G, int cl) {
    __shared__ float2 red[32];
    __shared__ Pair xch[32];
    const int tid = threadIdx.x;
    const int gi = tid / G, lt = tid - gi * G;
    int64_t row;
    int rank;
    if (cl > 1) {
#if LN_CLUSTERS
        row = (int64_t)(blockIdx.x / (unsigned)cl);
        rank = (int)(blockIdx.x % (unsigned)cl);
#else
        row = (int64_t)blockIdx.x;
        rank = gi;
#endif
    } else {
        row = (int64_t)blockIdx.x * (int64_t)(blockDim.x / G) + gi;
        rank = 0;
    }
    const bool live = row < B;
    const int nv = N / V, TT = G * cl, gt = rank * G + lt;
    const float* xr = x + (live ? row : 0) * (int64_t)N;
    float xv[S * V], wv[EARLY ? S * V : 1], bv[EARLY ? S * V : 1];
    const float k = xr[0];
    #pragma unroll
    for (int s = 0; s < S; ++s) {
        const int vi = s * TT + gt;
        if (live && vi < nv) {
            load_vec<V, false>(xr + vi * V, xv + s * V);
            if constexpr (EARLY) {
                load_vec<V, false>(weight + vi * V, wv + s * V);
                load_vec<V, false>(bias + vi * V, bv + s * V);
            }
        } else {
            #pragma unroll
            for (int e = 0; e < V; ++e) xv[s * V + e] = k;
        }
    }
    float s1, s2;
    shifted_sums<S * V>(xv, k, s1, s2);
    if (G > 32) {                                       // G is the same for the whole block
        if ((tid & 31) == 0) red[tid >> 5] = make_float2(s1, s2);
        __syncthreads();
        const int w0 = gi * (G >> 5);
        s1 = 0.f;
        s2 = 0.f;
        for (int w = 0; w < (G >> 5); ++w) { s1 += red[w0 + w].x; s2 += red[w0 + w].y; }
    }
    double S1 = s1, S2 = s2;
    if (cl > 1) {
#if LN_CLUSTERS
        cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
        if (tid == 0) xch[0] = Pair{S1, S2};
        cluster.sync();
        S1 = 0.0;
        S2 = 0.0;
        for (int r = 0; r < cl; ++r) {
            const Pair p = *cluster.map_shared_rank(&xch[0], r);
            S1 += p.a;
            S2 += p.b;
        }
        cluster.barrier_arrive();                       // this block's reads of the others are done
#else
        if (lt == 0) xch[gi] = Pair{S1, S2};
        __syncthreads();
        S1 = 0.0;
        S2 = 0.0;
        for (int r = 0; r < cl; ++r) { S1 += xch[r].a; S2 += xch[r].b; }
#endif
    }
    const double dm = S1 * inv_n;
    double var = S2 * inv_n - dm * dm;
    if (var < 0.0) var = 0.0;
    const float m = (float)dm, rstd = (float)rsqrt(var + (double)eps);
    if (live) {
        float* o = out + row * (int64_t)N;
        #pragma unroll
        for (int s = 0; s < S; ++s) {
            const int vi = s * TT + gt;
            if (vi < nv) {
                float r[V], wl[V], bl[V];
                if constexpr (EARLY) {
                    #pragma unroll
                    for (int e = 0; e < V; ++e) { wl[e] = wv[s * V + e]; bl[e] = bv[s * V + e]; }
                } else {
                    load_vec<V, false>(weight + vi * V, wl);
                    load_vec<V, false>(bias + vi * V, bl);
                }
                #pragma unroll
                for (int e = 0; e < V; ++e) r[e] = (xv[s * V + e] - m) * rstd * wl[e] + bl[e];
                store_vec<V, false>(o + vi * V, r);
            }
        }
    }
#if LN_CLUSTERS
    if (cl > 1) cooperative_groups::this_cluster().barrier_wait();   // no block leaves while others read it
#endif
}

// ------------------------------------------------------------------ persistent rows path (PERSIST > 0)
// As rows_kernel with V = 4, EARLY false, cl = 1: groups of G threads per row, R = blockDim.x / G rows per
// block iteration, but the grid (a few blocks per SM) loops over the rows, row base = blockIdx.x * R, then
// + gridDim.x * R. The weight and bias slices of a thread's columns (fixed across rows) are loaded once; x of
// the next iteration's row (and its shift k) is loaded before this one is reduced. The cross-warp sums
// alternate between two halves of `red`, so one barrier per iteration suffices (a warp can be at most one
// iteration ahead of another).
template <int S>
__global__ void __launch_bounds__(ROW_LB) persist_kernel(const float* __restrict__ x, const float* __restrict__ weight,
                                                         const float* __restrict__ bias, float* __restrict__ out,
                                                         int64_t B, int N, double inv_n, float eps, int G) {
    constexpr int V = 4;
    __shared__ float2 red[2][32];
    const int tid = threadIdx.x;
    const int gi = tid / G, lt = tid - gi * G;
    const int R = blockDim.x / G, nv = N / V;
    const int64_t step = (int64_t)gridDim.x * R;
    float wv[S * V], bv[S * V], xv[S * V], xn[S * V];
    #pragma unroll
    for (int s = 0; s < S; ++s) {
        const int vi = s * G + lt;
        if (vi < nv) {
            load_vec<V, false>(weight + vi * V, wv + s * V);
            load_vec<V, false>(bias + vi * V, bv + s * V);
        } else {
            #pragma unroll
            for (int e = 0; e < V; ++e) { wv[s * V + e] = 0.f; bv[s * V + e] = 0.f; }
        }
    }
    int64_t row = (int64_t)blockIdx.x * R + gi;
    float kn = row < B ? x[row * (int64_t)N] : 0.f;
    #pragma unroll
    for (int s = 0; s < S; ++s) {
        const int vi = s * G + lt;
        if (row < B && vi < nv) {
            load_vec<V, true>(x + row * (int64_t)N + vi * V, xn + s * V);
        } else {
            #pragma unroll
            for (int e = 0; e < V; ++e) xn[s * V + e] = kn;      // unused slots hold k: they become 0
        }
    }
    int half = 0;
    for (int64_t base = (int64_t)blockIdx.x * R; base < B; base += step, row += step, half ^= 1) {
        const float k = kn;
        #pragma unroll
        for (int i = 0; i < S * V; ++i) xv[i] = xn[i];
        const int64_t next = row + step;
        kn = next < B ? x[next * (int64_t)N] : 0.f;
        #pragma unroll
        for (int s = 0; s < S; ++s) {                   // the next row's loads, in flight during this row's work
            const int vi = s * G + lt;
            if (next < B && vi < nv) {
                load_vec<V, true>(x + next * (int64_t)N + vi * V, xn + s * V);
            } else {
                #pragma unroll
                for (int e = 0; e < V; ++e) xn[s * V + e] = kn;
            }
        }
        float s1, s2;
        shifted_sums<S * V>(xv, k, s1, s2);
        if (G > 32) {                                   // G is the same for the whole block
            if ((tid & 31) == 0) red[half][tid >> 5] = make_float2(s1, s2);
            __syncthreads();
            const int w0 = gi * (G >> 5);
            s1 = 0.f;
            s2 = 0.f;
            for (int w = 0; w < (G >> 5); ++w) { s1 += red[half][w0 + w].x; s2 += red[half][w0 + w].y; }
        }
        const double dm = (double)s1 * inv_n;
        double var = (double)s2 * inv_n - dm * dm;
        if (var < 0.0) var = 0.0;
        const float m = (float)dm, rstd = (float)rsqrt(var + (double)eps);
        if (row < B) {
            float* o = out + row * (int64_t)N;
            #pragma unroll
            for (int s = 0; s < S; ++s) {
                const int vi = s * G + lt;
                if (vi < nv) {
                    float r[V];
                    #pragma unroll
                    for (int e = 0; e < V; ++e) r[e] = (xv[s * V + e] - m) * rstd * wv[s * V + e] + bv[s * V + e];
                    store_vec<V, false>(o + vi * V, r);
                }
            }
        }
    }
}

// ------------------------------------------------------------------ grid path
#if LN_CLUSTERS
// Launched cooperatively with every block co-resident. Thread gt of TT = gridDim.x * GRID_THREADS owns
// vectors s * TT + gt, s < S, of each row. part: B * gridDim.x block sums, each written before the
// grid.sync() that precedes its reads.
template <int V, int S>
__global__ void __launch_bounds__(GRID_THREADS, 1024 / GRID_THREADS)
grid_kernel(const float* __restrict__ x, const float* __restrict__ weight, const float* __restrict__ bias,
            float* __restrict__ out, Pair* __restrict__ part, int64_t B, int64_t N, double inv_n, float eps) {
    cooperative_groups::grid_group grid = cooperative_groups::this_grid();
    __shared__ float2 red[GRID_THREADS / 32];
    __shared__ float st[2];
    const int tid = threadIdx.x;
    const int TT = (int)gridDim.x * GRID_THREADS, gt = (int)blockIdx.x * GRID_THREADS + tid;
    const int nv = (int)(N / V);                        // < 2^31 (grid_launch checks)
    for (int64_t row = 0; row < B; ++row) {
        const float* xr = x + row * N;
        const float k = __ldg(xr);
        float xv[S * V];
        #pragma unroll
        for (int s = 0; s < S; ++s) {
            const int vi = s * TT + gt;
            if (vi < nv) {
                load_vec<V, true>(xr + (int64_t)vi * V, xv + s * V);
            } else {
                #pragma unroll
                for (int e = 0; e < V; ++e) xv[s * V + e] = k;
            }
        }
        if (row == 0) {                                 // weight and bias into L2 while the grid syncs
            #pragma unroll
            for (int s = 0; s < S; ++s) {
                const int vi = s * TT + gt;
                if (vi < nv && ((vi * V) & 31) == 0) {   // one prefetch per 128-byte line
                    asm volatile("prefetch.global.L2 [%0];" ::"l"(weight + (int64_t)vi * V));
                    asm volatile("prefetch.global.L2 [%0];" ::"l"(bias + (int64_t)vi * V));
                }
            }
        }
        float s1, s2;
        shifted_sums<S * V>(xv, k, s1, s2);
        if ((tid & 31) == 0) red[tid >> 5] = make_float2(s1, s2);
        __syncthreads();
        if (tid == 0) {
            double a = 0.0, c = 0.0;
            for (int w = 0; w < GRID_THREADS / 32; ++w) { a += red[w].x; c += red[w].y; }
            part[row * gridDim.x + blockIdx.x] = Pair{a, c};
        }
        grid.sync();
        if (tid < 32) {
            double a = 0.0, c = 0.0;
            for (unsigned j = tid; j < gridDim.x; j += 32) {
                const double2 p = __ldcg(reinterpret_cast<const double2*>(part + row * gridDim.x + j));
                a += p.x;
                c += p.y;
            }
            a = warp_sum(a);
            c = warp_sum(c);
            if (tid == 0) {
                const double dm = a * inv_n;
                double var = c * inv_n - dm * dm;
                if (var < 0.0) var = 0.0;
                st[0] = (float)dm;
                st[1] = (float)rsqrt(var + (double)eps);
            }
        }
        __syncthreads();
        const float m = st[0], rstd = st[1];
        float* o = out + row * N;
        #pragma unroll
        for (int s = 0; s < S; ++s) {
            const int vi = s * TT + gt;
            if (vi < nv) {
                float r[V], wl[V], bl[V];
                load_vec<V, false>(weight + (int64_t)vi * V, wl);
                load_vec<V, false>(bias + (int64_t)vi * V, bl);
                #pragma unroll
                for (int e = 0; e < V; ++e) r[e] = (xv[s * V + e] - m) * rstd * wl[e] + bl[e];
                store_vec<V, true>(o + (int64_t)vi * V, r);
            }
        }
        __syncthreads();                                // red and st are rewritten by the next row
    }
}
#endif

// ------------------------------------------------------------------ split path
// grid B * P, tile-major: block (t, b) = t * B + b sums d = x - x[b, 0] over columns [t * L, (t+1) * L).
__global__ void __launch_bounds__(STATS_THREADS) split_stats(const float* __restrict__ x, Pair* __restrict__ sums,
                                                             int64_t B, int64_t N, int64_t L, int64_t keep_t0) {
    __shared__ Pair sh[STATS_THREADS / 32];
    const int64_t b = (int64_t)blockIdx.x % B, t = (int64_t)blockIdx.x / B;
    const int64_t j0 = t * L, j1 = j0 + L < N ? j0 + L : N;
    const float* xr = x + b * N;
    const float k = xr[0];
    const bool stream = t < keep_t0;                     // not re-read from L2 by split_norm: evict first
    int64_t head = (int64_t)((16 - ((uintptr_t)(xr + j0) & 15)) & 15) / 4;
    if (head > j1 - j0) head = j1 - j0;
    double a = 0.0, c = 0.0;
    if ((int64_t)threadIdx.x < head) {
        const float d = xr[j0 + threadIdx.x] - k;
        a += d;
        c += (double)d * d;
    }
    const int64_t v0 = j0 + head, nv = (j1 - v0) / 4;
    const float4* x4 = reinterpret_cast<const float4*>(xr + v0);
    for (int64_t q = threadIdx.x; q < nv; q += (int64_t)STATS_THREADS * STATS_UNROLL) {
        float4 v[STATS_UNROLL];
        #pragma unroll
        for (int u = 0; u < STATS_UNROLL; ++u) {
            const int64_t qq = q + (int64_t)u * STATS_THREADS;
            if (qq < nv) v[u] = stream ? LD_STREAM(x4 + qq) : x4[qq];
            else v[u] = make_float4(k, k, k, k);
        }
        float p1 = 0.f, p2 = 0.f;
        #pragma unroll
        for (int u = 0; u < STATS_UNROLL; ++u) {
            const float d0 = v[u].x - k, d1 = v[u].y - k, d2 = v[u].z - k, d3 = v[u].w - k;
            p1 += (d0 + d1) + (d2 + d3);
            p2 += (d0 * d0 + d1 * d1) + (d2 * d2 + d3 * d3);
        }
        a += p1;
        c += p2;
    }
    for (int64_t j = v0 + 4 * nv + threadIdx.x; j < j1; j += STATS_THREADS) {
        const float d = xr[j] - k;
        a += d;
        c += (double)d * d;
    }
    a = warp_sum(a);
    c = warp_sum(c);
    if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = Pair{a, c};
    __syncthreads();
    if (threadIdx.x == 0) {
        double ta = 0.0, tc = 0.0;
        for (int w = 0; w < STATS_THREADS / 32; ++w) { ta += sh[w].a; tc += sh[w].b; }
        sums[blockIdx.x] = Pair{ta, tc};
    }
}

// grid: column chunks of NORM_THREADS * S vectors, the last chunk first. Rows in batches of NORM_ROWS:
// the block merges each row's P tile sums (lpr threads per row), then writes the batch, two rows at once.
template <int V, int S>
__global__ void __launch_bounds__(NORM_THREADS) split_norm(const float* __restrict__ x, const float* __restrict__ weight,
                                                           const float* __restrict__ bias, const Pair* __restrict__ sums,
                                                           float* __restrict__ out, int64_t B, int64_t N, int64_t P,
                                                           double inv_n, float eps) {
    __shared__ float st[NORM_ROWS][3];                   // shift k, mean - k, rstd
    __shared__ Pair part[NORM_THREADS / 32];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int64_t nv = N / V;
    const int64_t base = ((int64_t)gridDim.x - 1 - (int64_t)blockIdx.x) * ((int64_t)NORM_THREADS * S);
    float wv[S * V], bv[S * V];
    #pragma unroll
    for (int s = 0; s < S; ++s) {
        const int64_t vi = base + (int64_t)s * NORM_THREADS + tid;
        if (vi < nv) {
            load_vec<V, true>(weight + vi * V, wv + s * V);
            load_vec<V, true>(bias + vi * V, bv + s * V);
        } else {
            #pragma unroll
            for (int e = 0; e < V; ++e) { wv[s * V + e] = 0.f; bv[s * V + e] = 0.f; }
        }
    }
    for (int64_t b0 = 0; b0 < B; b0 += NORM_ROWS) {
        const int nb = (int)(B - b0 < NORM_ROWS ? B - b0 : NORM_ROWS);
        int lpr = NORM_THREADS;                          // threads per row: a power of two, lpr * nb <= threads
        while (lpr * nb > NORM_THREADS) lpr >>= 1;
        const int rr = tid / lpr, l = tid - rr * lpr;
        double a = 0.0, c = 0.0;
        if (rr < nb) {
            for (int64_t t = l; t < P; t += lpr) {
                const Pair p = sums[t * B + b0 + rr];
                a += p.a;
                c += p.b;
            }
        }
        if (lpr <= 32) {
            for (int o = lpr >> 1; o > 0; o >>= 1) {
                a += __shfl_xor_sync(0xffffffffu, a, o);
                c += __shfl_xor_sync(0xffffffffu, c, o);
            }
        } else {
            a = warp_sum(a);
            c = warp_sum(c);
            if (lane == 0) part[warp] = Pair{a, c};
            __syncthreads();
            if (l == 0) {
                a = 0.0;
                c = 0.0;
                for (int w = rr * (lpr >> 5); w < (rr + 1) * (lpr >> 5); ++w) { a += part[w].a; c += part[w].b; }
            }
        }
        if (rr < nb && l == 0) {
            const double dm = a * inv_n;
            double var = c * inv_n - dm * dm;
            if (var < 0.0) var = 0.0;
            st[rr][0] = x[(b0 + rr) * N];
            st[rr][1] = (float)dm;
            st[rr][2] = (float)rsqrt(var + (double)eps);
        }
        __syncthreads();
        for (int r = 0; r < nb; r += 2) {
            const bool two = r + 1 < nb;
            const float* xa = x + (b0 + r) * N;
            const float* xb = x + (b0 + r + (two ? 1 : 0)) * N;
            float va[S * V] = {}, vb[S * V] = {};
            #pragma unroll
            for (int s = 0; s < S; ++s) {
                const int64_t vi = base + (int64_t)s * NORM_THREADS + tid;
                if (vi < nv) {
                    load_vec<V, true>(xa + vi * V, va + s * V);
                    if (two) load_vec<V, true>(xb + vi * V, vb + s * V);
                }
            }
            const float ka = st[r][0], ma = st[r][1], ra = st[r][2];
            const float kb = st[r + (two ? 1 : 0)][0], mb = st[r + (two ? 1 : 0)][1], rb = st[r + (two ? 1 : 0)][2];
            float* oa = out + (b0 + r) * N;
            float* ob = out + (b0 + r + (two ? 1 : 0)) * N;
            #pragma unroll
            for (int s = 0; s < S; ++s) {
                const int64_t vi = base + (int64_t)s * NORM_THREADS + tid;
                if (vi < nv) {
                    float ya[V], yb[V];
                    #pragma unroll
                    for (int e = 0; e < V; ++e) {
                        const int i = s * V + e;
                        ya[e] = ((va[i] - ka) - ma) * ra * wv[i] + bv[i];
                        yb[e] = ((vb[i] - kb) - mb) * rb * wv[i] + bv[i];
                    }
                    store_vec<V, true>(oa + vi * V, ya);
                    if (two) store_vec<V, true>(ob + vi * V, yb);
                }
            }
        }
        __syncthreads();                                 // st and part are rewritten by the next batch
    }
}

// ------------------------------------------------------------------ host side
// 0: launched; 1: this configuration cannot run (try another); 2: a launch error.
template <int V, int S, bool EARLY>
static int rows_launch(const float* x, const float* weight, const float* bias, float* out, int64_t B, int64_t N,
                       float eps, int G, int cl, cudaStream_t stream) {
    if (cl == 1) {
        const int R = G < ROW_BLOCK ? ROW_BLOCK / G : 1;                   // rows per block
        const int64_t grid = (B + R - 1) / R;
        if (grid > 0x7fffffff) return 1;
        rows_kernel<V, S, EARLY><<<(unsigned)grid, R * G, 0, stream>>>(x, weight, bias, out, B, (int)N, 1.0 / (double)N, eps, G, cl);
        return cudaGetLastError() == cudaSuccess ? 0 : 2;
    }
#if LN_CLUSTERS
    if (B * cl > 0x7fffffff) return 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)(B * cl));
    cfg.blockDim = dim3((unsigned)G);
    cfg.dynamicSmemBytes = 0;
    cfg.stream = stream;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = (unsigned)cl;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    if (cl > 8 && cudaFuncSetAttribute(rows_kernel<V, S, EARLY>, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) != cudaSuccess) {
        cudaGetLastError();
        return 1;
    }
    int fit = 0;
    if (cudaOccupancyMaxActiveClusters(&fit, rows_kernel<V, S, EARLY>, &cfg) != cudaSuccess || fit < 1) {
        cudaGetLastError();
        return 1;
    }
    const float* xc = x;
    const float* wc = weight;
    const float* bc = bias;
    const int n = (int)N;
    const double inv_n = 1.0 / (double)N;
    if (cudaLaunchKernelEx(&cfg, rows_kernel<V, S, EARLY>, xc, wc, bc, out, B, n, inv_n, eps, G, cl) != cudaSuccess) {
        cudaGetLastError();
        return 2;
    }
    return 0;
#else
    if ((int64_t)cl * G > 1024 || B > 0x7fffffff) return 1;               // the emulated cluster: one block
    rows_kernel<V, S, EARLY><<<(unsigned)B, cl * G, 0, stream>>>(x, weight, bias, out, B, (int)N, 1.0 / (double)N, eps, G, cl);
    return cudaGetLastError() == cudaSuccess ? 0 : 2;
#endif
}

template <int V, int S, bool EARLY>
static int rows_dispatch(int s, const float* x, const float* weight, const float* bias, float* out, int64_t B,
                         int64_t N, float eps, int G, int cl, cudaStream_t stream) {
    if constexpr (S * V > (EARLY ? ROW_ELEMS : LATE_ELEMS)) {
        return 1;
    } else {
        if (s == S) return rows_launch<V, S, EARLY>(x, weight, bias, out, B, N, eps, G, cl, stream);
        return rows_dispatch<V, S * 2, EARLY>(s, x, weight, bias, out, B, N, eps, G, cl, stream);
    }
}

// The persistent path (PERSIST > 0): 0 launched, 1 not taken, 2 a launch error.
template <int S>
static int persist_launch(const float* x, const float* weight, const float* bias, float* out, int64_t B, int64_t N,
                          float eps, int G, int sms, cudaStream_t stream) {
    const int R = G < ROW_BLOCK ? ROW_BLOCK / G : 1;
    int per = PERSIST;
#if LN_CLUSTERS
    int fit = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&fit, persist_kernel<S>, R * G, 0) != cudaSuccess || fit < 1) {
        cudaGetLastError();
        return 1;
    }
    if (per > fit) per = fit;
#endif
    int64_t grid = (B + R - 1) / R;
    if (grid > (int64_t)sms * per) grid = (int64_t)sms * per;
    persist_kernel<S><<<(unsigned)grid, R * G, 0, stream>>>(x, weight, bias, out, B, (int)N, 1.0 / (double)N, eps, G);
    return cudaGetLastError() == cudaSuccess ? 0 : 2;
}

template <int S>
static int persist_dispatch(int s, const float* x, const float* weight, const float* bias, float* out, int64_t B,
                            int64_t N, float eps, int G, int sms, cudaStream_t stream) {
    if constexpr (S * 4 > LATE_ELEMS) {
        return 1;
    } else {
        if (s == S) return persist_launch<S>(x, weight, bias, out, B, N, eps, G, sms, stream);
        return persist_dispatch<S * 2>(s, x, weight, bias, out, B, N, eps, G, sms, stream);
    }
}

// The rows / cluster paths: 0 launched, 1 not taken (use split), 2 error.
static int try_rows(const float* x, const float* weight, const float* bias, float* out, int64_t B, int64_t N,
                    float eps, int V, int sms, int wave_sms, cudaStream_t stream) {
    const int64_t nv = N / V;
    // about one wave of threads: latency-bound, so weight and bias are loaded with x (one round trip);
    // more: bandwidth-bound, so they are loaded after the statistics (fewer registers, more rows in flight)
    const int se = ROW_ELEMS / V;
    const bool early = B * ((nv + se - 1) / se) <= (int64_t)wave_sms * EARLY_THREADS;
    int S = (early ? ROW_ELEMS : LATE_ELEMS) / V;
    if (nv <= 32 * (int64_t)S) {                          // a warp per row, each lane with a few vectors
        S = 1;
        while (32 * (int64_t)S < nv) S <<= 1;
    }
    const int64_t need = (nv + S - 1) / S;                // threads per row
    int cl_min = 1;
    while (need > (int64_t)cl_min * ROW_TMAX) cl_min <<= 1;
    if (cl_min > CLUSTER_MAX) return 1;
    if (PERSIST > 0 && !early && V == 4 && cl_min == 1) {
        const int G = (int)((need + 31) / 32 * 32);
        const int rc = persist_dispatch<1>(S, x, weight, bias, out, B, N, eps, G, sms, stream);
        if (rc != 1) return rc;
    }
    int cl = cl_min;                                      // spread few rows over more blocks
    while (cl * 2 <= CLUSTER_MAX && B * cl * 2 <= sms && (need + 2 * cl - 1) / (2 * cl) >= SPREAD_MIN) cl <<= 1;
    for (; cl >= cl_min; cl >>= 1) {
        const int G = (int)(((need + cl - 1) / cl + 31) / 32 * 32);
        int rc = 1;
        if (early) {
            if (V == 4) rc = rows_dispatch<4, 1, true>(S, x, weight, bias, out, B, N, eps, G, cl, stream);
            else if (V == 2) rc = rows_dispatch<2, 1, true>(S, x, weight, bias, out, B, N, eps, G, cl, stream);
            else rc = rows_dispatch<1, 1, true>(S, x, weight, bias, out, B, N, eps, G, cl, stream);
        } else {
            if (V == 4) rc = rows_dispatch<4, 1, false>(S, x, weight, bias, out, B, N, eps, G, cl, stream);
            else if (V == 2) rc = rows_dispatch<2, 1, false>(S, x, weight, bias, out, B, N, eps, G, cl, stream);
            else rc = rows_dispatch<1, 1, false>(S, x, weight, bias, out, B, N, eps, G, cl, stream);
        }
        if (rc != 1) return rc;
    }
    return 1;
}

#if LN_CLUSTERS
template <int V, int S>
static int grid_launch(const float* x, const float* weight, const float* bias, float* out, int64_t B, int64_t N,
                       float eps, int sms, void* workspace, int64_t workspace_bytes, cudaStream_t stream) {
    int per_sm = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, grid_kernel<V, S>, GRID_THREADS, 0) != cudaSuccess ||
        per_sm < 1) {
        cudaGetLastError();
        return 1;
    }
    const int64_t blocks = (int64_t)per_sm * sms;
    if (N / V + (int64_t)blocks * GRID_THREADS * S >= 0x7fffffff) return 1;     // 32-bit vector indices
    if ((N / V + (int64_t)GRID_THREADS * S - 1) / ((int64_t)GRID_THREADS * S) > blocks) return 1;   // too long
    // as few blocks as hold the row at S vectors per thread, but a whole number of SMs' worth
    int64_t used = (N / V + (int64_t)GRID_THREADS * S - 1) / ((int64_t)GRID_THREADS * S);
    used = (used + per_sm - 1) / per_sm * per_sm;
    if (used > blocks) used = blocks;
    if (B * used * (int64_t)sizeof(Pair) > workspace_bytes || (uintptr_t)workspace % 16 != 0) return 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)used);
    cfg.blockDim = dim3((unsigned)GRID_THREADS);
    cfg.dynamicSmemBytes = 0;
    cfg.stream = stream;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeCooperative;
    attr[0].val.cooperative = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    Pair* part = static_cast<Pair*>(workspace);
    const double inv_n = 1.0 / (double)N;
    if (cudaLaunchKernelEx(&cfg, grid_kernel<V, S>, x, weight, bias, out, part, B, N, inv_n, eps) != cudaSuccess) {
        cudaGetLastError();
        return 1;
    }
    return 0;
}

// The smallest S (vectors per thread) whose co-resident grid holds a row: 0 launched, 1 not taken.
template <int V, int S>
static int grid_dispatch(const float* x, const float* weight, const float* bias, float* out, int64_t B, int64_t N,
                         float eps, int sms, void* workspace, int64_t workspace_bytes, cudaStream_t stream) {
    if constexpr (S * V > GRID_ELEMS) {
        return 1;
    } else {
        if (grid_launch<V, S>(x, weight, bias, out, B, N, eps, sms, workspace, workspace_bytes, stream) == 0) return 0;
        return grid_dispatch<V, S * 2>(x, weight, bias, out, B, N, eps, sms, workspace, workspace_bytes, stream);
    }
}
#endif

template <int V>
static int norm_launch(const float* x, const float* weight, const float* bias, const Pair* sums, float* out,
                       int64_t B, int64_t N, int64_t P, float eps, cudaStream_t stream) {
    constexpr int S = NORM_ELEMS / V;
    const int64_t chunks = (N / V + (int64_t)NORM_THREADS * S - 1) / ((int64_t)NORM_THREADS * S);
    if (chunks > 0x7fffffff) return 2;
    split_norm<V, S><<<(unsigned)chunks, NORM_THREADS, 0, stream>>>(x, weight, bias, sums, out, B, N, P, 1.0 / (double)N, eps);
    return cudaGetLastError() == cudaSuccess ? 0 : 2;
}

extern "C" int forward(const float* x, const float* weight, const float* bias, float* out,
                       int64_t B, int64_t N, float eps, void* workspace, int64_t workspace_bytes,
                       cudaStream_t stream) {
    if (B <= 0 || N <= 0) return 0;
    const uintptr_t all = (uintptr_t)x | (uintptr_t)weight | (uintptr_t)bias | (uintptr_t)out;
    const int V = N % 4 == 0 && (all & 15) == 0 ? 4 : N % 2 == 0 && (all & 7) == 0 ? 2 : 1;
    int sms = 132, wave_sms = 1;     // the CPU emulator: an H200's SM count, but one block at a time (one wave)
#if LN_CLUSTERS
    int dev = 0, count = 0;
    if (cudaGetDevice(&dev) == cudaSuccess &&
        cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, dev) == cudaSuccess && count > 0)
        sms = count;
    cudaGetLastError();
    wave_sms = sms;
#endif
    if (N <= ROW_MAX_N) {
        const int rc = try_rows(x, weight, bias, out, B, N, eps, V, sms, wave_sms, stream);
        if (rc != 1) return rc == 0 ? 0 : 1;
    }
#if LN_CLUSTERS
    if constexpr (GRID_PATH != 0) {                       // compiled only when taken (build time)
        if (N > ROW_MAX_N) {
            int rc;
            if (V == 4) rc = grid_dispatch<4, 1>(x, weight, bias, out, B, N, eps, sms, workspace, workspace_bytes, stream);
            else if (V == 2) rc = grid_dispatch<2, 1>(x, weight, bias, out, B, N, eps, sms, workspace, workspace_bytes, stream);
            else rc = grid_dispatch<1, 1>(x, weight, bias, out, B, N, eps, sms, workspace, workspace_bytes, stream);
            if (rc == 0) return 0;
        }
    }
#endif
    // split: P tiles per row, the per-(tile, row) sums in the workspace
    int64_t P = ((int64_t)sms * STATS_PER_SM + B - 1) / B;
    const int64_t most = (N + MIN_TILE - 1) / MIN_TILE;
    if (P > most) P = most;
    if (P > 1024) P = 1024;
    const int64_t fit = workspace_bytes / (B * (int64_t)sizeof(Pair));
    if (P > fit) P = fit;
    if (P < 1 || (uintptr_t)workspace % 16 != 0) return 1;
    int64_t L = (N + P - 1) / P;
    L = (L + 63) / 64 * 64;
    P = (N + L - 1) / L;                                  // no empty tiles
    if (B * P > 0x7fffffff) return 1;
    const int64_t keep = (L2_KEEP_MB * 1048576 + B * L * 4 - 1) / (B * L * 4);   // tiles kept in L2
    const int64_t keep_t0 = P > keep ? P - keep : 0;
    Pair* sums = static_cast<Pair*>(workspace);
    split_stats<<<(unsigned)(B * P), STATS_THREADS, 0, stream>>>(x, sums, B, N, L, keep_t0);
    if (cudaGetLastError() != cudaSuccess) return 1;
    int rc;
    if (V == 4) rc = norm_launch<4>(x, weight, bias, sums, out, B, N, P, eps, stream);
    else if (V == 2) rc = norm_launch<2>(x, weight, bias, sums, out, B, N, P, eps, stream);
    else rc = norm_launch<1>(x, weight, bias, sums, out, B, N, P, eps, stream);
    return rc == 0 ? 0 : 1;
}
