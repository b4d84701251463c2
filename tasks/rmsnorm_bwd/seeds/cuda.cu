// RMSNorm backward, CUDA seed.
//  1. rows:    one block per row. r = 1/sqrt(mean(x^2) + eps) and the row sum of gw * xhat
//              (gw = grad_out * weight), both as double block sums, then grad_x. Each row's r goes to
//              the workspace.
//  2. columns: grad_weight. Threads own columns; the rows are split into G groups (blockIdx.y) so that
//              small N still fills the GPU. With G == 1 the sums go straight to grad_weight; otherwise
//              each group writes float partials to the workspace and
//  3. reduce:  sums the G partials of each column.
// Nothing assumes the workspace starts zeroed: every word read was written earlier in the same call.
#include <cstdint>
#include <cuda_runtime.h>

constexpr int THREADS = 256;  // knob: 128, 256, 512, 1024
constexpr int TARGET_BLOCKS = 1024;   // enough column blocks to fill the GPU
constexpr int MAX_GROUPS = 256;       // the workspace is sized for this many row groups

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
                            float* __restrict__ r_of, int64_t N, float eps) {
    __shared__ double shared[THREADS];
    const int64_t b = blockIdx.x;
    const float* xr = x + b * N;
    const float* g = grad_out + b * N;
    double sq = 0.0;
    for (int64_t i = threadIdx.x; i < N; i += THREADS) sq += (double)xr[i] * xr[i];
    const double rd = rsqrt(block_sum(sq, shared) / N + eps);
    double s = 0.0;
    for (int64_t i = threadIdx.x; i < N; i += THREADS) s += (double)g[i] * weight[i] * (xr[i] * rd);
    const float c = (float)(block_sum(s, shared) / N);
    const float r = (float)rd;
    float* gx = grad_x + b * N;
    for (int64_t i = threadIdx.x; i < N; i += THREADS) gx[i] = r * (g[i] * weight[i] - xr[i] * r * c);
    if (threadIdx.x == 0) r_of[b] = r;
}

// grid (cdiv(N, THREADS), G): group blockIdx.y sums rows [y * rows_per_group, (y + 1) * rows_per_group).
__global__ void columns_kernel(const float* __restrict__ grad_out, const float* __restrict__ x,
                               const float* __restrict__ r_of, float* __restrict__ dw_out,
                               int64_t B, int64_t N, int64_t rows_per_group) {
    const int64_t j = (int64_t)blockIdx.x * THREADS + threadIdx.x;
    if (j >= N) return;
    const int64_t b0 = (int64_t)blockIdx.y * rows_per_group;
    const int64_t b1 = b0 + rows_per_group < B ? b0 + rows_per_group : B;
    double dw = 0.0;   // long column sums: double
    for (int64_t b = b0; b < b1; ++b) dw += grad_out[b * N + j] * (x[b * N + j] * r_of[b]);
    dw_out[(int64_t)blockIdx.y * N + j] = (float)dw;
}

__global__ void reduce_kernel(const float* __restrict__ dw_part, float* __restrict__ grad_weight,
                              int64_t N, int64_t G) {
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
    if (N == 0) return 0;
    const int64_t stats_bytes = B * (int64_t)sizeof(float);
    if (workspace_bytes < stats_bytes) return 1;
    float* r_of = static_cast<float*>(workspace);
    if (B == 0) {   // an empty sum: write zeros
        cudaMemsetAsync(grad_weight, 0, N * sizeof(float), stream);
        return cudaGetLastError() == cudaSuccess ? 0 : 1;
    }
    rows_kernel<<<(unsigned)B, THREADS, 0, stream>>>(grad_out, x, weight, grad_x, r_of, N, eps);

    const int64_t col_blocks = (N + THREADS - 1) / THREADS;
    int64_t G = TARGET_BLOCKS / col_blocks;
    if (G > B) G = B;
    if (G > MAX_GROUPS) G = MAX_GROUPS;
    const int64_t fit = (workspace_bytes - stats_bytes) / (N * (int64_t)sizeof(float));
    if (G > fit) G = fit;
    if (G < 1) G = 1;
    const int64_t rows_per_group = (B + G - 1) / G;
    G = (B + rows_per_group - 1) / rows_per_group;   // no empty groups
    if (G == 1) {
        columns_kernel<<<dim3((unsigned)col_blocks, 1), THREADS, 0, stream>>>(grad_out, x, r_of, grad_weight, B, N, B);
    } else {
        float* dw_part = r_of + B;
        columns_kernel<<<dim3((unsigned)col_blocks, (unsigned)G), THREADS, 0, stream>>>(
            grad_out, x, r_of, dw_part, B, N, rows_per_group);
        reduce_kernel<<<(unsigned)col_blocks, THREADS, 0, stream>>>(dw_part, grad_weight, N, G);
    }
    return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
