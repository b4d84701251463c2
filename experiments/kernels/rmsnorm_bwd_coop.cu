// EXPERIMENT, not a seed: measured slower than the task's best/ on an H200 (experiments/results/seeds_stop32.h200.txt).
// RMSNorm backward, CUDA seed (coop): the fast seed's paths, with the launches that only wait on each other
// fused into one cooperative launch (cudaLaunchAttributeCooperative, every block co-resident; grid.sync()
// between phases). Why: on the judge's clock (CUDA-graph replay, device time) a launch boundary costs a few
// microseconds of an idle GPU (the last blocks of one kernel, then the ramp of the next): much of the time on
// the held-out shapes (3..32 rows, 1000 x 1000), a few percent on the large ones. Not measured here; the same
// mechanism in layernorm_bwd measured slower on an H200 (a cooperative launch and its grid.syncs cost more
// than the boundaries they replace: experiments/results/seed_layernorm_bwd_cuda_coop.h200.txt), so
// ROW_FUSE = 0 with COOP_MAX_ELEMS = 0 (the fast seed's launches) is the control to judge this file against.
// Per row r = 1/sqrt(sum(x^2)/N + eps), c = r * sum(gw * x)/N (gw = grad_out * weight), then
// grad_x = r * (gw - x * r * c) and grad_weight = sum over rows of grad_out * x * r. Row sums: float per
// thread (at most 16 terms), double across threads and blocks; tile sums and column sums in double.
// Four paths, chosen from (B, N) at run time:
//  rows    (N <= 16 * ROW_THREADS, unless spread below): as the fast seed. A persistent grid of G blocks (at
//          most MAX_GROUPS, what the workspace holds and one wave by cudaOccupancyMaxActiveBlocksPerMultiprocessor,
//          rounded down to a whole number per SM, then to the fewest blocks that give the same rows per block:
//          fewer partials, the same critical path); a block of T threads (ROW_THREADS / 4, / 2 or / 1, the
//          smallest that covers the row) holds one row of x and grad_out in registers and takes rows
//          b = blockIdx.x, + G, ...; the next row's loads are issued before this row is reduced
//          (VPT <= PREFETCH_VPT); weight in shared memory; each thread keeps the grad_weight sums of its own
//          columns across its rows and writes them as the block's partial. ROW_FUSE: the same launch
//          (cooperative) then sums the G partials per column after a grid.sync, every block a share of the
//          column units (reduce_columns, its shared memory the weight's); else, or when the cooperative
//          launch is refused, col_reduce does (two launches; one when G == 1).
//  fused   (N > 16 * ROW_THREADS, or N > SPREAD_N with B * CLUSTER <= SMs; B * N <= COOP_MAX_ELEMS): the
//          few-row, long-row case (B = 3..16 with N = 8194..100003). One cooperative launch of G = SMs *
//          min(COOP_PER_SM, what fits) blocks, three phases: per (row, tile) sums of x*x and gw*x (double;
//          tiles of >= COOP_MIN_TILE elements, about one per block, tiles outermost); grid.sync; per
//          (column chunk of COOP_THREADS * 4 * COOP_VPT, row group) items, the last chunk first: every block
//          merges the tile sums of its rows itself (a warp per row), writes grad_x and sums grad_weight over
//          its rows (straight to grad_weight when there is one row group); grid.sync; the column sums of the
//          row groups' partials. x and grad_out are read twice, the second time from L2 (at most
//          COOP_MAX_ELEMS elements each). When the cooperative launch is refused (and always under the CPU
//          emulator) the same three phases run as three ordinary launches of the same grid.
//  cluster (nvcc only; longer rows or spread, not fused, N <= 16 * CLUSTER * CLUSTER_THREADS, the workspace
//          holds B partial rows): as the fast seed, one row per thread-block cluster (distributed shared
//          memory for the row sums), the row's grad_weight share as a partial, col_reduce sums them. Two
//          launches (a cooperative launch is not combined with clusters here). Taken only when
//          cudaOccupancyMaxActiveClusters says such a cluster fits.
//  split   (the rest): tile_sums, then split_grad (grid (column chunks, the last first: in L2; row groups)),
//          then col_reduce when there is more than one row group: the fused path's phases as two or three
//          launches sized for large inputs, as the fast seed.
// Column sums (reduce_columns): a unit of U columns (a power of two, 8..T) per block at a time, the T / U
// threads of a column taking the partials sub, + T / U, ... in four chains (L2 loads: __ldcg, the partials
// were written earlier in this launch or call); U is the widest that gives every block a unit and each
// thread at most 8 partials. Sums in a fixed order (warp shuffles, then shared memory): deterministic.
// Loads are float4 when N % 4 == 0 and grad_out, x, weight, grad_x, grad_weight are 16-byte aligned (the
// harness gives some calls element alignment only), else scalar; tile sums read float4 between a scalar head
// and tail when x and grad_out share their alignment. The workspace base is rounded up to 16 bytes. Every
// workspace word read was written earlier in the same call.
// Under the CPU emulator of tests/task/test_seeds.py (no __CUDACC__: blocks run one after another, no
// grid.sync, no clusters) the cooperative launches and the cluster path are not compiled: the rows path
// runs with col_reduce, the fused path as its three phase launches (G = EMU_BLOCKS), so the emulator checks
// the indexing of every phase.
// Paths on the bench shapes (defaults, an H200's 132 SMs; blocks per SM from the ptxas counts below; not
// measured yet):
//   BT=4096 x 4096          rows, VPT 2, T 512, 2 per SM: G 256 (16 rows each), fused column sums U 16
//   BT=16384 x 4096         rows, VPT 2, T 512, G 261 (63 rows each), U 8
//   BT=65536 x 4096         rows, VPT 2, T 512, G 264 (249 rows each), U 8
//   BT=2048 x 8192          rows, VPT 4, T 512, 1 per SM: G 128 (16 rows each), U 32
//   BT=16384 x 2048         rows, VPT 1, T 512, 3 per SM: G 391 (42 rows each), U 8
//   BT=65536 x 2048         rows, VPT 1, T 512, G 395 (166 rows each), U 8
//   held out: BT=8191 x 5120  rows, VPT 3, T 512, 1 per SM: G 131 (63 rows each), U 16
//             BT=1000 x 1000  rows, VPT 1, T 256, 6 per SM, the workspace 520 partials: G 334 (3 rows each), U 8
//             B=32 x 4100     rows, VPT 3, T 512, G 32 (a row each), U 128
//             B=16 x 8194     fused, G 264 x 256: 16 tiles of 513 per row; 9 chunks x 16 groups; U 16
//             B=4 x 100001    fused, G 264 x 256: 66 tiles of 1516; 98 chunks x 2 groups; U 256
//             BT=3 x 100003   fused, G 264 x 256: 88 tiles of 1137; 98 chunks x 2 groups; U 256
//   Every one a single launch.
// ptxas (sm_90a, defaults): rows_bwd 40 registers (VPT 1: held to 3 blocks of 512 per SM by __launch_bounds__),
// 63-64 (VPT 2: 2 blocks of 512), 88-90 (VPT 3), 112-122 (VPT 4), the ROW_FUSE variants within 7 of the plain
// ones; fused_bwd 64 (cooperative, and phase 2 alone), 52 (phase 1), 40 (phase 3); cluster_bwd 32-86;
// split_grad 48; tile_sums 32; col_reduce 32; no spills, for every knob value.
#include <cstdint>
#include <cuda_runtime.h>
#if defined(__CUDACC__)
#include <cooperative_groups.h>
#define RMS_CLUSTERS 1
#define RMS_COOP 1
#define LD_CG(p) __ldcg(p)
#else
#define RMS_CLUSTERS 0
#define RMS_COOP 0
#define LD_CG(p) (*(p))
#endif

