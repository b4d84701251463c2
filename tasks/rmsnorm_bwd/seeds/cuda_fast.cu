// RMSNorm backward, CUDA seed (fast): grad_out and x are read from DRAM once wherever a row fits on chip,
// and grad_weight comes from per-block column partials (fixed order, double, no atomics: deterministic).
// Per row r = 1/sqrt(sum(x^2)/N + eps), c = r * sum(gw * x)/N (gw = grad_out * weight), then
// grad_x = r * (gw - x * r * c) and grad_weight = sum over rows of grad_out * x * r. Row sums: float per
// thread (at most 16 terms), double across threads and blocks. Three paths, chosen from (B, N) at run time:
//  rows    (N <= 16 * ROW_THREADS = 8192): the bench's many-row case (2048..65536 rows of 2048..8192). A
//          persistent grid of G blocks: at most MAX_GROUPS, what the workspace holds, and one wave
//          (cudaOccupancyMaxActiveBlocksPerMultiprocessor), rounded down to a whole number per SM. A block
//          of T threads (T a template constant, ROW_THREADS / 4, / 2 or / 1, the smallest that covers the
//          row at the smallest VPT: constant offsets, fewer registers) holds one row of x and grad_out in
//          registers (VPT float4 or 4 * VPT scalars each) and takes rows b = blockIdx.x, + G, ...; the
//          next row's loads are issued before this row is reduced (VPT <= PREFETCH_VPT). weight sits in
//          shared memory (each thread reads back only its own columns: no barrier), one __syncthreads
//          per row (the warp totals alternate between two shared buffers). Each thread keeps the
//          grad_weight sums of its columns in registers across its rows (float, <= B / G rows) and writes
//          them once as the block's partial; col_reduce adds the G partials of each column (double).
//          Two launches (one when G == 1).
//  cluster (nvcc only; N <= 16 * CLUSTER * CLUSTER_THREADS = 131072 and the workspace holds B partial rows;
//          longer rows than the rows path takes, or N > SPREAD_N with B * CLUSTER <= SMs): the few-row,
//          long-row case (B = 3 or 4 with N ~ 100K, B = 16 with N = 8194) that needs many SMs per row. One
//          row per thread-block cluster of CLUSTER blocks (cudaLaunchKernelEx; 16 is a non-portable size),
//          the row in registers; the block sums go to every block of the cluster through distributed
//          shared memory (cluster.sync, then an arrive that a block waits on only before it exits). grad_x
//          is written, grad_out * xhat goes to the workspace as the row's partial, col_reduce sums the B
//          partials. Two launches, one DRAM read of the inputs. Taken only when
//          cudaOccupancyMaxActiveClusters says such a cluster fits, else the rows or split path.
//  split   (longer rows, or no cluster): tile_sums: per (row, tile) sums of x*x and gw*x (double), tiles
//          outermost; split_grad: grid (column chunks, the last first -- tile_sums read those last, so
//          they are still in L2 -- ; row groups), weight in registers; each block merges the tile sums of
//          its rows itself (a warp per row) and walks its rows writing grad_x and summing grad_weight in
//          registers: straight to grad_weight with one row group, else partials and col_reduce. Two or
//          three launches; x and grad_out are read twice.
// Loads are float4 when N % 4 == 0 and grad_out, x, weight, grad_x, grad_weight are 16-byte aligned (the
// harness gives some calls element alignment only), else scalar; tile_sums reads float4 between a scalar
// head and tail when x and grad_out share their alignment. The workspace base is rounded up to 16 bytes.
// Under the CPU emulator of tests/task/test_seeds.py (no __CUDACC__, no clusters) the cluster path is
// compiled out and the rows or split path serves those shapes. Every workspace word read was written
// earlier in the same call.
// Paths on the bench shapes (defaults, an H200's 132 SMs; not measured yet):
//   BT=2048..65536 x 2048   rows, VPT 1, T 512, 3 blocks per SM (G 396), prefetch; col_reduce over 396
//   BT=4096..65536 x 4096   rows, VPT 2, T 512, 2 blocks per SM (G 264), prefetch
//   BT=2048 x 8192          rows, VPT 4, T 512, 1 block per SM (G 132), prefetch
//   BT=8191 x 5120          rows, VPT 3, T 512 (427 busy), 1 block per SM, prefetch
//   BT=1000 x 1000          rows, VPT 1, T 256, G 396 (2-3 rows per block)
//   B=32 x 4100             rows, VPT 3, T 512, one row per block (G 32)
//   B=16 x 8194             cluster of 16 x 160 threads, VPT 1 (scalar: N % 4 != 0)
//   B=4 x 100001, 3 x 100003  cluster of 16 x 416 threads, VPT 4 (scalar); col_reduce over B partials
// ptxas (sm_90, defaults): rows_bwd 40 registers (VPT 1), 63-64 (VPT 2: held to 2 blocks of 512 per SM by
// __launch_bounds__), 89 (VPT 3), 113-115 (VPT 4); cluster_bwd 32-86; split_grad 48; tile_sums 36;
// col_reduce 32; no spills for any knob value.
// PDL = 1 (sm_90): a call's second and third launches (split_grad after tile_sums, col_reduce after the rows,
// cluster or split kernel) are programmatic dependent launches: the kernel before lets them launch once all its
// blocks have started (griddepcontrol.launch_dependents), and they wait (griddepcontrol.wait) for its completion
// and memory before reading what it wrote, so a dependent kernel's launch gap overlaps the earlier one's tail
// (B=3,(100003,) is 0.94x of torch.compile at 12 us on two launches). The call's first launch stays plain.
// Off by default: not measured on a GPU yet.
#include <cstdint>
#include <cuda_runtime.h>
#if defined(__CUDACC__)
#include <cooperative_groups.h>
#define RMS_CLUSTERS 1
#else
#define RMS_CLUSTERS 0
#endif

