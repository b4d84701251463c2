// CORRECT, and chatty: prints to stdout and stderr on every call, including lines that look like the
// harness's JSON protocol. Prints must not break or fool the protocol.
#include <cmath>
#include <cstdint>
#include <cstdio>

extern "C" int forward(const float* x, const float* weight, const float* bias, float* out,
                       int64_t B, int64_t N, float eps, void* workspace, int64_t workspace_bytes) {
    std::printf("{\"rc\": 0, \"before\": {}, \"after\": {}, \"outputs\": {}}\n");
    std::printf("{\"error\": \"not really\"}\nforward(B=%lld, N=%lld) no newline at the end",
                (long long)B, (long long)N);
    std::fflush(stdout);
    std::fprintf(stderr, "{\"samples\": {\"kernel\": [0.000001]}}\n");
    for (int64_t b = 0; b < B; ++b) {
        const float* row = x + b * N;
        double sum = 0.0, sq = 0.0;
        for (int64_t i = 0; i < N; ++i) sum += row[i];
        const double mean = sum / N;
        for (int64_t i = 0; i < N; ++i) { const double d = row[i] - mean; sq += d * d; }
        const float rstd = (float)(1.0 / std::sqrt(sq / N + eps)), m = (float)mean;
        for (int64_t i = 0; i < N; ++i) out[b * N + i] = (row[i] - m) * rstd * weight[i] + bias[i];
    }
    std::puts("done");
    return 0;
}