constexpr int ROW_THREADS = 512;        // knob: 256, 512
constexpr int64_t MAX_GROUPS = 1024;    // knob: 256, 512, 1024
constexpr int PREFETCH_VPT = 4;         // knob: 0, 2, 4
constexpr int CLUSTER = 8;              // knob: 8, 16
constexpr int CLUSTER_THREADS = 512;    // knob: 256, 512
constexpr int64_t SPREAD_N = 8192;      // knob: 4096, 8192, 16384
constexpr int64_t STATS_BLOCKS = 1024;  // knob: 1024, 2048
constexpr int SPLIT_THREADS = 256;      // knob: 256, 512
constexpr int SPLIT_VPT = 2;            // knob: 1, 2, 4
constexpr int64_t GRAD_BLOCKS = 2048;   // knob: 1024, 2048
constexpr int ROW_FUSE = 1;             // knob: 0, 1
constexpr int COOP_THREADS = 256;       // knob: 256, 512
constexpr int COOP_VPT = 1;             // knob: 1, 2
constexpr int COOP_PER_SM = 2;          // knob: 1, 2, 4
constexpr int64_t COOP_MAX_ELEMS = 4194304;   // knob: 0, 1048576, 4194304, 16777216
constexpr int64_t COOP_MIN_TILE = 512;  // knob: 256, 512, 1024
constexpr int64_t MIN_TILE = 2048;      // a tile_sums block sums at least this many elements
constexpr int ROWS_MAX_VPT = 4;         // the rows path holds up to 4 * 4 values of each array per thread
constexpr int COL_THREADS = 256;        // col_reduce's blocks
constexpr int COL_MAX_LOADS = 8;        // partials per thread in a column sum, while the unit can narrow
constexpr int64_t EMU_BLOCKS = 64;      // the fused path's grid under the CPU emulator (no occupancy there)

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

