// ResNet basic block forward, CPU seed (direct convolutions, NCHW), three passes:
//   1. y1 = relu(bn1(conv3x3(x, stride STRIDE)))            -> workspace
//   2. when C != K or STRIDE != 1: s = bn_d(conv1x1(x, stride STRIDE)) -> workspace; else s = x
//   3. out = relu(bn2(conv3x3(y1)) + s)
// Each pass: one OpenMP iteration per (image, group of KB output channels); each output plane is summed
// in float32 over input channels then filter taps (only the taps that fall inside the image), then gets
// its batch norm folded into v * scale + shift, the shortcut and the relu.
#include <cmath>
#include <cstdint>

constexpr int64_t KB = 4;  // knob: 1, 4, 16

struct BatchNorm { const float* weight; const float* bias; const float* mean; const float* var; };

static inline void valid(int64_t off, int64_t n, int64_t S, int64_t count, int64_t& lo, int64_t& hi) {
    lo = off >= 0 ? 0 : (-off + S - 1) / S;
    hi = n - 1 - off < 0 ? 0 : (n - 1 - off) / S + 1;
    if (hi > count) hi = count;
    if (lo > hi) lo = hi;
}

// o (HO x WO) += the R x R filter w applied to one input plane (H x W), stride S, zero padding P
static void add_plane(const float* in, int64_t H, int64_t W, const float* w, int64_t R, int64_t S, int64_t P,
                      float* o, int64_t HO, int64_t WO) {
    for (int64_t r = 0; r < R; ++r) {
        int64_t i0, i1;
        valid(r - P, H, S, HO, i0, i1);
        for (int64_t s = 0; s < R; ++s) {
            int64_t j0, j1;
            valid(s - P, W, S, WO, j0, j1);
            const float wv = w[r * R + s];
            for (int64_t i = i0; i < i1; ++i) {
                const float* row = in + (i * S + r - P) * W;
                float* orow = o + i * WO;
                for (int64_t j = j0; j < j1; ++j) orow[j] += wv * row[j * S + s - P];
            }
        }
    }
}

// out [B, K, HO, WO] = act(bn(conv(in [B, C, H, W], w [K, C, R, R])) + residual), act = relu or none
static void conv_bn(const float* in, int64_t B, int64_t C, int64_t H, int64_t W, const float* w, int64_t R,
                    int64_t S, int64_t P, int64_t K, int64_t HO, int64_t WO, BatchNorm bn, float eps,
                    const float* residual, bool relu, float* out) {
    const int64_t groups = (K + KB - 1) / KB, plane = HO * WO;
    #pragma omp parallel for collapse(2) schedule(static)
    for (int64_t b = 0; b < B; ++b) {
        for (int64_t g = 0; g < groups; ++g) {
            const int64_t k0 = g * KB, k1 = k0 + KB < K ? k0 + KB : K;
            for (int64_t k = k0; k < k1; ++k)
                for (int64_t p = 0; p < plane; ++p) out[(b * K + k) * plane + p] = 0.0f;
            for (int64_t c = 0; c < C; ++c)
                for (int64_t k = k0; k < k1; ++k)
                    add_plane(in + (b * C + c) * H * W, H, W, w + (k * C + c) * R * R, R, S, P,
                              out + (b * K + k) * plane, HO, WO);
            for (int64_t k = k0; k < k1; ++k) {
                const float scale = (float)(bn.weight[k] / std::sqrt((double)bn.var[k] + eps));
                const float shift = bn.bias[k] - bn.mean[k] * scale;
                float* o = out + (b * K + k) * plane;
                const float* add = residual ? residual + (b * K + k) * plane : nullptr;
                for (int64_t p = 0; p < plane; ++p) {
                    float v = o[p] * scale + shift;
                    if (add) v += add[p];
                    o[p] = relu && v < 0.0f ? 0.0f : v;
                }
            }
        }
    }
}

extern "C" int forward(const float* x, const float* conv1_weight, const float* bn1_weight, const float* bn1_bias,
                       const float* bn1_mean, const float* bn1_var, const float* conv2_weight,
                       const float* bn2_weight, const float* bn2_bias, const float* bn2_mean, const float* bn2_var,
                       const float* downsample_weight, const float* downsample_bn_weight,
                       const float* downsample_bn_bias, const float* downsample_bn_mean,
                       const float* downsample_bn_var, float* out,
                       int64_t B, int64_t C, int64_t H, int64_t W, int64_t K, int64_t STRIDE, float eps,
                       void* workspace, int64_t workspace_bytes) {
    const int64_t HO = (H - 1) / STRIDE + 1, WO = (W - 1) / STRIDE + 1, n = B * K * HO * WO;
    if (workspace_bytes < 2 * n * (int64_t)sizeof(float)) return 1;
    float* y1 = static_cast<float*>(workspace);
    float* shortcut = y1 + n;
    conv_bn(x, B, C, H, W, conv1_weight, 3, STRIDE, 1, K, HO, WO, {bn1_weight, bn1_bias, bn1_mean, bn1_var}, eps,
            nullptr, true, y1);
    const float* s = x;
    if (C != K || STRIDE != 1) {
        conv_bn(x, B, C, H, W, downsample_weight, 1, STRIDE, 0, K, HO, WO,
                {downsample_bn_weight, downsample_bn_bias, downsample_bn_mean, downsample_bn_var}, eps,
                nullptr, false, shortcut);
        s = shortcut;
    }
    conv_bn(y1, B, K, HO, WO, conv2_weight, 3, 1, 1, K, HO, WO, {bn2_weight, bn2_bias, bn2_mean, bn2_var}, eps,
            s, true, out);
    return 0;
}
