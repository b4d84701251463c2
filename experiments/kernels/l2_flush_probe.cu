// experiments/l2_flush_probe.py's device side: does the judge's L2 flush (torch's zero_() of a buffer twice
// the L2, normal stores) evict lines that a kernel loaded with an L2::evict_last cache policy? Built with
// nvcc -shared, called through ctypes on torch's current stream. Not a task kernel.
#include <cstdint>
#include <cuda_runtime.h>

constexpr int THREADS = 256;
constexpr int UNROLL = 4;

__device__ __forceinline__ uint64_t evict_last_policy() {
    uint64_t pol;
    asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(pol));
    return pol;
}

template <int MODE>   // 0: plain loads, 1: loads with an evict_last policy
__global__ void __launch_bounds__(THREADS) read_kernel(const float4* __restrict__ p, int64_t n4, float* sink) {
    uint64_t pol = 0;
    if constexpr (MODE == 1) pol = evict_last_policy();
    float acc = 0.f;
    const int64_t stride = (int64_t)gridDim.x * THREADS * UNROLL;
    for (int64_t i = (int64_t)blockIdx.x * THREADS * UNROLL + threadIdx.x; i < n4; i += stride) {
        float4 v[UNROLL];
        #pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const int64_t j = i + (int64_t)u * THREADS;
            if (j >= n4) { v[u] = make_float4(0.f, 0.f, 0.f, 0.f); continue; }
            if constexpr (MODE == 0) {
                v[u] = p[j];
            } else {
                asm("ld.global.L2::cache_hint.v4.f32 {%0, %1, %2, %3}, [%4], %5;"
                    : "=f"(v[u].x), "=f"(v[u].y), "=f"(v[u].z), "=f"(v[u].w) : "l"(p + j), "l"(pol));
            }
        }
        #pragma unroll
        for (int u = 0; u < UNROLL; ++u) acc += (v[u].x + v[u].y) + (v[u].z + v[u].w);
    }
    if (acc == 12345.678f) sink[blockIdx.x] = acc;   // never true for the probe's data; keeps the loads
}

// A flush that evict_last lines cannot outlast: the buffer is written with evict_last stores (so the
// kernel's evict_last lines are no longer preferred over it and are evicted by recency), then every one of
// its lines is discarded (invalidated without a write-back), which leaves the L2 holding nothing of anyone's.
__global__ void __launch_bounds__(THREADS) fill_last_kernel(float4* __restrict__ p, int64_t n4) {
    const uint64_t pol = evict_last_policy();
    const float4 z = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int64_t i = (int64_t)blockIdx.x * THREADS + threadIdx.x; i < n4; i += (int64_t)gridDim.x * THREADS)
        asm volatile("st.global.L2::cache_hint.v4.f32 [%0], {%1, %2, %3, %4}, %5;"
                     :: "l"(p + i), "f"(z.x), "f"(z.y), "f"(z.z), "f"(z.w), "l"(pol) : "memory");
}

__global__ void __launch_bounds__(THREADS) discard_kernel(char* __restrict__ p, int64_t lines) {
    for (int64_t i = (int64_t)blockIdx.x * THREADS + threadIdx.x; i < lines; i += (int64_t)gridDim.x * THREADS)
        asm volatile("discard.global.L2 [%0], 128;" :: "l"(p + i * 128) : "memory");
}

static int blocks() {
    int dev = 0, sms = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    return sms * 8;
}

extern "C" int probe_read(const float* p, int64_t n, float* sink, int mode, cudaStream_t s) {
    const int64_t n4 = n / 4;
    if (mode == 0) read_kernel<0><<<blocks(), THREADS, 0, s>>>(reinterpret_cast<const float4*>(p), n4, sink);
    else read_kernel<1><<<blocks(), THREADS, 0, s>>>(reinterpret_cast<const float4*>(p), n4, sink);
    return cudaGetLastError() == cudaSuccess ? 0 : 1;
}

extern "C" int probe_flush_last_discard(float* p, int64_t n, cudaStream_t s) {
    fill_last_kernel<<<blocks(), THREADS, 0, s>>>(reinterpret_cast<float4*>(p), n / 4);
    discard_kernel<<<blocks(), THREADS, 0, s>>>(reinterpret_cast<char*>(p), n * 4 / 128);
    return cudaGetLastError() == cudaSuccess ? 0 : 1;
}

extern "C" int probe_discard(float* p, int64_t n, cudaStream_t s) {
    discard_kernel<<<blocks(), THREADS, 0, s>>>(reinterpret_cast<char*>(p), n * 4 / 128);
    return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