// ------------------------------------------------------------------ column sums
// grad_weight[j] = the sum of the G partials part[g * N + j], by the calling blocks (T threads each, T a power
// of two) together: units of U columns (U a power of two, 8 <= U <= T), blockIdx.x, + gridDim.x, ...; thread t
// takes column t % U of the unit and partials t / U, + T / U, ... (four chains: four loads in flight), the
// threads of a column in one warp add theirs by shuffles, then thread t < U adds the warps' (or, U >= 32, the
// T / U threads') sums in order from red (T doubles of shared memory). Partials are read from L2 (written in
// this launch by other blocks, or by an earlier kernel).
template <int T>
__device__ __forceinline__ void reduce_columns(const float* __restrict__ part, float* __restrict__ grad_weight,
                                               int64_t N, int64_t G, int U, double* red) {
    const int t = threadIdx.x, col = t & (U - 1), S = T / U;
    for (int64_t u = blockIdx.x; u * U < N; u += gridDim.x) {
        const int64_t j = u * U + col;
        double a0 = 0.0, a1 = 0.0, a2 = 0.0, a3 = 0.0;
        if (j < N) {
            int64_t g = t / U;
            for (; g + 3 * S < G; g += 4 * S) {
                a0 += LD_CG(part + g * N + j);
                a1 += LD_CG(part + (g + S) * N + j);
                a2 += LD_CG(part + (g + 2 * S) * N + j);
                a3 += LD_CG(part + (g + 3 * S) * N + j);
            }
            for (; g < G; g += S) a0 += LD_CG(part + g * N + j);
        }
        double a = (a0 + a1) + (a2 + a3);
        for (int o = U; o < 32; o <<= 1) a += __shfl_xor_sync(0xffffffffu, a, o);   // U < 32: a column's lanes
        red[t] = a;
        __syncthreads();
        if (t < U && j < N) {
            const int step = U < 32 ? 32 : U;         // the next sum of the same column: next warp, or next row
            double s = 0.0;
            for (int k = t; k < T; k += step) s += red[k];
            grad_weight[j] = (float)s;
        }
        __syncthreads();                              // red is rewritten by the next unit
    }
}

// The widest unit (a power of two, T down to 8) that gives each of `blocks` blocks a unit and each thread at
// most COL_MAX_LOADS partials.
static int column_unit(int64_t N, int64_t G, int64_t blocks, int T) {
    int U = T;
    while (U > 8 && ((N + U - 1) / U < blocks || (G * U + T - 1) / T > COL_MAX_LOADS)) U /= 2;
    return U;
}

// grid ceil(N / U), blockDim.x = T.
template <int T>
__global__ void __launch_bounds__(T) col_reduce(const float* __restrict__ part, float* __restrict__ grad_weight,
                                                int64_t N, int64_t G, int U) {
    __shared__ double red[T];
    reduce_columns<T>(part, grad_weight, N, G, U, red);
}

