// HOSTILE: assumes N is a multiple of 32: the reductions run over whole 32-wide blocks only, so the
// statistics miss the last N % 32 elements (every output is still written).
#include <cmath>
#include <cstdint>

extern "C" int forward(const float* x, const float* weight, const float* bias, float* out,
                       int64_t B, int64_t N, float eps, void* workspace, int64_t workspace_bytes) {
    const int64_t blocks = N / 32;
    for (int64_t b = 0; b < B; ++b) {
        const float* row = x + b * N;
        double sum = 0.0, sq = 0.0;
        for (int64_t k = 0; k < blocks; ++k)
            for (int j = 0; j < 32; ++j) sum += row[k * 32 + j];
        const double mean = sum / N;
        for (int64_t k = 0; k < blocks; ++k)
            for (int j = 0; j < 32; ++j) { const double d = row[k * 32 + j] - mean; sq += d * d; }
        const float rstd = (float)(1.0 / std::sqrt(sq / N + eps)), m = (float)mean;
        for (int64_t i = 0; i < N; ++i) out[b * N + i] = (row[i] - m) * rstd * weight[i] + bias[i];
    }
    return 0;
}
