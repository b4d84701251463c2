// RMSNorm backward, CUDA seed (fused rows, row cached in registers).
//  1. rows_fused: G blocks; block y walks its group of consecutive rows. Each thread owns the columns
//                 j = k * THREADS + threadIdx.x (k < ITEMS: coalesced). Per row it loads its x and
//                 grad_out once into registers, the block sums x*x and gw*x (gw = grad_out * weight;
//                 double per thread, warp shuffles, shared memory), then it writes grad_x from its
//                 registers and adds grad_out * xhat into its grad_weight accumulators (double), which
//                 stay in registers across the group's rows: one read of x and grad_out in all. The
//                 group's grad_weight partial goes to the workspace (float). Rows longer than
//                 THREADS * ITEMS take two passes and keep the partial in the workspace instead.
//  2. reduce:     grad_weight = the sum of the G partials of each column (double).
// G = cdiv(B, rows per group) <= min(B, 256) with at least ROWS_PER_BLOCK rows per group.
// Nothing assumes the workspace starts zeroed: every word read was written earlier in the same call.
#include <cstdint>
#include <cuda_runtime.h>

constexpr int THREADS = 512;             // knob: 128, 256, 512, 1024
constexpr int ITEMS = 16;                // knob: 4, 8, 16
constexpr int64_t ROWS_PER_BLOCK = 16;   // knob: 4, 16, 64
constexpr int64_t MAX_GROUPS = 256;      // the workspace is sized for this many row groups

__device__ __forceinline__ double warp_allsum(double v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Every thread gets both block totals (the same bits in every thread). sh: 2 x 32 doubles.
__device__ __forceinline__ void block_sum2(double& a, double& b, double (*sh)[32]) {
    a = warp_allsum(a);
    b = warp_allsum(b);
    if ((threadIdx.x & 31) == 0) { sh[0][threadIdx.x >> 5] = a; sh[1][threadIdx.x >> 5] = b; }
    __syncthreads();
    a = 0.0;
    b = 0.0;
    for (int w = 0; w < THREADS / 32; ++w) { a += sh[0][w]; b += sh[1][w]; }
    __syncthreads();
}

__global__ void __launch_bounds__(THREADS) rows_fused(const float* __restrict__ grad_out, const float* __restrict__ x,
                           const float* __restrict__ weight, float* __restrict__ grad_x,
                           float* __restrict__ dw_part, int64_t B, int64_t N, int64_t rows_per_group, float eps) {
    __shared__ double sh[2][32];
    const int64_t b0 = (int64_t)blockIdx.x * rows_per_group;
    const int64_t b1 = b0 + rows_per_group < B ? b0 + rows_per_group : B;
    float* part = dw_part + (int64_t)blockIdx.x * N;
    if (N <= (int64_t)THREADS * ITEMS) {
        float w[ITEMS];
        double acc[ITEMS];
        #pragma unroll
        for (int k = 0; k < ITEMS; ++k) {
            const int64_t j = (int64_t)k * THREADS + threadIdx.x;
            w[k] = j < N ? weight[j] : 0.f;
            acc[k] = 0.0;
        }
        for (int64_t b = b0; b < b1; ++b) {
            const float* xr = x + b * N;
            const float* gr = grad_out + b * N;
            float xv[ITEMS], gv[ITEMS];
            #pragma unroll
            for (int k = 0; k < ITEMS; ++k) {
                const int64_t j = (int64_t)k * THREADS + threadIdx.x;
                xv[k] = j < N ? xr[j] : 0.f;
                gv[k] = j < N ? gr[j] : 0.f;
            }
            double sq = 0.0, dot = 0.0;
            #pragma unroll
            for (int k = 0; k < ITEMS; ++k) {
                sq += (double)xv[k] * xv[k];
                dot += (double)(gv[k] * w[k]) * xv[k];
            }
            block_sum2(sq, dot, sh);
            const double rd = rsqrt(sq / N + (double)eps);
            const float r = (float)rd, c = (float)(rd * dot / N);     // c = mean(gw * xhat)
            float* gx = grad_x + b * N;
            #pragma unroll
            for (int k = 0; k < ITEMS; ++k) {
                const int64_t j = (int64_t)k * THREADS + threadIdx.x;
                const float xhat = xv[k] * r;
                if (j < N) gx[j] = r * (gv[k] * w[k] - xhat * c);
                acc[k] += (double)(gv[k] * xhat);
            }
        }
        #pragma unroll
        for (int k = 0; k < ITEMS; ++k) {
            const int64_t j = (int64_t)k * THREADS + threadIdx.x;
            if (j < N) part[j] = (float)acc[k];
        }
    } else {                         // long rows: two passes per row, the partial kept in the workspace
        for (int64_t b = b0; b < b1; ++b) {
            const float* xr = x + b * N;
            const float* gr = grad_out + b * N;
            double sq = 0.0, dot = 0.0;
            for (int64_t j = threadIdx.x; j < N; j += THREADS) {
                sq += (double)xr[j] * xr[j];
                dot += (double)(gr[j] * weight[j]) * xr[j];
            }
            block_sum2(sq, dot, sh);
            const double rd = rsqrt(sq / N + (double)eps);
            const float r = (float)rd, c = (float)(rd * dot / N);
            float* gx = grad_x + b * N;
            for (int64_t j = threadIdx.x; j < N; j += THREADS) {      // thread j owns part[j]: no race
                const float g = gr[j], xhat = xr[j] * r;
                gx[j] = r * (g * weight[j] - xhat * c);
                part[j] = (b == b0 ? 0.f : part[j]) + g * xhat;
            }
        }
    }
}

__global__ void __launch_bounds__(THREADS) reduce_groups(const float* __restrict__ dw_part,
                                                         float* __restrict__ grad_weight, int64_t N, int64_t G) {
    const int64_t j = (int64_t)blockIdx.x * THREADS + threadIdx.x;
    if (j >= N) return;
    double dw = 0.0;
    for (int64_t k = 0; k < G; ++k) dw += dw_part[k * N + j];
    grad_weight[j] = (float)dw;
}

extern "C" int backward(const float* grad_out, const float* x, const float* weight,
                        float* grad_x, float* grad_weight,
                        int64_t B, int64_t N, float eps, void* workspace, int64_t workspace_bytes,
                        cudaStream_t stream) {
    if (N <= 0) return 0;
    if (B <= 0) {   // an empty sum: write zeros
        cudaMemsetAsync(grad_weight, 0, N * sizeof(float), stream);
        return cudaGetLastError() == cudaSuccess ? 0 : 1;
    }
    int64_t G = (B + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK;
    if (G > MAX_GROUPS) G = MAX_GROUPS;
    const int64_t fit = workspace_bytes / (N * (int64_t)sizeof(float));
    if (G > fit) G = fit;
    if (G < 1) return 1;
    const int64_t rows_per_group = (B + G - 1) / G;
    G = (B + rows_per_group - 1) / rows_per_group;                        // no empty groups
    float* dw_part = static_cast<float*>(workspace);
    rows_fused<<<(unsigned)G, THREADS, 0, stream>>>(grad_out, x, weight, grad_x, dw_part, B, N, rows_per_group, eps);
    reduce_groups<<<(unsigned)((N + THREADS - 1) / THREADS), THREADS, 0, stream>>>(dw_part, grad_weight, N, G);
    return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
