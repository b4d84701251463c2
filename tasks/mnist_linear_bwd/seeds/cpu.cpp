// Linear backward, CPU seed. grad_x[b, i] = sum_o grad_out[b, o] * weight[o, i]: one OpenMP item per (row
// b, chunk of COLS columns), the chunk summed in double over o (rows of weight, read contiguously).
// grad_weight[o, i] = sum_b grad_out[b, o] * x[b, i]: one item per (o, chunk), summed in double over b.
// grad_bias[o] = sum_b grad_out[b, o], in double.
#include <cstdint>

constexpr int64_t COLS = 256;  // knob: 64, 256, 1024

extern "C" int backward(const float* grad_out, const float* x, const float* weight, const float* bias,
                        float* grad_x, float* grad_weight, float* grad_bias,
                        int64_t B, int64_t IN, int64_t OUT, void* workspace, int64_t workspace_bytes) {
    const int64_t chunks = (IN + COLS - 1) / COLS;
    #pragma omp parallel for collapse(2) schedule(static)
    for (int64_t b = 0; b < B; ++b) {
        for (int64_t k = 0; k < chunks; ++k) {
            const int64_t i0 = k * COLS, n = IN - i0 < COLS ? IN - i0 : COLS;
            double acc[COLS];
            for (int64_t j = 0; j < n; ++j) acc[j] = 0.0;
            for (int64_t o = 0; o < OUT; ++o) {
                const double g = grad_out[b * OUT + o];
                const float* w = weight + o * IN + i0;
                for (int64_t j = 0; j < n; ++j) acc[j] += g * w[j];
            }
            for (int64_t j = 0; j < n; ++j) grad_x[b * IN + i0 + j] = (float)acc[j];
        }
    }
    #pragma omp parallel for collapse(2) schedule(static)
    for (int64_t o = 0; o < OUT; ++o) {
        for (int64_t k = 0; k < chunks; ++k) {
            const int64_t i0 = k * COLS, n = IN - i0 < COLS ? IN - i0 : COLS;
            double acc[COLS];
            for (int64_t j = 0; j < n; ++j) acc[j] = 0.0;
            for (int64_t b = 0; b < B; ++b) {
                const double g = grad_out[b * OUT + o];
                const float* xr = x + b * IN + i0;
                for (int64_t j = 0; j < n; ++j) acc[j] += g * xr[j];
            }
            for (int64_t j = 0; j < n; ++j) grad_weight[o * IN + i0 + j] = (float)acc[j];
        }
    }
    #pragma omp parallel for schedule(static)
    for (int64_t o = 0; o < OUT; ++o) {
        double s = 0.0;
        for (int64_t b = 0; b < B; ++b) s += grad_out[b * OUT + o];
        grad_bias[o] = (float)s;
    }
    return 0;
}
