// Linear forward, CPU seed: out[b, o] = sum_i x[b, i] * weight[o, i] + bias[o].
// One OpenMP item is a block of ROWS rows of x against one row of weight (the weight row stays in cache
// for ROWS dot products); each dot product is summed in double, in LANES vectorisable partial sums.
#include <cstdint>

constexpr int64_t ROWS = 4;   // knob: 1, 2, 4, 8
constexpr int64_t LANES = 8;  // knob: 4, 8, 16

// x . w in double, in LANES independent partial sums that the compiler turns into vector lanes
static inline double dot(const float* x, const float* w, int64_t n) {
    double lane[LANES] = {};
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int64_t l = 0; l < LANES; ++l) lane[l] += (double)x[i + l] * w[i + l];
    double s = 0.0;
    for (; i < n; ++i) s += (double)x[i] * w[i];
    for (int64_t l = 0; l < LANES; ++l) s += lane[l];
    return s;
}

extern "C" int forward(const float* x, const float* weight, const float* bias, float* out,
                       int64_t B, int64_t IN, int64_t OUT, void* workspace, int64_t workspace_bytes) {
    const int64_t row_blocks = (B + ROWS - 1) / ROWS;
    #pragma omp parallel for collapse(2) schedule(static)
    for (int64_t rb = 0; rb < row_blocks; ++rb) {
        for (int64_t o = 0; o < OUT; ++o) {
            const int64_t b0 = rb * ROWS;
            const int64_t n = B - b0 < ROWS ? B - b0 : ROWS;
            for (int64_t r = 0; r < n; ++r) {
                const float v = (float)(dot(x + (b0 + r) * IN, weight + o * IN, IN) + bias[o]);
                out[(b0 + r) * OUT + o] = v;
            }
        }
    }
    return 0;
}
