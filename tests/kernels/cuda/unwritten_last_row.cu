// HOSTILE: a correct one-block-per-row LayerNorm that skips the last row (its outputs stay NaN).
#include <cstdint>
#include <cuda_runtime.h>

__device__ float block_sum(const float* v, int64_t N, float mean, bool squares) {
    __shared__ float red[32];
    float s = 0.f;
    for (int64_t i = threadIdx.x; i < N; i += blockDim.x) { float d = v[i] - mean; s += squares ? d * d : v[i]; }
    for (int o = 16; o; o >>= 1) s += __shfl_xor_sync(~0u, s, o);
    __syncthreads();
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = s;
    __syncthreads();
    s = 0.f;
    for (int k = 0; k < (int)(blockDim.x >> 5); ++k) s += red[k];
    return s;
}

__global__ void rows(const float* x, const float* w, const float* b, float* out, int64_t B, int64_t N, float eps) {
    int64_t r = blockIdx.x;
    if (r >= B - 1) return;
    float mean = block_sum(x + r * N, N, 0.f, false) / N;
    float rstd = rsqrtf(block_sum(x + r * N, N, mean, true) / N + eps);
    for (int64_t i = threadIdx.x; i < N; i += blockDim.x)
        out[r * N + i] = (x[r * N + i] - mean) * rstd * w[i] + b[i];
}

extern "C" int forward(const float* x, const float* weight, const float* bias, float* out,
                       int64_t B, int64_t N, float eps, void* workspace, int64_t workspace_bytes,
                       cudaStream_t stream) {
    rows<<<(unsigned)B, 256, 0, stream>>>(x, weight, bias, out, B, N, eps);
    return 0;
}
