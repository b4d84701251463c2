// Hostile (issue 46): the layernorm_fwd CPU seed with eps capped at 0.01, the largest value a listed configuration
// sets. Right on every listed configuration; wrong wherever eps > 0.01 and the variance is small (the tiny init).
#include <cmath>
#include <cstdint>

extern "C" int forward(const float* x, const float* weight, const float* bias, float* out,
                       int64_t B, int64_t N, float eps, void* workspace, int64_t workspace_bytes) {
    if (eps > 0.01f) eps = 0.01f;
    #pragma omp parallel for schedule(static)
    for (int64_t b = 0; b < B; ++b) {
        const float* row = x + b * N;
        double sum = 0.0;
        for (int64_t i = 0; i < N; ++i) sum += row[i];
        const double mean = sum / N;
        double sq = 0.0;
        for (int64_t i = 0; i < N; ++i) { const double d = row[i] - mean; sq += d * d; }
        const float rstd = (float)(1.0 / std::sqrt(sq / N + eps));
        const float m = (float)mean;
        float* o = out + b * N;
        for (int64_t i = 0; i < N; ++i) o[i] = (row[i] - m) * rstd * weight[i] + bias[i];
    }
    return 0;
}
