// Linear forward, CUDA seed: a shared-memory tiled GEMM, out = x @ weight^T + bias. One block of
// TILE x TILE threads per TILE x TILE tile of out (blockIdx.x over rows of x, blockIdx.y over rows of
// weight); both operands are read along K (contiguous) into shared tiles, zero past the edges, and each
// thread sums its dot product in float32 (FMA), tile after tile of K.
#include <cstdint>
#include <cuda_runtime.h>

constexpr int TILE = 16;  // knob: 8, 16, 32

__global__ void linear_kernel(const float* __restrict__ x, const float* __restrict__ weight,
                              const float* __restrict__ bias, float* __restrict__ out,
                              int64_t M, int64_t K, int64_t N) {
    __shared__ float xs[TILE][TILE + 1];    // xs[row of x][k]
    __shared__ float ws[TILE][TILE + 1];    // ws[row of weight][k]
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int64_t m0 = (int64_t)blockIdx.x * TILE, n0 = (int64_t)blockIdx.y * TILE;
    float acc = 0.0f;
    for (int64_t k0 = 0; k0 < K; k0 += TILE) {
        const int64_t k = k0 + tx;
        xs[ty][tx] = (m0 + ty < M && k < K) ? x[(m0 + ty) * K + k] : 0.0f;
        ws[ty][tx] = (n0 + ty < N && k < K) ? weight[(n0 + ty) * K + k] : 0.0f;
        __syncthreads();
        #pragma unroll
        for (int kk = 0; kk < TILE; ++kk) acc = fmaf(xs[ty][kk], ws[tx][kk], acc);
        __syncthreads();
    }
    const int64_t m = m0 + ty, n = n0 + tx;
    if (m < M && n < N) out[m * N + n] = acc + bias[n];
}

extern "C" int forward(const float* x, const float* weight, const float* bias, float* out,
                       int64_t M, int64_t K, int64_t N, void* workspace, int64_t workspace_bytes,
                       cudaStream_t stream) {
    if (M == 0 || N == 0) return 0;
    const dim3 grid((unsigned)((M + TILE - 1) / TILE), (unsigned)((N + TILE - 1) / TILE));
    linear_kernel<<<grid, dim3(TILE, TILE), 0, stream>>>(x, weight, bias, out, M, K, N);
    return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