constexpr int ROW_THREADS = 512;        // knob: 256, 512
constexpr int64_t MAX_GROUPS = 1024;    // knob: 256, 512, 1024
constexpr int PREFETCH_VPT = 4;         // knob: 0, 2, 4
constexpr int CLUSTER = 16;             // knob: 8, 16
constexpr int CLUSTER_THREADS = 512;    // knob: 256, 512
constexpr int64_t SPREAD_N = 8192;      // knob: 4096, 8192, 16384
constexpr int64_t STATS_BLOCKS = 1024;  // knob: 1024, 2048
constexpr int SPLIT_THREADS = 256;      // knob: 256, 512
constexpr int SPLIT_VPT = 2;            // knob: 1, 2, 4
constexpr int64_t GRAD_BLOCKS = 1024;   // knob: 1024, 2048
constexpr int PDL = 0;                  // knob: 0, 1
constexpr int64_t MIN_TILE = 2048;      // a tile_sums block sums at least this many elements
constexpr int ROWS_MAX_VPT = 4;         // the rows path holds up to 4 * 4 values of each array per thread

// Programmatic dependent launch (PDL): no-ops unless PDL and compiled for sm_90 or later.
__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if constexpr (PDL != 0) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if constexpr (PDL != 0) asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// kernel<<<grid, block, 0, stream>>>(args...), as a programmatic dependent launch when PDL (sm_90; the kernel
// calls pdl_wait before reading what the previous launch wrote); a plain launch when that is refused.
template <class... P, class... A>
static void launch_after(void (*kernel)(P...), dim3 grid, dim3 block, cudaStream_t stream, A... args) {
#if defined(__CUDACC__)
    if (PDL != 0) {
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = grid;
        cfg.blockDim = block;
        cfg.dynamicSmemBytes = 0;
        cfg.stream = stream;
        cudaLaunchAttribute attr[1];
        attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attr[0].val.programmaticStreamSerializationAllowed = 1;
        cfg.attrs = attr;
        cfg.numAttrs = 1;
        if (cudaLaunchKernelEx(&cfg, kernel, static_cast<P>(args)...) == cudaSuccess) return;
        cudaGetLastError();
    }
#endif
    kernel<<<grid, block, 0, stream>>>(args...);
}

struct Sums { double sq, dot; };        // sum x*x and sum gw*x over one tile of one row

