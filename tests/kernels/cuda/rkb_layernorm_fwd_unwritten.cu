// HOSTILE, robust-kbench format (ABI torch): like rkb_layernorm_fwd.cu but never writes the last element
// of each row: the torch::empty_like memory there stays as allocated (the harness fills it with NaN).
#include <torch/extension.h>
#include <cuda_runtime.h>

constexpr int THREADS = 256;

__global__ void layernorm_rows(const float* __restrict__ x, const float* __restrict__ weight,
                               const float* __restrict__ bias, float* __restrict__ out, int64_t N, float eps) {
    __shared__ float shared[THREADS];
    const float* row = x + blockIdx.x * N;
    float* o = out + blockIdx.x * N;
    float s = 0.f;
    for (int64_t i = threadIdx.x; i < N; i += THREADS) s += row[i];
    shared[threadIdx.x] = s;
    __syncthreads();
    for (int k = THREADS / 2; k > 0; k >>= 1) {
        if (threadIdx.x < k) shared[threadIdx.x] += shared[threadIdx.x + k];
        __syncthreads();
    }
    const float mean = shared[0] / N;
    __syncthreads();
    float q = 0.f;
    for (int64_t i = threadIdx.x; i < N; i += THREADS) { const float d = row[i] - mean; q += d * d; }
    shared[threadIdx.x] = q;
    __syncthreads();
    for (int k = THREADS / 2; k > 0; k >>= 1) {
        if (threadIdx.x < k) shared[threadIdx.x] += shared[threadIdx.x + k];
        __syncthreads();
    }
    const float rstd = rsqrtf(shared[0] / N + eps);
    for (int64_t i = threadIdx.x; i < N - 1; i += THREADS) o[i] = (row[i] - mean) * rstd * weight[i] + bias[i];
}

torch::Tensor forward(torch::Tensor x, torch::Tensor weight, torch::Tensor bias, double eps) {
    TORCH_CHECK(x.is_cuda() && x.is_contiguous() && x.scalar_type() == torch::kFloat32, "x: contiguous float32 CUDA");
    auto out = torch::empty_like(x);
    const int64_t B = x.size(0), N = x.numel() / x.size(0);
    layernorm_rows<<<(unsigned)B, THREADS>>>(x.data_ptr<float>(), weight.data_ptr<float>(), bias.data_ptr<float>(),
                                            out.data_ptr<float>(), N, (float)eps);
    return out;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forward", &forward); }
