// Linear backward, CUDA seed: two launches of one tiled GEMM and a column sum.
//   grad_x      [B, IN]   = grad_out [B, OUT] @ weight [OUT, IN]
//   grad_weight [OUT, IN] = grad_out^T [OUT, B] @ x [B, IN]
//   grad_bias   [OUT]     = grad_out summed over the B rows (one thread per column, double sum)
// The GEMM computes C[m, n] = sum_k A(m, k) * Bm(k, n) with A and Bm read through strides, so the transposed
// grad_out needs no copy. Each block stages TILE x TILE tiles of A and Bm in shared memory; every thread
// keeps one float accumulator.
#include <cstdint>
#include <cuda_runtime.h>

constexpr int TILE = 16;      // knob: 8, 16, 32
constexpr int THREADS = 256;  // column-sum block size

__global__ void gemm_kernel(const float* __restrict__ A, const float* __restrict__ Bm, float* __restrict__ C,
                            int64_t M, int64_t N, int64_t K,
                            int64_t sam, int64_t sak, int64_t sbk, int64_t sbn) {
    __shared__ float as[TILE][TILE + 1];   // [m][k]
    __shared__ float bs[TILE][TILE + 1];   // [k][n]
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int64_t m0 = (int64_t)blockIdx.y * TILE, n0 = (int64_t)blockIdx.x * TILE;
    float acc = 0.0f;
    for (int64_t k0 = 0; k0 < K; k0 += TILE) {
        as[ty][tx] = (m0 + ty < M && k0 + tx < K) ? A[(m0 + ty) * sam + (k0 + tx) * sak] : 0.0f;
        bs[ty][tx] = (k0 + ty < K && n0 + tx < N) ? Bm[(k0 + ty) * sbk + (n0 + tx) * sbn] : 0.0f;
        __syncthreads();
        for (int k = 0; k < TILE; ++k) acc += as[ty][k] * bs[k][tx];
        __syncthreads();
    }
    if (m0 + ty < M && n0 + tx < N) C[(m0 + ty) * N + n0 + tx] = acc;
}

__global__ void column_sum_kernel(const float* __restrict__ g, float* __restrict__ out, int64_t rows, int64_t cols) {
    const int64_t j = (int64_t)blockIdx.x * THREADS + threadIdx.x;
    if (j >= cols) return;
    double s = 0.0;
    for (int64_t r = 0; r < rows; ++r) s += g[r * cols + j];
    out[j] = (float)s;
}

static int gemm(const float* A, const float* Bm, float* C, int64_t M, int64_t N, int64_t K,
                int64_t sam, int64_t sak, int64_t sbk, int64_t sbn, cudaStream_t stream) {
    if (M == 0 || N == 0) return 0;
    const dim3 grid((unsigned)((N + TILE - 1) / TILE), (unsigned)((M + TILE - 1) / TILE));
    if (grid.y > 65535) return 1;
    gemm_kernel<<<grid, dim3(TILE, TILE), 0, stream>>>(A, Bm, C, M, N, K, sam, sak, sbk, sbn);
    return 0;
}

extern "C" int backward(const float* grad_out, const float* x, const float* weight, const float* bias,
                        float* grad_x, float* grad_weight, float* grad_bias,
                        int64_t B, int64_t IN, int64_t OUT, void* workspace, int64_t workspace_bytes,
                        cudaStream_t stream) {
    if (gemm(grad_out, weight, grad_x, B, IN, OUT, OUT, 1, IN, 1, stream)) return 1;
    if (gemm(grad_out, x, grad_weight, OUT, IN, B, 1, OUT, IN, 1, stream)) return 1;
    if (OUT > 0)
        column_sum_kernel<<<(unsigned)((OUT + THREADS - 1) / THREADS), THREADS, 0, stream>>>(grad_out, grad_bias, B, OUT);
    return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
