// CORRECT (issue 49): sets the rounding mode to upward at entry (`fesetround(FE_UPWARD)`) and leaves it so: its
// answer moves by an ulp, well within tolerance. Before issue 49 the mode stayed set on the worker's main thread,
// where the harness then drew the next call's inputs with torch under it — a quarter of them a bit off the
// evaluator's own draw, and the kernel was rejected for "modifying" inputs it never wrote. Now the harness puts its
// own FPU state back after every call (`judge.worker.state`); this kernel checks that each call starts in it
// (a mode other than to-nearest at entry is printed: `PROBE rounding_at_entry=`).
#include <cfenv>
#include <cmath>
#include <cstdint>
#include <cstdio>

extern "C" int forward(const float* x, const float* weight, const float* bias, float* out,
                       int64_t B, int64_t N, float eps, void* workspace, int64_t workspace_bytes) {
    if (fegetround() != FE_TONEAREST) { printf("PROBE rounding_at_entry=%d\n", fegetround()); fflush(stdout); }
    fesetround(FE_UPWARD);
    for (int64_t b = 0; b < B; ++b) {
        const float* row = x + b * N;
        double sum = 0.0;
        for (int64_t i = 0; i < N; ++i) sum += row[i];
        const double mean = sum / N;
        double sq = 0.0;
        for (int64_t i = 0; i < N; ++i) { const double d = row[i] - mean; sq += d * d; }
        const float rstd = (float)(1.0 / std::sqrt(sq / N + eps));
        const float m = (float)mean;
        float* o = out + b * N;
        for (int64_t i = 0; i < N; ++i) o[i] = (row[i] - m) * rstd * weight[i] + bias[i];
    }
    return 0;
}
