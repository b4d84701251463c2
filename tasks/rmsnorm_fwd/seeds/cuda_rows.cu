// RMSNorm forward, CUDA seed (rows): one DRAM round trip per element wherever the row fits on chip (the
// structure of layernorm_fwd's cuda_rows.cu, with only the sum of squares). forward() picks a path from
// (B, N) and the alignment at run time:
//
//  rows     N <= ROW_TMAX * ROW_ELEMS (8192): one launch, no cluster. A group of G threads (a warp, or
//           several) holds a whole row in registers, several rows per block when G is small. When the
//           grid is about one wave (B * threads per row <= SMs * EARLY_THREADS: latency-bound), x and
//           weight are both loaded before the first use (one memory latency); otherwise (bandwidth-
//           bound, 65536x4096) only x is (evict-first when LATE_HINTS >= 1, so the weight stays in L1/L2),
//           weight after the statistics, out stored evict-first when LATE_HINTS == 2, and a thread holds
//           LATE_ELEMS values: fewer registers, more rows in flight per SM. Per thread, sum x * x in float
//           over its S * V values (four partial sums), then double: warp shuffles, one __syncthreads
//           across the group's warps. out = x * rsqrt(ss / N + eps) * w (the scale rounded to float once).
//  persist  PERSIST > 0, rows' bandwidth-bound case with float4 and no cluster: the same rows, but a grid of
//           PERSIST blocks per SM (at most what fits) that loop over them: each thread loads its weight slice
//           into registers once (not once per row: a GB of L2 reads on 65536x4096) and the next row's x
//           while it reduces and stores the current one, so each SM streams with no block boundary. (The
//           rows path reaches 77-80% of DRAM bandwidth on the large bench shapes under Nsight Compute, and
//           torch.compile ~8% more: 0.91-0.93x.) Off by default: not measured on a GPU yet.
//  cluster  N <= CLUSTER_MAX * ROW_TMAX * ROW_ELEMS (131072; 65536 where 16-block clusters cannot be
//           scheduled): one launch, the same kernel, a row per thread-block cluster of cl blocks
//           (cudaLaunchKernelEx, sm_90); each block's sum goes to the others through distributed
//           shared memory (one cluster.sync, then an arrive that the block waits on only before it
//           exits). Few rows are spread over more blocks (cl doubled while B * cl <= SMs and each block
//           keeps >= SPREAD_MIN threads). Taken only when cudaOccupancyMaxActiveClusters says such a
//           cluster fits, else the next smaller cl, else split. Under the CPU emulator (no clusters)
//           the cluster is one block of cl * G threads, its ranks the groups, so the indexing is checked.
//  split    longer rows (or no cluster): two launches. split_stats: per (tile, row) block sums of x * x
//           (float per 4 * STATS_UNROLL values, double beyond) into the workspace (8 bytes per (tile,
//           row), at most 8 * B + 1 MiB: P tiles per row with P <= workspace / (8 B), so >= 1); the
//           blocks of all tiles run at once, so what stays in L2 is chosen by priority: tiles of the
//           first columns are read with evict-first loads, those of the last L2_KEEP_MB of columns (all
//           of x when B * N * 4 <= 32 MB) with plain ones.
//           split_norm: a column chunk per block, the last chunk first (its x is still in L2), weight
//           loaded once into registers (overlapping the merge of the row's tile sums, which every block
//           does itself: no third launch), every row of the chunk two at a time; its loads and stores
//           are evict-first, so they do not push the kept x out of L2.
// (No grid path: layernorm_fwd's cooperative one is off by default there, and every bench row here is
// <= 100003 long.)
// Vector width V: float4 when N % 4 == 0 and x, weight, out are 16-byte aligned, float2 when N % 2 == 0
// and 8-byte aligned, else scalar (split_stats reads float4 between a scalar head and tail of every tile
// in any case). Nothing past a row's N-th element is read. Every workspace word read was written earlier
// in the same call.
//
// Paths on the bench set (H200, 132 SMs, aligned buffers; predicted, not measured yet):
//   BT=4096,(4096,)     rows, late, V4 S4: 256 thr per row, one row per block, 4096 blocks
//   BT=16384,(4096,)    rows, late, V4 S4: 256 per row, 16384 blocks
//   BT=2048,(8192,)     rows, late, V4 S4: 512 per row, 2048 blocks
//   BT=16384,(2048,)    rows, late, V4 S4: 128 per row, 2 rows per block of 256, 8192 blocks
//   BT=65536,(2048,)    rows, late, V4 S4: 128 per row, 2 rows per block, 32768 blocks
//   BT=65536,(4096,)    rows, late, V4 S4: 256 per row, 65536 blocks
//   B=4,(100001,)       cluster 16 x 416, early, V1 S16 (odd N): 64 blocks
//   B=16,(8194,)        cluster 2 x 288, early, V2 S8: 32 blocks
//   B=32,(4100,)        rows, early, V4 S4: a block of 288 per row, 32 blocks
//   BT=1000,(1000,)     rows, early, V4 S4: 64 thr per row, 4 rows per block of 256, 250 blocks
//   BT=3,(100003,)      cluster 16 x 416, early, V1 S16: 48 blocks
//   BT=8191,(5120,)     rows, late, V4 S4: 320 per row, one row per block, 8191 blocks
// ptxas (sm_90, defaults): see the report of the commit that added this file.
#include <cstdint>
#include <cuda_runtime.h>
#if defined(__CUDACC__)
#include <cooperative_groups.h>
#define RMS_CLUSTERS 1
#define LD_STREAM(p) __ldcs(p)
#define ST_STREAM(p, v) __stcs((p), (v))
#else
#define RMS_CLUSTERS 0
#define LD_STREAM(p) (*(p))
#define ST_STREAM(p, v) (*(p) = (v))
#endif

