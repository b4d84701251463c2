// Cross-entropy backward, CUDA seed: one block per row: the row max (block max), then the sum of
// exp(x - max) (double block sum), then grad = (exp(x - max) / sum - onehot) * grad_out[0] / B.
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

__global__ void ce_backward_rows(const float* __restrict__ grad_out, const float* __restrict__ logits,
                                 const int64_t* __restrict__ target, float* __restrict__ grad_logits,
                                 int64_t B, int64_t C) {
    __shared__ double dshared[THREADS];
    __shared__ float fshared[THREADS];
    const int64_t b = blockIdx.x;
    const float* row = logits + b * C;
    float mx = -INFINITY;
    for (int64_t j = threadIdx.x; j < C; j += THREADS) mx = fmaxf(mx, row[j]);
    mx = block_max(mx, fshared);
    double s = 0.0;
    for (int64_t j = threadIdx.x; j < C; j += THREADS) s += exp((double)(row[j] - mx));
    const double inv = 1.0 / block_sum(s, dshared);
    const double scale = (double)grad_out[0] / B;
    const int64_t t = target[b];
    float* out = grad_logits + b * C;
    for (int64_t j = threadIdx.x; j < C; j += THREADS)
        out[j] = (float)((exp((double)(row[j] - mx)) * inv - (j == t ? 1.0 : 0.0)) * scale);
}

extern "C" int backward(const float* grad_out, const float* logits, const int64_t* target,
                        float* grad_logits, int64_t B, int64_t C,
                        void* workspace, int64_t workspace_bytes, cudaStream_t stream) {
    if (B == 0 || C == 0) return 0;
    ce_backward_rows<<<(unsigned)B, THREADS, 0, stream>>>(grad_out, logits, target, grad_logits, B, C);
    return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
