// HOSTILE: a kernel that spins forever on the GPU (the volatile flag is never set); the launch itself
// returns at once, so the hang shows when the harness synchronises.
#include <cstdint>
#include <cuda_runtime.h>

__device__ volatile int release_flag = 0;

__global__ void spin_forever() {
    while (release_flag == 0) {
    }
}

extern "C" int forward(const float* x, const float* weight, const float* bias, float* out,
                       int64_t B, int64_t N, float eps, void* workspace, int64_t workspace_bytes,
                       cudaStream_t stream) {
    spin_forever<<<1, 1, 0, stream>>>();
    return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
