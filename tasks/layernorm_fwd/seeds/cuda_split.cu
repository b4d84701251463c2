// LayerNorm forward, CUDA seed (rows split over many blocks). For a few very long rows (B = 1..8,
// N = 64K..4M) one block per row leaves most of the GPU idle; here every row is cut into tiles.
//  1. tile_stats: grid (B, tiles per row). Each block sums d = x - k and d*d over its tile of about TILE
//                 elements (k: the tile's first element, a shift against cancellation; double per
//                 thread, double block sum) and writes (mean_t, M2_t) to the workspace. With VEC = 4, x
//                 is read as float4 between a scalar head (up to the first 16-byte boundary: row starts
//                 b * N are unaligned when N is odd) and a scalar tail.
//  2. row_finish: one block per row merges its tiles (Chan's parallel variance) into mean and rstd.
//  3. normalize:  grid (column blocks of THREADS * ELEMS_PER_THREAD, rows): out = (x - mean) * rstd * w + b,
//                 as float4 when N % 4 == 0 and every pointer is 16-byte aligned, else scalar.
// Nothing assumes the workspace starts zeroed: every word read was written earlier in the same call.
#include <cstdint>
#include <cuda_runtime.h>

constexpr int THREADS = 256;          // knob: 128, 256, 512
constexpr int64_t TILE = 16384;       // knob: 4096, 16384, 65536
constexpr int ELEMS_PER_THREAD = 8;   // knob: 4, 8, 16
constexpr int VEC = 4;                // knob: 1, 4

struct TileStats { double mean, m2; };

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

__global__ void __launch_bounds__(THREADS) tile_stats(const float* __restrict__ x, TileStats* __restrict__ tiles,
                           int64_t N, int64_t tile_len, int64_t tpr) {
    __shared__ double sh[2][32];
    const int64_t b = blockIdx.x, t = blockIdx.y;
    const int64_t j0 = t * tile_len;
    const int64_t j1 = j0 + tile_len < N ? j0 + tile_len : N;
    const float* xr = x + b * N;
    const float k = xr[j0];
    double s[2] = {0.0, 0.0};
    if (VEC == 4) {
        int64_t head = (int64_t)((16 - ((uintptr_t)(xr + j0) & 15)) & 15) / 4;
        if (head > j1 - j0) head = j1 - j0;
        if (threadIdx.x < head) { const float d = xr[j0 + threadIdx.x] - k; s[0] += d; s[1] += (double)d * d; }
        const int64_t v0 = j0 + head;
        const int64_t nv = (j1 - v0) / 4;
        const float4* x4 = reinterpret_cast<const float4*>(xr + v0);
        for (int64_t q = threadIdx.x; q < nv; q += THREADS) {
            const float4 a = x4[q];
            const float d0 = a.x - k, d1 = a.y - k, d2 = a.z - k, d3 = a.w - k;
            s[0] += (double)((d0 + d1) + (d2 + d3));
            s[1] += (double)d0 * d0 + (double)d1 * d1 + (double)d2 * d2 + (double)d3 * d3;
        }
        for (int64_t j = v0 + 4 * nv + threadIdx.x; j < j1; j += THREADS) {
            const float d = xr[j] - k;
            s[0] += d;
            s[1] += (double)d * d;
        }
    } else {
        for (int64_t j = j0 + threadIdx.x; j < j1; j += THREADS) {
            const float d = xr[j] - k;
            s[0] += d;
            s[1] += (double)d * d;
        }
    }
    block_sum<2>(s, sh);
    if (threadIdx.x == 0) {
        const double dm = s[0] / (double)(j1 - j0);
        tiles[b * tpr + t] = TileStats{k + dm, s[1] - s[0] * dm};
    }
}

__global__ void __launch_bounds__(THREADS) row_finish(const TileStats* __restrict__ tiles, float* __restrict__ mean_of,
                           float* __restrict__ rstd_of, int64_t N, int64_t tile_len, int64_t tpr, float eps) {
    __shared__ double sh[1][32];
    const int64_t b = blockIdx.x;
    const TileStats* ts = tiles + b * tpr;
    double u[1] = {0.0};
    for (int64_t t = threadIdx.x; t < tpr; t += THREADS) {
        const int64_t end = (t + 1) * tile_len < N ? (t + 1) * tile_len : N;
        u[0] += (double)(end - t * tile_len) * ts[t].mean;
    }
    block_sum<1>(u, sh);
    const double mean = u[0] / N;
    double v[1] = {0.0};
    for (int64_t t = threadIdx.x; t < tpr; t += THREADS) {
        const int64_t end = (t + 1) * tile_len < N ? (t + 1) * tile_len : N;
        const double d = ts[t].mean - mean;
        v[0] += ts[t].m2 + (double)(end - t * tile_len) * d * d;
    }
    block_sum<1>(v, sh);
    if (threadIdx.x == 0) {
        const double var = v[0] > 0.0 ? v[0] / N : 0.0;
        mean_of[b] = (float)mean;
        rstd_of[b] = (float)rsqrt(var + (double)eps);
    }
}

