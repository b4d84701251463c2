// RMSNorm forward, CUDA seed (fast): x is read from DRAM once where the row fits on chip, in as few
// launches as the shape allows. Three paths, chosen by N at run time:
//  rows    (N <= 32 * ROW_THREADS): one launch. A group of T threads holds a whole row in registers
//          (VPT float4 or 4 * VPT scalars per thread), several rows per block (T sized to the row, so
//          short rows use one warp); the sum of squares (double), then out = x * r * weight.
//  cluster (N <= 32 * CLUSTER * CLUSTER_THREADS, sm_90): one launch. The same kernel, one row per
//          thread-block cluster of CLUSTER blocks; block totals are exchanged through distributed shared
//          memory. Used only when cudaOccupancyMaxActiveClusters says such a cluster fits.
//  split   (longer rows, or no clusters): two launches. tile_sums: per (row, tile) sums of x * x (double);
//          split_norm: column chunks (weight read once, in registers) over all rows, last chunk first
//          (tile_sums reads tiles outermost, so its last reads, still in L2, are the last columns of
//          every row); each block merges the tile sums of its rows itself (a warp per row), so no third
//          launch.
// Loads are float4 when N % 4 == 0 and x, weight, out are 16-byte aligned (the harness gives some calls
// element alignment only), else scalar; tile_sums reads float4 between a scalar head and tail.
// Under the CPU emulator of tests/task/test_seeds.py (no __CUDACC__, no clusters) the cluster path is
// compiled out and the split path serves those rows. Every workspace word read was written in this call.
#include <cstdint>
#include <cuda_runtime.h>
#if defined(__CUDACC__)
#include <cooperative_groups.h>
#endif

constexpr int ROW_THREADS = 256;        // knob: 256, 512, 1024
constexpr int BLOCK_THREADS = 256;      // knob: 128, 256
constexpr int CLUSTER = 8;              // knob: 4, 8
constexpr int CLUSTER_THREADS = 512;    // knob: 256, 512
constexpr int64_t STATS_BLOCKS = 1024;  // knob: 1024, 2048
constexpr int SPLIT_THREADS = 256;      // knob: 256, 512
constexpr int SPLIT_VPT = 4;            // knob: 2, 4
constexpr int64_t MIN_TILE = 2048;      // a tile_sums block sums at least this many elements

