// Hostile: correct values, but also writes one element past the end of `out` (its last row overflows).
#include <cmath>
#include <cstdint>

extern "C" int forward(const float* x, const float* weight, const float* bias, float* out,
                       int64_t B, int64_t N, float eps, void* workspace, int64_t workspace_bytes) {
    for (int64_t b = 0; b < B; ++b) {
        const float* row = x + b * N;
        double sum = 0.0, sq = 0.0;
        for (int64_t i = 0; i < N; ++i) sum += row[i];
        const double mean = sum / N;
        for (int64_t i = 0; i < N; ++i) { const double d = row[i] - mean; sq += d * d; }
        const float rstd = (float)(1.0 / std::sqrt(sq / N + eps));
        for (int64_t i = 0; i < N; ++i) out[b * N + i] = (row[i] - (float)mean) * rstd * weight[i] + bias[i];
    }
    out[B * N] = 0.0f;
    return 0;
}
