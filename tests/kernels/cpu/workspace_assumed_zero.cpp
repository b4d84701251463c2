// HOSTILE: accumulates per-row sums into the workspace without clearing it first (assumes zeroed memory).
#include <cmath>
#include <cstdint>

extern "C" int forward(const float* x, const float* weight, const float* bias, float* out,
                       int64_t B, int64_t N, float eps, void* workspace, int64_t workspace_bytes) {
    float* acc = static_cast<float*>(workspace);       // [B][2]: sum, sum of squares
    for (int64_t b = 0; b < B; ++b)
        for (int64_t i = 0; i < N; ++i) {
            const float v = x[b * N + i];
            acc[2 * b] += v;
            acc[2 * b + 1] += v * v;
        }
    for (int64_t b = 0; b < B; ++b) {
        const float mean = acc[2 * b] / N;
        const float var = acc[2 * b + 1] / N - mean * mean;
        const float rstd = 1.0f / std::sqrt(var + eps);
        for (int64_t i = 0; i < N; ++i) out[b * N + i] = (x[b * N + i] - mean) * rstd * weight[i] + bias[i];
    }
    return 0;
}
