// HOSTILE: writes through a bad pointer: the process dies of SIGSEGV (no abort, no exit).
#include <cstdint>

extern "C" int forward(const float* x, const float* weight, const float* bias, float* out,
                       int64_t B, int64_t N, float eps, void* workspace, int64_t workspace_bytes) {
    volatile float* bad = reinterpret_cast<volatile float*>(static_cast<uintptr_t>(16));
    *bad = 1.0f;
    return 0;
}