__device__ __forceinline__ double warp_sum(double v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Sum over the T = blockDim.x threads of row group threadIdx.y (every thread gets the same bits).
__device__ __forceinline__ double group_sum(double v, double* sh) {
    v = warp_sum(v);
    const int T = blockDim.x;
    if (T == 32) return v;
    const int wpr = T / 32, warp = threadIdx.y * wpr + threadIdx.x / 32;
    if ((threadIdx.x & 31) == 0) sh[warp] = v;
    __syncthreads();
    double s = 0.0;
    for (int k = 0; k < wpr; ++k) s += sh[threadIdx.y * wpr + k];
    __syncthreads();
    return s;
}

#if defined(__CUDACC__)
// The sum of one value per block over the CL blocks of a cluster, in rank order (the same bits in every
// block), through distributed shared memory. slot 1 is the last exchange: a block waits before leaving
// until every other has read its value.
template <int CL>
__device__ __forceinline__ double cluster_total(double v, double* xch, int slot) {
    cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
    if (threadIdx.x == 0 && threadIdx.y == 0) xch[slot] = v;
    cluster.sync();
    double s = 0.0;
    for (int r = 0; r < CL; ++r) s += *cluster.map_shared_rank(xch + slot, r);
    if (slot == 1) cluster.sync();
    return s;
}
#else
template <int CL>   // without nvcc no cluster is launched (see forward), so CL is always 1 here
inline double cluster_total(double v, double*, int) { return v; }
#endif

// Element k (< 4 * VPT) of thread gt of TT threads covering a row: column (k/4 * TT + gt) * 4 + k%4 when
// vectorised, else (k * TT + gt): coalesced either way.
__device__ __forceinline__ int64_t column(int k, int64_t gt, int64_t TT, bool vec) {
    return vec ? ((int64_t)(k / 4) * TT + gt) * 4 + (k & 3) : (int64_t)k * TT + gt;
}

// CL == 1: blockDim (T, rows per block), row blockIdx.x * blockDim.y + threadIdx.y.
// CL > 1: one row per cluster of CL blocks of T threads (blockDim.y == 1).
template <int VPT, int CL>
__global__ void __launch_bounds__(1024) rows_kernel(const float* __restrict__ x, const float* __restrict__ weight,
                                                    float* __restrict__ out,
                                                    int64_t B, int64_t N, float eps, bool vec) {
    __shared__ double sh[32];
    __shared__ double xch[2];     // slot 1 only: one exchange
    const int64_t T = blockDim.x;
    const int64_t row = CL == 1 ? (int64_t)blockIdx.x * blockDim.y + threadIdx.y : (int64_t)blockIdx.x / CL;
    const int64_t gt = CL == 1 ? (int64_t)threadIdx.x : (int64_t)(blockIdx.x % CL) * T + threadIdx.x;
    const int64_t TT = T * CL;
    const bool live = row < B;
    const float* xr = x + (live ? row : 0) * N;
    float v[4 * VPT];
    #pragma unroll
    for (int i = 0; i < VPT; ++i) {
        const int64_t c = column(4 * i, gt, TT, vec);
        if (vec) {
            const float4 a = live && c < N ? *reinterpret_cast<const float4*>(xr + c) : make_float4(0.f, 0.f, 0.f, 0.f);
            v[4 * i] = a.x; v[4 * i + 1] = a.y; v[4 * i + 2] = a.z; v[4 * i + 3] = a.w;
        } else {
            #pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int64_t ce = column(4 * i + e, gt, TT, vec);
                v[4 * i + e] = live && ce < N ? xr[ce] : 0.f;
            }
        }
    }
    double q = 0.0;
    #pragma unroll
    for (int k = 0; k < 4 * VPT; ++k) q += (double)v[k] * v[k];
    q = group_sum(q, sh);
    if constexpr (CL > 1) q = cluster_total<CL>(q, xch, 1);
    const float r = (float)rsqrt(q / (double)N + (double)eps);
    if (!live) return;
    float* o = out + row * N;
    #pragma unroll
    for (int i = 0; i < VPT; ++i) {
        const int64_t c = column(4 * i, gt, TT, vec);
        if (vec) {
            if (c < N) {
                const float4 w = *reinterpret_cast<const float4*>(weight + c);
                *reinterpret_cast<float4*>(o + c) = make_float4(v[4 * i] * r * w.x, v[4 * i + 1] * r * w.y,
                                                                v[4 * i + 2] * r * w.z, v[4 * i + 3] * r * w.w);
            }
        } else {
            #pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int64_t ce = column(4 * i + e, gt, TT, vec);
                if (ce < N) o[ce] = v[4 * i + e] * r * weight[ce];
            }
        }
    }
}

