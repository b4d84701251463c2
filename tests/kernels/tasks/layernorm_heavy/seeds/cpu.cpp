// HONEST but deliberately heavy (the outside clock's tests): computes the answer REPEAT times, each pass
// writing the output (which may alias the inputs as far as the compiler knows, so no pass can be dropped).
#include <cmath>
#include <cstdint>

constexpr int REPEAT = 5000;

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
    for (int r = 0; r < REPEAT; ++r) layernorm(x, weight, bias, out, B, N, eps);
    return 0;
}