constexpr int ROW_ELEMS = 16;           // knob: 8, 16
constexpr int LATE_ELEMS = 16;          // knob: 8, 16, 32
constexpr int LATE_HINTS = 1;           // knob: 0, 1, 2
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
constexpr int PERSIST = 0;              // knob: 0, 1, 2, 3, 4
constexpr int64_t MIN_TILE = 4096;      // a split_stats block sums at least this many elements
constexpr int ROW_LB = ROW_TMAX > ROW_BLOCK ? ROW_TMAX : ROW_BLOCK;   // rows_kernel's largest block
constexpr int64_t ROW_MAX_N = (int64_t)CLUSTER_MAX * ROW_TMAX * (ROW_ELEMS > LATE_ELEMS ? ROW_ELEMS : LATE_ELEMS);

__device__ __forceinline__ double warp_sum(double v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// sum of xv[e]^2 in float, four independent partial sums (a short dependency chain), then double.
template <int E>
__device__ __forceinline__ double square_sum(const float* xv) {
    float q[4] = {0.f, 0.f, 0.f, 0.f};
    #pragma unroll
    for (int e = 0; e < E; ++e) q[e & 3] += xv[e] * xv[e];
    return (double)((q[0] + q[1]) + (q[2] + q[3]));
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
                                                      float* __restrict__ out, int64_t B, int N, double inv_n,
                                                      float eps, int G, int cl) {
    constexpr bool LD_CS = !EARLY && LATE_HINTS >= 1;   // bandwidth-bound: x is read once
    constexpr bool ST_CS = !EARLY && LATE_HINTS >= 2;
    __shared__ double red[32];
    __shared__ double xch[32];
    const int tid = threadIdx.x;
    const int gi = tid / G, lt = tid - gi * G;
    int64_t row;
    int rank;
    if (cl > 1) {
#if RMS_CLUSTERS
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
    float xv[S * V], wv[EARLY ? S * V : 1];
    #pragma unroll
    for (int s = 0; s < S; ++s) {
        const int vi = s * TT + gt;
        if (live && vi < nv) {
            load_vec<V, LD_CS>(xr + vi * V, xv + s * V);
            if constexpr (EARLY) load_vec<V, false>(weight + vi * V, wv + s * V);
        } else {
            #pragma unroll
            for (int e = 0; e < V; ++e) xv[s * V + e] = 0.f;
        }
    }
    double ss = warp_sum(square_sum<S * V>(xv));
    if (G > 32) {                                       // G is the same for the whole block
        if ((tid & 31) == 0) red[tid >> 5] = ss;
        __syncthreads();
        const int w0 = gi * (G >> 5);
        ss = 0.0;
        for (int w = 0; w < (G >> 5); ++w) ss += red[w0 + w];
    }
    if (cl > 1) {
#if RMS_CLUSTERS
        cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
        if (tid == 0) xch[0] = ss;
        cluster.sync();
        ss = 0.0;
        for (int r = 0; r < cl; ++r) ss += *cluster.map_shared_rank(&xch[0], r);
        cluster.barrier_arrive();                       // this block's reads of the others are done
#else
        if (lt == 0) xch[gi] = ss;
        __syncthreads();
        ss = 0.0;
        for (int r = 0; r < cl; ++r) ss += xch[r];
#endif
    }
    const float rs = (float)rsqrt(ss * inv_n + (double)eps);
    if (live) {
        float* o = out + row * (int64_t)N;
        #pragma unroll
        for (int s = 0; s < S; ++s) {
            const int vi = s * TT + gt;
            if (vi < nv) {
                float r[V], wl[V];
                if constexpr (EARLY) {
                    #pragma unroll
                    for (int e = 0; e < V; ++e) wl[e] = wv[s * V + e];
                } else {
                    load_vec<V, false>(weight + vi * V, wl);
                }
                #pragma unroll
                for (int e = 0; e < V; ++e) r[e] = xv[s * V + e] * rs * wl[e];
                store_vec<V, ST_CS>(o + vi * V, r);
            }
        }
    }
#if RMS_CLUSTERS
    if (cl > 1) cooperative_groups::this_cluster().barrier_wait();   // no block leaves while others read it
#endif
}

// ------------------------------------------------------------------ persistent rows path (PERSIST > 0)
// As rows_kernel with V = 4, EARLY false, cl = 1: groups of G threads per row, R = blockDim.x / G rows per
// block iteration, but the grid (a few blocks per SM) loops over the rows, row base = blockIdx.x * R, then
// + gridDim.x * R. The weight slice of a thread's columns (fixed across rows) is loaded once; x of the next
// iteration's row is loaded before this one is reduced. The cross-warp sums alternate between two halves of
// `red`, so one barrier per iteration suffices (a warp can be at most one iteration ahead of another).
template <int S>
__global__ void __launch_bounds__(ROW_LB) persist_kernel(const float* __restrict__ x, const float* __restrict__ weight,
                                                         float* __restrict__ out, int64_t B, int N, double inv_n,
                                                         float eps, int G) {
    constexpr int V = 4;
    constexpr bool LD_CS = LATE_HINTS >= 1, ST_CS = LATE_HINTS >= 2;
    __shared__ double red[2][32];
    const int tid = threadIdx.x;
    const int gi = tid / G, lt = tid - gi * G;
    const int R = blockDim.x / G, nv = N / V;
    const int64_t step = (int64_t)gridDim.x * R;
    float wv[S * V], xv[S * V], xn[S * V];
    #pragma unroll
    for (int s = 0; s < S; ++s) {
        const int vi = s * G + lt;
        if (vi < nv) {
            load_vec<V, false>(weight + vi * V, wv + s * V);
        } else {
            #pragma unroll
            for (int e = 0; e < V; ++e) wv[s * V + e] = 0.f;
        }
    }
    int64_t row = (int64_t)blockIdx.x * R + gi;
    #pragma unroll
    for (int s = 0; s < S; ++s) {
        const int vi = s * G + lt;
        if (row < B && vi < nv) {
            load_vec<V, LD_CS>(x + row * (int64_t)N + vi * V, xn + s * V);
        } else {
            #pragma unroll
            for (int e = 0; e < V; ++e) xn[s * V + e] = 0.f;
        }
    }
    int half = 0;
    for (int64_t base = (int64_t)blockIdx.x * R; base < B; base += step, row += step, half ^= 1) {
        #pragma unroll
        for (int k = 0; k < S * V; ++k) xv[k] = xn[k];
        const int64_t next = row + step;
        #pragma unroll
        for (int s = 0; s < S; ++s) {                   // the next row's loads, in flight during this row's work
            const int vi = s * G + lt;
            if (next < B && vi < nv) {
                load_vec<V, LD_CS>(x + next * (int64_t)N + vi * V, xn + s * V);
            } else {
                #pragma unroll
                for (int e = 0; e < V; ++e) xn[s * V + e] = 0.f;
            }
        }
        double ss = warp_sum(square_sum<S * V>(xv));
        if (G > 32) {                                   // G is the same for the whole block
            if ((tid & 31) == 0) red[half][tid >> 5] = ss;
            __syncthreads();
            const int w0 = gi * (G >> 5);
            ss = 0.0;
            for (int w = 0; w < (G >> 5); ++w) ss += red[half][w0 + w];
        }
        const float rs = (float)rsqrt(ss * inv_n + (double)eps);
        if (row < B) {
            float* o = out + row * (int64_t)N;
            #pragma unroll
            for (int s = 0; s < S; ++s) {
                const int vi = s * G + lt;
                if (vi < nv) {
                    float r[V];
                    #pragma unroll
                    for (int e = 0; e < V; ++e) r[e] = xv[s * V + e] * rs * wv[s * V + e];
                    store_vec<V, ST_CS>(o + vi * V, r);
                }
            }
        }
    }
}

// ------------------------------------------------------------------ split path
// grid B * P, tile-major: block (t, b) = t * B + b sums x * x over columns [t * L, (t+1) * L) of row b.
__global__ void __launch_bounds__(STATS_THREADS) split_stats(const float* __restrict__ x, double* __restrict__ sums,
                                                             int64_t B, int64_t N, int64_t L, int64_t keep_t0) {
    __shared__ double sh[STATS_THREADS / 32];
    const int64_t b = (int64_t)blockIdx.x % B, t = (int64_t)blockIdx.x / B;
    const int64_t j0 = t * L, j1 = j0 + L < N ? j0 + L : N;
    const float* xr = x + b * N;
    const bool stream = t < keep_t0;                     // not re-read from L2 by split_norm: evict first
    int64_t head = (int64_t)((16 - ((uintptr_t)(xr + j0) & 15)) & 15) / 4;
    if (head > j1 - j0) head = j1 - j0;
    double c = 0.0;
    if ((int64_t)threadIdx.x < head) {
        const float v = xr[j0 + threadIdx.x];
        c += (double)v * v;
    }
    const int64_t v0 = j0 + head, nv = (j1 - v0) / 4;
    const float4* x4 = reinterpret_cast<const float4*>(xr + v0);
    for (int64_t q = threadIdx.x; q < nv; q += (int64_t)STATS_THREADS * STATS_UNROLL) {
        float4 v[STATS_UNROLL];
        #pragma unroll
        for (int u = 0; u < STATS_UNROLL; ++u) {
            const int64_t qq = q + (int64_t)u * STATS_THREADS;
            if (qq < nv) v[u] = stream ? LD_STREAM(x4 + qq) : x4[qq];
            else v[u] = make_float4(0.f, 0.f, 0.f, 0.f);
        }
        float p = 0.f;
        #pragma unroll
        for (int u = 0; u < STATS_UNROLL; ++u)
            p += (v[u].x * v[u].x + v[u].y * v[u].y) + (v[u].z * v[u].z + v[u].w * v[u].w);
        c += p;
    }
    for (int64_t j = v0 + 4 * nv + threadIdx.x; j < j1; j += STATS_THREADS) {
        const float v = xr[j];
        c += (double)v * v;
    }
    c = warp_sum(c);
    if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = c;
    __syncthreads();
    if (threadIdx.x == 0) {
        double tc = 0.0;
        for (int w = 0; w < STATS_THREADS / 32; ++w) tc += sh[w];
        sums[blockIdx.x] = tc;
    }
}

// grid: column chunks of NORM_THREADS * S vectors, the last chunk first. Rows in batches of NORM_ROWS:
// the block merges each row's P tile sums (lpr threads per row), then writes the batch, two rows at once.
template <int V, int S>
__global__ void __launch_bounds__(NORM_THREADS) split_norm(const float* __restrict__ x, const float* __restrict__ weight,
                                                           const double* __restrict__ sums, float* __restrict__ out,
                                                           int64_t B, int64_t N, int64_t P, double inv_n, float eps) {
    __shared__ float st[NORM_ROWS];                      // the row's scale rsqrt(ss / N + eps)
    __shared__ double part[NORM_THREADS / 32];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int64_t nv = N / V;
    const int64_t base = ((int64_t)gridDim.x - 1 - (int64_t)blockIdx.x) * ((int64_t)NORM_THREADS * S);
    float wv[S * V];
    #pragma unroll
    for (int s = 0; s < S; ++s) {
        const int64_t vi = base + (int64_t)s * NORM_THREADS + tid;
        if (vi < nv) {
            load_vec<V, true>(weight + vi * V, wv + s * V);
        } else {
            #pragma unroll
            for (int e = 0; e < V; ++e) wv[s * V + e] = 0.f;
        }
    }
    for (int64_t b0 = 0; b0 < B; b0 += NORM_ROWS) {
        const int nb = (int)(B - b0 < NORM_ROWS ? B - b0 : NORM_ROWS);
        int lpr = NORM_THREADS;                          // threads per row: a power of two, lpr * nb <= threads
        while (lpr * nb > NORM_THREADS) lpr >>= 1;
        const int rr = tid / lpr, l = tid - rr * lpr;
        double c = 0.0;
        if (rr < nb) {
            for (int64_t t = l; t < P; t += lpr) c += sums[t * B + b0 + rr];
        }
        if (lpr <= 32) {
            for (int o = lpr >> 1; o > 0; o >>= 1) c += __shfl_xor_sync(0xffffffffu, c, o);
        } else {
            c = warp_sum(c);
            if (lane == 0) part[warp] = c;
            __syncthreads();
            if (l == 0) {
                c = 0.0;
                for (int w = rr * (lpr >> 5); w < (rr + 1) * (lpr >> 5); ++w) c += part[w];
            }
        }
        if (rr < nb && l == 0) st[rr] = (float)rsqrt(c * inv_n + (double)eps);
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
            const float ra = st[r], rb = st[r + (two ? 1 : 0)];
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
                        ya[e] = va[i] * ra * wv[i];
                        yb[e] = vb[i] * rb * wv[i];
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
static int rows_launch(const float* x, const float* weight, float* out, int64_t B, int64_t N, float eps, int G,
                       int cl, cudaStream_t stream) {
    if (cl == 1) {
        const int R = G < ROW_BLOCK ? ROW_BLOCK / G : 1;                   // rows per block
        const int64_t grid = (B + R - 1) / R;
        if (grid > 0x7fffffff) return 1;
        rows_kernel<V, S, EARLY><<<(unsigned)grid, R * G, 0, stream>>>(x, weight, out, B, (int)N, 1.0 / (double)N, eps, G, cl);
        return cudaGetLastError() == cudaSuccess ? 0 : 2;
    }
#if RMS_CLUSTERS
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
    const int n = (int)N;
    const double inv_n = 1.0 / (double)N;
    if (cudaLaunchKernelEx(&cfg, rows_kernel<V, S, EARLY>, xc, wc, out, B, n, inv_n, eps, G, cl) != cudaSuccess) {
        cudaGetLastError();
        return 2;
    }
    return 0;
#else
    if ((int64_t)cl * G > 1024 || B > 0x7fffffff) return 1;               // the emulated cluster: one block
    rows_kernel<V, S, EARLY><<<(unsigned)B, cl * G, 0, stream>>>(x, weight, out, B, (int)N, 1.0 / (double)N, eps, G, cl);
    return cudaGetLastError() == cudaSuccess ? 0 : 2;
#endif
}

template <int V, int S, bool EARLY>
static int rows_dispatch(int s, const float* x, const float* weight, float* out, int64_t B, int64_t N, float eps,
                         int G, int cl, cudaStream_t stream) {
    if constexpr (S * V > (EARLY ? ROW_ELEMS : LATE_ELEMS)) {
        return 1;
    } else {
        if (s == S) return rows_launch<V, S, EARLY>(x, weight, out, B, N, eps, G, cl, stream);
        return rows_dispatch<V, S * 2, EARLY>(s, x, weight, out, B, N, eps, G, cl, stream);
    }
}

// The persistent path (PERSIST > 0): 0 launched, 1 not taken, 2 a launch error.
template <int S>
static int persist_launch(const float* x, const float* weight, float* out, int64_t B, int64_t N, float eps, int G,
                          int sms, cudaStream_t stream) {
    const int R = G < ROW_BLOCK ? ROW_BLOCK / G : 1;
    int per = PERSIST;
#if RMS_CLUSTERS
    int fit = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&fit, persist_kernel<S>, R * G, 0) != cudaSuccess || fit < 1) {
        cudaGetLastError();
        return 1;
    }
    if (per > fit) per = fit;
#endif
    int64_t grid = (B + R - 1) / R;
    if (grid > (int64_t)sms * per) grid = (int64_t)sms * per;
    persist_kernel<S><<<(unsigned)grid, R * G, 0, stream>>>(x, weight, out, B, (int)N, 1.0 / (double)N, eps, G);
    return cudaGetLastError() == cudaSuccess ? 0 : 2;
}

template <int S>
static int persist_dispatch(int s, const float* x, const float* weight, float* out, int64_t B, int64_t N, float eps,
                            int G, int sms, cudaStream_t stream) {
    if constexpr (S * 4 > LATE_ELEMS) {
        return 1;
    } else {
        if (s == S) return persist_launch<S>(x, weight, out, B, N, eps, G, sms, stream);
        return persist_dispatch<S * 2>(s, x, weight, out, B, N, eps, G, sms, stream);
    }
}

// The rows / cluster paths: 0 launched, 1 not taken (use split), 2 error.
static int try_rows(const float* x, const float* weight, float* out, int64_t B, int64_t N, float eps, int V,
                    int sms, int wave_sms, cudaStream_t stream) {
    const int64_t nv = N / V;
    // about one wave of threads: latency-bound, so weight is loaded with x (one round trip); more:
    // bandwidth-bound, so it is loaded after the statistics (fewer registers, more rows in flight)
    const int se = ROW_ELEMS / V;
    const bool early = B * ((nv + se - 1) / se) <= (int64_t)wave_sms * EARLY_THREADS;
    int S = (early ? ROW_ELEMS : LATE_ELEMS) / V;
    if (S < 1) S = 1;
    if (nv <= 32 * (int64_t)S) {                          // a warp per row, each lane with a few vectors
        S = 1;
        while (32 * (int64_t)S < nv) S <<= 1;
    }
    const int64_t need = (nv + S - 1) / S;                // threads per row
    int cl_min = 1;
    while (need > (int64_t)cl_min * ROW_TMAX) cl_min <<= 1;
    if (cl_min > CLUSTER_MAX) return 1;
    if (PERSIST > 0 && !early && V == 4 && cl_min == 1) {
        const int rc = persist_dispatch<1>(S, x, weight, out, B, N, eps, (int)((need + 31) / 32 * 32), sms, stream);
        if (rc != 1) return rc;
    }
    int cl = cl_min;                                      // spread few rows over more blocks
    while (cl * 2 <= CLUSTER_MAX && B * cl * 2 <= sms && (need + 2 * cl - 1) / (2 * cl) >= SPREAD_MIN) cl <<= 1;
    for (; cl >= cl_min; cl >>= 1) {
        const int G = (int)(((need + cl - 1) / cl + 31) / 32 * 32);
        int rc = 1;
        if (early) {
            if (V == 4) rc = rows_dispatch<4, 1, true>(S, x, weight, out, B, N, eps, G, cl, stream);
            else if (V == 2) rc = rows_dispatch<2, 1, true>(S, x, weight, out, B, N, eps, G, cl, stream);
            else rc = rows_dispatch<1, 1, true>(S, x, weight, out, B, N, eps, G, cl, stream);
        } else {
            if (V == 4) rc = rows_dispatch<4, 1, false>(S, x, weight, out, B, N, eps, G, cl, stream);
            else if (V == 2) rc = rows_dispatch<2, 1, false>(S, x, weight, out, B, N, eps, G, cl, stream);
            else rc = rows_dispatch<1, 1, false>(S, x, weight, out, B, N, eps, G, cl, stream);
        }
        if (rc != 1) return rc;
    }
    return 1;
}

template <int V>
static int norm_launch(const float* x, const float* weight, const double* sums, float* out, int64_t B, int64_t N,
                       int64_t P, float eps, cudaStream_t stream) {
    constexpr int S = NORM_ELEMS / V;
    const int64_t chunks = (N / V + (int64_t)NORM_THREADS * S - 1) / ((int64_t)NORM_THREADS * S);
    if (chunks > 0x7fffffff) return 2;
    split_norm<V, S><<<(unsigned)chunks, NORM_THREADS, 0, stream>>>(x, weight, sums, out, B, N, P, 1.0 / (double)N, eps);
    return cudaGetLastError() == cudaSuccess ? 0 : 2;
}

extern "C" int forward(const float* x, const float* weight, float* out,
                       int64_t B, int64_t N, float eps, void* workspace, int64_t workspace_bytes,
                       cudaStream_t stream) {
    if (B <= 0 || N <= 0) return 0;
    const uintptr_t all = (uintptr_t)x | (uintptr_t)weight | (uintptr_t)out;
    const int V = N % 4 == 0 && (all & 15) == 0 ? 4 : N % 2 == 0 && (all & 7) == 0 ? 2 : 1;
    int sms = 132, wave_sms = 1;     // the CPU emulator: an H200's SM count, but one block at a time (one wave)
#if RMS_CLUSTERS
    int dev = 0, count = 0;
    if (cudaGetDevice(&dev) == cudaSuccess &&
        cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, dev) == cudaSuccess && count > 0)
        sms = count;
    cudaGetLastError();
    wave_sms = sms;
#endif
    if (N <= ROW_MAX_N) {
        const int rc = try_rows(x, weight, out, B, N, eps, V, sms, wave_sms, stream);
        if (rc != 1) return rc == 0 ? 0 : 1;
    }
    // split: P tiles per row, the per-(tile, row) sums in the workspace (8 * B bytes hold P = 1)
    int64_t P = ((int64_t)sms * STATS_PER_SM + B - 1) / B;
    const int64_t most = (N + MIN_TILE - 1) / MIN_TILE;
    if (P > most) P = most;
    if (P > 1024) P = 1024;
    const int64_t fit = workspace_bytes / (B * (int64_t)sizeof(double));
    if (P > fit) P = fit;
    if (P < 1 || (uintptr_t)workspace % 8 != 0) return 1;
    int64_t L = (N + P - 1) / P;
    L = (L + 63) / 64 * 64;
    P = (N + L - 1) / L;                                  // no empty tiles
    if (B * P > 0x7fffffff) return 1;
    const int64_t keep = (L2_KEEP_MB * 1048576 + B * L * 4 - 1) / (B * L * 4);   // tiles kept in L2
    const int64_t keep_t0 = P > keep ? P - keep : 0;
    double* sums = static_cast<double*>(workspace);
    split_stats<<<(unsigned)(B * P), STATS_THREADS, 0, stream>>>(x, sums, B, N, L, keep_t0);
    if (cudaGetLastError() != cudaSuccess) return 1;
    int rc;
    if (V == 4) rc = norm_launch<4>(x, weight, sums, out, B, N, P, eps, stream);
    else if (V == 2) rc = norm_launch<2>(x, weight, sums, out, B, N, P, eps, stream);
    else rc = norm_launch<1>(x, weight, sums, out, B, N, P, eps, stream);
    return rc == 0 ? 0 : 1;
}
