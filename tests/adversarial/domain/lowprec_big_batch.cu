// Hostile (issue 46): the layernorm_bwd CUDA seed, but beyond the largest batch the small set lists (1000 rows) the
// column sums (grad_weight, grad_bias) are rounded to bfloat16 as they go: wrong on tall batches.
// LayerNorm backward, CUDA seed.
//  1. rows:    one block per row. Mean and variance (two passes, double block sums), rstd, then the row
//              sums of gw = grad_out * weight and gw * xhat (double), then grad_x. Each row's mean and
//              rstd go to the workspace.
//  2. columns: grad_weight and grad_bias. Threads own columns; the rows are split into G groups
//              (blockIdx.y) so that small N still fills the GPU. With G == 1 the sums go straight to
//              the outputs; otherwise each group writes float partials to the workspace and
//  3. reduce:  sums the G partials of each column.
// Nothing assumes the workspace starts zeroed: every word read was written earlier in the same call.
#include <cstdint>
#include <cuda_runtime.h>

constexpr int THREADS = 256;  // knob: 128, 256, 512, 1024
constexpr int TARGET_BLOCKS = 1024;   // enough column blocks to fill the GPU
constexpr int MAX_GROUPS = 256;       // the workspace is sized for this many row groups

__device__ double bf16(double v) {      // v rounded to bfloat16 (8 bits of mantissa)
    unsigned int u = __float_as_uint((float)v);
    u = (u + 0x8000u) & 0xffff0000u;
    return __uint_as_float(u);
}

__device__ double block_sum(double v, double* shared) {
    shared[threadIdx.x] = v;
    __syncthreads();
    for (int s = THREADS / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) shared[threadIdx.x] += shared[threadIdx.x + s];
        __syncthreads();
    }
    double total = shared[0];
    __syncthreads();
    return total;
}

__global__ void rows_kernel(const float* __restrict__ grad_out, const float* __restrict__ x,
                            const float* __restrict__ weight, float* __restrict__ grad_x,
                            float* __restrict__ mean_of, float* __restrict__ rstd_of, int64_t N, float eps) {
    __shared__ double shared[THREADS];
    const int64_t b = blockIdx.x;
    const float* xr = x + b * N;
    const float* g = grad_out + b * N;
    double sum = 0.0;
    for (int64_t i = threadIdx.x; i < N; i += THREADS) sum += xr[i];
    const double mean = block_sum(sum, shared) / N;
    double sq = 0.0;
    for (int64_t i = threadIdx.x; i < N; i += THREADS) { double d = xr[i] - mean; sq += d * d; }
    const double rstd = rsqrt(block_sum(sq, shared) / N + eps);
    double s_gw = 0.0, s_gwx = 0.0;
    for (int64_t i = threadIdx.x; i < N; i += THREADS) {
        const double gw = (double)g[i] * weight[i];
        s_gw += gw;
        s_gwx += gw * ((xr[i] - mean) * rstd);
    }
    const float a = (float)(block_sum(s_gw, shared) / N);
    const float c = (float)(block_sum(s_gwx, shared) / N);
    const float m = (float)mean, r = (float)rstd;
    float* gx = grad_x + b * N;
    for (int64_t i = threadIdx.x; i < N; i += THREADS) {
        const float xhat = (xr[i] - m) * r;
        gx[i] = r * (g[i] * weight[i] - a - xhat * c);
    }
    if (threadIdx.x == 0) { mean_of[b] = m; rstd_of[b] = r; }
}

// grid (cdiv(N, THREADS), G): group blockIdx.y sums rows [y * rows_per_group, (y + 1) * rows_per_group).
__global__ void columns_kernel(const float* __restrict__ grad_out, const float* __restrict__ x,
                               const float* __restrict__ mean_of, const float* __restrict__ rstd_of,
                               float* __restrict__ dw_out, float* __restrict__ db_out,
                               int64_t B, int64_t N, int64_t rows_per_group) {
    const int64_t j = (int64_t)blockIdx.x * THREADS + threadIdx.x;
    if (j >= N) return;
    const int64_t b0 = (int64_t)blockIdx.y * rows_per_group;
    const int64_t b1 = b0 + rows_per_group < B ? b0 + rows_per_group : B;
    double dw = 0.0, db = 0.0;   // long column sums: double
    for (int64_t b = b0; b < b1; ++b) {
        const float g = grad_out[b * N + j];
        dw += g * ((x[b * N + j] - mean_of[b]) * rstd_of[b]);
        db += g;
        if (B > 1000) { dw = bf16(dw); db = bf16(db); }   // beyond the largest listed batch: bfloat16 sums
    }
    dw_out[(int64_t)blockIdx.y * N + j] = (float)dw;
    db_out[(int64_t)blockIdx.y * N + j] = (float)db;
}

__global__ void reduce_kernel(const float* __restrict__ dw_part, const float* __restrict__ db_part,
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
    if (N == 0) return 0;
    const int64_t stats_bytes = 2 * B * (int64_t)sizeof(float);
    if (workspace_bytes < stats_bytes) return 1;
    float* mean_of = static_cast<float*>(workspace);
    float* rstd_of = mean_of + B;
    if (B == 0) {   // empty sums: write zeros
        cudaMemsetAsync(grad_weight, 0, N * sizeof(float), stream);
        cudaMemsetAsync(grad_bias, 0, N * sizeof(float), stream);
        return cudaGetLastError() == cudaSuccess ? 0 : 1;
    }
    rows_kernel<<<(unsigned)B, THREADS, 0, stream>>>(grad_out, x, weight, grad_x, mean_of, rstd_of, N, eps);

    const int64_t col_blocks = (N + THREADS - 1) / THREADS;
    int64_t G = TARGET_BLOCKS / col_blocks;
    if (G > B) G = B;
    if (G > MAX_GROUPS) G = MAX_GROUPS;
    const int64_t fit = (workspace_bytes - stats_bytes) / (2 * N * (int64_t)sizeof(float));
    if (G > fit) G = fit;
    if (G < 1) G = 1;
    const int64_t rows_per_group = (B + G - 1) / G;
    G = (B + rows_per_group - 1) / rows_per_group;   // no empty groups
    if (G == 1) {
        columns_kernel<<<dim3((unsigned)col_blocks, 1), THREADS, 0, stream>>>(
            grad_out, x, mean_of, rstd_of, grad_weight, grad_bias, B, N, B);
    } else {
        float* dw_part = rstd_of + B;
        float* db_part = dw_part + G * N;
        columns_kernel<<<dim3((unsigned)col_blocks, (unsigned)G), THREADS, 0, stream>>>(
            grad_out, x, mean_of, rstd_of, dw_part, db_part, B, N, rows_per_group);
        reduce_kernel<<<(unsigned)col_blocks, THREADS, 0, stream>>>(dw_part, db_part, grad_weight, grad_bias, N, G);
    }
    return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
