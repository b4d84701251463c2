// LayerNorm backward, CUDA seed (pipe): the fast seed, plus a rows path fed by Hopper bulk copies. Three paths,
// chosen at run time:
//  pipe  (N <= PIPE_MAXN, N % 4 == 0, the [B, N] pointers and weight 16-byte aligned, B >= PIPE_MINB; sm_90
//        only: under the CPU emulator, rows instead): a persistent grid of G blocks (as many as the GPU holds
//        at once, at most 256), each taking groups of R consecutive rows g = blockIdx.x, + G, ...; a group's x
//        and grad_out are one contiguous stretch each, brought into shared memory by two cp.async.bulk copies
//        on an mbarrier, PIPE_STAGES groups in flight per block, so DRAM always has the next rows' loads while
//        this group is reduced (the fast seed's rows path holds a row in registers and has one row in flight
//        per block: 49% of DRAM bandwidth on 8192x4096, under Nsight Compute). Short rows (N <= 32 * 4 *
//        WARP_VPT): a warp per row, R = warps per block, warp shuffles only; longer: the block per row, R =
//        1. Per row from shared memory: the mean (double), then sum (x - mean)^2, sum gw, sum gw * (x - mean)
//        (double), then grad_x stored from registers; each thread keeps the grad_weight / grad_bias sums of
//        its columns (and its weight) in registers across its rows; at the end the warps' sums are added in
//        shared memory and written as block partials; col_reduce adds the G partials per column. Two launches.
//  rows  (N <= 4 * ROW_VPT * ROW_THREADS otherwise): the fast seed's: a block holds one row of x and grad_out in
//        registers, takes rows b = blockIdx.x, + G, ...; the next row's loads issued before this row is
//        reduced (VPT <= PREFETCH_VPT); block partials, col_reduce.
//  split (longer rows): tile_sums: per (row, tile) sums of d = x - x[row, 0], d * d, gw, gw * d (double);
//        split_grad: grid (column chunks, the last first: still in L2; row groups), each block merges the
//        tile sums of its rows itself and walks them, writing grad_x and summing grad_weight / grad_bias in
//        registers; then col_reduce when there is more than one row group. x and grad_out are read twice.
// PDL = 1 (sm_90): the second and third launches of a call (split_grad after tile_sums, col_reduce after the
// rows, pipe or split kernel) are programmatic dependent launches: the kernel before lets them launch as soon
// as all its blocks have started (griddepcontrol.launch_dependents), and they wait (griddepcontrol.wait) for
// its completion and memory before reading what it wrote, so the launch gap of a dependent kernel (~1-2 us on
// the small shapes) overlaps the earlier kernel's tail. The call's first kernel is launched as usual: nothing
// of a call overlaps the work before it. Off by default: not measured on a GPU yet.
// Loads are float4 when N % 4 == 0 and every [B, N] pointer and weight are 16-byte aligned (the harness
// gives some calls element alignment only), else scalar. Every workspace word read was written in this call.
#include <cstdint>
#include <cuda_runtime.h>
#if defined(__CUDACC__)
#define LN_PIPE 1
#else
#define LN_PIPE 0
#endif

constexpr int ROW_THREADS = 256;        // knob: 256, 512
constexpr int ROW_VPT = 4;              // knob: 4, 5, 6, 8
constexpr int PDL = 0;                  // knob: 0, 1
constexpr int64_t ROW_GROUPS = 256;     // knob: 256, 512
constexpr int64_t STATS_BLOCKS = 1024;  // knob: 1024, 2048
constexpr int SPLIT_THREADS = 256;      // knob: 256, 512
constexpr int SPLIT_VPT = 2;            // knob: 1, 2, 4
constexpr int64_t GRAD_BLOCKS = 1024;   // knob: 1024, 2048
constexpr int PREFETCH_VPT = 2;        // knob: 0, 2
constexpr int64_t MIN_TILE = 2048;      // a tile_sums block sums at least this many elements
constexpr int PIPE_THREADS = 256;       // knob: 128, 256, 512
constexpr int PIPE_STAGES = 3;          // knob: 2, 3, 4
constexpr int WARP_VPT = 8;             // knob: 4, 8
constexpr int64_t PIPE_MAXN = 8192;     // knob: 0, 4096, 8192
constexpr int64_t PIPE_MINB = 256;      // knob: 64, 256, 1024

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

struct Sums { double s1, s2, s3, s4; };   // sum d, d*d, gw, gw*d over a tile, d = x - x[row, 0]

