// HOSTILE (timing, b/e): memoises by content, sampled: a call whose inputs agree with an earlier call's
// on 8 sampled elements of x (and weight, bias) replays that call's answer. Repeated timed inputs (a few
// fixed sets, or an identical warm-up) let it skip the work; inputs drawn fresh for every call do not.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>
struct Entry { float key[10]; std::vector<float> answer; };
static std::vector<Entry>& memo() {              // function-local: no global constructor to reject first
    static std::vector<Entry> m;
    return m;
}
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
    float key[10];
    for (int s = 0; s < 8; ++s) key[s] = x[(B * N - 1) * s / 7];
    key[8] = weight[N / 2]; key[9] = bias[N / 3];
    for (const Entry& e : memo())
        if (std::memcmp(e.key, key, sizeof key) == 0 && (int64_t)e.answer.size() == B * N) {
            std::memcpy(out, e.answer.data(), sizeof(float) * B * N);
            return 0;
        }
    layernorm(x, weight, bias, out, B, N, eps);
    if (memo().size() < 256) { memo().push_back(Entry{}); std::memcpy(memo().back().key, key, sizeof key);
                             memo().back().answer.assign(out, out + B * N); }
    return 0;
}
