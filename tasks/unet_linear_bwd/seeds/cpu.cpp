// Linear backward, CPU seed. grad_x: one block of ROWS rows per OpenMP iteration, grad_x[m, :] = sum over
// n of grad_out[m, n] * weight[n, :] (row updates along K, contiguous; each weight row is reused from
// cache by the ROWS rows of the block). grad_weight and grad_bias: one row n per OpenMP iteration,
// grad_weight[n, :] = sum over m of grad_out[m, n] * x[m, :], accumulated in float32 in the output row
// itself, the bias sum in double. Every output element is written first.
#include <cstdint>

constexpr int64_t ROWS = 8;  // knob: 1, 8, 32

extern "C" int backward(const float* grad_out, const float* x, const float* weight, const float* bias,
                        float* grad_x, float* grad_weight, float* grad_bias,
                        int64_t M, int64_t K, int64_t N, void* workspace, int64_t workspace_bytes) {
    const int64_t blocks = (M + ROWS - 1) / ROWS;
    #pragma omp parallel for schedule(static)
    for (int64_t blk = 0; blk < blocks; ++blk) {
        const int64_t m0 = blk * ROWS, m1 = m0 + ROWS < M ? m0 + ROWS : M;
        for (int64_t k = 0; k < (m1 - m0) * K; ++k) grad_x[m0 * K + k] = 0.0f;
        for (int64_t n = 0; n < N; ++n) {
            const float* w = weight + n * K;
            for (int64_t m = m0; m < m1; ++m) {
                const float g = grad_out[m * N + n];
                float* gx = grad_x + m * K;
                #pragma omp simd
                for (int64_t k = 0; k < K; ++k) gx[k] += g * w[k];
            }
        }
    }
    #pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
        float* gw = grad_weight + n * K;
        for (int64_t k = 0; k < K; ++k) gw[k] = 0.0f;
        double gb = 0.0;
        for (int64_t m = 0; m < M; ++m) {
            const float g = grad_out[m * N + n];
            const float* xr = x + m * K;
            gb += g;
            #pragma omp simd
            for (int64_t k = 0; k < K; ++k) gw[k] += g * xr[k];
        }
        grad_bias[n] = (float)gb;
    }
    return 0;
}
