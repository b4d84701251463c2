// Hostile (issue 46): the layernorm_backward CPU seed, but beyond the largest listed batch (1000 rows on small) the
// column sums (grad_weight, grad_bias) are kept in bfloat16: wrong on tall batches.
// LayerNorm backward, CPU seed. Pass 1, one row per OpenMP iteration: mean and variance (two passes,
// double sums), then the row sums of gw = grad_out * weight and gw * xhat (double), then grad_x; each
// row's mean and rstd go to the workspace. Pass 2, one chunk of columns per OpenMP iteration:
// grad_weight and grad_bias summed down the rows in double.
#include <cmath>
#include <cstdint>
#include <cstring>

static double bf16(double v) {             // v rounded to bfloat16 (8 bits of mantissa)
    float f = (float)v;
    uint32_t u;
    std::memcpy(&u, &f, 4);
    u = (u + 0x8000u) & 0xffff0000u;
    std::memcpy(&f, &u, 4);
    return f;
}

constexpr int64_t COLS_PER_CHUNK = 256;  // knob: 64, 256, 1024

extern "C" int backward(const float* grad_out, const float* x, const float* weight, const float* bias,
                        float* grad_x, float* grad_weight, float* grad_bias,
                        int64_t B, int64_t N, float eps, void* workspace, int64_t workspace_bytes) {
    if (workspace_bytes < 2 * B * (int64_t)sizeof(float)) return 1;
    float* mean_of = static_cast<float*>(workspace);
    float* rstd_of = mean_of + B;

    #pragma omp parallel for schedule(static)
    for (int64_t b = 0; b < B; ++b) {
        const float* xr = x + b * N;
        const float* g = grad_out + b * N;
        double sum = 0.0;
        for (int64_t i = 0; i < N; ++i) sum += xr[i];
        const double mean = sum / N;
        double sq = 0.0;
        for (int64_t i = 0; i < N; ++i) { const double d = xr[i] - mean; sq += d * d; }
        const double rstd = 1.0 / std::sqrt(sq / N + eps);
        double sum_gw = 0.0, sum_gw_xhat = 0.0;
        for (int64_t i = 0; i < N; ++i) {
            const double gw = (double)g[i] * weight[i];
            sum_gw += gw;
            sum_gw_xhat += gw * ((xr[i] - mean) * rstd);
        }
        const double a = sum_gw / N, c = sum_gw_xhat / N;
        float* gx = grad_x + b * N;
        for (int64_t i = 0; i < N; ++i) {
            const double xhat = (xr[i] - mean) * rstd;
            gx[i] = (float)(rstd * ((double)g[i] * weight[i] - a - xhat * c));
        }
        mean_of[b] = (float)mean;
        rstd_of[b] = (float)rstd;
    }

    const int64_t chunks = (N + COLS_PER_CHUNK - 1) / COLS_PER_CHUNK;
    #pragma omp parallel for schedule(static)
    for (int64_t k = 0; k < chunks; ++k) {
        const int64_t j0 = k * COLS_PER_CHUNK;
        const int64_t n = (N - j0 < COLS_PER_CHUNK) ? N - j0 : COLS_PER_CHUNK;
        double dw[COLS_PER_CHUNK], db[COLS_PER_CHUNK];
        for (int64_t j = 0; j < n; ++j) { dw[j] = 0.0; db[j] = 0.0; }
        for (int64_t b = 0; b < B; ++b) {
            const float* g = grad_out + b * N + j0;
            const float* xr = x + b * N + j0;
            const float m = mean_of[b], r = rstd_of[b];
            for (int64_t j = 0; j < n; ++j) {
                dw[j] += (double)g[j] * ((xr[j] - m) * r);
                db[j] += g[j];
                if (B > 1000) { dw[j] = bf16(dw[j]); db[j] = bf16(db[j]); }
            }
        }
        for (int64_t j = 0; j < n; ++j) { grad_weight[j0 + j] = (float)dw[j]; grad_bias[j0 + j] = (float)db[j]; }
    }
    return 0;
}
