// Scaled softmax forward, CPU seed of the search tests' task. Every value of every knob is correct:
// ROWS rows per OpenMP iteration, CHUNK lanes of partial maxima and sums (the tail handled apart), and the
// normalising loop unrolled by UNROLL (the tail handled apart).
#include <cmath>
#include <cstdint>

constexpr int ROWS = 1;     // knob: 1, 2, 4
constexpr int CHUNK = 4;    // knob: 1, 4, 8
constexpr int UNROLL = 1;   // knob: 1, 2

extern "C" int forward(const float* x, float* out, int64_t B, int64_t N, float scale,
                       void* workspace, int64_t workspace_bytes) {
    const int64_t blocks = (B + ROWS - 1) / ROWS;
    #pragma omp parallel for schedule(static)
    for (int64_t blk = 0; blk < blocks; ++blk) {
        const int64_t end = (blk + 1) * ROWS < B ? (blk + 1) * ROWS : B;
        for (int64_t b = blk * ROWS; b < end; ++b) {
            const float* row = x + b * N;
            float* o = out + b * N;
            float lane_max[CHUNK];
            for (int c = 0; c < CHUNK; ++c) lane_max[c] = -INFINITY;
            int64_t i = 0;
            for (; i + CHUNK <= N; i += CHUNK)
                for (int c = 0; c < CHUNK; ++c) lane_max[c] = std::fmax(lane_max[c], scale * row[i + c]);
            float m = -INFINITY;
            for (int c = 0; c < CHUNK; ++c) m = std::fmax(m, lane_max[c]);
            for (; i < N; ++i) m = std::fmax(m, scale * row[i]);
            double lane_sum[CHUNK];
            for (int c = 0; c < CHUNK; ++c) lane_sum[c] = 0.0;
            i = 0;
            for (; i + CHUNK <= N; i += CHUNK)
                for (int c = 0; c < CHUNK; ++c) {
                    const float e = std::exp(scale * row[i + c] - m);
                    o[i + c] = e;
                    lane_sum[c] += e;
                }
            double sum = 0.0;
            for (int c = 0; c < CHUNK; ++c) sum += lane_sum[c];
            for (; i < N; ++i) {
                const float e = std::exp(scale * row[i] - m);
                o[i] = e;
                sum += e;
            }
            const float inv = (float)(1.0 / sum);
            i = 0;
            for (; i + UNROLL <= N; i += UNROLL)
                for (int u = 0; u < UNROLL; ++u) o[i + u] *= inv;
            for (; i < N; ++i) o[i] *= inv;
        }
    }
    return 0;
}
