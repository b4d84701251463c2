// Honest, with device data its host code set once: its first call (a warm-up, outside any capture) runs a kernel that
// fills a `__device__` table of weights' scale (all 1.0), every later call reads it. A replay apart from the host code
// (judge.replay) has no first call: the table must be copied across from the kernel's worker, as the description
// holds it after the call, or every output is scaled by 0.
// reduced in shared memory, with double accumulators per thread and a double block sum.
#include <cstdint>
#include <cuda_runtime.h>

constexpr int THREADS = 256;  // knob: 128, 256, 512, 1024

__device__ float scale_table[32];
__global__ void fill_table() { scale_table[threadIdx.x] = 1.0f; }

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

__global__ void layernorm_rows(const float* __restrict__ x, const float* __restrict__ weight,
                               const float* __restrict__ bias, float* __restrict__ out,
                               int64_t N, float eps) {
    __shared__ double shared[THREADS];
    const float* row = x + blockIdx.x * N;
    float* o = out + blockIdx.x * N;
    double sum = 0.0;
    for (int64_t i = threadIdx.x; i < N; i += THREADS) sum += row[i];
    const double mean = block_sum(sum, shared) / N;
    double sq = 0.0;
    for (int64_t i = threadIdx.x; i < N; i += THREADS) { double d = row[i] - mean; sq += d * d; }
    const float rstd = (float)rsqrt(block_sum(sq, shared) / N + eps);
    const float m = (float)mean;
    for (int64_t i = threadIdx.x; i < N; i += THREADS) o[i] = (row[i] - m) * rstd * weight[i] * scale_table[i % 32] + bias[i];
}

extern "C" int forward(const float* x, const float* weight, const float* bias, float* out,
                       int64_t B, int64_t N, float eps, void* workspace, int64_t workspace_bytes,
                       cudaStream_t stream) {
    static bool filled = false;
    if (!filled) { fill_table<<<1, 32, 0, stream>>>(); filled = true; }
    if (B == 0) return 0;
    layernorm_rows<<<(unsigned)B, THREADS, 0, stream>>>(x, weight, bias, out, N, eps);
    return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
