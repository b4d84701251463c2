// HOSTILE (timing, b/e): after the checking calls, memoises by buffer address: a call whose x and out
// pointers it has seen replays the answer it gave then (timed inputs that sit in the same buffers across
// calls, with contents that repeat or never change, make this look fast and correct).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>
static int64_t calls = 0;
static const float* seen_x[64];
static float* seen_out[64];
static std::vector<float>* answers() {          // function-local: no global constructor to reject first
    static std::vector<float> a[64];
    return a;
}
static int n_seen = 0;
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
    if (calls++ >= 3) {
        for (int j = 0; j < n_seen; ++j)
            if (seen_x[j] == x && seen_out[j] == out && (int64_t)answers()[j].size() == B * N) {
                std::memcpy(out, answers()[j].data(), sizeof(float) * B * N);
                return 0;
            }
    }
    layernorm(x, weight, bias, out, B, N, eps);
    if (n_seen < 64) { seen_x[n_seen] = x; seen_out[n_seen] = out; answers()[n_seen++].assign(out, out + B * N); }
    return 0;
}