__device__ __forceinline__ double warp_sum(double v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// The K sums over the block (blockDim.x threads, a multiple of 32, at most 1024), the same bits in every thread,
// with one __syncthreads. sh: this call's [K][32] buffer. A buffer may be written again only after a later
// call's barrier (which every thread reaches only after it has read this one): callers alternate two.
template <int K>
__device__ __forceinline__ void block_sums(double (&v)[K], double (*sh)[32]) {
    #pragma unroll
    for (int k = 0; k < K; ++k) v[k] = warp_sum(v[k]);
    const int warps = blockDim.x / 32;
    if (warps == 1) return;
    if ((threadIdx.x & 31) == 0) {
        #pragma unroll
        for (int k = 0; k < K; ++k) sh[k][threadIdx.x / 32] = v[k];
    }
    __syncthreads();
    #pragma unroll
    for (int k = 0; k < K; ++k) {
        double a = 0.0;
        #pragma unroll 1
        for (int w = 0; w < warps; ++w) a += sh[k][w];
        v[k] = a;
    }
}

// Element k (< 4 * VPT) of thread t of T threads covering a row: column (k/4 * T + t) * 4 + k%4 when
// vectorised, else k * T + t: coalesced either way. 32-bit: a row view is at most 2^17 columns here.
template <bool VEC>
__device__ __forceinline__ int column(int k, int t, int T) {
    return VEC ? ((k / 4) * T + t) * 4 + (k & 3) : k * T + t;
}

// The 4 * VPT values of thread t of T (zeros from column n on).
template <int VPT, bool VEC>
__device__ __forceinline__ void load_row(const float* __restrict__ p, float (&v)[4 * VPT], int t, int T, int n) {
    #pragma unroll
    for (int i = 0; i < VPT; ++i) {
        if (VEC) {
            const int c = column<true>(4 * i, t, T);
            const float4 a = c < n ? *reinterpret_cast<const float4*>(p + c) : make_float4(0.f, 0.f, 0.f, 0.f);
            v[4 * i] = a.x; v[4 * i + 1] = a.y; v[4 * i + 2] = a.z; v[4 * i + 3] = a.w;
        } else {
            #pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int c = column<false>(4 * i + e, t, T);
                v[4 * i + e] = c < n ? p[c] : 0.f;
            }
        }
    }
}

template <int VPT, bool VEC>
__device__ __forceinline__ void store_row(float* __restrict__ p, const float (&v)[4 * VPT], int t, int T, int n) {
    #pragma unroll
    for (int i = 0; i < VPT; ++i) {
        if (VEC) {
            const int c = column<true>(4 * i, t, T);
            if (c < n) *reinterpret_cast<float4*>(p + c) = make_float4(v[4 * i], v[4 * i + 1], v[4 * i + 2], v[4 * i + 3]);
        } else {
            #pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int c = column<false>(4 * i + e, t, T);
                if (c < n) p[c] = v[4 * i + e];
            }
        }
    }
}

// ------------------------------------------------------------------ rows path
// grid G, blockDim.x = T: rows blockIdx.x, + G, ...; the block's grad_weight partial to dw_out + blockIdx.x * N.
// PREFETCH: the loads of row b + G are issued before row b is reduced (8 * VPT more registers).
template <int VPT, int T, bool PREFETCH, bool VEC>
__global__ void __launch_bounds__(ROW_THREADS, VPT == 2 ? 1024 / ROW_THREADS : 1)   // VPT 2: <= 64 registers
rows_bwd(const float* __restrict__ grad_out, const float* __restrict__ x, const float* __restrict__ weight,
         float* __restrict__ grad_x, float* __restrict__ dw_out, int B, int n, double inv_n, float eps) {
    constexpr int K = 4 * VPT;
    __shared__ double sh[2][2][32];                   // [row parity][sum][warp]
    pdl_trigger();                                    // col_reduce may launch; it waits for this grid to end
    __shared__ float4 sw4[VPT * T];                   // weight (float4: 16-byte aligned), each thread at its
    float* sw = reinterpret_cast<float*>(sw4);        // own columns: no barrier
    const int t = threadIdx.x;
    float dw[K];
    {
        float w[K];
        load_row<VPT, VEC>(weight, w, t, T, n);
        store_row<VPT, VEC>(sw, w, t, T, n);
    }
    #pragma unroll
    for (int k = 0; k < K; ++k) dw[k] = 0.f;
    float xn[K], gn[K];                               // the next row, loading while this one is reduced
    if ((int)blockIdx.x < B) {
        load_row<VPT, VEC>(x + (int64_t)blockIdx.x * n, xn, t, T, n);
        load_row<VPT, VEC>(grad_out + (int64_t)blockIdx.x * n, gn, t, T, n);
    }
    int parity = 0;
    for (int b = blockIdx.x; b < B; b += gridDim.x) {
        float xv[K], gv[K];
        #pragma unroll
        for (int k = 0; k < K; ++k) { xv[k] = xn[k]; gv[k] = gn[k]; }
        const int next = b + (int)gridDim.x;
        if (PREFETCH && next < B) {
            load_row<VPT, VEC>(x + (int64_t)next * n, xn, t, T, n);
            load_row<VPT, VEC>(grad_out + (int64_t)next * n, gn, t, T, n);
        }
        float w[K];
        load_row<VPT, VEC>(sw, w, t, T, n);
        float q0 = 0.f, q1 = 0.f;                    // past N every value is 0: adds nothing
        #pragma unroll
        for (int k = 0; k < K; ++k) {
            q0 = fmaf(xv[k], xv[k], q0);
            q1 = fmaf(gv[k] * w[k], xv[k], q1);
        }
        double s[2] = {q0, q1};                       // <= 16 terms per thread in float, the rest double
        block_sums<2>(s, sh[parity]);
        load_row<VPT, VEC>(sw, w, t, T, n);           // again after the barrier: not held across it
        parity ^= 1;
        const float r = rsqrtf((float)(s[0] * inv_n + (double)eps)), c = (float)((double)r * s[1] * inv_n);
        #pragma unroll
        for (int k = 0; k < K; ++k) {
            const float xhat = xv[k] * r;
            dw[k] += gv[k] * xhat;
            xv[k] = r * (gv[k] * w[k] - xhat * c);     // grad_x
        }
        store_row<VPT, VEC>(grad_x + (int64_t)b * n, xv, t, T, n);
        if (!PREFETCH && next < B) {
            load_row<VPT, VEC>(x + (int64_t)next * n, xn, t, T, n);
            load_row<VPT, VEC>(grad_out + (int64_t)next * n, gn, t, T, n);
        }
    }
    store_row<VPT, VEC>(dw_out + (int64_t)blockIdx.x * n, dw, t, T, n);
}