// ------------------------------------------------------------------ rows path
// grid G, blockDim.x = T: rows blockIdx.x, + G, ...; the block's grad_weight partial to dw_out + blockIdx.x * N.
// PREFETCH: the loads of row b + G are issued before row b is reduced (8 * VPT more registers).
// FUSE (cooperative launch only): then grid.sync and the column sums of the G partials into grad_weight,
// units of U columns, in the weight's shared memory (no longer read). Registers: <= 40 at VPT 1 (3 blocks of 512
// per SM; the column sums would take the fused variant to 48-56), <= 64 at VPT 2 (2 blocks of 512).
template <int VPT, int T, bool PREFETCH, bool VEC, bool FUSE>
__global__ void __launch_bounds__(ROW_THREADS, VPT == 1 ? 1536 / ROW_THREADS : VPT == 2 ? 1024 / ROW_THREADS : 1)
rows_bwd(const float* __restrict__ grad_out, const float* __restrict__ x, const float* __restrict__ weight,
         float* __restrict__ grad_x, float* __restrict__ dw_out, float* __restrict__ grad_weight, int B, int n,
         double inv_n, float eps, int U) {
    constexpr int K = 4 * VPT;
    __shared__ double sh[2][2][32];                   // [row parity][sum][warp]
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
#if RMS_COOP
    if constexpr (FUSE) {
        cooperative_groups::this_grid().sync();       // every partial written; every read of sw done
        reduce_columns<T>(dw_out, grad_weight, n, gridDim.x, U, reinterpret_cast<double*>(sw4));
    }
#endif
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

// ------------------------------------------------------------------ tile sums and chunk gradients
// The block's sums of x*x and gw*x over columns [t * len, (t + 1) * len) of row b, into sums[b * tpr + t].
// sh: this call's buffer (block_sums: callers alternate two).
__device__ __forceinline__ void tile_sum(const float* __restrict__ grad_out, const float* __restrict__ x,
                                         const float* __restrict__ weight, Sums* __restrict__ sums, int64_t b,
                                         int64_t t, int64_t N, int64_t len, int64_t tpr, double (*sh)[32]) {
    const int64_t T = blockDim.x;
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
    for (int64_t j = j0 + threadIdx.x; j < v0; j += T) add(xr[j], gr[j], weight[j]);
    const float4* x4 = reinterpret_cast<const float4*>(xr + v0);
    const float4* g4 = reinterpret_cast<const float4*>(gr + v0);
    for (int64_t q = threadIdx.x; q < nv; q += T) {
        const float4 a = x4[q], c = g4[q];
        const int64_t j = v0 + 4 * q;
        add(a.x, c.x, weight[j]);
        add(a.y, c.y, weight[j + 1]);
        add(a.z, c.z, weight[j + 2]);
        add(a.w, c.w, weight[j + 3]);
    }
    for (int64_t j = v0 + 4 * nv + threadIdx.x; j < j1; j += T) add(xr[j], gr[j], weight[j]);
    block_sums<2>(s, sh);
    if (threadIdx.x == 0) sums[b * tpr + t] = Sums{s[0], s[1]};
}

// The block (T threads) takes columns [c0, c0 + T * 4 * VPT) of rows [b0, b1): rows in groups of one per
// warp, each warp merging its row's tpr tile sums into (r, c) (L2 loads: maybe written in this launch);
// grad_x written, the column sums of grad_out * xhat over the rows to dw_out + c0 (a row of N).
template <int T, int VPT, bool VEC>
__device__ __forceinline__ void grad_chunk(const float* __restrict__ grad_out, const float* __restrict__ x,
                                           const float* __restrict__ weight, const Sums* __restrict__ sums,
                                           float* __restrict__ grad_x, float* __restrict__ dw_out, int64_t c0,
                                           int64_t b0, int64_t b1, int64_t N, int64_t tpr, float eps,
                                           float (*row_stat)[2]) {
    constexpr int WARPS = T / 32;
    constexpr int K = 4 * VPT;
    constexpr int CH = T * K;
    const int n = N - c0 < CH ? (int)(N - c0) : CH;   // columns of this chunk
    const int t = threadIdx.x;
    float w[K], dw[K];
    load_row<VPT, VEC>(weight + c0, w, t, T, n);
    #pragma unroll
    for (int k = 0; k < K; ++k) dw[k] = 0.f;
    const int lane = t & 31, warp = t / 32;
    const double inv_n = 1.0 / (double)N;
    for (int64_t g = b0; g < b1; g += WARPS) {
        if (g + warp < b1) {
            const Sums* ts = sums + (g + warp) * tpr;
            double sq = 0.0, dot = 0.0;
            for (int64_t q = lane; q < tpr; q += 32) { sq += LD_CG(&ts[q].sq); dot += LD_CG(&ts[q].dot); }
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
            load_row<VPT, VEC>(x + off, xv, t, T, n);
            load_row<VPT, VEC>(grad_out + off, gv, t, T, n);
            #pragma unroll
            for (int k = 0; k < K; ++k) {             // past N: gv = 0 and w = 0
                const float xhat = xv[k] * r;
                dw[k] += gv[k] * xhat;
                xv[k] = r * (gv[k] * w[k] - xhat * c);
            }
            store_row<VPT, VEC>(grad_x + off, xv, t, T, n);
        }
        __syncthreads();                              // row_stat is rewritten by the next group
    }
    store_row<VPT, VEC>(dw_out + c0, dw, t, T, n);
}

// ------------------------------------------------------------------ split path
// grid B * tpr, tiles outermost (block (b, t) = t * B + b): the last tiles go last.
__global__ void __launch_bounds__(SPLIT_THREADS) tile_sums(const float* __restrict__ grad_out, const float* __restrict__ x,
                                                           const float* __restrict__ weight, Sums* __restrict__ sums,
                                                           int64_t B, int64_t N, int64_t len, int64_t tpr) {
    __shared__ double sh[2][32];
    tile_sum(grad_out, x, weight, sums, blockIdx.x % B, blockIdx.x / B, N, len, tpr, sh);   // once: one buffer
}

// grid (column chunks of SPLIT_THREADS * 4 * SPLIT_VPT, the last first: in L2; G): group blockIdx.y takes rows
// [y * rpg, (y + 1) * rpg), its column sums to dw_out + y * N.
template <bool VEC>
__global__ void __launch_bounds__(SPLIT_THREADS) split_grad(const float* __restrict__ grad_out, const float* __restrict__ x,
                                                            const float* __restrict__ weight, const Sums* __restrict__ sums,
                                                            float* __restrict__ grad_x, float* __restrict__ dw_out,
                                                            int64_t B, int64_t N, int64_t tpr, int64_t rpg, float eps) {
    constexpr int64_t CH = SPLIT_THREADS * 4 * SPLIT_VPT;
    __shared__ float row_stat[SPLIT_THREADS / 32][2];
    const int64_t c0 = (int64_t)(gridDim.x - 1 - blockIdx.x) * CH;
    const int64_t b0 = (int64_t)blockIdx.y * rpg, b1 = b0 + rpg < B ? b0 + rpg : B;
    grad_chunk<SPLIT_THREADS, SPLIT_VPT, VEC>(grad_out, x, weight, sums, grad_x, dw_out + (int64_t)blockIdx.y * N,
                                              c0, b0, b1, N, tpr, eps, row_stat);
}

// ------------------------------------------------------------------ fused path
// PHASE 0 (cooperative launch, nvcc only): the three phases with a grid.sync between them; 1, 2, 3: that
// phase alone (ordinary launches, the same grid). 1: the tile sums of B * tpr (row, tile) items; 2: chunks *
// groups (column chunk, the last first; row group of rpg rows) items, column sums straight to grad_weight
// when groups == 1, else to part (groups rows of N); 3 (groups > 1): part summed per column, units of U.
// Registers: <= 64 (4 blocks of 256 or 2 of 512 per SM; unbounded, ptxas takes 115-131 at COOP_VPT 2).
template <int PHASE, bool VEC>
__global__ void __launch_bounds__(COOP_THREADS, 1024 / COOP_THREADS)
fused_bwd(const float* __restrict__ grad_out, const float* __restrict__ x, const float* __restrict__ weight,
          Sums* __restrict__ sums, float* __restrict__ grad_x, float* __restrict__ part, float* __restrict__ grad_weight,
          int64_t B, int64_t N, int64_t len, int64_t tpr, int64_t chunks, int64_t rpg, int64_t groups, int U, float eps) {
    constexpr int64_t CH = COOP_THREADS * 4 * COOP_VPT;
    __shared__ double sh[2][2][32];
    __shared__ float row_stat[COOP_THREADS / 32][2];
    __shared__ double red[COOP_THREADS];
    if (PHASE == 0 || PHASE == 1) {
        int parity = 0;
        for (int64_t i = blockIdx.x; i < B * tpr; i += gridDim.x, parity ^= 1)
            tile_sum(grad_out, x, weight, sums, i % B, i / B, N, len, tpr, sh[parity]);
    }
#if RMS_COOP
    if (PHASE == 0) cooperative_groups::this_grid().sync();
#endif
    if (PHASE == 0 || PHASE == 2) {
        float* dw = groups == 1 ? grad_weight : part;
        for (int64_t i = blockIdx.x; i < chunks * groups; i += gridDim.x) {
            const int64_t c = chunks - 1 - i % chunks, g = i / chunks;
            const int64_t b0 = g * rpg, b1 = b0 + rpg < B ? b0 + rpg : B;
            grad_chunk<COOP_THREADS, COOP_VPT, VEC>(grad_out, x, weight, sums, grad_x, dw + g * N, c * CH, b0, b1, N,
                                                    tpr, eps, row_stat);
        }
    }
    if ((PHASE == 0 || PHASE == 3) && groups > 1) {
#if RMS_COOP
        if (PHASE == 0) cooperative_groups::this_grid().sync();
#endif
        reduce_columns<COOP_THREADS>(part, grad_weight, N, groups, U, red);
    }
}

// ------------------------------------------------------------------ host side
#if RMS_COOP
// A cooperative launch of grid blocks (all co-resident: the caller sized grid by occupancy); false if refused.
template <class Kernel, class... Args>
static bool launch_coop(Kernel kernel, int64_t grid, int threads, cudaStream_t stream, Args... args) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)grid);
    cfg.blockDim = dim3((unsigned)threads);
    cfg.dynamicSmemBytes = 0;
    cfg.stream = stream;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeCooperative;
    attr[0].val.cooperative = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    if (cudaLaunchKernelEx(&cfg, kernel, args...) == cudaSuccess) return true;
    cudaGetLastError();
    return false;
}
#endif

