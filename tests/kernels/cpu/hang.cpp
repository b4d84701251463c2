// HOSTILE: never returns (the volatile flag keeps the loop from being optimised away).
#include <cstdint>

static volatile int spinning = 1;

extern "C" int forward(const float* x, const float* weight, const float* bias, float* out,
                       int64_t B, int64_t N, float eps, void* workspace, int64_t workspace_bytes) {
    while (spinning) {
    }
    return 0;
}
