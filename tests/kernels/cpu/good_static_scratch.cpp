// CORRECT (issue 49): a grow-only scratch buffer at namespace scope — a common pattern: `static std::vector<float>`
// holds each row's centred values, grown (never shrunk) when a call needs more. As a global object with a
// constructor and a destructor it makes the compiler emit a static initialiser (`_GLOBAL__sub_I_...` in
// .init_array), which the symbol check rejected as "the library runs code at load" until issue 49 decided that
// rule did not earn its false rejections (docs/guarantees.md). Single-threaded: one buffer.
#include <cmath>
#include <cstdint>
#include <vector>

static std::vector<float> scratch;

extern "C" int forward(const float* x, const float* weight, const float* bias, float* out,
                       int64_t B, int64_t N, float eps, void* workspace, int64_t workspace_bytes) {
    if ((int64_t)scratch.size() < N) scratch.resize(N);
    for (int64_t b = 0; b < B; ++b) {
        const float* row = x + b * N;
        double sum = 0.0;
        for (int64_t i = 0; i < N; ++i) sum += row[i];
        const float mean = (float)(sum / N);
        double sq = 0.0;
        for (int64_t i = 0; i < N; ++i) { scratch[i] = row[i] - mean; sq += (double)scratch[i] * scratch[i]; }
        const float rstd = (float)(1.0 / std::sqrt(sq / N + eps));
        float* o = out + b * N;
        for (int64_t i = 0; i < N; ++i) o[i] = scratch[i] * rstd * weight[i] + bias[i];
    }
    return 0;
}