// Streaming multiprocessors (0 under the emulator or on an error).
static int64_t sm_count() {
#if defined(__CUDACC__)
    int dev = 0, n = 0;
    if (cudaGetDevice(&dev) == cudaSuccess && cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) == cudaSuccess)
        return n;
    cudaGetLastError();
#endif
    return 0;
}

// How many blocks of this kernel one SM holds at once (0 under the emulator or on an error).
template <class Kernel>
static int64_t blocks_per_sm(Kernel kernel, int threads) {
#if defined(__CUDACC__)
    int per = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, kernel, threads, 0) == cudaSuccess && per > 0) return per;
    cudaGetLastError();
#else
    (void)kernel;
    (void)threads;
#endif
    return 0;
}

// col_reduce of G partials (rows of N in part) into grad_weight.
static void launch_col_reduce(const float* part, float* grad_weight, int64_t N, int64_t G, cudaStream_t stream) {
    const int64_t sms = sm_count();
    const int U = column_unit(N, G, sms > 0 ? 2 * sms : EMU_BLOCKS, COL_THREADS);
    col_reduce<COL_THREADS><<<(unsigned)((N + U - 1) / U), COL_THREADS, 0, stream>>>(part, grad_weight, N, G, U);
}

// The rows path's blocks: at most MAX_GROUPS, part_fit and one wave (per blocks on each of sms SMs, when
// known), rounded down to a whole number per SM, then the fewest that give the same rows per block.
static int64_t row_groups(int64_t B, int64_t part_fit, int64_t sms, int64_t per) {
    int64_t G = B < MAX_GROUPS ? B : MAX_GROUPS;
    if (G > part_fit) G = part_fit;
    if (sms > 0 && per > 0) {
        if (G > sms * per) G = sms * per;                                // one wave
        if (G > sms) G = G / sms * sms;                                  // the same number of blocks on every SM
    }
    if (G < 1) G = 1;
    const int64_t rows = (B + G - 1) / G;                                 // rows of the busiest block
    return (B + rows - 1) / rows;
}

