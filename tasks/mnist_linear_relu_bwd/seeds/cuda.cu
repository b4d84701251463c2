// Linear + ReLU backward, CUDA seed: four launches, three of one tiled GEMM.
//   1. g [B, OUT] (workspace) = grad_out where pre = x @ weight^T + bias > 0, else 0: the GEMM with the
//      mask as its epilogue (MASK = true)
//   2. grad_x      [B, IN]   = g @ weight
//   3. grad_weight [OUT, IN] = g^T @ x
//   4. grad_bias   [OUT]     = g summed over the B rows (one thread per column, double sum)
// The GEMM computes C[m, n] = sum_k A(m, k) * Bm(k, n) with A and Bm read through strides, so transposes
// need no copy. Each block stages TILE x TILE tiles of A and Bm in shared memory; every thread keeps one
// float accumulator.
#include <cstdint>
#include <cuda_runtime.h>

constexpr int TILE = 16;      // knob: 8, 16, 32
constexpr int THREADS = 256;  // column-sum block size

template <bool MASK>
__global__ void gemm_kernel(const float* __restrict__ A, const float* __restrict__ Bm, float* __restrict__ C,
                            int64_t M, int64_t N, int64_t K, int64_t sam, int64_t sak, int64_t sbk, int64_t sbn,
                            const float* __restrict__ bias, const float* __restrict__ grad_out) {
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
    const int64_t m = m0 + ty, n = n0 + tx;
    if (m >= M || n >= N) return;
    if (MASK) C[m * N + n] = acc + bias[n] > 0.0f ? grad_out[m * N + n] : 0.0f;
    else C[m * N + n] = acc;
}

__global__ void column_sum_kernel(const float* __restrict__ g, float* __restrict__ out, int64_t rows, int64_t cols) {
    const int64_t j = (int64_t)blockIdx.x * THREADS + threadIdx.x;
    if (j >= cols) return;
    double s = 0.0;
    for (int64_t r = 0; r < rows; ++r) s += g[r * cols + j];
    out[j] = (float)s;
}

template <bool MASK>
static int gemm(const float* A, const float* Bm, float* C, int64_t M, int64_t N, int64_t K, int64_t sam,
                int64_t sak, int64_t sbk, int64_t sbn, const float* bias, const float* grad_out, cudaStream_t stream) {
    if (M == 0 || N == 0) return 0;
    const dim3 grid((unsigned)((N + TILE - 1) / TILE), (unsigned)((M + TILE - 1) / TILE));
    if (grid.y > 65535) return 1;
    gemm_kernel<MASK><<<grid, dim3(TILE, TILE), 0, stream>>>(A, Bm, C, M, N, K, sam, sak, sbk, sbn, bias, grad_out);
    return 0;
}

extern "C" int backward(const float* grad_out, const float* x, const float* weight, const float* bias,
                        float* grad_x, float* grad_weight, float* grad_bias,
                        int64_t B, int64_t IN, int64_t OUT, void* workspace, int64_t workspace_bytes,
                        cudaStream_t stream) {
    if (workspace_bytes < B * OUT * (int64_t)sizeof(float)) return 1;
    float* g = static_cast<float*>(workspace);
    if (gemm<true>(x, weight, g, B, OUT, IN, IN, 1, 1, IN, bias, grad_out, stream)) return 1;
    if (gemm<false>(g, weight, grad_x, B, IN, OUT, OUT, 1, IN, 1, nullptr, nullptr, stream)) return 1;
    if (gemm<false>(g, x, grad_weight, OUT, IN, B, 1, OUT, IN, 1, nullptr, nullptr, stream)) return 1;
    if (OUT > 0)
        column_sum_kernel<<<(unsigned)((OUT + THREADS - 1) / THREADS), THREADS, 0, stream>>>(g, grad_bias, B, OUT);
    return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
