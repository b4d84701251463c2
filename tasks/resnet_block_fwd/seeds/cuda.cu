// ResNet basic block forward, CUDA seed: three launches of one implicit-GEMM convolution kernel whose
// epilogue applies a batch norm (running statistics), an optional shortcut add and an optional relu:
//   1. y1 = relu(bn1(conv3x3(x, stride STRIDE, padding 1)))                  -> workspace
//   2. when C != K or STRIDE != 1: s = bn_d(conv1x1(x, stride STRIDE))       -> workspace; else s = x
//   3. out = relu(bn2(conv3x3(y1, stride 1, padding 1)) + s)
// GEMM rows are output pixels (b, i, j), columns output channels, the reduction runs over (c, r, s). Each
// block of TILE x TILE threads computes a TILE x TILE tile, gathering input taps (zero in the padding)
// and weights into shared memory TILE reduction steps at a time; float32 FMA sums.
#include <cstdint>
#include <cuda_runtime.h>

constexpr int TILE = 16;  // knob: 8, 16, 32

struct Conv {                 // one convolution and its epilogue
    const float* in; int64_t C, H, W;
    const float* weight; int64_t R, S, P;
    const float* bn_weight; const float* bn_bias; const float* bn_mean; const float* bn_var;
    const float* residual;    // [B, K, HO, WO] or nullptr
    int relu;
    float* out; int64_t B, K, HO, WO;
};

__global__ void conv_bn_kernel(Conv cv, float eps) {
    __shared__ float xs[TILE][TILE + 1];   // xs[reduction step][pixel]
    __shared__ float ws[TILE][TILE + 1];   // ws[reduction step][channel]
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int64_t plane = cv.HO * cv.WO, rows = cv.B * plane, taps = cv.R * cv.R, red = cv.C * taps;
    const int64_t q0 = (int64_t)blockIdx.x * TILE, k0 = (int64_t)blockIdx.y * TILE;
    const int64_t q = q0 + tx;
    const int64_t b = q / plane, i = (q % plane) / cv.WO, j = q % cv.WO;
    float acc = 0.0f;
    for (int64_t p0 = 0; p0 < red; p0 += TILE) {
        const int64_t p = p0 + ty;
        float v = 0.0f;
        if (q < rows && p < red) {
            const int64_t c = p / taps, r = (p % taps) / cv.R, s = p % cv.R;
            const int64_t y = i * cv.S + r - cv.P, xx = j * cv.S + s - cv.P;
            if (y >= 0 && y < cv.H && xx >= 0 && xx < cv.W) v = cv.in[((b * cv.C + c) * cv.H + y) * cv.W + xx];
        }
        xs[ty][tx] = v;
        ws[ty][tx] = (k0 + tx < cv.K && p < red) ? cv.weight[(k0 + tx) * red + p] : 0.0f;
        __syncthreads();
        #pragma unroll
        for (int pp = 0; pp < TILE; ++pp) acc = fmaf(xs[pp][tx], ws[pp][ty], acc);
        __syncthreads();
    }
    const int64_t k = k0 + ty;
    if (q >= rows || k >= cv.K) return;
    const float scale = cv.bn_weight[k] / sqrtf(cv.bn_var[k] + eps);
    float v = (acc - cv.bn_mean[k]) * scale + cv.bn_bias[k];
    const int64_t at = (b * cv.K + k) * plane + i * cv.WO + j;
    if (cv.residual) v += cv.residual[at];
    cv.out[at] = cv.relu && v < 0.0f ? 0.0f : v;
}

static void launch(const Conv& cv, float eps, cudaStream_t stream) {
    const dim3 grid((unsigned)((cv.B * cv.HO * cv.WO + TILE - 1) / TILE), (unsigned)((cv.K + TILE - 1) / TILE));
    conv_bn_kernel<<<grid, dim3(TILE, TILE), 0, stream>>>(cv, eps);
}

extern "C" int forward(const float* x, const float* conv1_weight, const float* bn1_weight, const float* bn1_bias,
                       const float* bn1_mean, const float* bn1_var, const float* conv2_weight,
                       const float* bn2_weight, const float* bn2_bias, const float* bn2_mean, const float* bn2_var,
                       const float* downsample_weight, const float* downsample_bn_weight,
                       const float* downsample_bn_bias, const float* downsample_bn_mean,
                       const float* downsample_bn_var, float* out,
                       int64_t B, int64_t C, int64_t H, int64_t W, int64_t K, int64_t STRIDE, float eps,
                       void* workspace, int64_t workspace_bytes, cudaStream_t stream) {
    const int64_t HO = (H - 1) / STRIDE + 1, WO = (W - 1) / STRIDE + 1, n = B * K * HO * WO;
    if (n == 0) return 0;
    if (workspace_bytes < 2 * n * (int64_t)sizeof(float)) return 1;
    float* y1 = static_cast<float*>(workspace);
    float* shortcut = y1 + n;
    launch({x, C, H, W, conv1_weight, 3, STRIDE, 1, bn1_weight, bn1_bias, bn1_mean, bn1_var, nullptr, 1,
            y1, B, K, HO, WO}, eps, stream);
    const float* s = x;
    if (C != K || STRIDE != 1) {
        launch({x, C, H, W, downsample_weight, 1, STRIDE, 0, downsample_bn_weight, downsample_bn_bias,
                downsample_bn_mean, downsample_bn_var, nullptr, 0, shortcut, B, K, HO, WO}, eps, stream);
        s = shortcut;
    }
    launch({y1, K, HO, WO, conv2_weight, 3, 1, 1, bn2_weight, bn2_bias, bn2_mean, bn2_var, s, 1,
            out, B, K, HO, WO}, eps, stream);
    return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
