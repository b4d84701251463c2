// Cross-entropy forward, CUDA seed.
//  1. rows: one block per row: the row max (block max), then the sum of exp(x - max) (double block
//     sum); the row's loss, log(sum) + max - x[target], goes to the workspace as a double.
//  2. mean: one block sums the B row losses (double) and writes loss[0] = total / B.
// Nothing assumes the workspace starts zeroed: every word read was written earlier in the same call.
#include <cstdint>
#include <cuda_runtime.h>

constexpr int THREADS = 256;  // knob: 128, 256, 512, 1024

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

__device__ float block_max(float v, float* shared) {
    shared[threadIdx.x] = v;
    __syncthreads();
    for (int s = THREADS / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) shared[threadIdx.x] = fmaxf(shared[threadIdx.x], shared[threadIdx.x + s]);
        __syncthreads();
    }
    float m = shared[0];
    __syncthreads();
    return m;
}

__global__ void row_loss_kernel(const float* __restrict__ logits, const int64_t* __restrict__ target,
                                double* __restrict__ row_loss, int64_t C) {
    __shared__ double dshared[THREADS];
    __shared__ float fshared[THREADS];
    const int64_t b = blockIdx.x;
    const float* row = logits + b * C;
    float mx = -INFINITY;
    for (int64_t j = threadIdx.x; j < C; j += THREADS) mx = fmaxf(mx, row[j]);
    mx = block_max(mx, fshared);
    double s = 0.0;
    for (int64_t j = threadIdx.x; j < C; j += THREADS) s += exp((double)(row[j] - mx));
    s = block_sum(s, dshared);
    if (threadIdx.x == 0) row_loss[b] = log(s) + (double)mx - (double)row[target[b]];
}

__global__ void mean_kernel(const double* __restrict__ row_loss, float* __restrict__ loss, int64_t B) {
    __shared__ double shared[THREADS];
    double s = 0.0;
    for (int64_t b = threadIdx.x; b < B; b += THREADS) s += row_loss[b];
    s = block_sum(s, shared);
    if (threadIdx.x == 0) loss[0] = (float)(s / B);
}

extern "C" int forward(const float* logits, const int64_t* target, float* loss,
                       int64_t B, int64_t C, void* workspace, int64_t workspace_bytes,
                       cudaStream_t stream) {
    if (workspace_bytes < B * (int64_t)sizeof(double)) return 1;
    if (B == 0 || C == 0) return 1;
    double* row_loss = static_cast<double*>(workspace);
    row_loss_kernel<<<(unsigned)B, THREADS, 0, stream>>>(logits, target, row_loss, C);
    mean_kernel<<<1, THREADS, 0, stream>>>(row_loss, loss, B);
    return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
