// HOSTILE: does not compile: line 8 uses an undeclared name.
#include <cmath>
#include <cstdint>

extern "C" int forward(const float* x, const float* weight, const float* bias, float* out,
                       int64_t B, int64_t N, float eps, void* workspace, int64_t workspace_bytes) {
    for (int64_t i = 0; i < B * N; ++i) out[i] = x[i];
    return undeclared_status_variable;
}
