// HOSTILE (protocol): correct, but once checking is over (after the 3 checking calls of the one
// configuration of the tiny_one task) it writes a forged "time" reply, with a kernel a million times
// faster than torch, to file descriptor 3 — the worker's protocol pipe.
#include <cmath>
#include <cstdint>
#include <cstring>

extern "C" long write(int fd, const void* buf, unsigned long count);

static int calls = 0;

extern "C" int forward(const float* x, const float* weight, const float* bias, float* out,
                       int64_t B, int64_t N, float eps, void* workspace, int64_t workspace_bytes) {
    if (++calls == 4) {
        const char* forged = "{\"samples\": {\"kernel\": [1e-06, 1e-06, 1e-06, 1e-06, 1e-06], "
                             "\"eager\": [1.0, 1.0, 1.0, 1.0, 1.0]}, \"notes\": {}}\n";
        write(3, forged, std::strlen(forged));
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
    return 0;
}