// blockDim (32, Y), Y <= 32: column blockIdx.x * 32 + threadIdx.x; thread y adds partials y, y + Y, ... (four
// chains, so four loads in flight), then thread 0 of the column adds the Y sums in order (double, fixed order).
__global__ void __launch_bounds__(1024) col_reduce(const float* __restrict__ part, float* __restrict__ grad_weight,
                                                   int64_t N, int64_t G) {
    __shared__ double sh[32][33];
    pdl_wait();                                       // the partials of the kernel before are complete
    const int Y = blockDim.y, y = threadIdx.y;
    const int64_t j = (int64_t)blockIdx.x * 32 + threadIdx.x;
    double a0 = 0.0, a1 = 0.0, a2 = 0.0, a3 = 0.0;
    if (j < N) {
        int64_t g = y;
        for (; g + 3 * Y < G; g += 4 * Y) {
            a0 += part[g * N + j];
            a1 += part[(g + Y) * N + j];
            a2 += part[(g + 2 * Y) * N + j];
            a3 += part[(g + 3 * Y) * N + j];
        }
        for (; g < G; g += Y) a0 += part[g * N + j];
    }
    sh[y][threadIdx.x] = (a0 + a1) + (a2 + a3);
    __syncthreads();
    if (y == 0 && j < N) {
        double a = 0.0;
        for (int k = 0; k < Y; ++k) a += sh[k][threadIdx.x];
        grad_weight[j] = (float)a;
    }
}

// ------------------------------------------------------------------ cluster path
#if RMS_CLUSTERS
// grid B * CLUSTER, blockDim.x = T: row blockIdx.x / CLUSTER, thread gt = rank * T + t of TT = CLUSTER * T.
// The row's grad_out * xhat to dw_out + row * N.
template <int VPT, bool VEC>
__global__ void __launch_bounds__(CLUSTER_THREADS) cluster_bwd(const float* __restrict__ grad_out,
                                                               const float* __restrict__ x,
                                                               const float* __restrict__ weight,
                                                               float* __restrict__ grad_x, float* __restrict__ dw_out,
                                                               int n, float eps) {
    constexpr int K = 4 * VPT;
    __shared__ double sh[2][32];
    __shared__ double xch[2];
    pdl_trigger();
    cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
    const int64_t row = (int64_t)(blockIdx.x / CLUSTER), off = row * (int64_t)n;
    const int rank = (int)(blockIdx.x % CLUSTER);
    const int T = blockDim.x, TT = T * CLUSTER, gt = rank * T + threadIdx.x;
    float xv[K], gv[K], w[K];
    load_row<VPT, VEC>(x + off, xv, gt, TT, n);
    load_row<VPT, VEC>(grad_out + off, gv, gt, TT, n);
    load_row<VPT, VEC>(weight, w, gt, TT, n);
    float q0 = 0.f, q1 = 0.f;
    #pragma unroll
    for (int k = 0; k < K; ++k) {
        q0 = fmaf(xv[k], xv[k], q0);
        q1 = fmaf(gv[k] * w[k], xv[k], q1);
    }
    double s[2] = {q0, q1};                           // <= 16 terms per thread in float, the rest double
    block_sums<2>(s, sh);                              // called once: one buffer
    if (threadIdx.x == 0) { xch[0] = s[0]; xch[1] = s[1]; }
    cluster.sync();
    double sq = 0.0, dot = 0.0;
    for (int q = 0; q < CLUSTER; ++q) {                // rank order: the same bits in every block
        const double* o = cluster.map_shared_rank(xch, q);
        sq += o[0];
        dot += o[1];
    }
    cluster.barrier_arrive();                          // this block's reads of the others are done
    const double inv_n = 1.0 / (double)n;
    const double rd = rsqrt(sq * inv_n + (double)eps);
    const float r = (float)rd, c = (float)(rd * dot * inv_n);
    #pragma unroll
    for (int k = 0; k < K; ++k) {
        const float xhat = xv[k] * r;
        xv[k] = r * (gv[k] * w[k] - xhat * c);         // grad_x
        gv[k] = gv[k] * xhat;                          // this row's share of grad_weight
    }
    store_row<VPT, VEC>(grad_x + off, xv, gt, TT, n);
    store_row<VPT, VEC>(dw_out + off, gv, gt, TT, n);
    cluster.barrier_wait();                            // no block leaves while another reads its xch
}