__device__ __forceinline__ double warp_sum(double v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// The K sums over the block (blockDim.x threads, a multiple of 32), the same bits in every thread.
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
        double s = 0.0;
        for (int w = 0; w < warps; ++w) s += sh[k][w];
        v[k] = s;
    }
    __syncthreads();
}

// Element k (< 4 * VPT) of thread t of T threads covering a row: column (k/4 * T + t) * 4 + k%4 when
// vectorised, else k * T + t: coalesced either way.
__device__ __forceinline__ int64_t column(int k, int64_t t, int64_t T, bool vec) {
    return vec ? ((int64_t)(k / 4) * T + t) * 4 + (k & 3) : (int64_t)k * T + t;
}

template <int VPT>
__device__ __forceinline__ void load_row(const float* __restrict__ p, float (&v)[4 * VPT], int64_t N, bool vec) {
    #pragma unroll
    for (int i = 0; i < VPT; ++i) {
        const int64_t c = column(4 * i, threadIdx.x, blockDim.x, vec);
        if (vec) {
            const float4 a = c < N ? *reinterpret_cast<const float4*>(p + c) : make_float4(0.f, 0.f, 0.f, 0.f);
            v[4 * i] = a.x; v[4 * i + 1] = a.y; v[4 * i + 2] = a.z; v[4 * i + 3] = a.w;
        } else {
            #pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int64_t ce = column(4 * i + e, threadIdx.x, blockDim.x, vec);
                v[4 * i + e] = ce < N ? p[ce] : 0.f;
            }
        }
    }
}

template <int VPT>
__device__ __forceinline__ void store_row(float* __restrict__ p, const float (&v)[4 * VPT], int64_t N, bool vec) {
    #pragma unroll
    for (int i = 0; i < VPT; ++i) {
        const int64_t c = column(4 * i, threadIdx.x, blockDim.x, vec);
        if (vec) {
            if (c < N) *reinterpret_cast<float4*>(p + c) = make_float4(v[4 * i], v[4 * i + 1], v[4 * i + 2], v[4 * i + 3]);
        } else {
            #pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int64_t ce = column(4 * i + e, threadIdx.x, blockDim.x, vec);
                if (ce < N) p[ce] = v[4 * i + e];
            }
        }
    }
}

// grid G, blockDim.x = T: rows blockIdx.x, + G, ...; partial column sums to dw_out/db_out + blockIdx.x * N.
// PREFETCH: the loads of row b + G are issued before row b is reduced (8 * VPT more registers).
template <int VPT, bool PREFETCH>
__global__ void __launch_bounds__(ROW_THREADS) rows_bwd(const float* __restrict__ grad_out, const float* __restrict__ x,
                                                        const float* __restrict__ weight, float* __restrict__ grad_x,
                                                        float* __restrict__ dw_out, float* __restrict__ db_out,
                                                        int64_t B, int64_t N, float eps, bool vec) {
    __shared__ double sh[3][32];
    pdl_trigger();                                    // col_reduce may launch; it waits for this grid to end
    float dw[4 * VPT], db[4 * VPT];
    #pragma unroll
    for (int k = 0; k < 4 * VPT; ++k) { dw[k] = 0.f; db[k] = 0.f; }
    const double inv_n = 1.0 / (double)N;
    float xn[4 * VPT], gn[4 * VPT];                   // the next row, loading while this one is reduced
    if (blockIdx.x < B) {
        load_row<VPT>(x + blockIdx.x * N, xn, N, vec);
        load_row<VPT>(grad_out + blockIdx.x * N, gn, N, vec);
    }
    for (int64_t b = blockIdx.x; b < B; b += gridDim.x) {
        float xv[4 * VPT], gv[4 * VPT];
        #pragma unroll
        for (int k = 0; k < 4 * VPT; ++k) { xv[k] = xn[k]; gv[k] = gn[k]; }
        if (PREFETCH && b + gridDim.x < B) {
            load_row<VPT>(x + (b + gridDim.x) * N, xn, N, vec);
            load_row<VPT>(grad_out + (b + gridDim.x) * N, gn, N, vec);
        }
        double s[1] = {0.0};
        #pragma unroll
        for (int k = 0; k < 4 * VPT; ++k) s[0] += xv[k];
        block_sums<1>(s, sh);
        const double mean = s[0] * inv_n;     // double: a float mean of rows with |mean| >> std shifts every xhat
        double u[3] = {0.0, 0.0, 0.0};
        #pragma unroll
        for (int k = 0; k < 4 * VPT; ++k) {
            const int64_t c = column(k, threadIdx.x, blockDim.x, vec);
            if (c < N) {
                const float d = (float)((double)xv[k] - mean), gw = gv[k] * weight[c];
                u[0] += (double)d * d;
                u[1] += gw;
                u[2] += (double)gw * d;
            }
        }
        block_sums<3>(u, sh);
        const double rstd = rsqrt(u[0] * inv_n + (double)eps);
        const float r = (float)rstd, a = (float)(u[1] * inv_n), cc = (float)(rstd * u[2] * inv_n);
        #pragma unroll
        for (int k = 0; k < 4 * VPT; ++k) {      // past N: gv = 0, so the column sums gain 0
            const int64_t c = column(k, threadIdx.x, blockDim.x, vec);
            const float xhat = (float)((double)xv[k] - mean) * r;
            dw[k] += gv[k] * xhat;
            db[k] += gv[k];
            xv[k] = r * (gv[k] * (c < N ? weight[c] : 0.f) - a - xhat * cc);     // grad_x
        }
        store_row<VPT>(grad_x + b * N, xv, N, vec);
        if (!PREFETCH && b + gridDim.x < B) {
            load_row<VPT>(x + (b + gridDim.x) * N, xn, N, vec);
            load_row<VPT>(grad_out + (b + gridDim.x) * N, gn, N, vec);
        }
    }
    #pragma unroll
    for (int k = 0; k < 4 * VPT; ++k) {
        const int64_t c = column(k, threadIdx.x, blockDim.x, vec);
        if (c < N) { dw_out[blockIdx.x * N + c] = dw[k]; db_out[blockIdx.x * N + c] = db[k]; }
    }
}

