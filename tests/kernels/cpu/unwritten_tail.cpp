// HOSTILE: vectorised by 8 with no scalar tail: the last N % 8 elements of each row are never written.
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
        const float rstd = (float)(1.0 / std::sqrt(sq / N + eps)), m = (float)mean;
        for (int64_t i = 0; i + 8 <= N; i += 8)
            for (int k = 0; k < 8; ++k) out[b * N + i + k] = (row[i + k] - m) * rstd * weight[i + k] + bias[i + k];
    }
    return 0;
}
