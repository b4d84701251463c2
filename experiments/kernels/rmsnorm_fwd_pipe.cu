// EXPERIMENT, not a seed: measured slower than the task's best/ on an H200 (experiments/results/seeds_stop32.h200.txt).
// This copy of best/cuda.cu adds a pipe path (PIPE_* knobs, launch_pipe): rows of N <= PIPE_MAXN brought into shared
// memory by cp.async.bulk on mbarriers, PIPE_STAGES groups of rows in flight per block, a warp or the block per row.
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
constexpr int64_t MIN_TILE = 4096;      // a split_stats block sums at least this many elements
constexpr int PIPE_THREADS = 256;       // knob: 128, 256, 512
constexpr int PIPE_STAGES = 3;          // knob: 2, 3, 4
constexpr int WARP_VPT = 8;             // knob: 4, 8
constexpr int64_t PIPE_MAXN = 8192;     // knob: 0, 4096, 8192
constexpr int64_t PIPE_MINB = 1024;     // knob: 256, 1024, 4096
constexpr bool PIPE_RMS = true;            // the pipe path computes RMSNorm
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

#if defined(__CUDACC__)
// ------------------------------------------------------------------ pipe path (sm_90 bulk copies)
__device__ __forceinline__ uint32_t smem_addr(const void* p) { return (uint32_t)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void bar_init(uint64_t* bar) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_addr(bar)) : "memory");
}

// Thread 0 arms the stage's barrier for `bytes` and starts the copy; the barrier's phase completes when it lands.
__device__ __forceinline__ void bar_expect(uint64_t* bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes) : "memory");
}

__device__ __forceinline__ void bulk_load(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 ::"r"(smem_addr(dst)), "l"(src), "r"(bytes), "r"(smem_addr(bar)) : "memory");
}

__device__ __forceinline__ void bar_wait(uint64_t* bar, uint32_t parity) {
    uint32_t done = 0;
    while (!done)
        asm volatile("{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\tselp.u32 %0, 1, 0, p;\n}"
                     : "=r"(done) : "r"(smem_addr(bar)), "r"(parity) : "memory");
}

constexpr int PIPE_HEAD = 128;          // bytes of dynamic shared memory before the stages: the barriers

// (a, b) summed over the block, in double, the same bits in every thread.
__device__ __forceinline__ void pipe_block_sums(double& a, double& b, double (*sh)[32]) {
    a = warp_sum(a);
    b = warp_sum(b);
    const int warps = blockDim.x / 32;
    if (warps == 1) return;
    if ((threadIdx.x & 31) == 0) { sh[0][threadIdx.x / 32] = a; sh[1][threadIdx.x / 32] = b; }
    __syncthreads();
    a = 0.0;
    b = 0.0;
    for (int w = 0; w < warps; ++w) { a += sh[0][w]; b += sh[1][w]; }
    __syncthreads();
}

