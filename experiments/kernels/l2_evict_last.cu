// A probe of the judge's L2 flush, not a kernel to use: layernorm_fwd's plain seed (tasks/layernorm_fwd/seeds/cuda.cu)
// with every load of x, weight and bias carrying an L2 evict_last cache policy when HINT is 1. The judge flushes
// the L2 before every timed call by writing a buffer twice its size with ordinary stores; lines marked evict_last
// are evicted after ordinary ones, so they may survive that flush, and a call could find the inputs a previous
// call of the same buffers loaded (the timed buffers are reused from round to round). If HINT=1 times clearly
// faster than HINT=0 on configurations that fit in the L2 (50 MB on an H200), the flush leaks and the judge must
// either flush with evict_last stores itself or reject cache policies:
//   python experiments/knob_sweep.py --task layernorm_fwd --kernel experiments/kernels/l2_evict_last.cu \
//       --target cuda --each HINT
#include <cstdint>
#include <cuda_runtime.h>

constexpr int THREADS = 256;
constexpr int HINT = 1;       // knob: 0, 1

__device__ __forceinline__ float load(const float* p) {
    if constexpr (HINT == 0) {
        return *p;
    } else {
        float v;
        asm volatile("{\n\t.reg .b64 pol;\n\t"
                     "createpolicy.fractional.L2::evict_last.b64 pol, 1.0;\n\t"
                     "ld.global.L2::cache_hint.f32 %0, [%1], pol;\n\t}"
                     : "=f"(v) : "l"(p));
        return v;
    }
}

__device__ double block_sum(double v, double* shared) {
    shared[threadIdx.x] = v;
    __syncthreads();
    for (int s = THREADS / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) shared[threadIdx.x] += shared[threadIdx.x + s];
        __syncthreads();
    }
    double total = shared[0];
    __syncthreads();
    return total;
}

__global__ void layernorm_rows(const float* __restrict__ x, const float* __restrict__ weight,
                               const float* __restrict__ bias, float* __restrict__ out,
                               int64_t N, float eps) {
    __shared__ double shared[THREADS];
    const float* row = x + blockIdx.x * N;
    float* o = out + blockIdx.x * N;
    double sum = 0.0;
    for (int64_t i = threadIdx.x; i < N; i += THREADS) sum += load(row + i);
    const double mean = block_sum(sum, shared) / N;
    double sq = 0.0;
    for (int64_t i = threadIdx.x; i < N; i += THREADS) { double d = load(row + i) - mean; sq += d * d; }
    const float rstd = (float)rsqrt(block_sum(sq, shared) / N + eps);
    const float m = (float)mean;
    for (int64_t i = threadIdx.x; i < N; i += THREADS)
        o[i] = (load(row + i) - m) * rstd * load(weight + i) + load(bias + i);
}

extern "C" int forward(const float* x, const float* weight, const float* bias, float* out,
                       int64_t B, int64_t N, float eps, void* workspace, int64_t workspace_bytes,
                       cudaStream_t stream) {
    if (B == 0) return 0;
    layernorm_rows<<<(unsigned)B, THREADS, 0, stream>>>(x, weight, bias, out, N, eps);
    return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
