// Conv 3x3 + ReLU + 2x2 max pooling forward, CUDA seed: one thread per pooled output (a grid-stride loop).
// It computes its window's four convolution outputs from the 4x4 patch of x under it (float sums over c,
// kh, kw), adds the bias and keeps the largest, clamped at 0 (max(0, max(...)) is the pooled ReLU).
#include <cstdint>
#include <cuda_runtime.h>

constexpr int THREADS = 256;  // knob: 64, 128, 256, 512
constexpr int64_t MAX_BLOCKS = 65536;

__global__ void conv_relu_pool_kernel(const float* __restrict__ x, const float* __restrict__ weight,
                                      const float* __restrict__ bias, float* __restrict__ out, int64_t total,
                                      int64_t C, int64_t H, int64_t W, int64_t O, int64_t PH, int64_t PW) {
    for (int64_t k = (int64_t)blockIdx.x * THREADS + threadIdx.x; k < total; k += (int64_t)gridDim.x * THREADS) {
        const int64_t j = k % PW, i = (k / PW) % PH, o = (k / (PW * PH)) % O, b = k / (PW * PH * O);
        float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};      // conv at (2i + di, 2j + dj), q = 2 * di + dj
        for (int64_t c = 0; c < C; ++c) {
            const float* xc = x + ((b * C + c) * H + 2 * i) * W + 2 * j;
            const float* wc = weight + (o * C + c) * 9;
            for (int kh = 0; kh < 3; ++kh)
                for (int kw = 0; kw < 3; ++kw) {
                    const float wv = wc[kh * 3 + kw];
                    for (int q = 0; q < 4; ++q) acc[q] += wv * xc[(q / 2 + kh) * W + q % 2 + kw];
                }
        }
        const float m = fmaxf(fmaxf(acc[0], acc[1]), fmaxf(acc[2], acc[3])) + bias[o];
        out[k] = fmaxf(m, 0.0f);
    }
}

extern "C" int forward(const float* x, const float* weight, const float* bias, float* out,
                       int64_t B, int64_t C, int64_t H, int64_t W, int64_t O,
                       void* workspace, int64_t workspace_bytes, cudaStream_t stream) {
    const int64_t PH = (H - 2) / 2, PW = (W - 2) / 2;
    const int64_t total = B * O * PH * PW;
    if (total <= 0) return 0;
    int64_t blocks = (total + THREADS - 1) / THREADS;
    if (blocks > MAX_BLOCKS) blocks = MAX_BLOCKS;
    conv_relu_pool_kernel<<<(unsigned)blocks, THREADS, 0, stream>>>(x, weight, bias, out, total, C, H, W, O, PH, PW);
    return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