// blockDim (32, 8): column blockIdx.x * 32 + threadIdx.x, partials threadIdx.y, + 8, ... (double sums).
__global__ void __launch_bounds__(256) col_reduce(const float* __restrict__ dw_part, const float* __restrict__ db_part,
                                                  float* __restrict__ grad_weight, float* __restrict__ grad_bias,
                                                  int64_t N, int64_t G) {
    __shared__ double sh[2][8][33];
    pdl_wait();                                       // the partials of the kernel before are complete
    const int64_t j = (int64_t)blockIdx.x * 32 + threadIdx.x;
    double dw = 0.0, db = 0.0;
    if (j < N)
        for (int64_t g = threadIdx.y; g < G; g += 8) { dw += dw_part[g * N + j]; db += db_part[g * N + j]; }
    sh[0][threadIdx.y][threadIdx.x] = dw;
    sh[1][threadIdx.y][threadIdx.x] = db;
    __syncthreads();
    if (threadIdx.y == 0 && j < N) {
        double a = 0.0, c = 0.0;
        for (int k = 0; k < 8; ++k) { a += sh[0][k][threadIdx.x]; c += sh[1][k][threadIdx.x]; }
        grad_weight[j] = (float)a;
        grad_bias[j] = (float)c;
    }
}

// grid B * tpr, tiles outermost: block (b, t) sums over columns [t * len, (t + 1) * len) of row b,
// d = x - x[b, 0].
__global__ void __launch_bounds__(SPLIT_THREADS) tile_sums(const float* __restrict__ grad_out, const float* __restrict__ x,
                                                           const float* __restrict__ weight, Sums* __restrict__ sums,
                                                           int64_t B, int64_t N, int64_t len, int64_t tpr) {
    __shared__ double sh[4][32];
    pdl_trigger();
    const int64_t b = blockIdx.x % B, t = blockIdx.x / B;        // tile-major: the last tiles go last
    const int64_t j0 = t * len, j1 = j0 + len < N ? j0 + len : N;
    const float* xr = x + b * N;
    const float* gr = grad_out + b * N;
    const float k = xr[0];
    double s[4] = {0.0, 0.0, 0.0, 0.0};
    auto add = [&](float xv, float gv, float wv) {
        const float d = xv - k, gw = gv * wv;
        s[0] += d;
        s[1] += (double)d * d;
        s[2] += gw;
        s[3] += (double)gw * d;
    };
    int64_t v0 = j1, nv = 0;                         // the float4 stretch [v0, v0 + 4 * nv), if any
    if (((((uintptr_t)x ^ (uintptr_t)grad_out) & 15) == 0)) {
        int64_t head = (int64_t)((16 - ((uintptr_t)(xr + j0) & 15)) & 15) / 4;
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
    block_sums<4>(s, sh);
    if (threadIdx.x == 0) sums[b * tpr + t] = Sums{s[0], s[1], s[2], s[3]};
}

// grid (column chunks of SPLIT_THREADS * 4 * SPLIT_VPT, the last first; G): group blockIdx.y takes rows
// [y * rpg, (y + 1) * rpg).
// Rows go in groups of one per warp; each warp merges its row's tile sums into (mean, rstd, a, c).
__global__ void __launch_bounds__(SPLIT_THREADS) split_grad(const float* __restrict__ grad_out, const float* __restrict__ x,
                                                            const float* __restrict__ weight, const Sums* __restrict__ sums,
                                                            float* __restrict__ grad_x, float* __restrict__ dw_out,
                                                            float* __restrict__ db_out, int64_t B, int64_t N,
                                                            int64_t tpr, int64_t rpg, float eps, bool vec) {
    constexpr int WARPS = SPLIT_THREADS / 32;
    constexpr int K = 4 * SPLIT_VPT;
    __shared__ float row_stat[WARPS][4];
    const int64_t c0 = (int64_t)(gridDim.x - 1 - blockIdx.x) * (SPLIT_THREADS * K);   // last chunk first: in L2
    const int64_t b0 = (int64_t)blockIdx.y * rpg, b1 = b0 + rpg < B ? b0 + rpg : B;
    float w[K], dw[K], db[K];
    #pragma unroll
    for (int k = 0; k < K; ++k) {
        const int64_t c = c0 + column(k, threadIdx.x, SPLIT_THREADS, vec);
        w[k] = c < N ? weight[c] : 0.f;
        dw[k] = 0.f;
        db[k] = 0.f;
    }
    pdl_trigger();
    pdl_wait();                                       // tile_sums' sums are complete (the weight loads overlapped)
    const int lane = threadIdx.x & 31, warp = threadIdx.x / 32;
    const double inv_n = 1.0 / (double)N;
    for (int64_t g = b0; g < b1; g += WARPS) {
        if (g + warp < b1) {
            const Sums* ts = sums + (g + warp) * tpr;
            double s1 = 0.0, s2 = 0.0, s3 = 0.0, s4 = 0.0;
            for (int64_t t = lane; t < tpr; t += 32) { s1 += ts[t].s1; s2 += ts[t].s2; s3 += ts[t].s3; s4 += ts[t].s4; }
            s1 = warp_sum(s1); s2 = warp_sum(s2); s3 = warp_sum(s3); s4 = warp_sum(s4);
            if (lane == 0) {
                const double dm = s1 * inv_n, var = s2 * inv_n - dm * dm;
                const double rstd = rsqrt((var > 0.0 ? var : 0.0) + (double)eps);
                row_stat[warp][0] = (float)((double)x[(g + warp) * N] + dm);
                row_stat[warp][1] = (float)rstd;
                row_stat[warp][2] = (float)(s3 * inv_n);
                row_stat[warp][3] = (float)(rstd * (s4 - dm * s3) * inv_n);
            }
        }
        __syncthreads();
        const int64_t g1 = g + WARPS < b1 ? g + WARPS : b1;
        for (int64_t b = g; b < g1; ++b) {
            const float m = row_stat[b - g][0], r = row_stat[b - g][1], a = row_stat[b - g][2], cc = row_stat[b - g][3];
            float xv[K], gv[K];
            #pragma unroll
            for (int i = 0; i < SPLIT_VPT; ++i) {
                const int64_t c = c0 + column(4 * i, threadIdx.x, SPLIT_THREADS, vec);
                if (vec) {
                    const float4 p = c < N ? *reinterpret_cast<const float4*>(x + b * N + c) : make_float4(0.f, 0.f, 0.f, 0.f);
                    const float4 q = c < N ? *reinterpret_cast<const float4*>(grad_out + b * N + c) : make_float4(0.f, 0.f, 0.f, 0.f);
                    xv[4 * i] = p.x; xv[4 * i + 1] = p.y; xv[4 * i + 2] = p.z; xv[4 * i + 3] = p.w;
                    gv[4 * i] = q.x; gv[4 * i + 1] = q.y; gv[4 * i + 2] = q.z; gv[4 * i + 3] = q.w;
                } else {
                    #pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        const int64_t ce = c0 + column(4 * i + e, threadIdx.x, SPLIT_THREADS, vec);
                        xv[4 * i + e] = ce < N ? x[b * N + ce] : 0.f;
                        gv[4 * i + e] = ce < N ? grad_out[b * N + ce] : 0.f;
                    }
                }
            }
            #pragma unroll
            for (int k = 0; k < K; ++k) {          // past N: gv = 0 and w = 0
                const float xhat = (xv[k] - m) * r;
                dw[k] += gv[k] * xhat;
                db[k] += gv[k];
                xv[k] = r * (gv[k] * w[k] - a - xhat * cc);
            }
            float* gx = grad_x + b * N;
            #pragma unroll
            for (int i = 0; i < SPLIT_VPT; ++i) {
                const int64_t c = c0 + column(4 * i, threadIdx.x, SPLIT_THREADS, vec);
                if (vec) {
                    if (c < N) *reinterpret_cast<float4*>(gx + c) = make_float4(xv[4 * i], xv[4 * i + 1], xv[4 * i + 2], xv[4 * i + 3]);
                } else {
                    #pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        const int64_t ce = c0 + column(4 * i + e, threadIdx.x, SPLIT_THREADS, vec);
                        if (ce < N) gx[ce] = xv[4 * i + e];
                    }
                }
            }
        }
        __syncthreads();
    }
    const int64_t out = (int64_t)blockIdx.y * N;
    #pragma unroll
    for (int k = 0; k < K; ++k) {
        const int64_t c = c0 + column(k, threadIdx.x, SPLIT_THREADS, vec);
        if (c < N) { dw_out[out + c] = dw[k]; db_out[out + c] = db[k]; }
    }
}

