// CORRECT: writes each row's mean and 1/std to the workspace (checking it is large enough), then reads
// them back in a second loop. Every workspace element it reads, it wrote first in this call.
#include <cmath>
#include <cstdint>

extern "C" int forward(const float* x, const float* weight, const float* bias, float* out,
                       int64_t B, int64_t N, float eps, void* workspace, int64_t workspace_bytes) {
    if (workspace == nullptr || workspace_bytes < (int64_t)(2 * B * sizeof(float))) return 2;
    float* stats = static_cast<float*>(workspace);        // [B][2]: mean, rstd
    #pragma omp parallel for
    for (int64_t b = 0; b < B; ++b) {
        const float* row = x + b * N;
        double sum = 0.0, sq = 0.0;
        for (int64_t i = 0; i < N; ++i) sum += row[i];
        const double mean = sum / N;
        for (int64_t i = 0; i < N; ++i) { const double d = row[i] - mean; sq += d * d; }
        stats[2 * b] = (float)mean;
        stats[2 * b + 1] = (float)(1.0 / std::sqrt(sq / N + eps));
    }
    #pragma omp parallel for
    for (int64_t b = 0; b < B; ++b) {
        const float m = stats[2 * b], rstd = stats[2 * b + 1];
        for (int64_t i = 0; i < N; ++i) out[b * N + i] = (x[b * N + i] - m) * rstd * weight[i] + bias[i];
    }
    return 0;
}
