// HOSTILE: writes through a wild device pointer (a terabyte past the output): an illegal address.
#include <cstdint>
#include <cuda_runtime.h>

__global__ void wild_write(float* out) {
    if (threadIdx.x == 0 && blockIdx.x == 0) out[1ull << 40] = 1.0f;
}

extern "C" int forward(const float* x, const float* weight, const float* bias, float* out,
                       int64_t B, int64_t N, float eps, void* workspace, int64_t workspace_bytes,
                       cudaStream_t stream) {
    wild_write<<<1, 32, 0, stream>>>(out);
    return 0;
}
