// Allocates its scratch inside its call (`cudaMallocAsync`/`cudaFreeAsync` on the stream): under capture these are
// allocation and free nodes of its graph, which a worker that never runs its host code does not replay — rejected
// naming them when the device code is timed apart from the host code (judge.replay). (Correct otherwise.)
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
    for (int64_t i = threadIdx.x; i < N; i += THREADS) o[i] = (row[i] - m) * rstd * weight[i] + bias[i];
}

extern "C" int forward(const float* x, const float* weight, const float* bias, float* out,
                       int64_t B, int64_t N, float eps, void* workspace, int64_t workspace_bytes,
                       cudaStream_t stream) {
    if (B == 0) return 0;
    void* scratch = nullptr;
    if (cudaMallocAsync(&scratch, 1 << 20, stream) != cudaSuccess) return 1;
    layernorm_rows<<<(unsigned)B, THREADS, 0, stream>>>(x, weight, bias, out, N, eps);
    cudaFreeAsync(scratch, stream);
    return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