#if LN_PIPE
// ------------------------------------------------------------------ pipe path (sm_90 bulk copies)
__device__ __forceinline__ uint32_t smem_addr(const void* p) { return (uint32_t)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void bar_init(uint64_t* bar) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_addr(bar)) : "memory");
}

// Thread 0 arms the stage's barrier for `bytes` and starts the copies; the barrier's phase completes when they land.
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

// WARP: a warp per row (R = warps rows a group), else the block per row (R = 1). Thread `lane` of the row's
// tpr threads owns columns (i * tpr + lane) * 4 + e, i < VPT, e < 4. Stage s holds a group's x then grad_out,
// R * N floats each. part: block partials of grad_weight (G rows of N), then of grad_bias.
template <bool WARP, int VPT>
__global__ void __launch_bounds__(512) pipe_bwd(const float* __restrict__ grad_out, const float* __restrict__ x,
                                                const float* __restrict__ weight, float* __restrict__ grad_x,
                                                float* __restrict__ part, int64_t B, int64_t N, int R, float eps) {
    extern __shared__ __align__(128) unsigned char smem[];
    __shared__ double sh[3][32];
    pdl_trigger();
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
        float* dst = stages + (int64_t)s * 2 * SN;
        bar_expect(&bars[s], 2 * bytes);
        bulk_load(dst, x + b0 * N, bytes, &bars[s]);
        bulk_load(dst + SN, grad_out + b0 * N, bytes, &bars[s]);
    };
    if (threadIdx.x == 0)
        for (int s = 0; s < PIPE_STAGES; ++s)
            if (blockIdx.x + (int64_t)s * gridDim.x < groups) issue(blockIdx.x + (int64_t)s * gridDim.x, s);
    float dw[4 * VPT], db[4 * VPT];
    #pragma unroll
    for (int k = 0; k < 4 * VPT; ++k) { dw[k] = 0.f; db[k] = 0.f; }
    const double inv_n = 1.0 / (double)N;
    const float4* w4 = reinterpret_cast<const float4*>(weight);          // N * 4 bytes at most 32 KB: L1 hits
    int it = 0;
    for (int64_t g = blockIdx.x; g < groups; g += gridDim.x, ++it) {
        const int s = it % PIPE_STAGES;
        bar_wait(&bars[s], (uint32_t)((it / PIPE_STAGES) & 1));
        const int64_t b = g * R + sub;
        const bool live = sub < R && b < B;
        const float4* xs = reinterpret_cast<const float4*>(stages + (int64_t)s * 2 * SN + (int64_t)sub * N);
        const float4* gs = reinterpret_cast<const float4*>(stages + (int64_t)s * 2 * SN + SN + (int64_t)sub * N);
        const int64_t nv = live ? N / 4 : 0;                         // this thread's row: vectors < nv
        double m[1] = {0.0};
        #pragma unroll
        for (int i = 0; i < VPT; ++i) {
            const int64_t v = (int64_t)i * tpr + lane;
            if (v < nv) {
                const float4 a = xs[v];
                m[0] += (double)a.x + (double)a.y + (double)a.z + (double)a.w;
            }
        }
        if (WARP) m[0] = warp_sum(m[0]); else block_sums<1>(m, sh);
        const double mean = m[0] * inv_n;     // double: a float mean of rows with |mean| >> std shifts every xhat
        double u[3] = {0.0, 0.0, 0.0};
        #pragma unroll
        for (int i = 0; i < VPT; ++i) {
            const int64_t v = (int64_t)i * tpr + lane;
            if (v < nv) {
                const float4 a = xs[v], q = gs[v], wv = __ldg(w4 + v);
                const float xe[4] = {a.x, a.y, a.z, a.w}, ge[4] = {q.x, q.y, q.z, q.w}, we[4] = {wv.x, wv.y, wv.z, wv.w};
                #pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const float d = (float)((double)xe[e] - mean), gw = ge[e] * we[e];
                    u[0] += (double)d * d;
                    u[1] += gw;
                    u[2] += (double)gw * d;
                }
            }
        }
        if (WARP) {
            #pragma unroll
            for (int k = 0; k < 3; ++k) u[k] = warp_sum(u[k]);
        } else {
            block_sums<3>(u, sh);
        }
        const double rstd = rsqrt(u[0] * inv_n + (double)eps);
        const float r = (float)rstd, a_ = (float)(u[1] * inv_n), cc = (float)(rstd * u[2] * inv_n);
        #pragma unroll
        for (int i = 0; i < VPT; ++i) {
            const int64_t v = (int64_t)i * tpr + lane;
            if (v < nv) {
                const float4 a = xs[v], q = gs[v], wv = __ldg(w4 + v);
                const float xe[4] = {a.x, a.y, a.z, a.w}, ge[4] = {q.x, q.y, q.z, q.w}, we[4] = {wv.x, wv.y, wv.z, wv.w};
                float o[4];
                #pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const float xhat = (float)((double)xe[e] - mean) * r;
                    dw[4 * i + e] += ge[e] * xhat;
                    db[4 * i + e] += ge[e];
                    o[e] = r * (ge[e] * we[e] - a_ - xhat * cc);
                }
                *reinterpret_cast<float4*>(grad_x + b * N + 4 * v) = make_float4(o[0], o[1], o[2], o[3]);
            }
        }
        __syncthreads();                                  // stage s read by every thread: refill it
        if (threadIdx.x == 0 && g + (int64_t)PIPE_STAGES * gridDim.x < groups) issue(g + (int64_t)PIPE_STAGES * gridDim.x, s);
    }
    float* pw = part + (int64_t)blockIdx.x * N;
    float* pb = part + (int64_t)gridDim.x * N + (int64_t)blockIdx.x * N;
    if (!WARP) {
        #pragma unroll
        for (int k = 0; k < 4 * VPT; ++k) {
            const int64_t c = ((int64_t)(k / 4) * tpr + lane) * 4 + (k & 3);
            if (c < N) { pw[c] = dw[k]; pb[c] = db[k]; }
        }
        return;
    }
    // the warps' sums of the same columns, added in shared memory (the stages are all consumed by now)
    __syncthreads();
    float* acc = stages;                                  // [warps][2][N]
    const int warps = blockDim.x / 32;
    #pragma unroll
    for (int k = 0; k < 4 * VPT; ++k) {
        const int64_t c = ((int64_t)(k / 4) * 32 + lane) * 4 + (k & 3);
        if (c < N) { acc[(2 * sub) * N + c] = dw[k]; acc[(2 * sub + 1) * N + c] = db[k]; }
    }
    __syncthreads();
    for (int64_t c = threadIdx.x; c < N; c += blockDim.x) {
        float sw = 0.f, sb = 0.f;
        for (int v = 0; v < warps; ++v) { sw += acc[(2 * v) * N + c]; sb += acc[(2 * v + 1) * N + c]; }
        pw[c] = sw;
        pb[c] = sb;
    }
}