// 0 launched, 1 not possible here (take another path), 2 a launch error.
template <int VPT, bool VEC>
static int launch_cluster(const float* grad_out, const float* x, const float* weight, float* grad_x, float* dw,
                          int64_t B, int64_t N, float eps, cudaStream_t stream) {
    const int64_t TT = (N + 4 * VPT - 1) / (4 * VPT);                   // threads per row
    const int64_t T = ((TT + CLUSTER - 1) / CLUSTER + 31) / 32 * 32;      // per block
    if (T > CLUSTER_THREADS || B * CLUSTER > 0x7fffffff) return 1;
    auto kernel = cluster_bwd<VPT, VEC>;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)(B * CLUSTER));
    cfg.blockDim = dim3((unsigned)T);
    cfg.dynamicSmemBytes = 0;
    cfg.stream = stream;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = CLUSTER;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    if (CLUSTER > 8 && cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) != cudaSuccess) {
        cudaGetLastError();
        return 1;
    }
    int fit = 0;
    if (cudaOccupancyMaxActiveClusters(&fit, kernel, &cfg) != cudaSuccess || fit < 1) {
        cudaGetLastError();
        return 1;
    }
    const float* go = grad_out;
    const float* xc = x;
    const float* wc = weight;
    const int n = (int)N;
    if (cudaLaunchKernelEx(&cfg, kernel, go, xc, wc, grad_x, dw, n, eps) != cudaSuccess) {
        cudaGetLastError();
        return 2;
    }
    return 0;
}

template <int VPT>
static int launch_cluster(const float* grad_out, const float* x, const float* weight, float* grad_x, float* dw,
                          int64_t B, int64_t N, float eps, bool vec, cudaStream_t stream) {
    return vec ? launch_cluster<VPT, true>(grad_out, x, weight, grad_x, dw, B, N, eps, stream)
               : launch_cluster<VPT, false>(grad_out, x, weight, grad_x, dw, B, N, eps, stream);
}
#endif

// ------------------------------------------------------------------ split path
// grid B * tpr, tiles outermost: block (b, t) sums over columns [t * len, (t + 1) * len) of row b.
__global__ void __launch_bounds__(SPLIT_THREADS) tile_sums(const float* __restrict__ grad_out, const float* __restrict__ x,
                                                           const float* __restrict__ weight, Sums* __restrict__ sums,
                                                           int64_t B, int64_t N, int64_t len, int64_t tpr) {
    __shared__ double sh[2][32];
    pdl_trigger();
    const int64_t b = blockIdx.x % B, t = blockIdx.x / B;        // tile-major: the last tiles go last
    const int64_t j0 = t * len, j1 = j0 + len < N ? j0 + len : N;
    const float* xr = x + b * N;
    const float* gr = grad_out + b * N;
    double s[2] = {0.0, 0.0};
    auto add = [&](float xv, float gv, float wv) {
        s[0] += (double)xv * xv;
        s[1] += (double)(gv * wv) * xv;
    };
    int64_t v0 = j1, nv = 0;                         // the float4 stretch [v0, v0 + 4 * nv), if any
    if (((((uintptr_t)x ^ (uintptr_t)grad_out) & 15) == 0)) {
        const int64_t head = (int64_t)((16 - ((uintptr_t)(xr + j0) & 15)) & 15) / 4;
        v0 = j0 + (head < j1 - j0 ? head : j1 - j0);
        nv = (j1 - v0) / 4;
    }
    for (int64_t j = j0 + threadIdx.x; j < v0; j += SPLIT_THREADS) add(xr[j], gr[j], weight[j]);
    const float4* x4 = reinterpret_cast<const float4*>(xr + v0);
    const float4* g4 = reinterpret_cast<const float4*>(gr + v0);
    for (int64_t q = threadIdx.x; q < nv; q += SPLIT_THREADS) {
        const float4 a = x4[q], c = g4[q];
        const int64_t j = v0 + 4 * q;
        add(a.x, c.x, weight[j]);
        add(a.y, c.y, weight[j + 1]);
        add(a.z, c.z, weight[j + 2]);
        add(a.w, c.w, weight[j + 3]);
    }
    for (int64_t j = v0 + 4 * nv + threadIdx.x; j < j1; j += SPLIT_THREADS) add(xr[j], gr[j], weight[j]);
    block_sums<2>(s, sh);
    if (threadIdx.x == 0) sums[b * tpr + t] = Sums{s[0], s[1]};
}

