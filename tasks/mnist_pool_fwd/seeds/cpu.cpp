// 2x2 max pooling forward, CPU seed: one OpenMP item per (b, c) plane; each output is the largest of its
// four inputs, starting from the window's first value (inputs can all be negative).
#include <cstdint>

extern "C" int forward(const float* x, float* out, int64_t B, int64_t C, int64_t H, int64_t W,
                       void* workspace, int64_t workspace_bytes) {
    const int64_t PH = H / 2, PW = W / 2;
    #pragma omp parallel for schedule(static)
    for (int64_t p = 0; p < B * C; ++p) {
        const float* in = x + p * H * W;
        float* o = out + p * PH * PW;
        for (int64_t i = 0; i < PH; ++i) {
            const float* r0 = in + 2 * i * W;
            const float* r1 = r0 + W;
            for (int64_t j = 0; j < PW; ++j) {
                float m = r0[2 * j];
                m = r0[2 * j + 1] > m ? r0[2 * j + 1] : m;
                m = r1[2 * j] > m ? r1[2 * j] : m;
                m = r1[2 * j + 1] > m ? r1[2 * j + 1] : m;
                o[i * PW + j] = m;
            }
        }
    }
    return 0;
}
