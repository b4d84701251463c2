// Llama MLP forward, CUDA seed: two shared-memory tiled GEMM kernels through the workspace.
//   1. gate_up: h[m, u] = silu(x[m, :] . gate_proj[u, :]) * (x[m, :] . up_proj[u, :]), h [M, U] in the
//      workspace; one x tile feeds both products.
//   2. down:    out[m, d] = h[m, :] . down_proj[d, :]
// Every operand is read along its contiguous reduction axis into TILE x TILE shared tiles (zero past the
// edges); one block of TILE x TILE threads per output tile, blockIdx.x over rows; float32 FMA sums.
#include <cstdint>
#include <cuda_runtime.h>

constexpr int TILE = 16;  // knob: 8, 16, 32

__global__ void gate_up_kernel(const float* __restrict__ x, const float* __restrict__ gate_proj,
                               const float* __restrict__ up_proj, float* __restrict__ h,
                               int64_t M, int64_t D, int64_t U) {
    __shared__ float xs[TILE][TILE + 1];
    __shared__ float gs[TILE][TILE + 1];
    __shared__ float us[TILE][TILE + 1];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int64_t m0 = (int64_t)blockIdx.x * TILE, u0 = (int64_t)blockIdx.y * TILE;
    float g = 0.0f, v = 0.0f;
    for (int64_t d0 = 0; d0 < D; d0 += TILE) {
        const int64_t d = d0 + tx;
        xs[ty][tx] = (m0 + ty < M && d < D) ? x[(m0 + ty) * D + d] : 0.0f;
        const bool in = u0 + ty < U && d < D;
        gs[ty][tx] = in ? gate_proj[(u0 + ty) * D + d] : 0.0f;
        us[ty][tx] = in ? up_proj[(u0 + ty) * D + d] : 0.0f;
        __syncthreads();
        #pragma unroll
        for (int kk = 0; kk < TILE; ++kk) {
            g = fmaf(xs[ty][kk], gs[tx][kk], g);
            v = fmaf(xs[ty][kk], us[tx][kk], v);
        }
        __syncthreads();
    }
    const int64_t m = m0 + ty, u = u0 + tx;
    if (m < M && u < U) h[m * U + u] = g / (1.0f + expf(-g)) * v;
}

__global__ void down_kernel(const float* __restrict__ h, const float* __restrict__ down_proj,
                            float* __restrict__ out, int64_t M, int64_t D, int64_t U) {
    __shared__ float hs[TILE][TILE + 1];
    __shared__ float ws[TILE][TILE + 1];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int64_t m0 = (int64_t)blockIdx.x * TILE, d0 = (int64_t)blockIdx.y * TILE;
    float acc = 0.0f;
    for (int64_t u0 = 0; u0 < U; u0 += TILE) {
        const int64_t u = u0 + tx;
        hs[ty][tx] = (m0 + ty < M && u < U) ? h[(m0 + ty) * U + u] : 0.0f;
        ws[ty][tx] = (d0 + ty < D && u < U) ? down_proj[(d0 + ty) * U + u] : 0.0f;
        __syncthreads();
        #pragma unroll
        for (int kk = 0; kk < TILE; ++kk) acc = fmaf(hs[ty][kk], ws[tx][kk], acc);
        __syncthreads();
    }
    const int64_t m = m0 + ty, d = d0 + tx;
    if (m < M && d < D) out[m * D + d] = acc;
}

extern "C" int forward(const float* x, const float* gate_proj, const float* up_proj, const float* down_proj,
                       float* out, int64_t M, int64_t D, int64_t U, void* workspace, int64_t workspace_bytes,
                       cudaStream_t stream) {
    if (M == 0 || D == 0) return 0;
    if (workspace_bytes < M * U * (int64_t)sizeof(float)) return 1;
    float* h = static_cast<float*>(workspace);
    const unsigned tiles_m = (unsigned)((M + TILE - 1) / TILE);
    if (U > 0) {
        gate_up_kernel<<<dim3(tiles_m, (unsigned)((U + TILE - 1) / TILE)), dim3(TILE, TILE), 0, stream>>>(
            x, gate_proj, up_proj, h, M, D, U);
    }
    down_kernel<<<dim3(tiles_m, (unsigned)((D + TILE - 1) / TILE)), dim3(TILE, TILE), 0, stream>>>(
        h, down_proj, out, M, D, U);
    return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
