// Cross-entropy backward, CUDA seed (a few lanes per row, many rows per block). One block per row wastes
// 246 of 256 threads on C = 10 rows; here a row belongs to L lanes of a warp (L = LANES when
// C <= WIDE_C, else a whole warp) and each block holds THREADS / L rows. The L lanes take the row max
// (xor shuffles within the lane group), then sum expf(x - max) (double), then write
// grad = (expf(x - max) / sum - onehot) * grad_out[0] / B, formed in double (at the target p ~ 1 can
// cancel). Lanes of rows past B compute nothing but still shuffle: the shuffles stay warp-uniform.
#include <cstdint>
#include <cuda_runtime.h>

constexpr int THREADS = 256;          // knob: 128, 256, 512
constexpr int LANES = 2;              // knob: 1, 2, 4, 8, 16, 32
constexpr int64_t WIDE_C = 64;        // knob: 16, 64, 256, 1024

template <int L>
__global__ void __launch_bounds__(THREADS) ce_backward_rows(const float* __restrict__ grad_out,
                                                            const float* __restrict__ logits,
                                                            const int64_t* __restrict__ target,
                                                            float* __restrict__ grad_logits, int64_t B, int64_t C) {
    const int64_t b = (int64_t)blockIdx.x * (THREADS / L) + threadIdx.x / L;
    const int lane = threadIdx.x % L;
    const int64_t n = b < B ? C : 0;
    const int64_t r = b < B ? b : 0;
    const float* row = logits + r * C;
    float mx = -INFINITY;
    for (int64_t j = lane; j < n; j += L) mx = fmaxf(mx, row[j]);
    for (int o = L / 2; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o, L));
    double s = 0.0;
    for (int64_t j = lane; j < n; j += L) s += (double)expf(row[j] - mx);
    for (int o = L / 2; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o, L);
    if (n == 0) return;                               // after the last shuffle
    const double inv = 1.0 / s, scale = (double)grad_out[0] / B;
    const int64_t t = target[r];
    float* out = grad_logits + r * C;
    for (int64_t j = lane; j < n; j += L)
        out[j] = (float)(((double)expf(row[j] - mx) * inv - (j == t ? 1.0 : 0.0)) * scale);
}

template <int L>
static void launch_rows(const float* grad_out, const float* logits, const int64_t* target, float* grad_logits,
                        int64_t B, int64_t C, cudaStream_t stream) {
    const int64_t rows_per_block = THREADS / L;
    const int64_t blocks = (B + rows_per_block - 1) / rows_per_block;
    ce_backward_rows<L><<<(unsigned)blocks, THREADS, 0, stream>>>(grad_out, logits, target, grad_logits, B, C);
}

extern "C" int backward(const float* grad_out, const float* logits, const int64_t* target,
                        float* grad_logits, int64_t B, int64_t C,
                        void* workspace, int64_t workspace_bytes, cudaStream_t stream) {
    if (B <= 0 || C <= 0) return 0;
    if (C <= WIDE_C) launch_rows<LANES>(grad_out, logits, target, grad_logits, B, C, stream);
    else launch_rows<32>(grad_out, logits, target, grad_logits, B, C, stream);
    return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