// WARP: a warp per row (R = warps rows a group), else the block per row (R = 1). Thread `lane` of the row's
// tpr threads owns the float4 vectors i * tpr + lane, i < VPT. Stage s holds a group's R rows of x.
template <bool WARP, int VPT>
__global__ void __launch_bounds__(512) pipe_fwd(const float* __restrict__ x, const float* __restrict__ weight,
                                                const float* __restrict__ bias, float* __restrict__ out, int64_t B,
                                                int64_t N, int R, float eps) {
    extern __shared__ __align__(128) unsigned char smem[];
    __shared__ double sh[2][32];
    uint64_t* bars = reinterpret_cast<uint64_t*>(smem);
    float* stages = reinterpret_cast<float*>(smem + PIPE_HEAD);
    const int64_t SN = (int64_t)R * N;
    const int tpr = WARP ? 32 : (int)blockDim.x;
    const int lane = WARP ? (int)(threadIdx.x & 31) : (int)threadIdx.x;
    const int sub = WARP ? (int)(threadIdx.x / 32) : 0;
    const int64_t groups = (B + R - 1) / R;
    if (threadIdx.x == 0) {
        for (int s = 0; s < PIPE_STAGES; ++s) bar_init(&bars[s]);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    auto issue = [&](int64_t g, int s) {
        const int64_t b0 = g * R, rows = B - b0 < R ? B - b0 : R;
        const uint32_t bytes = (uint32_t)(rows * N * (int64_t)sizeof(float));
        bar_expect(&bars[s], bytes);
        bulk_load(stages + (int64_t)s * SN, x + b0 * N, bytes, &bars[s]);
    };
    if (threadIdx.x == 0)
        for (int s = 0; s < PIPE_STAGES; ++s)
            if (blockIdx.x + (int64_t)s * gridDim.x < groups) issue(blockIdx.x + (int64_t)s * gridDim.x, s);
    const float4* w4 = reinterpret_cast<const float4*>(weight);          // N * 4 bytes at most 32 KB: L1 hits
    const float4* b4 = reinterpret_cast<const float4*>(bias);
    const double inv_n = 1.0 / (double)N;
    int it = 0;
    for (int64_t g = blockIdx.x; g < groups; g += gridDim.x, ++it) {
        const int s = it % PIPE_STAGES;
        bar_wait(&bars[s], (uint32_t)((it / PIPE_STAGES) & 1));
        const int64_t b = g * R + sub;
        const bool live = sub < R && b < B;
        const float* xr = stages + (int64_t)s * SN + (int64_t)sub * N;
        const float4* xs = reinterpret_cast<const float4*>(xr);
        const int64_t nv = live ? N / 4 : 0;
        const float k = PIPE_RMS || !live ? 0.f : xr[0];                 // LayerNorm: sums of d = x - x[row, 0]
        float f1 = 0.f, f2 = 0.f;
        #pragma unroll
        for (int i = 0; i < VPT; ++i) {
            const int64_t v = (int64_t)i * tpr + lane;
            if (v < nv) {
                const float4 a = xs[v];
                const float d[4] = {a.x - k, a.y - k, a.z - k, a.w - k};
                #pragma unroll
                for (int e = 0; e < 4; ++e) { f1 += d[e]; f2 += d[e] * d[e]; }
            }
        }
        double s1 = f1, s2 = f2;
        if (WARP) { s1 = warp_sum(s1); s2 = warp_sum(s2); } else { pipe_block_sums(s1, s2, sh); }
        const double dm = PIPE_RMS ? 0.0 : s1 * inv_n;
        double var = s2 * inv_n - dm * dm;
        if (var < 0.0) var = 0.0;
        const float rstd = (float)rsqrt(var + (double)eps), m = (float)dm;
        #pragma unroll
        for (int i = 0; i < VPT; ++i) {
            const int64_t v = (int64_t)i * tpr + lane;
            if (v < nv) {
                const float4 a = xs[v], wv = __ldg(w4 + v);
                const float4 bv = PIPE_RMS ? make_float4(0.f, 0.f, 0.f, 0.f) : __ldg(b4 + v);
                const float4 o = make_float4(((a.x - k) - m) * rstd * wv.x + bv.x, ((a.y - k) - m) * rstd * wv.y + bv.y,
                                             ((a.z - k) - m) * rstd * wv.z + bv.z, ((a.w - k) - m) * rstd * wv.w + bv.w);
                __stcs(reinterpret_cast<float4*>(out + b * N) + v, o);
            }
        }
        __syncthreads();                                  // stage s read by every thread: refill it
        if (threadIdx.x == 0 && g + (int64_t)PIPE_STAGES * gridDim.x < groups) issue(g + (int64_t)PIPE_STAGES * gridDim.x, s);
    }
}

template <bool WARP, int VPT>
static bool launch_pipe_as(const float* x, const float* weight, const float* bias, float* out, int64_t B, int64_t N,
                           int T, int R, float eps, cudaStream_t stream) {
    const int64_t smem = PIPE_HEAD + (int64_t)PIPE_STAGES * R * N * (int64_t)sizeof(float);
    if (smem > 227 * 1024) return false;
    auto kernel = pipe_fwd<WARP, VPT>;
    int dev = 0, sms = 0, per = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess
        || cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem) != cudaSuccess
        || cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, kernel, T, (size_t)smem) != cudaSuccess || per < 1) {
        cudaGetLastError();
        return false;
    }
    int64_t G = (B + R - 1) / R;
    if (G > (int64_t)sms * per) G = (int64_t)sms * per;
    kernel<<<(unsigned)G, (unsigned)T, (size_t)smem, stream>>>(x, weight, bias, out, B, N, R, eps);
    return cudaGetLastError() == cudaSuccess;
}

// The pipe path (N <= PIPE_MAXN, N % 4 == 0, 16-byte aligned, B >= PIPE_MINB): true when launched.
static bool launch_pipe(const float* x, const float* weight, const float* bias, float* out, int64_t B, int64_t N,
                        float eps, cudaStream_t stream) {
    const uintptr_t all = (uintptr_t)x | (uintptr_t)weight | (uintptr_t)bias | (uintptr_t)out;
    if (N > PIPE_MAXN || B < PIPE_MINB || N % 4 != 0 || (all & 15) != 0) return false;
    if (N <= 32 * 4 * WARP_VPT)
        return launch_pipe_as<true, WARP_VPT>(x, weight, bias, out, B, N, PIPE_THREADS, PIPE_THREADS / 32, eps, stream);
    const int64_t vpt = (N + 4 * PIPE_THREADS - 1) / (4 * PIPE_THREADS);
    if (vpt > 4) return false;
    const int T = (int)(((N + 4 * vpt - 1) / (4 * vpt) + 31) / 32 * 32);
    auto as = vpt == 1 ? launch_pipe_as<false, 1> : vpt == 2 ? launch_pipe_as<false, 2>
              : vpt == 3 ? launch_pipe_as<false, 3> : launch_pipe_as<false, 4>;
    return as(x, weight, bias, out, B, N, T, 1, eps, stream);
}
#endif

extern "C" int forward(const float* x, const float* weight, float* out,
                       int64_t B, int64_t N, float eps, void* workspace, int64_t workspace_bytes,
                       cudaStream_t stream) {
    if (B <= 0 || N <= 0) return 0;
#if defined(__CUDACC__)
    if (launch_pipe(x, weight, nullptr, out, B, N, eps, stream)) return 0;
#endif
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