// The pipe path if it applies (see the top): G, the number of block partials in part, or 0 if not taken.
template <bool WARP, int VPT>
static int64_t launch_pipe_as(const float* grad_out, const float* x, const float* weight, float* grad_x, float* part,
                              int64_t part_fit, int64_t B, int64_t N, int T, int R, float eps, cudaStream_t stream) {
    const int64_t smem = PIPE_HEAD + (int64_t)PIPE_STAGES * 2 * R * N * (int64_t)sizeof(float);
    const int64_t tail = WARP ? (int64_t)(T / 32) * 2 * N * (int64_t)sizeof(float) : 0;   // the warps' sums
    if (tail > smem - PIPE_HEAD || smem > 227 * 1024) return 0;
    auto kernel = pipe_bwd<WARP, VPT>;
    int dev = 0, sms = 0, per = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess
        || cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem) != cudaSuccess
        || cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, kernel, T, (size_t)smem) != cudaSuccess || per < 1) {
        cudaGetLastError();
        return 0;
    }
    int64_t G = (B + R - 1) / R;
    if (G > (int64_t)sms * per) G = (int64_t)sms * per;
    if (G > 256) G = 256;
    if (G > part_fit) G = part_fit;
    if (G < 1) return 0;
    kernel<<<(unsigned)G, (unsigned)T, (size_t)smem, stream>>>(grad_out, x, weight, grad_x, part, B, N, R, eps);
    return G;
}

