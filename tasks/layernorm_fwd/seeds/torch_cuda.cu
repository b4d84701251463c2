// LayerNorm forward, torch-extension seed (robust-kbench / KernelBench format): the kernels of cuda.cu,
// called from a `forward` that takes and returns torch tensors and allocates its own outputs and scratch.
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>
#include <cstdint>

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

static void check_input(const torch::Tensor& t, const char* name, c10::ScalarType dtype) {
    TORCH_CHECK(t.is_cuda(), name, " must be a CUDA tensor");
    TORCH_CHECK(t.scalar_type() == dtype, name, " has the wrong dtype");
}

torch::Tensor forward(torch::Tensor x, torch::Tensor weight, torch::Tensor bias, double eps) {
    check_input(x, "x", torch::kFloat32);
    check_input(weight, "weight", torch::kFloat32);
    check_input(bias, "bias", torch::kFloat32);
    x = x.contiguous(); weight = weight.contiguous(); bias = bias.contiguous();
    const int64_t N = weight.numel();
    const int64_t B = N ? x.numel() / N : 0;
    auto out = torch::empty_like(x);
    if (B == 0 || N == 0) return out;
    auto stream = c10::cuda::getCurrentCUDAStream();
    layernorm_rows<<<(unsigned)B, THREADS, 0, stream>>>(x.data_ptr<float>(), weight.data_ptr<float>(),
        bias.data_ptr<float>(), out.data_ptr<float>(), N, (float)eps);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("forward", &forward, "LayerNorm forward");
}
