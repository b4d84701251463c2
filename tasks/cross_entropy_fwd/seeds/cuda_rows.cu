// Cross-entropy forward, CUDA seed (a few lanes per row, many rows per block). One block per row wastes
// 246 of 256 threads on C = 10 rows; here a row belongs to L lanes of a warp (L = LANES when
// C <= WIDE_C, else a whole warp), each block holds THREADS / L rows at a time and the grid (at most
// MAX_BLOCKS blocks) strides over the rows.
//  1. row_losses: the L lanes take the row max (xor shuffles within the lane group), then sum
//                 expf(x - max) (double), and the group's first lane adds log(sum) + max - x[target]
//                 to its running loss (double). The block's total goes to the workspace.
//  2. finish:     one block sums the per-block totals in order: loss[0] = total / B (deterministic).
// The row loop is uniform across each warp (lanes of rows past B compute nothing but still shuffle).
// Nothing assumes the workspace starts zeroed: every word read was written earlier in the same call.
#include <cstdint>
#include <cuda_runtime.h>

constexpr int THREADS = 256;          // knob: 128, 256, 512
constexpr int LANES = 2;              // knob: 1, 2, 4, 8, 16, 32
constexpr int64_t WIDE_C = 64;        // knob: 16, 64, 256, 1024
constexpr int64_t MAX_BLOCKS = 1024;  // knob: 256, 1024, 4096

__device__ __forceinline__ double warp_allsum(double v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// The block total, the same bits in every thread. sh: 32 doubles of shared memory.
__device__ __forceinline__ double block_sum(double v, double* sh) {
    v = warp_allsum(v);
    if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = v;
    __syncthreads();
    double s = 0.0;
    for (int w = 0; w < THREADS / 32; ++w) s += sh[w];
    __syncthreads();
    return s;
}

template <int L>
__global__ void __launch_bounds__(THREADS) row_losses(const float* __restrict__ logits,
                                                      const int64_t* __restrict__ target,
                                                      double* __restrict__ block_loss, int64_t B, int64_t C) {
    __shared__ double sh[32];
    const int64_t gtid = (int64_t)blockIdx.x * THREADS + threadIdx.x;
    const int64_t groups = (int64_t)gridDim.x * (THREADS / L);       // rows in flight over the grid
    const int64_t warp_first = (gtid / 32) * (32 / L);               // the first row of this warp
    const int lane = threadIdx.x % L;
    double acc = 0.0;
    for (int64_t first = warp_first; first < B; first += groups) {  // uniform across the warp
        const int64_t b = first + (threadIdx.x % 32) / L;
        const int64_t n = b < B ? C : 0;
        const float* row = logits + (b < B ? b : 0) * C;
        float mx = -INFINITY;
        for (int64_t j = lane; j < n; j += L) mx = fmaxf(mx, row[j]);
        for (int o = L / 2; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o, L));
        double s = 0.0;
        for (int64_t j = lane; j < n; j += L) s += (double)expf(row[j] - mx);
        for (int o = L / 2; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o, L);
        if (lane == 0 && b < B) acc += log(s) + (double)mx - (double)row[target[b]];
    }
    acc = block_sum(acc, sh);
    if (threadIdx.x == 0) block_loss[blockIdx.x] = acc;
}

__global__ void __launch_bounds__(THREADS) finish(const double* __restrict__ block_loss, float* __restrict__ loss,
                                                  int64_t blocks, int64_t B) {
    __shared__ double sh[32];
    double s = 0.0;
    for (int64_t k = threadIdx.x; k < blocks; k += THREADS) s += block_loss[k];
    s = block_sum(s, sh);
    if (threadIdx.x == 0) loss[0] = (float)(s / B);
}

template <int L>
static int64_t launch_rows(const float* logits, const int64_t* target, double* block_loss, int64_t B, int64_t C,
                           cudaStream_t stream) {
    const int64_t rows_per_block = THREADS / L;
    int64_t blocks = (B + rows_per_block - 1) / rows_per_block;
    if (blocks > MAX_BLOCKS) blocks = MAX_BLOCKS;
    row_losses<L><<<(unsigned)blocks, THREADS, 0, stream>>>(logits, target, block_loss, B, C);
    return blocks;
}

extern "C" int forward(const float* logits, const int64_t* target, float* loss,
                       int64_t B, int64_t C, void* workspace, int64_t workspace_bytes,
                       cudaStream_t stream) {
    if (B <= 0 || C <= 0) return 1;
    if (workspace_bytes < MAX_BLOCKS * (int64_t)sizeof(double)) return 1;
    double* block_loss = static_cast<double*>(workspace);
    const int64_t blocks = C <= WIDE_C ? launch_rows<LANES>(logits, target, block_loss, B, C, stream)
                                       : launch_rows<32>(logits, target, block_loss, B, C, stream);
    finish<<<1, THREADS, 0, stream>>>(block_loss, loss, blocks, B);
    return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
