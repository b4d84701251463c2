// LayerNorm backward, CUDA seed (rows split over many blocks). For a few very long rows (B = 16..64,
// N = 4M) one block per row leaves most of the GPU idle; here every row is cut into tiles.
//  1. tile_stats: grid (B, tiles per row). Each block sums over its tile of about TILE elements, with the
//                 tile's first element k as a shift: d = x - k, d*d, gw = grad_out * weight, gw * d
//                 (double per thread, double block sum). It writes (mean_t, M2_t, sum gw,
//                 sum gw * (x - mean_t)) to the workspace. With VEC = 4, x and grad_out are read as
//                 float4 between a scalar head (up to the first 16-byte boundary: row starts b * N are
//                 unaligned when N is odd) and a scalar tail.
//  2. row_finish: one block per row merges its tiles (Chan's parallel variance) into mean, rstd,
//                 a = mean(gw) and c = mean(gw * xhat) (mean kept in double: rows with |mean| >> std).
//  3. grad:       grid (column blocks, row groups). Each thread owns COLS_PER_THREAD columns (strided by
//                 THREADS: coalesced) and walks down its group's rows: grad_x, and from the same loads
//                 grad_weight and grad_bias (double). One group (few rows): straight to the outputs;
//                 several (many short rows): float partials in the workspace, and
//  4. reduce:     sums the group partials of each column.
// x and grad_out are read twice. Nothing assumes the workspace starts zeroed: every word read was
// written earlier in the same call.
#include <cstdint>
#include <cuda_runtime.h>

constexpr int THREADS = 256;          // knob: 128, 256, 512
constexpr int64_t TILE = 8192;        // knob: 2048, 8192, 32768
constexpr int COLS_PER_THREAD = 2;    // knob: 1, 2, 4
constexpr int VEC = 4;                // knob: 1, 4
constexpr int64_t TARGET_BLOCKS = 2048;   // column blocks x row groups wanted in the grad kernel
constexpr int64_t MAX_GROUPS = 256;       // the workspace is sized for this many row groups

struct TileStats { double mean, m2, sum_gw, sum_gwd; };   // sum_gwd = sum gw * (x - mean_t)

__device__ __forceinline__ double warp_allsum(double v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Every thread gets the K block totals (the same bits in every thread). sh: K x 32 doubles.
template <int K>
__device__ __forceinline__ void block_sum(double (&v)[K], double (*sh)[32]) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    #pragma unroll
    for (int k = 0; k < K; ++k) v[k] = warp_allsum(v[k]);
    if (lane == 0) {
        #pragma unroll
        for (int k = 0; k < K; ++k) sh[k][warp] = v[k];
    }
    __syncthreads();
    #pragma unroll
    for (int k = 0; k < K; ++k) {
        double s = 0.0;
        for (int w = 0; w < THREADS / 32; ++w) s += sh[k][w];
        v[k] = s;
    }
    __syncthreads();
}

__global__ void __launch_bounds__(THREADS) tile_stats(const float* __restrict__ grad_out, const float* __restrict__ x,
                           const float* __restrict__ weight, TileStats* __restrict__ tiles,
                           int64_t N, int64_t tile_len, int64_t tpr) {
    __shared__ double sh[4][32];
    const int64_t b = blockIdx.x, t = blockIdx.y;
    const int64_t j0 = t * tile_len;
    const int64_t j1 = j0 + tile_len < N ? j0 + tile_len : N;
    const float* xr = x + b * N;
    const float* gr = grad_out + b * N;
    const float k = xr[j0];
    double s[4] = {0.0, 0.0, 0.0, 0.0};
    auto add = [&](float xv, float gv, float wv) {
        const float d = xv - k, gw = gv * wv;
        s[0] += d;
        s[1] += (double)d * d;
        s[2] += gw;
        s[3] += (double)gw * d;
    };
    const bool vec = VEC == 4 && ((((uintptr_t)x ^ (uintptr_t)grad_out) & 15) == 0);
    if (vec) {
        int64_t head = (int64_t)((16 - ((uintptr_t)(xr + j0) & 15)) & 15) / 4;
        if (head > j1 - j0) head = j1 - j0;
        if (threadIdx.x < head) add(xr[j0 + threadIdx.x], gr[j0 + threadIdx.x], weight[j0 + threadIdx.x]);
        const int64_t v0 = j0 + head;
        const int64_t nv = (j1 - v0) / 4;
        const float4* x4 = reinterpret_cast<const float4*>(xr + v0);
        const float4* g4 = reinterpret_cast<const float4*>(gr + v0);
        for (int64_t q = threadIdx.x; q < nv; q += THREADS) {
            const float4 a = x4[q], c = g4[q];
            const int64_t j = v0 + 4 * q;
            add(a.x, c.x, weight[j]);
            add(a.y, c.y, weight[j + 1]);
            add(a.z, c.z, weight[j + 2]);
            add(a.w, c.w, weight[j + 3]);
        }
        for (int64_t j = v0 + 4 * nv + threadIdx.x; j < j1; j += THREADS) add(xr[j], gr[j], weight[j]);
    } else {
        for (int64_t j = j0 + threadIdx.x; j < j1; j += THREADS) add(xr[j], gr[j], weight[j]);
    }
    block_sum<4>(s, sh);
    if (threadIdx.x == 0) {
        const double n = (double)(j1 - j0), dm = s[0] / n;
        tiles[b * tpr + t] = TileStats{k + dm, s[1] - s[0] * dm, s[2], s[3] - dm * s[2]};
    }
}

