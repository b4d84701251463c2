// HONEST but slow: computes the answer twice (for paired-comparison tests on the GPU).
#include <cstdint>
#include <cuda_runtime.h>


constexpr int THREADS = 256;

__device__ double block_sum(double v, double* shared) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if ((threadIdx.x & 31) == 0) shared[threadIdx.x >> 5] = v;
    __syncthreads();
    double total = 0.0;
    for (int w = 0; w < THREADS / 32; ++w) total += shared[w];
    __syncthreads();
    return total;
}
__global__ void layernorm_rows(const float* __restrict__ x, const float* __restrict__ weight,
                               const float* __restrict__ bias, float* __restrict__ out, int64_t N, float eps) {
    __shared__ double shared[THREADS / 32];
    const float* row = x + blockIdx.x * N;
    float* o = out + blockIdx.x * N;
    double sum = 0.0;
    for (int64_t i = threadIdx.x; i < N; i += THREADS) sum += row[i];
    const float mean = (float)(block_sum(sum, shared) / N);
    double sq = 0.0;
    for (int64_t i = threadIdx.x; i < N; i += THREADS) { const float d = row[i] - mean; sq += d * d; }
    const float rstd = (float)rsqrt(block_sum(sq, shared) / N + eps);
    for (int64_t i = threadIdx.x; i < N; i += THREADS) o[i] = (row[i] - mean) * rstd * weight[i] + bias[i];
}

extern "C" int forward(const float* x, const float* weight, const float* bias, float* out,
                       int64_t B, int64_t N, float eps, void* workspace, int64_t workspace_bytes,
                       cudaStream_t stream) {
    if (B == 0) return 0;
    layernorm_rows<<<(unsigned)B, THREADS, 0, stream>>>(x, weight, bias, out, N, eps);
    layernorm_rows<<<(unsigned)B, THREADS, 0, stream>>>(x, weight, bias, out, N, eps);
    return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