static int64_t launch_pipe(const float* grad_out, const float* x, const float* weight, float* grad_x, float* part,
                           int64_t part_fit, int64_t B, int64_t N, float eps, cudaStream_t stream) {
    if (N <= 32 * 4 * WARP_VPT)
        return launch_pipe_as<true, WARP_VPT>(grad_out, x, weight, grad_x, part, part_fit, B, N, PIPE_THREADS,
                                               PIPE_THREADS / 32, eps, stream);
    const int64_t vpt = (N + 4 * PIPE_THREADS - 1) / (4 * PIPE_THREADS);
    if (vpt > 4) return 0;
    const int T = (int)(((N + 4 * vpt - 1) / (4 * vpt) + 31) / 32 * 32);
    auto as = vpt == 1 ? launch_pipe_as<false, 1> : vpt == 2 ? launch_pipe_as<false, 2>
              : vpt == 3 ? launch_pipe_as<false, 3> : launch_pipe_as<false, 4>;
    return as(grad_out, x, weight, grad_x, part, part_fit, B, N, T, 1, eps, stream);
}
#endif

// kernel<<<grid, block, 0, stream>>>(args...), as a programmatic dependent launch when PDL (sm_90; the kernel
// calls pdl_wait before reading what the previous launch wrote); a plain launch when that is refused.
template <class... P, class... A>
static void launch_after(void (*kernel)(P...), dim3 grid, dim3 block, cudaStream_t stream, A... args) {
#if LN_PIPE
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

// How many blocks of this kernel the GPU holds at once (without nvcc, under the CPU emulator: ROW_GROUPS).
template <class Kernel>
static int64_t resident_blocks(Kernel kernel, int threads) {
#if defined(__CUDACC__)
    int dev = 0, sms = 0, per = 0;
    if (cudaGetDevice(&dev) == cudaSuccess && cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) == cudaSuccess
        && cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, kernel, threads, 0) == cudaSuccess && per > 0)
        return (int64_t)sms * per;
    cudaGetLastError();