__global__ void __launch_bounds__(THREADS) row_finish(const TileStats* __restrict__ tiles, double* __restrict__ mean_of,
                           float* __restrict__ rstd_of, float* __restrict__ a_of, float* __restrict__ c_of,
                           int64_t N, int64_t tile_len, int64_t tpr, float eps) {
    __shared__ double sh[2][32];
    const int64_t b = blockIdx.x;
    const TileStats* ts = tiles + b * tpr;
    double u[2] = {0.0, 0.0};
    for (int64_t t = threadIdx.x; t < tpr; t += THREADS) {
        const int64_t end = (t + 1) * tile_len < N ? (t + 1) * tile_len : N;
        u[0] += (double)(end - t * tile_len) * ts[t].mean;
        u[1] += ts[t].sum_gw;
    }
    block_sum<2>(u, sh);
    const double mean = u[0] / N, sum_gw = u[1];
    double v[2] = {0.0, 0.0};
    for (int64_t t = threadIdx.x; t < tpr; t += THREADS) {
        const int64_t end = (t + 1) * tile_len < N ? (t + 1) * tile_len : N;
        const double d = ts[t].mean - mean;
        v[0] += ts[t].m2 + (double)(end - t * tile_len) * d * d;
        v[1] += ts[t].sum_gwd + d * ts[t].sum_gw;
    }
    block_sum<2>(v, sh);
    if (threadIdx.x == 0) {
        const double var = v[0] > 0.0 ? v[0] / N : 0.0;
        const double rstd = rsqrt(var + (double)eps);
        mean_of[b] = mean;                 // double: a float mean of rows with |mean| >> std shifts xhat
        rstd_of[b] = (float)rstd;
        a_of[b] = (float)(sum_gw / N);
        c_of[b] = (float)(rstd * v[1] / N);
    }
}

// grid (column blocks, G): group blockIdx.y walks rows [y * rows_per_group, (y + 1) * rows_per_group).
__global__ void __launch_bounds__(THREADS) grad_kernel(const float* __restrict__ grad_out, const float* __restrict__ x,
                            const float* __restrict__ weight, const double* __restrict__ mean_of,
                            const float* __restrict__ rstd_of, const float* __restrict__ a_of,
                            const float* __restrict__ c_of, float* __restrict__ grad_x,
                            float* __restrict__ dw_out, float* __restrict__ db_out,
                            int64_t B, int64_t N, int64_t rows_per_group) {
    const int64_t base = (int64_t)blockIdx.x * (THREADS * COLS_PER_THREAD) + threadIdx.x;
    const int64_t b0 = (int64_t)blockIdx.y * rows_per_group;
    const int64_t b1 = b0 + rows_per_group < B ? b0 + rows_per_group : B;
    float w[COLS_PER_THREAD];
    double dw[COLS_PER_THREAD], db[COLS_PER_THREAD];
    #pragma unroll
    for (int c = 0; c < COLS_PER_THREAD; ++c) {
        const int64_t j = base + (int64_t)c * THREADS;
        w[c] = j < N ? weight[j] : 0.f;
        dw[c] = 0.0;
        db[c] = 0.0;
    }
    for (int64_t b = b0; b < b1; ++b) {
        const double m = mean_of[b];
        const float r = rstd_of[b], a = a_of[b], cc = c_of[b];
        const int64_t row = b * N;
        #pragma unroll
        for (int c = 0; c < COLS_PER_THREAD; ++c) {
            const int64_t j = base + (int64_t)c * THREADS;
            if (j < N) {
                const float g = grad_out[row + j];
                const float xhat = (float)((double)x[row + j] - m) * r;   // x - mean exact enough at |mean| >> std
                grad_x[row + j] = r * (g * w[c] - a - xhat * cc);
                dw[c] += (double)(g * xhat);
                db[c] += (double)g;
            }
        }
    }
    const int64_t out = (int64_t)blockIdx.y * N;
    #pragma unroll
    for (int c = 0; c < COLS_PER_THREAD; ++c) {
        const int64_t j = base + (int64_t)c * THREADS;
        if (j < N) {
            dw_out[out + j] = (float)dw[c];
            db_out[out + j] = (float)db[c];
        }
    }
}