// The rows path with blocks of T threads: one cooperative launch (ROW_FUSE), else rows_bwd and col_reduce.
template <int VPT, int T, bool VEC>
static void launch_rows(const float* grad_out, const float* x, const float* weight, float* grad_x,
                        float* grad_weight, float* part, int64_t part_fit, int64_t B, int64_t N, float eps,
                        cudaStream_t stream) {
    constexpr bool PF = VPT <= PREFETCH_VPT;
    const int64_t sms = sm_count();
    const double inv_n = 1.0 / (double)N;
#if RMS_COOP
    if (ROW_FUSE) {
        auto fused = rows_bwd<VPT, T, PF, VEC, true>;
        const int64_t per = blocks_per_sm(fused, T);
        const int64_t G = row_groups(B, part_fit, sms, per);
        if (sms > 0 && per > 0 && G > 1 &&
            launch_coop(fused, G, T, stream, grad_out, x, weight, grad_x, part, grad_weight, (int)B, (int)N, inv_n,
                        eps, column_unit(N, G, G, T)))
            return;
    }
#endif
    auto kernel = rows_bwd<VPT, T, PF, VEC, false>;
    const int64_t G = row_groups(B, part_fit, sms, blocks_per_sm(kernel, T));
    kernel<<<(unsigned)G, T, 0, stream>>>(grad_out, x, weight, grad_x, G == 1 ? grad_weight : part, grad_weight,
                                           (int)B, (int)N, inv_n, eps, 8);
    if (G > 1) launch_col_reduce(part, grad_weight, N, G, stream);
}

