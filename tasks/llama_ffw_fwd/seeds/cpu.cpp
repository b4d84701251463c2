// Llama MLP forward, CPU seed, in two passes through the workspace:
//   1. h[m, u] = silu(dot(x[m, :], gate_proj[u, :])) * dot(x[m, :], up_proj[u, :])   ([M, U], float32)
//   2. out[m, d] = dot(h[m, :], down_proj[d, :])
// OpenMP over tiles of TILE rows by TILE weight rows (weight rows reused from cache by TILE rows of x or
// h); every dot product is a float32 SIMD reduction along a contiguous row.
#include <cmath>
#include <cstdint>

constexpr int64_t TILE = 16;  // knob: 4, 16, 64

static inline float dot(const float* a, const float* b, int64_t n) {
    float acc = 0.0f;
    #pragma omp simd reduction(+ : acc)
    for (int64_t i = 0; i < n; ++i) acc += a[i] * b[i];
    return acc;
}

extern "C" int forward(const float* x, const float* gate_proj, const float* up_proj, const float* down_proj,
                       float* out, int64_t M, int64_t D, int64_t U, void* workspace, int64_t workspace_bytes) {
    if (workspace_bytes < M * U * (int64_t)sizeof(float)) return 1;
    float* h = static_cast<float*>(workspace);
    const int64_t tiles_m = (M + TILE - 1) / TILE;
    const int64_t tiles_u = (U + TILE - 1) / TILE, tiles_d = (D + TILE - 1) / TILE;
    #pragma omp parallel for collapse(2) schedule(static)
    for (int64_t tm = 0; tm < tiles_m; ++tm) {
        for (int64_t tu = 0; tu < tiles_u; ++tu) {
            const int64_t m1 = (tm + 1) * TILE < M ? (tm + 1) * TILE : M;
            const int64_t u1 = (tu + 1) * TILE < U ? (tu + 1) * TILE : U;
            for (int64_t m = tm * TILE; m < m1; ++m) {
                for (int64_t u = tu * TILE; u < u1; ++u) {
                    const float g = dot(x + m * D, gate_proj + u * D, D);
                    const float v = dot(x + m * D, up_proj + u * D, D);
                    h[m * U + u] = g / (1.0f + std::exp(-g)) * v;
                }
            }
        }
    }
    #pragma omp parallel for collapse(2) schedule(static)
    for (int64_t tm = 0; tm < tiles_m; ++tm) {
        for (int64_t td = 0; td < tiles_d; ++td) {
            const int64_t m1 = (tm + 1) * TILE < M ? (tm + 1) * TILE : M;
            const int64_t d1 = (td + 1) * TILE < D ? (td + 1) * TILE : D;
            for (int64_t m = tm * TILE; m < m1; ++m)
                for (int64_t d = td * TILE; d < d1; ++d) out[m * D + d] = dot(h + m * U, down_proj + d * U, U);
        }
    }
    return 0;
}