__global__ void __launch_bounds__(THREADS) reduce_groups(const float* __restrict__ dw_part,
                                                         const float* __restrict__ db_part,
                                                         float* __restrict__ grad_weight, float* __restrict__ grad_bias,
                                                         int64_t N, int64_t G) {
    const int64_t j = (int64_t)blockIdx.x * THREADS + threadIdx.x;
    if (j >= N) return;
    double dw = 0.0, db = 0.0;
    for (int64_t k = 0; k < G; ++k) { dw += dw_part[k * N + j]; db += db_part[k * N + j]; }
    grad_weight[j] = (float)dw;
    grad_bias[j] = (float)db;
}

extern "C" int backward(const float* grad_out, const float* x, const float* weight, const float* bias,
                        float* grad_x, float* grad_weight, float* grad_bias,
                        int64_t B, int64_t N, float eps, void* workspace, int64_t workspace_bytes,
                        cudaStream_t stream) {
    if (N <= 0) return 0;
    if (B <= 0) {   // empty sums: write zeros
        cudaMemsetAsync(grad_weight, 0, N * sizeof(float), stream);
        cudaMemsetAsync(grad_bias, 0, N * sizeof(float), stream);
        return cudaGetLastError() == cudaSuccess ? 0 : 1;
    }
    // workspace: [mean: B doubles][rstd, a, c: B floats each] [tile records, later reused for the group partials]
    const int64_t row_bytes = (B * (int64_t)(sizeof(double) + 3 * sizeof(float)) + 15) / 16 * 16;   // keeps tiles aligned
    const int64_t rest = workspace_bytes - row_bytes;
    if (rest < B * (int64_t)sizeof(TileStats)) return 1;
    double* mean_of = static_cast<double*>(workspace);
    float* rstd_of = reinterpret_cast<float*>(mean_of + B);
    float* a_of = rstd_of + B;
    float* c_of = a_of + B;
    char* region = static_cast<char*>(workspace) + row_bytes;
    TileStats* tiles = reinterpret_cast<TileStats*>(region);

    int64_t tpr = (N + TILE - 1) / TILE;                                  // tiles per row
    const int64_t fit = rest / (B * (int64_t)sizeof(TileStats));
    if (tpr > fit) tpr = fit;
    if (tpr > 65535) tpr = 65535;                                         // gridDim.y
    const int64_t tile_len = (N + tpr - 1) / tpr;
    tpr = (N + tile_len - 1) / tile_len;                                  // no empty tiles
    tile_stats<<<dim3((unsigned)B, (unsigned)tpr), THREADS, 0, stream>>>(grad_out, x, weight, tiles, N, tile_len, tpr);
    row_finish<<<(unsigned)B, THREADS, 0, stream>>>(tiles, mean_of, rstd_of, a_of, c_of, N, tile_len, tpr, eps);

    const int64_t col_blocks = (N + THREADS * COLS_PER_THREAD - 1) / (THREADS * COLS_PER_THREAD);
    int64_t G = TARGET_BLOCKS / col_blocks;
    if (G > B) G = B;
    if (G > MAX_GROUPS) G = MAX_GROUPS;
    const int64_t gfit = rest / (2 * N * (int64_t)sizeof(float));
    if (G > gfit) G = gfit;
    if (G < 1) G = 1;
    const int64_t rows_per_group = (B + G - 1) / G;
    G = (B + rows_per_group - 1) / rows_per_group;                        // no empty groups
    if (G == 1) {
        grad_kernel<<<dim3((unsigned)col_blocks, 1), THREADS, 0, stream>>>(
            grad_out, x, weight, mean_of, rstd_of, a_of, c_of, grad_x, grad_weight, grad_bias, B, N, B);
    } else {
        float* dw_part = reinterpret_cast<float*>(region);                // the tile records are consumed
        float* db_part = dw_part + G * N;
        grad_kernel<<<dim3((unsigned)col_blocks, (unsigned)G), THREADS, 0, stream>>>(
            grad_out, x, weight, mean_of, rstd_of, a_of, c_of, grad_x, dw_part, db_part, B, N, rows_per_group);
        reduce_groups<<<(unsigned)((N + THREADS - 1) / THREADS), THREADS, 0, stream>>>(
            dw_part, db_part, grad_weight, grad_bias, N, G);
    }
    return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