// grid (column chunks of SPLIT_THREADS * 4 * SPLIT_VPT, the last first; G): group blockIdx.y takes rows
// [y * rpg, (y + 1) * rpg). Rows go in groups of one per warp; each warp merges its row's tile sums into (r, c).
template <bool VEC>
__global__ void __launch_bounds__(SPLIT_THREADS) split_grad(const float* __restrict__ grad_out, const float* __restrict__ x,
                                                            const float* __restrict__ weight, const Sums* __restrict__ sums,
                                                            float* __restrict__ grad_x, float* __restrict__ dw_out,
                                                            int64_t B, int64_t N, int64_t tpr, int64_t rpg, float eps) {
    constexpr int WARPS = SPLIT_THREADS / 32;
    constexpr int K = 4 * SPLIT_VPT;
    constexpr int CH = SPLIT_THREADS * K;
    __shared__ float row_stat[WARPS][2];
    const int64_t c0 = (int64_t)(gridDim.x - 1 - blockIdx.x) * CH;   // last chunk first: in L2
    const int64_t b0 = (int64_t)blockIdx.y * rpg, b1 = b0 + rpg < B ? b0 + rpg : B;
    const int n = N - c0 < CH ? (int)(N - c0) : CH;   // columns of this chunk
    const int t = threadIdx.x;
    float w[K], dw[K];
    load_row<SPLIT_VPT, VEC>(weight + c0, w, t, SPLIT_THREADS, n);
    #pragma unroll
    for (int k = 0; k < K; ++k) dw[k] = 0.f;
    pdl_trigger();
    pdl_wait();                                       // tile_sums' sums are complete (the weight loads overlapped)
    const int lane = t & 31, warp = t / 32;
    const double inv_n = 1.0 / (double)N;
    for (int64_t g = b0; g < b1; g += WARPS) {
        if (g + warp < b1) {
            const Sums* ts = sums + (g + warp) * tpr;
            double sq = 0.0, dot = 0.0;
            for (int64_t q = lane; q < tpr; q += 32) { sq += ts[q].sq; dot += ts[q].dot; }
            sq = warp_sum(sq);
            dot = warp_sum(dot);
            if (lane == 0) {
                const double rd = rsqrt(sq * inv_n + (double)eps);
                row_stat[warp][0] = (float)rd;
                row_stat[warp][1] = (float)(rd * dot * inv_n);
            }
        }
        __syncthreads();
        const int64_t g1 = g + WARPS < b1 ? g + WARPS : b1;
        for (int64_t b = g; b < g1; ++b) {
            const float r = row_stat[b - g][0], c = row_stat[b - g][1];
            const int64_t off = b * N + c0;
            float xv[K], gv[K];
            load_row<SPLIT_VPT, VEC>(x + off, xv, t, SPLIT_THREADS, n);
            load_row<SPLIT_VPT, VEC>(grad_out + off, gv, t, SPLIT_THREADS, n);
            #pragma unroll
            for (int k = 0; k < K; ++k) {             // past N: gv = 0 and w = 0
                const float xhat = xv[k] * r;
                dw[k] += gv[k] * xhat;
                xv[k] = r * (gv[k] * w[k] - xhat * c);
            }
            store_row<SPLIT_VPT, VEC>(grad_x + off, xv, t, SPLIT_THREADS, n);
        }
        __syncthreads();                              // row_stat is rewritten by the next group
    }
    store_row<SPLIT_VPT, VEC>(dw_out + (int64_t)blockIdx.y * N + c0, dw, t, SPLIT_THREADS, n);
}

