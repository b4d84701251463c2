// 2x2 max pooling backward, CUDA seed: one thread per element of grad_x (a grid-stride loop). An element
// inside the pooled area finds the first maximum of its window (row-major order; a later value wins only
// if strictly larger) and takes the window's grad_out value if that maximum is itself, else 0; an element
// of an odd last row or column gets 0.
#include <cstdint>
#include <cuda_runtime.h>

constexpr int THREADS = 256;  // knob: 128, 256, 512, 1024
constexpr int64_t MAX_BLOCKS = 65536;

__global__ void pool_backward_kernel(const float* __restrict__ grad_out, const float* __restrict__ x,
                                     float* __restrict__ grad_x, int64_t total, int64_t H, int64_t W,
                                     int64_t PH, int64_t PW) {
    for (int64_t k = (int64_t)blockIdx.x * THREADS + threadIdx.x; k < total; k += (int64_t)gridDim.x * THREADS) {
        const int64_t w = k % W, h = (k / W) % H, p = k / (W * H);
        const int64_t i = h / 2, j = w / 2;
        float v = 0.0f;
        if (i < PH && j < PW) {
            const float* win = x + p * H * W + 2 * i * W + 2 * j;
            const int64_t at[4] = {0, 1, W, W + 1};
            int best = 0;
            for (int q = 1; q < 4; ++q) best = win[at[q]] > win[at[best]] ? q : best;
            if (at[best] == (h - 2 * i) * W + (w - 2 * j)) v = grad_out[(p * PH + i) * PW + j];
        }
        grad_x[k] = v;
    }
}

extern "C" int backward(const float* grad_out, const float* x, float* grad_x,
                        int64_t B, int64_t C, int64_t H, int64_t W, void* workspace, int64_t workspace_bytes,
                        cudaStream_t stream) {
    const int64_t total = B * C * H * W;
    if (total == 0) return 0;
    int64_t blocks = (total + THREADS - 1) / THREADS;
    if (blocks > MAX_BLOCKS) blocks = MAX_BLOCKS;
    pool_backward_kernel<<<(unsigned)blocks, THREADS, 0, stream>>>(grad_out, x, grad_x, total, H, W, H / 2, W / 2);
    return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
