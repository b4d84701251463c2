// Linear + ReLU backward, CPU seed. Pass 1, one OpenMP item per row b: pre = x[b] . weight[o] + bias[o]
// summed in double, and the masked gradient g[b, o] = pre > 0 ? grad_out[b, o] : 0 into the workspace.
// Pass 2, as a linear backward on g: grad_x[b, i] = sum_o g[b, o] * weight[o, i] per (row, chunk of COLS
// columns); grad_weight[o, i] = sum_b g[b, o] * x[b, i] per (o, chunk); grad_bias[o] = sum_b g[b, o]; all
// summed in double.
#include <cstdint>

constexpr int64_t COLS = 256;  // knob: 64, 256, 1024
constexpr int64_t LANES = 8;

// x . w in double, in LANES independent partial sums that the compiler turns into vector lanes
static inline double dot(const float* x, const float* w, int64_t n) {
    double lane[LANES] = {};
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int64_t l = 0; l < LANES; ++l) lane[l] += (double)x[i + l] * w[i + l];
    double s = 0.0;
    for (; i < n; ++i) s += (double)x[i] * w[i];
    for (int64_t l = 0; l < LANES; ++l) s += lane[l];
    return s;
}

extern "C" int backward(const float* grad_out, const float* x, const float* weight, const float* bias,
                        float* grad_x, float* grad_weight, float* grad_bias,
                        int64_t B, int64_t IN, int64_t OUT, void* workspace, int64_t workspace_bytes) {
    if (workspace_bytes < B * OUT * (int64_t)sizeof(float)) return 1;
    float* g = static_cast<float*>(workspace);
    #pragma omp parallel for schedule(static)
    for (int64_t b = 0; b < B; ++b) {
        const float* xr = x + b * IN;
        for (int64_t o = 0; o < OUT; ++o) {
            const double pre = dot(xr, weight + o * IN, IN) + bias[o];
            g[b * OUT + o] = pre > 0.0 ? grad_out[b * OUT + o] : 0.0f;
        }
    }
    const int64_t chunks = (IN + COLS - 1) / COLS;
    #pragma omp parallel for collapse(2) schedule(static)
    for (int64_t b = 0; b < B; ++b) {
        for (int64_t k = 0; k < chunks; ++k) {
            const int64_t i0 = k * COLS, n = IN - i0 < COLS ? IN - i0 : COLS;
            double acc[COLS];
            for (int64_t j = 0; j < n; ++j) acc[j] = 0.0;
            for (int64_t o = 0; o < OUT; ++o) {
                const double gv = g[b * OUT + o];
                if (gv == 0.0) continue;
                const float* w = weight + o * IN + i0;
                for (int64_t j = 0; j < n; ++j) acc[j] += gv * w[j];
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
                const double gv = g[b * OUT + o];
                if (gv == 0.0) continue;
                const float* xr = x + b * IN + i0;
                for (int64_t j = 0; j < n; ++j) acc[j] += gv * xr[j];
            }
            for (int64_t j = 0; j < n; ++j) grad_weight[o * IN + i0 + j] = (float)acc[j];
        }
    }
    #pragma omp parallel for schedule(static)
    for (int64_t o = 0; o < OUT; ++o) {
        double s = 0.0;
        for (int64_t b = 0; b < B; ++b) s += g[b * OUT + o];
        grad_bias[o] = (float)s;
    }
    return 0;
}
