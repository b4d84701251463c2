// Conv 3x3 + ReLU + 2x2 max pooling backward, CUDA seed: five steps over g, the gradient at the
// convolution's output [B, O, H - 2, W - 2], kept in the workspace.
//   1. g = 0 (cudaMemsetAsync).
//   2. select: one thread per pooling window computes its four convolution outputs (float sums over c, kh,
//      kw, plus the bias), finds the first maximum in row-major order (a later one wins only if strictly
//      larger) and, if it is > 0, writes the window's grad_out value to g there.
//   3. grad_bias: one block per o sums g[:, o] (double block sum).
//   4. grad_weight: one block per (o, c, kh, kw) sums g[b, o, h, w] * x[b, c, h + kh, w + kw] over b, h, w
//      (double block sum).
//   5. grad_x: one thread per element sums g[b, o, y - kh, z - kw] * weight[o, c, kh, kw] over o, kh, kw.
#include <cstdint>
#include <cuda_runtime.h>

constexpr int THREADS = 256;  // knob: 128, 256, 512
constexpr int64_t MAX_BLOCKS = 65536;

__device__ double block_sum(double v, double* shared) {
    shared[threadIdx.x] = v;
    __syncthreads();
    for (int s = THREADS / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) shared[threadIdx.x] += shared[threadIdx.x + s];
        __syncthreads();
    }
    return shared[0];
}

__global__ void select_kernel(const float* __restrict__ grad_out, const float* __restrict__ x,
                              const float* __restrict__ weight, const float* __restrict__ bias,
                              float* __restrict__ g, int64_t total, int64_t C, int64_t H, int64_t W, int64_t O,
                              int64_t PH, int64_t PW) {
    const int64_t OH = H - 2, OW = W - 2;
    for (int64_t k = (int64_t)blockIdx.x * THREADS + threadIdx.x; k < total; k += (int64_t)gridDim.x * THREADS) {
        const int64_t j = k % PW, i = (k / PW) % PH, o = (k / (PW * PH)) % O, b = k / (PW * PH * O);
        float conv[4];      // at (2i + di, 2j + dj), q = 2 * di + dj
        for (int q = 0; q < 4; ++q) conv[q] = bias[o];
        for (int64_t c = 0; c < C; ++c) {
            const float* xc = x + ((b * C + c) * H + 2 * i) * W + 2 * j;
            const float* wc = weight + (o * C + c) * 9;
            for (int kh = 0; kh < 3; ++kh)
                for (int kw = 0; kw < 3; ++kw)
                    for (int q = 0; q < 4; ++q) conv[q] += wc[kh * 3 + kw] * xc[(q / 2 + kh) * W + q % 2 + kw];
        }
        int best = 0;
        for (int q = 1; q < 4; ++q) best = conv[q] > conv[best] ? q : best;
        if (conv[best] > 0.0f) g[((b * O + o) * OH + 2 * i + best / 2) * OW + 2 * j + best % 2] = grad_out[k];
    }
}

__global__ void bias_kernel(const float* __restrict__ g, float* __restrict__ grad_bias, int64_t B, int64_t O,
                            int64_t plane) {
    __shared__ double shared[THREADS];
    const int64_t o = blockIdx.x;
    double s = 0.0;
    for (int64_t k = threadIdx.x; k < B * plane; k += THREADS) s += g[((k / plane) * O + o) * plane + k % plane];
    s = block_sum(s, shared);
    if (threadIdx.x == 0) grad_bias[o] = (float)s;
}

__global__ void weight_kernel(const float* __restrict__ g, const float* __restrict__ x, float* __restrict__ grad_weight,
                              int64_t B, int64_t C, int64_t H, int64_t W, int64_t O) {
    __shared__ double shared[THREADS];
    const int64_t idx = blockIdx.x;                     // ((o * C + c) * 3 + kh) * 3 + kw
    const int64_t kw = idx % 3, kh = (idx / 3) % 3, c = (idx / 9) % C, o = idx / (9 * C);
    const int64_t OH = H - 2, OW = W - 2, plane = OH * OW;
    double s = 0.0;
    for (int64_t k = threadIdx.x; k < B * plane; k += THREADS) {
        const int64_t b = k / plane, h = (k % plane) / OW, w = k % OW;
        const float gv = g[(b * O + o) * plane + h * OW + w];
        if (gv != 0.0f) s += (double)gv * x[((b * C + c) * H + h + kh) * W + w + kw];
    }
    s = block_sum(s, shared);
    if (threadIdx.x == 0) grad_weight[idx] = (float)s;
}

__global__ void input_kernel(const float* __restrict__ g, const float* __restrict__ weight, float* __restrict__ grad_x,
                             int64_t total, int64_t C, int64_t H, int64_t W, int64_t O) {
    const int64_t OH = H - 2, OW = W - 2;
    for (int64_t k = (int64_t)blockIdx.x * THREADS + threadIdx.x; k < total; k += (int64_t)gridDim.x * THREADS) {
        const int64_t z = k % W, y = (k / W) % H, c = (k / (W * H)) % C, b = k / (W * H * C);
        float s = 0.0f;
        for (int64_t o = 0; o < O; ++o) {
            const float* gp = g + (b * O + o) * OH * OW;
            const float* wc = weight + (o * C + c) * 9;
            for (int kh = 0; kh < 3; ++kh) {
                const int64_t h = y - kh;
                if (h < 0 || h >= OH) continue;
                for (int kw = 0; kw < 3; ++kw) {
                    const int64_t w = z - kw;
                    if (w >= 0 && w < OW) s += gp[h * OW + w] * wc[kh * 3 + kw];
                }
            }
        }
        grad_x[k] = s;
    }
}

static unsigned blocks_for(int64_t total) {
    const int64_t blocks = (total + THREADS - 1) / THREADS;
    return (unsigned)(blocks < MAX_BLOCKS ? blocks : MAX_BLOCKS);
}

extern "C" int backward(const float* grad_out, const float* x, const float* weight, const float* bias,
                        float* grad_x, float* grad_weight, float* grad_bias,
                        int64_t B, int64_t C, int64_t H, int64_t W, int64_t O,
                        void* workspace, int64_t workspace_bytes, cudaStream_t stream) {
    const int64_t OH = H - 2, OW = W - 2;
    if (OH < 1 || OW < 1 || workspace_bytes < B * O * OH * OW * (int64_t)sizeof(float)) return 1;
    if (B == 0 || C == 0 || O == 0) return 1;
    const int64_t PH = OH / 2, PW = OW / 2;
    float* g = static_cast<float*>(workspace);
    cudaMemsetAsync(g, 0, B * O * OH * OW * sizeof(float), stream);
    if (B * O * PH * PW > 0)
        select_kernel<<<blocks_for(B * O * PH * PW), THREADS, 0, stream>>>(grad_out, x, weight, bias, g,
                                                                          B * O * PH * PW, C, H, W, O, PH, PW);
    bias_kernel<<<(unsigned)O, THREADS, 0, stream>>>(g, grad_bias, B, O, OH * OW);
    weight_kernel<<<(unsigned)(O * C * 9), THREADS, 0, stream>>>(g, x, grad_weight, B, C, H, W, O);
    input_kernel<<<blocks_for(B * C * H * W), THREADS, 0, stream>>>(g, weight, grad_x, B * C * H * W, C, H, W, O);
    return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