#endif
    return ROW_GROUPS;
}

// The rows path; returns G, the number of row groups (blocks), each with its partials in part (G > 1).
template <int VPT>
static int64_t launch_rows(const float* grad_out, const float* x, const float* weight, float* grad_x,
                           float* grad_weight, float* grad_bias, float* part, int64_t part_fit, int64_t B, int64_t N,
                           float eps, bool vec, cudaStream_t stream) {
    const int64_t need = (N + 4 * VPT - 1) / (4 * VPT);                   // threads per row
    const int T = (int)((need + 31) / 32 * 32);
    auto kernel = rows_bwd<VPT, VPT <= PREFETCH_VPT>;
    int64_t G = B < ROW_GROUPS ? B : ROW_GROUPS;
    const int64_t resident = resident_blocks(kernel, T);                  // one wave: a block per row group
    if (G > resident) G = resident;
    if (G > part_fit) G = part_fit;
    if (G < 1) G = 1;
    kernel<<<(unsigned)G, (unsigned)T, 0, stream>>>(grad_out, x, weight, grad_x, G == 1 ? grad_weight : part,
                                                     G == 1 ? grad_bias : part + G * N, B, N, eps, vec);
    return G;
}

// launch_rows<vpt> for 1 <= vpt <= V: only the VPTs the knob allows are compiled.
template <int V>
static int64_t dispatch_rows(int vpt, const float* grad_out, const float* x, const float* weight, float* grad_x,
                             float* grad_weight, float* grad_bias, float* part, int64_t part_fit, int64_t B, int64_t N,
                             float eps, bool vec, cudaStream_t stream) {
    if constexpr (V > 1) {
        if (vpt < V)
            return dispatch_rows<V - 1>(vpt, grad_out, x, weight, grad_x, grad_weight, grad_bias, part, part_fit, B, N,
                                        eps, vec, stream);
    }
    return launch_rows<V>(grad_out, x, weight, grad_x, grad_weight, grad_bias, part, part_fit, B, N, eps, vec, stream);
}

