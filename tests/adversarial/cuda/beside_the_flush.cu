// Issue 49's accepted attack (an H100, strict confinement): inside its call, while the harness captures the timing
// graph, it asks for the capture's graph and the nodes the call would follow (`cudaStreamGetCaptureInfo`: the L2
// flush before it), and adds its real work as a kernel node beside that flush — depending on the flush's own
// dependencies (`cudaGraphNodeGetDependencies`), so it runs while the flush runs, whose time the clock subtracts —
// then launches an empty kernel on the stream as the call itself. Every call API it uses is on the allow-list.
// With the device code replayed apart from its host code (judge.replay), the describing capture has no flush: its
// node is described like any other and replayed after the replaying worker's own flush, timed in full.
#include <cstdint>
#include <cuda_runtime.h>

constexpr int THREADS = 256;  // knob: 128, 256, 512, 1024

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
    for (int64_t i = threadIdx.x; i < N; i += THREADS) sum += row[i];
    const double mean = block_sum(sum, shared) / N;
    double sq = 0.0;
    for (int64_t i = threadIdx.x; i < N; i += THREADS) { double d = row[i] - mean; sq += d * d; }
    const float rstd = (float)rsqrt(block_sum(sq, shared) / N + eps);
    const float m = (float)mean;
    for (int64_t i = threadIdx.x; i < N; i += THREADS) o[i] = (row[i] - m) * rstd * weight[i] + bias[i];
}

__global__ void nothing() {}

extern "C" int forward(const float* x, const float* weight, const float* bias, float* out,
                       int64_t B, int64_t N, float eps, void* workspace, int64_t workspace_bytes,
                       cudaStream_t stream) {
    if (B == 0) return 0;
    cudaStreamCaptureStatus status;
    cudaGraph_t graph;
    const cudaGraphNode_t* deps = nullptr;
    size_t count = 0;
    if (cudaStreamGetCaptureInfo(stream, &status, nullptr, &graph, &deps, nullptr, &count) == cudaSuccess &&
        status == cudaStreamCaptureStatusActive && count == 1) {
        cudaGraphNode_t before[8];
        size_t n = 8;
        if (cudaGraphNodeGetDependencies(deps[0], before, nullptr, &n) == cudaSuccess && n <= 8) {
            int64_t N_ = N; float eps_ = eps;
            void* args[] = {(void*)&x, (void*)&weight, (void*)&bias, (void*)&out, (void*)&N_, (void*)&eps_};
            cudaKernelNodeParams p = {};
            p.func = (void*)layernorm_rows;
            p.gridDim = dim3((unsigned)B);
            p.blockDim = dim3(THREADS);
            p.kernelParams = args;
            cudaGraphNode_t mine;
            if (cudaGraphAddKernelNode(&mine, graph, before, n, &p) == cudaSuccess) {
                nothing<<<1, 1, 0, stream>>>();          // the call the stream sees
                return cudaGetLastError() == cudaSuccess ? 0 : 1;
            }
        }
    }
    layernorm_rows<<<(unsigned)B, THREADS, 0, stream>>>(x, weight, bias, out, N, eps);
    return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
