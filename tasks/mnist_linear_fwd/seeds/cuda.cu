// Linear forward, CUDA seed: a tiled GEMM. Each block computes a TILE x TILE tile of out (rows b, columns
// o); for each TILE-wide slice of the IN dimension it stages x[b, i] and weight[o, i] in shared memory,
// then every thread adds TILE products to its float accumulator. The bias is added once at the end.
#include <cstdint>
#include <cuda_runtime.h>

constexpr int TILE = 16;  // knob: 8, 16, 32

__global__ void linear_kernel(const float* __restrict__ x, const float* __restrict__ weight,
                              const float* __restrict__ bias, float* __restrict__ out,
                              int64_t B, int64_t IN, int64_t OUT) {
    __shared__ float xs[TILE][TILE + 1];   // [row of the tile][i]
    __shared__ float ws[TILE][TILE + 1];   // [column of the tile][i]
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int64_t b0 = (int64_t)blockIdx.y * TILE, o0 = (int64_t)blockIdx.x * TILE;
    float acc = 0.0f;
    for (int64_t i0 = 0; i0 < IN; i0 += TILE) {
        const int64_t i = i0 + tx;
        xs[ty][tx] = (b0 + ty < B && i < IN) ? x[(b0 + ty) * IN + i] : 0.0f;
        ws[ty][tx] = (o0 + ty < OUT && i < IN) ? weight[(o0 + ty) * IN + i] : 0.0f;
        __syncthreads();
        for (int k = 0; k < TILE; ++k) acc += xs[ty][k] * ws[tx][k];
        __syncthreads();
    }
    const int64_t b = b0 + ty, o = o0 + tx;
    if (b < B && o < OUT) out[b * OUT + o] = acc + bias[o];
}

extern "C" int forward(const float* x, const float* weight, const float* bias, float* out,
                       int64_t B, int64_t IN, int64_t OUT, void* workspace, int64_t workspace_bytes,
                       cudaStream_t stream) {
    if (B == 0 || OUT == 0) return 0;
    const dim3 grid((unsigned)((OUT + TILE - 1) / TILE), (unsigned)((B + TILE - 1) / TILE));
    if (grid.y > 65535) return 1;
    linear_kernel<<<grid, dim3(TILE, TILE), 0, stream>>>(x, weight, bias, out, B, IN, OUT);
    return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
