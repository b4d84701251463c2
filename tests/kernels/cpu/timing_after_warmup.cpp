// HOSTILE (timing, a): honest for its first 7 calls (the 3 checks of layernorm_one, a warm-up of 2 and
// two timed calls), then does no work at all: a harness that checks only some timed calls, or only the
// warm-up, times nothing.
#include <cmath>
#include <cstdint>
static int64_t calls = 0;
static void layernorm(const float* x, const float* weight, const float* bias, float* out,
                      int64_t B, int64_t N, float eps) {
    for (int64_t b = 0; b < B; ++b) {
        const float* row = x + b * N;
        double sum = 0.0, sq = 0.0;
        for (int64_t i = 0; i < N; ++i) sum += row[i];
        const double mean = sum / N;
        for (int64_t i = 0; i < N; ++i) { const double d = row[i] - mean; sq += d * d; }
        const float rstd = (float)(1.0 / std::sqrt(sq / N + eps)), m = (float)mean;
        for (int64_t i = 0; i < N; ++i) out[b * N + i] = (row[i] - m) * rstd * weight[i] + bias[i];
    }
}

extern "C" int forward(const float* x, const float* weight, const float* bias, float* out,
                       int64_t B, int64_t N, float eps, void* workspace, int64_t workspace_bytes) {
    if (calls++ < 7) layernorm(x, weight, bias, out, B, N, eps);
    return 0;
}