// grid B * tpr, tiles outermost: block (b, t) sums x * x over columns [t * len, (t + 1) * len) of row b.
__global__ void __launch_bounds__(SPLIT_THREADS) tile_sums(const float* __restrict__ x, double* __restrict__ sums,
                                                           int64_t B, int64_t N, int64_t len, int64_t tpr) {
    __shared__ double sh[32];
    const int64_t b = blockIdx.x % B, t = blockIdx.x / B;        // tile-major: the last tiles go last
    const int64_t j0 = t * len, j1 = j0 + len < N ? j0 + len : N;
    const float* xr = x + b * N;
    double q = 0.0;
    int64_t head = (int64_t)((16 - ((uintptr_t)(xr + j0) & 15)) & 15) / 4;
    if (head > j1 - j0) head = j1 - j0;
    if (threadIdx.x < head) q += (double)xr[j0 + threadIdx.x] * xr[j0 + threadIdx.x];
    const int64_t v0 = j0 + head, nv = (j1 - v0) / 4;
    const float4* x4 = reinterpret_cast<const float4*>(xr + v0);
    for (int64_t p = threadIdx.x; p < nv; p += SPLIT_THREADS) {
        const float4 a = x4[p];
        q += (double)a.x * a.x + (double)a.y * a.y + (double)a.z * a.z + (double)a.w * a.w;
    }
    for (int64_t j = v0 + 4 * nv + threadIdx.x; j < j1; j += SPLIT_THREADS) q += (double)xr[j] * xr[j];
    q = warp_sum(q);
    if ((threadIdx.x & 31) == 0) sh[threadIdx.x / 32] = q;
    __syncthreads();
    if (threadIdx.x == 0) {
        double a = 0.0;
        for (int w = 0; w < SPLIT_THREADS / 32; ++w) a += sh[w];
        sums[b * tpr + t] = a;
    }
}

// grid: column chunks of CH = SPLIT_THREADS * 4 * SPLIT_VPT, the last chunk first. weight of the
// chunk stay in registers while the block walks every row; rows go in groups of one per warp, each warp
// merging its row's tile sums into its scale in shared memory.
__global__ void __launch_bounds__(SPLIT_THREADS) split_norm(const float* __restrict__ x, const float* __restrict__ weight,
                                                            const double* __restrict__ sums,
                                                            float* __restrict__ out, int64_t B, int64_t N, int64_t tpr,
                                                            float eps, bool vec) {
    constexpr int WARPS = SPLIT_THREADS / 32;
    __shared__ float row_scale[WARPS];
    const int64_t c0 = (int64_t)(gridDim.x - 1 - blockIdx.x) * (SPLIT_THREADS * 4 * SPLIT_VPT);
    float w[4 * SPLIT_VPT];
    #pragma unroll
    for (int k = 0; k < 4 * SPLIT_VPT; ++k) {
        const int64_t c = c0 + column(k, threadIdx.x, SPLIT_THREADS, vec);
        w[k] = c < N ? weight[c] : 0.f;
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x / 32;
    for (int64_t g = 0; g < B; g += WARPS) {
        if (g + warp < B) {
            const int64_t b = g + warp;
            double q = 0.0;
            for (int64_t t = lane; t < tpr; t += 32) q += sums[b * tpr + t];
            q = warp_sum(q);
            if (lane == 0) row_scale[warp] = (float)rsqrt(q / (double)N + (double)eps);
        }
        __syncthreads();
        const int64_t g1 = g + WARPS < B ? g + WARPS : B;
        for (int64_t b = g; b < g1; ++b) {
            const float r = row_scale[b - g];
            const float* xr = x + b * N;
            float* o = out + b * N;
            #pragma unroll
            for (int i = 0; i < SPLIT_VPT; ++i) {
                const int64_t c = c0 + column(4 * i, threadIdx.x, SPLIT_THREADS, vec);
                if (vec) {
                    if (c < N) {
                        const float4 a = *reinterpret_cast<const float4*>(xr + c);
                        *reinterpret_cast<float4*>(o + c) = make_float4(a.x * r * w[4 * i], a.y * r * w[4 * i + 1],
                                                                        a.z * r * w[4 * i + 2], a.w * r * w[4 * i + 3]);
                    }
                } else {
                    #pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        const int64_t ce = c0 + column(4 * i + e, threadIdx.x, SPLIT_THREADS, vec);
                        if (ce < N) o[ce] = xr[ce] * r * w[4 * i + e];
                    }
                }
            }
        }
        __syncthreads();
    }
}

