// Conv 3x3 + ReLU + 2x2 max pooling forward, CPU seed: one OpenMP item per (b, o) output plane. Each
// pooled output computes its window's four convolution outputs (sums in double over c, kh, kw), adds the
// bias, and keeps the largest, clamped at 0 (max(0, max(...)) is the pooled ReLU).
#include <cstdint>

extern "C" int forward(const float* x, const float* weight, const float* bias, float* out,
                       int64_t B, int64_t C, int64_t H, int64_t W, int64_t O,
                       void* workspace, int64_t workspace_bytes) {
    const int64_t PH = (H - 2) / 2, PW = (W - 2) / 2;
    #pragma omp parallel for collapse(2) schedule(static)
    for (int64_t b = 0; b < B; ++b) {
        for (int64_t o = 0; o < O; ++o) {
            const float* wo = weight + o * C * 9;
            for (int64_t i = 0; i < PH; ++i) {
                for (int64_t j = 0; j < PW; ++j) {
                    double acc[4] = {0.0, 0.0, 0.0, 0.0};     // conv at (2i + di, 2j + dj), q = 2 * di + dj
                    for (int64_t c = 0; c < C; ++c) {
                        const float* xc = x + (b * C + c) * H * W;
                        const float* wc = wo + c * 9;
                        for (int64_t kh = 0; kh < 3; ++kh)
                            for (int64_t kw = 0; kw < 3; ++kw) {
                                const double wv = wc[kh * 3 + kw];
                                for (int64_t q = 0; q < 4; ++q)
                                    acc[q] += wv * xc[(2 * i + q / 2 + kh) * W + 2 * j + q % 2 + kw];
                            }
                    }
                    double m = 0.0;
                    for (int64_t q = 0; q < 4; ++q) m = acc[q] + bias[o] > m ? acc[q] + bias[o] : m;
                    out[((b * O + o) * PH + i) * PW + j] = (float)m;
                }
            }
        }
    }
    return 0;
}
