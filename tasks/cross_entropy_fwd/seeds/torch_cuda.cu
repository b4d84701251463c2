// Cross-entropy forward (mean over rows), torch-extension seed (robust-kbench / KernelBench format): the kernels of cuda.cu,
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

__global__ void row_loss_kernel(const float* __restrict__ logits, const int64_t* __restrict__ target,
                                double* __restrict__ row_loss, int64_t C) {
    __shared__ double dshared[THREADS];
    __shared__ float fshared[THREADS];
    const int64_t b = blockIdx.x;
    const float* row = logits + b * C;
    float mx = -INFINITY;
    for (int64_t j = threadIdx.x; j < C; j += THREADS) mx = fmaxf(mx, row[j]);
    mx = block_max(mx, fshared);
    double s = 0.0;
    for (int64_t j = threadIdx.x; j < C; j += THREADS) s += exp((double)(row[j] - mx));
    s = block_sum(s, dshared);
    if (threadIdx.x == 0) row_loss[b] = log(s) + (double)mx - (double)row[target[b]];
}

__global__ void mean_kernel(const double* __restrict__ row_loss, float* __restrict__ loss, int64_t B) {
    __shared__ double shared[THREADS];
    double s = 0.0;
    for (int64_t b = threadIdx.x; b < B; b += THREADS) s += row_loss[b];
    s = block_sum(s, shared);
    if (threadIdx.x == 0) loss[0] = (float)(s / B);
}

static void check_input(const torch::Tensor& t, const char* name, c10::ScalarType dtype) {
    TORCH_CHECK(t.is_cuda(), name, " must be a CUDA tensor");
    TORCH_CHECK(t.scalar_type() == dtype, name, " has the wrong dtype");
}

torch::Tensor forward(torch::Tensor logits, torch::Tensor target) {
    check_input(logits, "logits", torch::kFloat32);
    check_input(target, "target", torch::kInt64);
    logits = logits.contiguous(); target = target.contiguous();
    const int64_t B = logits.size(0), C = logits.size(1);
    auto loss = torch::empty({}, logits.options());          // a 0-dim tensor, as F.cross_entropy returns
    TORCH_CHECK(B > 0 && C > 0, "empty logits");
    auto stream = c10::cuda::getCurrentCUDAStream();
    auto row_loss = torch::empty({B}, logits.options().dtype(torch::kFloat64));
    row_loss_kernel<<<(unsigned)B, THREADS, 0, stream>>>(logits.data_ptr<float>(), target.data_ptr<int64_t>(),
        row_loss.data_ptr<double>(), C);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    mean_kernel<<<1, THREADS, 0, stream>>>(row_loss.data_ptr<double>(), loss.data_ptr<float>(), B);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return loss;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("forward", &forward, "Cross-entropy forward (mean over rows)");
}