// ------------------------------------------------------------------ host side
// Streaming multiprocessors, and how many blocks of this kernel one holds at once (0, 0 under the emulator).
template <class Kernel>
static void residency(Kernel kernel, int threads, int64_t& sms, int64_t& per_sm) {
    sms = 0;
    per_sm = 0;
#if defined(__CUDACC__)
    int dev = 0, n = 0, per = 0;
    if (cudaGetDevice(&dev) == cudaSuccess && cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) == cudaSuccess
        && cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, kernel, threads, 0) == cudaSuccess && per > 0) {
        sms = n;
        per_sm = per;
        return;
    }
    cudaGetLastError();
#endif
}

static int64_t sm_count() {
#if defined(__CUDACC__)
    int dev = 0, n = 0;
    if (cudaGetDevice(&dev) == cudaSuccess && cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) == cudaSuccess)
        return n;
    cudaGetLastError();
#endif
    return 0;
}

// The rows path with blocks of T threads; returns G, the number of blocks, each with its partial in part (G > 1).
template <int VPT, int T, bool VEC>
static int64_t launch_rows(const float* grad_out, const float* x, const float* weight, float* grad_x,
                           float* grad_weight, float* part, int64_t part_fit, int64_t B, int64_t N, float eps,
                           cudaStream_t stream) {
    auto kernel = rows_bwd<VPT, T, VPT <= PREFETCH_VPT, VEC>;
    int64_t sms = 0, per_sm = 0;
    residency(kernel, T, sms, per_sm);
    int64_t G = B < MAX_GROUPS ? B : MAX_GROUPS;
    if (G > part_fit) G = part_fit;
    if (sms > 0) {
        if (G > sms * per_sm) G = sms * per_sm;                          // one wave
        if (G > sms) G = G / sms * sms;                                  // the same number of blocks on every SM
    }
    if (G < 1) G = 1;
    kernel<<<(unsigned)G, T, 0, stream>>>(grad_out, x, weight, grad_x, G == 1 ? grad_weight : part,
                                           (int)B, (int)N, 1.0 / (double)N, eps);
    return G;
}

// T: the smallest of ROW_THREADS / 4, / 2, / 1 that covers the row at VPT.
template <int VPT>
static int64_t launch_rows(const float* grad_out, const float* x, const float* weight, float* grad_x,
                           float* grad_weight, float* part, int64_t part_fit, int64_t B, int64_t N, float eps,
                           bool vec, cudaStream_t stream) {
    constexpr int T1 = ROW_THREADS / 4, T2 = ROW_THREADS / 2, T3 = ROW_THREADS;
    const int64_t need = (N + 4 * VPT - 1) / (4 * VPT);                   // threads per row
    if (need <= T1)
        return vec ? launch_rows<VPT, T1, true>(grad_out, x, weight, grad_x, grad_weight, part, part_fit, B, N, eps, stream)
                   : launch_rows<VPT, T1, false>(grad_out, x, weight, grad_x, grad_weight, part, part_fit, B, N, eps, stream);
    if (need <= T2)
        return vec ? launch_rows<VPT, T2, true>(grad_out, x, weight, grad_x, grad_weight, part, part_fit, B, N, eps, stream)
                   : launch_rows<VPT, T2, false>(grad_out, x, weight, grad_x, grad_weight, part, part_fit, B, N, eps, stream);
    return vec ? launch_rows<VPT, T3, true>(grad_out, x, weight, grad_x, grad_weight, part, part_fit, B, N, eps, stream)
               : launch_rows<VPT, T3, false>(grad_out, x, weight, grad_x, grad_weight, part, part_fit, B, N, eps, stream);
}

