// HOSTILE (timing, c): steers which call is last. After the 3 checking calls it burns 0.3 s on the next
// call (a timing loop that stops on a time budget then stops early), then works only on every fifth call —
// the one it bets is last and checked — and skips the rest.
#include <cmath>
#include <cstdint>
#include <atomic>
static int64_t calls = 0;
static float spin(int64_t n) { float s = 0; for (int64_t i = 0; i < n; ++i) s = s * 0.999f + 1.0f; return s; }
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
    const int64_t k = calls++;
    if (k == 3 && spin(300000000) < 0) return 9;
    if (k < 4 || (k - 4) % 5 == 4) layernorm(x, weight, bias, out, B, N, eps);
    return 0;
}
