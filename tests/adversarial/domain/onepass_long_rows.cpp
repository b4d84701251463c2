// Hostile (issue 46): the layernorm_fwd CPU seed, but rows longer than the longest listed one (262147 on small) take a
// one-pass float variance, E[x^2] - mean^2: faster, and wrong where |mean| >> std (the offset inits).
#include <cmath>
#include <cstdint>

extern "C" int forward(const float* x, const float* weight, const float* bias, float* out,
                       int64_t B, int64_t N, float eps, void* workspace, int64_t workspace_bytes) {
    #pragma omp parallel for schedule(static)
    for (int64_t b = 0; b < B; ++b) {
        const float* row = x + b * N;
        double mean, var;
        if (N > 262147) {
            float s = 0.f, s2 = 0.f;
            for (int64_t i = 0; i < N; ++i) { s += row[i]; s2 += row[i] * row[i]; }
            const float m = s / N;
            mean = m; var = s2 / N - m * m;
        } else {
            double sum = 0.0;
            for (int64_t i = 0; i < N; ++i) sum += row[i];
            mean = sum / N;
            double sq = 0.0;
            for (int64_t i = 0; i < N; ++i) { const double d = row[i] - mean; sq += d * d; }
            var = sq / N;
        }
        const float rstd = (float)(1.0 / std::sqrt(var + eps));
        const float m = (float)mean;
        float* o = out + b * N;
        for (int64_t i = 0; i < N; ++i) o[i] = (row[i] - m) * rstd * weight[i] + bias[i];
    }
    return 0;
}