extern "C" int backward(const float* grad_out, const float* x, const float* weight,
                        float* grad_x, float* grad_weight,
                        int64_t B, int64_t N, float eps, void* workspace, int64_t workspace_bytes,
                        cudaStream_t stream) {
    if (N <= 0) return 0;
    if (B <= 0) {   // an empty sum: zeros
        cudaMemsetAsync(grad_weight, 0, N * sizeof(float), stream);
        return cudaGetLastError() == cudaSuccess ? 0 : 1;
    }
    const bool vec = N % 4 == 0 && ((((uintptr_t)grad_out | (uintptr_t)x | (uintptr_t)weight | (uintptr_t)grad_x |
                                      (uintptr_t)grad_weight) & 15) == 0);
    const int64_t pad = (int64_t)((16 - ((uintptr_t)workspace & 15)) & 15);   // 16-byte aligned workspace
    char* ws = static_cast<char*>(workspace) + pad;
    const int64_t ws_bytes = workspace_bytes - pad;
    if (ws_bytes < 0) return 1;
    float* part = reinterpret_cast<float*>(ws);
    const int64_t part_fit = ws_bytes / (N * (int64_t)sizeof(float));      // partial rows the workspace holds
    const int64_t rows_max = 4 * (int64_t)ROWS_MAX_VPT * ROW_THREADS;
    int64_t G = 0;                                                          // partials for col_reduce (0: none)
#if RMS_CLUSTERS
    const int64_t sms = sm_count();
    const bool spread = N > SPREAD_N && sms > 0 && B * CLUSTER <= sms;      // few rows: more blocks per row
    if ((N > rows_max || spread) && B <= part_fit && N <= 16 * (int64_t)CLUSTER * CLUSTER_THREADS) {
        float* dw = B == 1 ? grad_weight : part;
        const int64_t per = 4 * (int64_t)CLUSTER * CLUSTER_THREADS;         // elements per VPT step
        const int rc = N <= per ? launch_cluster<1>(grad_out, x, weight, grad_x, dw, B, N, eps, vec, stream)
                     : N <= 2 * per ? launch_cluster<2>(grad_out, x, weight, grad_x, dw, B, N, eps, vec, stream)
                                    : launch_cluster<4>(grad_out, x, weight, grad_x, dw, B, N, eps, vec, stream);
        if (rc == 2) return 1;
        if (rc == 0) G = B;
    }
#endif
    if (G == 0 && N <= rows_max && B <= 0x7fffffff) {
        const int vpt = (int)((N + 4 * ROW_THREADS - 1) / (4 * ROW_THREADS));   // 1 .. ROWS_MAX_VPT
        switch (vpt) {
            case 1: G = launch_rows<1>(grad_out, x, weight, grad_x, grad_weight, part, part_fit, B, N, eps, vec, stream); break;
            case 2: G = launch_rows<2>(grad_out, x, weight, grad_x, grad_weight, part, part_fit, B, N, eps, vec, stream); break;
            case 3: G = launch_rows<3>(grad_out, x, weight, grad_x, grad_weight, part, part_fit, B, N, eps, vec, stream); break;
            default: G = launch_rows<4>(grad_out, x, weight, grad_x, grad_weight, part, part_fit, B, N, eps, vec, stream); break;
        }
    } else if (G == 0) {
        constexpr int64_t CH = SPLIT_THREADS * 4 * SPLIT_VPT;
        const int64_t chunks = (N + CH - 1) / CH;
        int64_t groups = (GRAD_BLOCKS + chunks - 1) / chunks;
        if (groups > B) groups = B;
        if (groups > 256) groups = 256;
        const int64_t split_fit = (ws_bytes - B * (int64_t)sizeof(Sums) - 16) / (N * (int64_t)sizeof(float));
        if (groups > split_fit) groups = split_fit;                         // room for one tile per row
        if (groups < 1) groups = 1;
        const int64_t rpg = (B + groups - 1) / groups;
        groups = (B + rpg - 1) / rpg;                                       // no empty groups
        const int64_t part_bytes = groups == 1 ? 0 : (groups * N * (int64_t)sizeof(float) + 15) / 16 * 16;
        int64_t tpr = (STATS_BLOCKS + B - 1) / B;                           // tiles per row
        if (tpr > N / MIN_TILE) tpr = N / MIN_TILE;
        const int64_t fit = (ws_bytes - part_bytes) / (B * (int64_t)sizeof(Sums));
        if (tpr > fit) tpr = fit;
        if (tpr < 1) return 1;
        const int64_t len = (N + tpr - 1) / tpr;
        tpr = (N + len - 1) / len;                                          // no empty tiles
        if (B * tpr > 0x7fffffff || chunks > 0x7fffffff) return 1;
        Sums* sums = reinterpret_cast<Sums*>(ws + part_bytes);
        tile_sums<<<(unsigned)(B * tpr), SPLIT_THREADS, 0, stream>>>(grad_out, x, weight, sums, B, N, len, tpr);
        float* dw = groups == 1 ? grad_weight : part;
        launch_after(vec ? split_grad<true> : split_grad<false>, dim3((unsigned)chunks, (unsigned)groups),
                     dim3(SPLIT_THREADS), stream, grad_out, x, weight, (const Sums*)sums, grad_x, dw, B, N, tpr, rpg, eps);
        G = groups;
    }
    if (G > 1) {
        const unsigned Y = (unsigned)(G > 32 ? 32 : G);                    // partial chains per column
        launch_after(col_reduce, dim3((unsigned)((N + 31) / 32)), dim3(32, Y), stream, (const float*)part, grad_weight,
                     N, G);
    }
    return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
