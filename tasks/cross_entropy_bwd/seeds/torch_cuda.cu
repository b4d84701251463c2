// Cross-entropy backward (mean over rows), torch-extension seed (robust-kbench / KernelBench format): the kernels of cuda.cu,
// called from a `backward` that takes and returns torch tensors and allocates its own outputs and scratch.
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

__device__ float block_max(float v, float* shared) {
    shared[threadIdx.x] = v;
    __syncthreads();
    for (int s = THREADS / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) shared[threadIdx.x] = fmaxf(shared[threadIdx.x], shared[threadIdx.x + s]);
        __syncthreads();
    }
    float m = shared[0];
    __syncthreads();
    return m;
}

__global__ void ce_backward_rows(const float* __restrict__ grad_out, const float* __restrict__ logits,
                                 const int64_t* __restrict__ target, float* __restrict__ grad_logits,
                                 int64_t B, int64_t C) {
    __shared__ double dshared[THREADS];
    __shared__ float fshared[THREADS];
    const int64_t b = blockIdx.x;
    const float* row = logits + b * C;
    float mx = -INFINITY;
    for (int64_t j = threadIdx.x; j < C; j += THREADS) mx = fmaxf(mx, row[j]);
    mx = block_max(mx, fshared);
    double s = 0.0;
    for (int64_t j = threadIdx.x; j < C; j += THREADS) s += exp((double)(row[j] - mx));
    const double inv = 1.0 / block_sum(s, dshared);
    const double scale = (double)grad_out[0] / B;
    const int64_t t = target[b];
    float* out = grad_logits + b * C;
    for (int64_t j = threadIdx.x; j < C; j += THREADS)
        out[j] = (float)((exp((double)(row[j] - mx)) * inv - (j == t ? 1.0 : 0.0)) * scale);
}

static void check_input(const torch::Tensor& t, const char* name, c10::ScalarType dtype) {
    TORCH_CHECK(t.is_cuda(), name, " must be a CUDA tensor");
    TORCH_CHECK(t.scalar_type() == dtype, name, " has the wrong dtype");
}

// robust-kbench's arguments: the mean loss's upstream gradient is a 0-dim tensor.
torch::Tensor backward(torch::Tensor grad_out, torch::Tensor logits, torch::Tensor target) {
    TORCH_CHECK(grad_out.dim() == 0, "grad_out must be 0-dim (the gradient of a scalar loss)");
    check_input(grad_out, "grad_out", torch::kFloat32);
    check_input(logits, "logits", torch::kFloat32);
    check_input(target, "target", torch::kInt64);
    logits = logits.contiguous(); target = target.contiguous();
    const int64_t B = logits.size(0), C = logits.size(1);
    auto grad_logits = torch::empty_like(logits);
    if (B == 0 || C == 0) return grad_logits;
    auto stream = c10::cuda::getCurrentCUDAStream();
    ce_backward_rows<<<(unsigned)B, THREADS, 0, stream>>>(grad_out.data_ptr<float>(), logits.data_ptr<float>(),
        target.data_ptr<int64_t>(), grad_logits.data_ptr<float>(), B, C);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return grad_logits;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("backward", &backward, "Cross-entropy backward (mean over rows)");
}
