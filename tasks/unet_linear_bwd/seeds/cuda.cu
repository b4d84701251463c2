// Linear backward, CUDA seed. One shared-memory tiled GEMM kernel with strided operands,
// C[i, j] = sum over p of A[i * a_i + p * a_p] * B[p * b_p + j * b_j], launched twice:
//   grad_x      [M, K] = grad_out [M, N] @ weight [N, K]      (reduction over N)
//   grad_weight [N, K] = grad_out^T   @ x [M, K]              (reduction over M)
// and a column-sum kernel, grad_bias[n] = sum over m of grad_out[m, n] (one thread per column, double).
// One block of TILE x TILE threads per TILE x TILE tile of C; each thread sums in float32 (FMA).
#include <cstdint>
#include <cuda_runtime.h>

constexpr int TILE = 16;  // knob: 8, 16, 32
constexpr int THREADS = 256;

__global__ void gemm_kernel(const float* __restrict__ A, int64_t a_i, int64_t a_p,
                            const float* __restrict__ B, int64_t b_p, int64_t b_j,
                            float* __restrict__ C, int64_t I, int64_t J, int64_t P) {
    __shared__ float as[TILE][TILE + 1];   // as[p][i]
    __shared__ float bs[TILE][TILE + 1];   // bs[p][j]
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int64_t i0 = (int64_t)blockIdx.x * TILE, j0 = (int64_t)blockIdx.y * TILE;
    float acc = 0.0f;
    for (int64_t p0 = 0; p0 < P; p0 += TILE) {
        const int64_t p = p0 + ty;
        as[ty][tx] = (p < P && i0 + tx < I) ? A[(i0 + tx) * a_i + p * a_p] : 0.0f;
        bs[ty][tx] = (p < P && j0 + tx < J) ? B[p * b_p + (j0 + tx) * b_j] : 0.0f;
        __syncthreads();
        #pragma unroll
        for (int pp = 0; pp < TILE; ++pp) acc = fmaf(as[pp][ty], bs[pp][tx], acc);
        __syncthreads();
    }
    const int64_t i = i0 + ty, j = j0 + tx;
    if (i < I && j < J) C[i * J + j] = acc;
}

__global__ void column_sum_kernel(const float* __restrict__ g, float* __restrict__ out, int64_t M, int64_t N) {
    const int64_t n = (int64_t)blockIdx.x * THREADS + threadIdx.x;
    if (n >= N) return;
    double s = 0.0;
    for (int64_t m = 0; m < M; ++m) s += g[m * N + n];
    out[n] = (float)s;
}

static void gemm(const float* A, int64_t a_i, int64_t a_p, const float* B, int64_t b_p, int64_t b_j, float* C,
                 int64_t I, int64_t J, int64_t P, cudaStream_t stream) {
    const dim3 grid((unsigned)((I + TILE - 1) / TILE), (unsigned)((J + TILE - 1) / TILE));
    gemm_kernel<<<grid, dim3(TILE, TILE), 0, stream>>>(A, a_i, a_p, B, b_p, b_j, C, I, J, P);
}

extern "C" int backward(const float* grad_out, const float* x, const float* weight, const float* bias,
                        float* grad_x, float* grad_weight, float* grad_bias,
                        int64_t M, int64_t K, int64_t N, void* workspace, int64_t workspace_bytes,
                        cudaStream_t stream) {
    if (K == 0 || N == 0) return 0;
    if (M > 0) gemm(grad_out, N, 1, weight, K, 1, grad_x, M, K, N, stream);   // A(i=m, p=n), B(p=n, j=k)
    gemm(grad_out, 1, N, x, K, 1, grad_weight, N, K, M, stream);             // A(i=n, p=m), B(p=m, j=k)
    column_sum_kernel<<<(unsigned)((N + THREADS - 1) / THREADS), THREADS, 0, stream>>>(grad_out, grad_bias, M, N);
    return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