// grid (column blocks, min(B, 65535)): block (c, y) writes columns [c * THREADS * ELEMS_PER_THREAD, ...)
// of rows y, y + gridDim.y, ...
__global__ void __launch_bounds__(THREADS) normalize(const float* __restrict__ x, const float* __restrict__ weight,
                          const float* __restrict__ bias, const float* __restrict__ mean_of,
                          const float* __restrict__ rstd_of, float* __restrict__ out, int64_t B, int64_t N,
                          bool vec) {
    const int64_t c0 = (int64_t)blockIdx.x * (THREADS * ELEMS_PER_THREAD);
    const int64_t c1 = c0 + THREADS * ELEMS_PER_THREAD < N ? c0 + THREADS * ELEMS_PER_THREAD : N;
    for (int64_t b = blockIdx.y; b < B; b += gridDim.y) {
        const float m = mean_of[b], r = rstd_of[b];
        const float* xr = x + b * N;
        float* o = out + b * N;
        if (VEC == 4 && vec) {      // N % 4 == 0 and aligned pointers: c0 and c1 are multiples of 4
            const float4* x4 = reinterpret_cast<const float4*>(xr);
            const float4* w4 = reinterpret_cast<const float4*>(weight);
            const float4* b4 = reinterpret_cast<const float4*>(bias);
            float4* o4 = reinterpret_cast<float4*>(o);
            for (int64_t q = c0 / 4 + threadIdx.x; q < c1 / 4; q += THREADS) {
                const float4 a = x4[q], w = w4[q], bb = b4[q];
                o4[q] = make_float4((a.x - m) * r * w.x + bb.x, (a.y - m) * r * w.y + bb.y,
                                    (a.z - m) * r * w.z + bb.z, (a.w - m) * r * w.w + bb.w);
            }
        } else {
            for (int64_t j = c0 + threadIdx.x; j < c1; j += THREADS) o[j] = (xr[j] - m) * r * weight[j] + bias[j];
        }
    }
}

extern "C" int forward(const float* x, const float* weight, const float* bias, float* out,
                       int64_t B, int64_t N, float eps, void* workspace, int64_t workspace_bytes,
                       cudaStream_t stream) {
    if (B <= 0 || N <= 0) return 0;
    // workspace: [mean, rstd: B floats each, padded to 16 bytes] [tile records]
    const int64_t row_bytes = (2 * B * (int64_t)sizeof(float) + 15) / 16 * 16;
    const int64_t fit = (workspace_bytes - row_bytes) / (B * (int64_t)sizeof(TileStats));
    if (fit < 1) return 1;
    float* mean_of = static_cast<float*>(workspace);
    float* rstd_of = mean_of + B;
    TileStats* tiles = reinterpret_cast<TileStats*>(static_cast<char*>(workspace) + row_bytes);

    int64_t tpr = (N + TILE - 1) / TILE;                                  // tiles per row
    if (tpr > fit) tpr = fit;
    if (tpr > 65535) tpr = 65535;                                         // gridDim.y
    const int64_t tile_len = (N + tpr - 1) / tpr;
    tpr = (N + tile_len - 1) / tile_len;                                  // no empty tiles
    tile_stats<<<dim3((unsigned)B, (unsigned)tpr), THREADS, 0, stream>>>(x, tiles, N, tile_len, tpr);
    row_finish<<<(unsigned)B, THREADS, 0, stream>>>(tiles, mean_of, rstd_of, N, tile_len, tpr, eps);
    const bool vec = N % 4 == 0 && ((((uintptr_t)x | (uintptr_t)weight | (uintptr_t)bias | (uintptr_t)out) & 15) == 0);
    const int64_t col_blocks = (N + THREADS * ELEMS_PER_THREAD - 1) / (THREADS * ELEMS_PER_THREAD);
    const unsigned rows_y = (unsigned)(B < 65535 ? B : 65535);                  // gridDim.y
    normalize<<<dim3((unsigned)col_blocks, rows_y), THREADS, 0, stream>>>(x, weight, bias, mean_of, rstd_of, out,
                                                                         B, N, vec);
    return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
