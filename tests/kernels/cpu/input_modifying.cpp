// HOSTILE: normalises x in place (casting away const), then scales and shifts into out.
#include <cmath>
#include <cstdint>

extern "C" int forward(const float* x, const float* weight, const float* bias, float* out,
                       int64_t B, int64_t N, float eps, void* workspace, int64_t workspace_bytes) {
    float* xs = const_cast<float*>(x);
    for (int64_t b = 0; b < B; ++b) {
        float* row = xs + b * N;
        double sum = 0.0, sq = 0.0;
        for (int64_t i = 0; i < N; ++i) sum += row[i];
        const double mean = sum / N;
        for (int64_t i = 0; i < N; ++i) { const double d = row[i] - mean; sq += d * d; }
        const float rstd = (float)(1.0 / std::sqrt(sq / N + eps)), m = (float)mean;
        for (int64_t i = 0; i < N; ++i) row[i] = (row[i] - m) * rstd;
        for (int64_t i = 0; i < N; ++i) out[b * N + i] = row[i] * weight[i] + bias[i];
    }
    return 0;
}