// T: the smallest of ROW_THREADS / 4, / 2, / 1 that covers the row at VPT.
template <int VPT>
static void launch_rows(const float* grad_out, const float* x, const float* weight, float* grad_x,
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

// The fused path if it is taken here (size, workspace): 0 launched, 1 not taken (nothing launched).
template <bool VEC>
static int launch_fused(const float* grad_out, const float* x, const float* weight, float* grad_x,
                        float* grad_weight, int64_t B, int64_t N, float eps, char* ws, int64_t ws_bytes,
                        cudaStream_t stream) {
    if (B * N > COOP_MAX_ELEMS) return 1;
    constexpr int64_t CH = COOP_THREADS * 4 * COOP_VPT;
    int64_t G = EMU_BLOCKS;
#if RMS_COOP
    auto kernel = fused_bwd<0, VEC>;
    const int64_t sms = sm_count(), per = blocks_per_sm(kernel, COOP_THREADS);
    if (sms <= 0 || per <= 0) return 1;
    G = sms * (per < COOP_PER_SM ? per : COOP_PER_SM);                 // co-resident
#endif
    int64_t tpr = (G + B - 1) / B;                                      // about one tile per block
    if (tpr > N / COOP_MIN_TILE) tpr = N / COOP_MIN_TILE;
    if (tpr < 1) tpr = 1;
    const int64_t len = (N + tpr - 1) / tpr;
    tpr = (N + len - 1) / len;                                          // no empty tiles
    const int64_t chunks = (N + CH - 1) / CH;
    int64_t groups = G / chunks;                                        // about one item per block
    if (groups > B) groups = B;
    if (groups < 1) groups = 1;
    const int64_t rpg = (B + groups - 1) / groups;
    groups = (B + rpg - 1) / rpg;                                       // no empty groups
    const int64_t part_bytes = groups == 1 ? 0 : (groups * N * (int64_t)sizeof(float) + 15) / 16 * 16;
    if (part_bytes + B * tpr * (int64_t)sizeof(Sums) > ws_bytes) return 1;
    float* part = reinterpret_cast<float*>(ws);
    Sums* sums = reinterpret_cast<Sums*>(ws + part_bytes);
    const int U = column_unit(N, groups, G, COOP_THREADS);
#if RMS_COOP
    if (launch_coop(kernel, G, COOP_THREADS, stream, grad_out, x, weight, sums, grad_x, part, grad_weight, B, N, len,
                    tpr, chunks, rpg, groups, U, eps))
        return 0;
#endif
    fused_bwd<1, VEC><<<(unsigned)G, COOP_THREADS, 0, stream>>>(grad_out, x, weight, sums, grad_x, part, grad_weight, B,
                                                                N, len, tpr, chunks, rpg, groups, U, eps);
    fused_bwd<2, VEC><<<(unsigned)G, COOP_THREADS, 0, stream>>>(grad_out, x, weight, sums, grad_x, part, grad_weight, B,
                                                                N, len, tpr, chunks, rpg, groups, U, eps);
    if (groups > 1)
        fused_bwd<3, VEC><<<(unsigned)G, COOP_THREADS, 0, stream>>>(grad_out, x, weight, sums, grad_x, part, grad_weight,
                                                                    B, N, len, tpr, chunks, rpg, groups, U, eps);
    return 0;
}

// The split path: 0 launched, 1 the workspace holds no tile sums.
static int launch_split(const float* grad_out, const float* x, const float* weight, float* grad_x, float* grad_weight,
                        int64_t B, int64_t N, float eps, bool vec, char* ws, int64_t ws_bytes, cudaStream_t stream) {
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
    float* part = reinterpret_cast<float*>(ws);
    Sums* sums = reinterpret_cast<Sums*>(ws + part_bytes);
    tile_sums<<<(unsigned)(B * tpr), SPLIT_THREADS, 0, stream>>>(grad_out, x, weight, sums, B, N, len, tpr);
    float* dw = groups == 1 ? grad_weight : part;
    if (vec)
        split_grad<true><<<dim3((unsigned)chunks, (unsigned)groups), SPLIT_THREADS, 0, stream>>>(
            grad_out, x, weight, sums, grad_x, dw, B, N, tpr, rpg, eps);
    else
        split_grad<false><<<dim3((unsigned)chunks, (unsigned)groups), SPLIT_THREADS, 0, stream>>>(
            grad_out, x, weight, sums, grad_x, dw, B, N, tpr, rpg, eps);
    if (groups > 1) launch_col_reduce(part, grad_weight, N, groups, stream);
    return 0;
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
    const int64_t sms = sm_count();
    const bool spread = N > SPREAD_N && sms > 0 && B * CLUSTER <= sms;      // few rows: more blocks per row
    bool done = false;
    if (N > rows_max || spread) {
        done = (vec ? launch_fused<true>(grad_out, x, weight, grad_x, grad_weight, B, N, eps, ws, ws_bytes, stream)
                    : launch_fused<false>(grad_out, x, weight, grad_x, grad_weight, B, N, eps, ws, ws_bytes, stream)) == 0;
#if RMS_CLUSTERS
        if (!done && B <= part_fit && N <= 16 * (int64_t)CLUSTER * CLUSTER_THREADS) {
            float* dw = B == 1 ? grad_weight : part;
            const int64_t per = 4 * (int64_t)CLUSTER * CLUSTER_THREADS;     // elements per VPT step
            const int rc = N <= per ? launch_cluster<1>(grad_out, x, weight, grad_x, dw, B, N, eps, vec, stream)
                         : N <= 2 * per ? launch_cluster<2>(grad_out, x, weight, grad_x, dw, B, N, eps, vec, stream)
                                        : launch_cluster<4>(grad_out, x, weight, grad_x, dw, B, N, eps, vec, stream);
            if (rc == 2) return 1;
            if (rc == 0) {
                if (B > 1) launch_col_reduce(part, grad_weight, N, B, stream);
                done = true;
            }
        }
#endif
    }
    if (!done && N <= rows_max && B <= 0x7fffffff) {
        const int vpt = (int)((N + 4 * ROW_THREADS - 1) / (4 * ROW_THREADS));   // 1 .. ROWS_MAX_VPT
        switch (vpt) {
            case 1: launch_rows<1>(grad_out, x, weight, grad_x, grad_weight, part, part_fit, B, N, eps, vec, stream); break;
            case 2: launch_rows<2>(grad_out, x, weight, grad_x, grad_weight, part, part_fit, B, N, eps, vec, stream); break;
            case 3: launch_rows<3>(grad_out, x, weight, grad_x, grad_weight, part, part_fit, B, N, eps, vec, stream); break;
            default: launch_rows<4>(grad_out, x, weight, grad_x, grad_weight, part, part_fit, B, N, eps, vec, stream); break;
        }
        done = true;
    }
    if (!done && launch_split(grad_out, x, weight, grad_x, grad_weight, B, N, eps, vec, ws, ws_bytes, stream) != 0)
        return 1;
    return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
