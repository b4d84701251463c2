// RMSNorm backward, CPU seed. Pass 1, one row per OpenMP iteration: r = 1/sqrt(mean(x^2) + eps) and
// the row sum of gw * xhat (double), then grad_x; each row's r goes to the workspace. Pass 2, one chunk
// of columns per OpenMP iteration: grad_weight summed down the rows in double.
#include <cmath>
#include <cstdint>

constexpr int64_t COLS_PER_CHUNK = 256;  // knob: 64, 256, 1024

extern "C" int backward(const float* grad_out, const float* x, const float* weight,
                        float* grad_x, float* grad_weight,
                        int64_t B, int64_t N, float eps, void* workspace, int64_t workspace_bytes) {
    if (workspace_bytes < B * (int64_t)sizeof(float)) return 1;
    float* r_of = static_cast<float*>(workspace);

    #pragma omp parallel for schedule(static)
    for (int64_t b = 0; b < B; ++b) {
        const float* xr = x + b * N;
        const float* g = grad_out + b * N;
        double sq = 0.0;
        for (int64_t i = 0; i < N; ++i) sq += (double)xr[i] * xr[i];
        const double r = 1.0 / std::sqrt(sq / N + eps);
        double sum_gw_xhat = 0.0;
        for (int64_t i = 0; i < N; ++i) sum_gw_xhat += (double)g[i] * weight[i] * (xr[i] * r);
        const double c = sum_gw_xhat / N;
        float* gx = grad_x + b * N;
        for (int64_t i = 0; i < N; ++i) gx[i] = (float)(r * ((double)g[i] * weight[i] - xr[i] * r * c));
        r_of[b] = (float)r;
    }

    const int64_t chunks = (N + COLS_PER_CHUNK - 1) / COLS_PER_CHUNK;
    #pragma omp parallel for schedule(static)
    for (int64_t k = 0; k < chunks; ++k) {
        const int64_t j0 = k * COLS_PER_CHUNK;
        const int64_t n = (N - j0 < COLS_PER_CHUNK) ? N - j0 : COLS_PER_CHUNK;
        double dw[COLS_PER_CHUNK];
        for (int64_t j = 0; j < n; ++j) dw[j] = 0.0;
        for (int64_t b = 0; b < B; ++b) {
            const float* g = grad_out + b * N + j0;
            const float* xr = x + b * N + j0;
            const float r = r_of[b];
            for (int64_t j = 0; j < n; ++j) dw[j] += (double)g[j] * (xr[j] * r);
        }
        for (int64_t j = 0; j < n; ++j) grad_weight[j0 + j] = (float)dw[j];
    }
    return 0;
}
