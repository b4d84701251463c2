// 2x2 max pooling backward, CPU seed: one OpenMP item per (b, c) plane. The plane of grad_x is zeroed,
// then each window's grad_out value is written at the window's first maximum (row-major order; a later
// value replaces the maximum only if strictly larger).
#include <cstdint>

extern "C" int backward(const float* grad_out, const float* x, float* grad_x,
                        int64_t B, int64_t C, int64_t H, int64_t W, void* workspace, int64_t workspace_bytes) {
    const int64_t PH = H / 2, PW = W / 2;
    #pragma omp parallel for schedule(static)
    for (int64_t p = 0; p < B * C; ++p) {
        const float* in = x + p * H * W;
        const float* g = grad_out + p * PH * PW;
        float* gx = grad_x + p * H * W;
        for (int64_t k = 0; k < H * W; ++k) gx[k] = 0.0f;
        for (int64_t i = 0; i < PH; ++i) {
            for (int64_t j = 0; j < PW; ++j) {
                const int64_t at[4] = {2 * i * W + 2 * j, 2 * i * W + 2 * j + 1, (2 * i + 1) * W + 2 * j,
                                       (2 * i + 1) * W + 2 * j + 1};
                int64_t best = at[0];
                for (int q = 1; q < 4; ++q) best = in[at[q]] > in[best] ? at[q] : best;
                gx[best] = g[i * PW + j];
            }
        }
    }
    return 0;
}