template <int VPT>
static void launch_rows(const float* x, const float* weight, float* out, int64_t B, int64_t N,
                        float eps, bool vec, cudaStream_t stream) {
    const int64_t need = (N + 4 * VPT - 1) / (4 * VPT);                  // threads per row
    const int T = (int)((need + 31) / 32 * 32);
    const int R = T < BLOCK_THREADS ? BLOCK_THREADS / T : 1;             // rows per block
    rows_kernel<VPT, 1><<<(unsigned)((B + R - 1) / R), dim3(T, R), 0, stream>>>(x, weight, out, B, N, eps, vec);
}

#if defined(__CUDACC__)
// One row per cluster of CLUSTER blocks; false (nothing launched) when such a cluster cannot be scheduled.
template <int VPT>
static bool launch_cluster(const float* x, const float* weight, float* out, int64_t B, int64_t N,
                           float eps, bool vec, cudaStream_t stream) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)(B * CLUSTER));
    cfg.blockDim = dim3(CLUSTER_THREADS);
    cfg.stream = stream;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = CLUSTER;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    int fit = 0;
    if (cudaOccupancyMaxActiveClusters(&fit, rows_kernel<VPT, CLUSTER>, &cfg) != cudaSuccess || fit < 1) {
        cudaGetLastError();
        return false;
    }
    return cudaLaunchKernelEx(&cfg, rows_kernel<VPT, CLUSTER>, x, weight, out, B, N, eps, vec) == cudaSuccess;
}
#endif

extern "C" int forward(const float* x, const float* weight, float* out,
                       int64_t B, int64_t N, float eps, void* workspace, int64_t workspace_bytes,
                       cudaStream_t stream) {
    if (B <= 0 || N <= 0) return 0;
    const bool vec = N % 4 == 0 && ((((uintptr_t)x | (uintptr_t)weight | (uintptr_t)out) & 15) == 0);
    if (N <= 4 * ROW_THREADS) launch_rows<1>(x, weight, out, B, N, eps, vec, stream);
    else if (N <= 8 * ROW_THREADS) launch_rows<2>(x, weight, out, B, N, eps, vec, stream);
    else if (N <= 16 * ROW_THREADS) launch_rows<4>(x, weight, out, B, N, eps, vec, stream);
    else if (N <= 32 * ROW_THREADS) launch_rows<8>(x, weight, out, B, N, eps, vec, stream);
    else {
        bool done = false;
#if defined(__CUDACC__)
        constexpr int64_t per = 4 * (int64_t)CLUSTER * CLUSTER_THREADS;    // elements per float4 slot
        if (B * CLUSTER <= 0x7fffffff) {
            if (N <= 2 * per) done = launch_cluster<2>(x, weight, out, B, N, eps, vec, stream);
            else if (N <= 4 * per) done = launch_cluster<4>(x, weight, out, B, N, eps, vec, stream);
            else if (N <= 8 * per) done = launch_cluster<8>(x, weight, out, B, N, eps, vec, stream);
        }
#endif
        if (!done) {
            int64_t tpr = (STATS_BLOCKS + B - 1) / B;                          // tiles per row
            if (tpr > N / MIN_TILE) tpr = N / MIN_TILE;
            const int64_t fit = workspace_bytes / (B * (int64_t)sizeof(double));
            if (tpr > fit) tpr = fit;
            if (tpr < 1) return 1;
            const int64_t len = (N + tpr - 1) / tpr;
            tpr = (N + len - 1) / len;                                         // no empty tiles
            double* sums = static_cast<double*>(workspace);
            tile_sums<<<(unsigned)(B * tpr), SPLIT_THREADS, 0, stream>>>(x, sums, B, N, len, tpr);
            const int64_t chunks = (N + SPLIT_THREADS * 4 * SPLIT_VPT - 1) / (SPLIT_THREADS * 4 * SPLIT_VPT);
            split_norm<<<(unsigned)chunks, SPLIT_THREADS, 0, stream>>>(x, weight, sums, out, B, N, tpr, eps, vec);
        }
    }
    return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
