// WRONG under its own setting (issue 49): scales each row's deviations by 2^-70 before squaring them (to keep the sum
// of squares far from overflow) and scales the sum back, in float32 — so the squares are denormals (about 2^-140)
// — and turns flush-to-zero and denormals-are-zero on at entry: every square flushes to zero, the variance is 0,
// and the output is off by far more than the tolerance. Judged on its own work: rejected for the wrong answer, not
// for anything the harness did after its call. (Its twin without the flags is right: denormals keep enough bits.)
#include <cmath>
#include <cstdint>
#include <immintrin.h>

extern "C" int forward(const float* x, const float* weight, const float* bias, float* out,
                       int64_t B, int64_t N, float eps, void* workspace, int64_t workspace_bytes) {
    _mm_setcsr(_mm_getcsr() | 0x8040);
    const float down = std::ldexp(1.0f, -70), up = std::ldexp(1.0f, 70);   // 2^140 is past float's range
    for (int64_t b = 0; b < B; ++b) {
        const float* row = x + b * N;
        double sum = 0.0;
        for (int64_t i = 0; i < N; ++i) sum += row[i];
        const float mean = (float)(sum / N);
        float sq = 0.0f;
        for (int64_t i = 0; i < N; ++i) { volatile float d = (row[i] - mean) * down; sq += d * d; }
        const float var = sq * up * up / N;
        const float rstd = 1.0f / std::sqrt(var + eps);
        float* o = out + b * N;
        for (int64_t i = 0; i < N; ++i) o[i] = (row[i] - mean) * rstd * weight[i] + bias[i];
    }
    return 0;
}
