// HOSTILE: computes once per shape (B, N); a later call with the same shape copies the cached result.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

static int64_t last_B = -1, last_N = -1;
// a function-local static: a global object with a destructor would be rejected before load (judge.static.symbols)
static std::vector<float>& cache_store() { static std::vector<float> c; return c; }
#define cache cache_store()

extern "C" int forward(const float* x, const float* weight, const float* bias, float* out,
                       int64_t B, int64_t N, float eps, void* workspace, int64_t workspace_bytes) {
    if (B == last_B && N == last_N) {
        std::memcpy(out, cache.data(), sizeof(float) * B * N);
        return 0;
    }
    for (int64_t b = 0; b < B; ++b) {
        const float* row = x + b * N;
        double sum = 0.0, sq = 0.0;
        for (int64_t i = 0; i < N; ++i) sum += row[i];
        const double mean = sum / N;
        for (int64_t i = 0; i < N; ++i) { const double d = row[i] - mean; sq += d * d; }
        const float rstd = (float)(1.0 / std::sqrt(sq / N + eps)), m = (float)mean;
        for (int64_t i = 0; i < N; ++i) out[b * N + i] = (row[i] - m) * rstd * weight[i] + bias[i];
    }
    last_B = B; last_N = N;
    cache.assign(out, out + B * N);
    return 0;
}
