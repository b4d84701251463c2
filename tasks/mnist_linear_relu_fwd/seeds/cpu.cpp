// Linear + ReLU forward, CPU seed: out[b, o] = max(0, sum_i x[b, i] * weight[o, i] + bias[o]). One OpenMP
// item is a block of ROWS rows of x against one row of weight: the weight row is read once for ROWS dot
// products, each summed in double.
#include <cstdint>

constexpr int64_t ROWS = 4;  // knob: 1, 2, 4, 8

extern "C" int forward(const float* x, const float* weight, const float* bias, float* out,
                       int64_t B, int64_t IN, int64_t OUT, void* workspace, int64_t workspace_bytes) {
    const int64_t row_blocks = (B + ROWS - 1) / ROWS;
    #pragma omp parallel for collapse(2) schedule(static)
    for (int64_t rb = 0; rb < row_blocks; ++rb) {
        for (int64_t o = 0; o < OUT; ++o) {
            const int64_t b0 = rb * ROWS;
            const int64_t n = B - b0 < ROWS ? B - b0 : ROWS;
            const float* w = weight + o * IN;
            double acc[ROWS];
            for (int64_t r = 0; r < ROWS; ++r) acc[r] = 0.0;
            for (int64_t i = 0; i < IN; ++i) {
                const double wi = w[i];
                for (int64_t r = 0; r < n; ++r) acc[r] += wi * x[(b0 + r) * IN + i];
            }
            for (int64_t r = 0; r < n; ++r) {
                const float v = (float)(acc[r] + bias[o]);
                out[(b0 + r) * OUT + o] = v > 0.0f ? v : 0.0f;
            }
        }
    }
    return 0;
}
