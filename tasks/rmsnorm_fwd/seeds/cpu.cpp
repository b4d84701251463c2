// RMSNorm forward, CPU seed: one row per OpenMP iteration, the sum of squares in double.
#include <cmath>
#include <cstdint>

extern "C" int forward(const float* x, const float* weight, float* out,
                       int64_t B, int64_t N, float eps, void* workspace, int64_t workspace_bytes) {
    #pragma omp parallel for schedule(static)
    for (int64_t b = 0; b < B; ++b) {
        const float* row = x + b * N;
        double sq = 0.0;
        for (int64_t i = 0; i < N; ++i) sq += (double)row[i] * row[i];
        const float r = (float)(1.0 / std::sqrt(sq / N + eps));
        float* o = out + b * N;
        for (int64_t i = 0; i < N; ++i) o[i] = row[i] * r * weight[i];
    }
    return 0;
}