extern "C" int backward(const float* grad_out, const float* x, const float* weight, const float* bias,
                        float* grad_x, float* grad_weight, float* grad_bias,
                        int64_t B, int64_t N, float eps, void* workspace, int64_t workspace_bytes,
                        cudaStream_t stream) {
    if (N <= 0) return 0;
    if (B <= 0) {   // empty sums: zeros
        cudaMemsetAsync(grad_weight, 0, N * sizeof(float), stream);
        cudaMemsetAsync(grad_bias, 0, N * sizeof(float), stream);
        return cudaGetLastError() == cudaSuccess ? 0 : 1;
    }
    const bool vec = N % 4 == 0 && ((((uintptr_t)grad_out | (uintptr_t)x | (uintptr_t)weight | (uintptr_t)grad_x) & 15) == 0);
    const int64_t part_fit = workspace_bytes / (2 * N * (int64_t)sizeof(float));    // row groups the partials allow
    float* dw_part = static_cast<float*>(workspace);
    int64_t G = 1;
#if LN_PIPE
    if (vec && N <= PIPE_MAXN && B >= PIPE_MINB
        && (G = launch_pipe(grad_out, x, weight, grad_x, dw_part, part_fit, B, N, eps, stream)) > 0) {
        launch_after(col_reduce, dim3((unsigned)((N + 31) / 32)), dim3(32, 8), stream, (const float*)dw_part,
                     (const float*)(dw_part + G * N), grad_weight, grad_bias, N, G);   // partials even when G == 1
        return cudaGetLastError() == cudaSuccess ? 0 : 1;
    }
    G = 1;
#endif
    if (N <= 4 * ROW_VPT * ROW_THREADS) {     // ROW_VPT > 4: rows past 16 * ROW_THREADS (B=32,(4100,)) read once,
        int vpt = (int)((N + 4 * ROW_THREADS - 1) / (4 * ROW_THREADS));   // two launches, not split's three
        if (vpt < 1) vpt = 1;
        G = dispatch_rows<ROW_VPT>(vpt, grad_out, x, weight, grad_x, grad_weight, grad_bias, dw_part, part_fit, B, N,
                                   eps, vec, stream);
    } else {
        constexpr int64_t CH = SPLIT_THREADS * 4 * SPLIT_VPT;
        const int64_t chunks = (N + CH - 1) / CH;
        G = (GRAD_BLOCKS + chunks - 1) / chunks;
        if (G > B) G = B;
        if (G > 256) G = 256;
        const int64_t split_fit = (workspace_bytes - B * (int64_t)sizeof(Sums)) / (2 * N * (int64_t)sizeof(float));
        if (G > split_fit) G = split_fit;                                     // room for one tile per row
        if (G < 1) G = 1;
        const int64_t rpg = (B + G - 1) / G;
        G = (B + rpg - 1) / rpg;                                              // no empty groups
        const int64_t part_bytes = G == 1 ? 0 : 2 * G * N * (int64_t)sizeof(float);
        int64_t tpr = (STATS_BLOCKS + B - 1) / B;                             // tiles per row
        if (tpr > N / MIN_TILE) tpr = N / MIN_TILE;
        const int64_t fit = (workspace_bytes - part_bytes) / (B * (int64_t)sizeof(Sums));
        if (tpr > fit) tpr = fit;
        if (tpr < 1) return 1;
        const int64_t len = (N + tpr - 1) / tpr;
        tpr = (N + len - 1) / len;                                            // no empty tiles
        Sums* sums = reinterpret_cast<Sums*>(static_cast<char*>(workspace) + part_bytes);
        tile_sums<<<(unsigned)(B * tpr), SPLIT_THREADS, 0, stream>>>(grad_out, x, weight, sums, B, N, len, tpr);
        float* dw = G == 1 ? grad_weight : dw_part;
        float* db = G == 1 ? grad_bias : dw_part + G * N;
        launch_after(split_grad, dim3((unsigned)chunks, (unsigned)G), dim3(SPLIT_THREADS), stream, grad_out, x, weight,
                     (const Sums*)sums, grad_x, dw, db, B, N, tpr, rpg, eps, vec);
    }
    if (G > 1)
        launch_after(col_reduce, dim3((unsigned)((N + 31) / 32)), dim3(32, 8), stream, (const float*)dw_part,
                     (const float*)(dw_part + G * N), grad_weight, grad_bias, N, G);
    return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
