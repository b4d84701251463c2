// Conv 3x3 + ReLU + 2x2 max pooling backward, CPU seed, in four OpenMP passes over g, the gradient at the
// convolution's output [B, O, H - 2, W - 2], kept in the workspace.
//   1. per (b, o) plane: zero g; in each pooling window compute the four convolution outputs (double sums
//      over c, kh, kw, plus the bias), find the first maximum in row-major order (a later one wins only if
//      strictly larger) and, if it is > 0, set g there to the window's grad_out value.
//   2. per o: grad_bias[o] = sum of g[:, o] (double).
//   3. per (o, c): grad_weight[o, c, kh, kw] = sum over b, h, w of g[b, o, h, w] * x[b, c, h + kh, w + kw]
//      (nine double sums; zeros of g skipped).
//   4. per (b, c) plane: grad_x = 0, then each nonzero g[b, o, h, w] adds g * weight[o, c, kh, kw] to
//      grad_x[b, c, h + kh, w + kw] (float).
#include <cstdint>

extern "C" int backward(const float* grad_out, const float* x, const float* weight, const float* bias,
                        float* grad_x, float* grad_weight, float* grad_bias,
                        int64_t B, int64_t C, int64_t H, int64_t W, int64_t O,
                        void* workspace, int64_t workspace_bytes) {
    const int64_t OH = H - 2, OW = W - 2;
    if (OH < 1 || OW < 1 || workspace_bytes < B * O * OH * OW * (int64_t)sizeof(float)) return 1;
    const int64_t PH = OH / 2, PW = OW / 2;
    float* g = static_cast<float*>(workspace);

    #pragma omp parallel for collapse(2) schedule(static)
    for (int64_t b = 0; b < B; ++b) {
        for (int64_t o = 0; o < O; ++o) {
            float* gp = g + (b * O + o) * OH * OW;
            for (int64_t k = 0; k < OH * OW; ++k) gp[k] = 0.0f;
            for (int64_t i = 0; i < PH; ++i) {
                for (int64_t j = 0; j < PW; ++j) {
                    double conv[4];      // at (2i + di, 2j + dj), q = 2 * di + dj
                    for (int64_t q = 0; q < 4; ++q) conv[q] = bias[o];
                    for (int64_t c = 0; c < C; ++c) {
                        const float* xc = x + (b * C + c) * H * W;
                        const float* wc = weight + (o * C + c) * 9;
                        for (int64_t kh = 0; kh < 3; ++kh)
                            for (int64_t kw = 0; kw < 3; ++kw)
                                for (int64_t q = 0; q < 4; ++q)
                                    conv[q] += (double)wc[kh * 3 + kw] * xc[(2 * i + q / 2 + kh) * W + 2 * j + q % 2 + kw];
                    }
                    int64_t best = 0;
                    for (int64_t q = 1; q < 4; ++q) best = conv[q] > conv[best] ? q : best;
                    if (conv[best] > 0.0)
                        gp[(2 * i + best / 2) * OW + 2 * j + best % 2] = grad_out[((b * O + o) * PH + i) * PW + j];
                }
            }
        }
    }

    #pragma omp parallel for schedule(static)
    for (int64_t o = 0; o < O; ++o) {
        double s = 0.0;
        for (int64_t b = 0; b < B; ++b)
            for (int64_t k = 0; k < OH * OW; ++k) s += g[(b * O + o) * OH * OW + k];
        grad_bias[o] = (float)s;
    }

    #pragma omp parallel for collapse(2) schedule(static)
    for (int64_t o = 0; o < O; ++o) {
        for (int64_t c = 0; c < C; ++c) {
            double acc[9] = {0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0};
            for (int64_t b = 0; b < B; ++b) {
                const float* gp = g + (b * O + o) * OH * OW;
                const float* xc = x + (b * C + c) * H * W;
                for (int64_t h = 0; h < OH; ++h)
                    for (int64_t w = 0; w < OW; ++w) {
                        const double gv = gp[h * OW + w];
                        if (gv == 0.0) continue;
                        for (int64_t kh = 0; kh < 3; ++kh)
                            for (int64_t kw = 0; kw < 3; ++kw) acc[kh * 3 + kw] += gv * xc[(h + kh) * W + w + kw];
                    }
            }
            for (int64_t k = 0; k < 9; ++k) grad_weight[(o * C + c) * 9 + k] = (float)acc[k];
        }
    }

    #pragma omp parallel for collapse(2) schedule(static)
    for (int64_t b = 0; b < B; ++b) {
        for (int64_t c = 0; c < C; ++c) {
            float* gx = grad_x + (b * C + c) * H * W;
            for (int64_t k = 0; k < H * W; ++k) gx[k] = 0.0f;
            for (int64_t o = 0; o < O; ++o) {
                const float* gp = g + (b * O + o) * OH * OW;
                const float* wc = weight + (o * C + c) * 9;
                for (int64_t h = 0; h < OH; ++h)
                    for (int64_t w = 0; w < OW; ++w) {
                        const float gv = gp[h * OW + w];
                        if (gv == 0.0f) continue;
                        for (int64_t kh = 0; kh < 3; ++kh)
                            for (int64_t kw = 0; kw < 3; ++kw) gx[(h + kh) * W + w + kw] += gv * wc[kh * 3 + kw];
                    }
            }
        }
    }
    return 0;
}
