// Linear forward, CPU seed: out[m, n] = bias[n] + dot(x[m, :], weight[n, :]). OpenMP over tiles of
// TILE_M rows of x by TILE_N rows of weight (both read along K, contiguous), so each tile of weight rows
// is reused from cache by TILE_M rows of x; each dot product is a float32 SIMD reduction.
#include <cstdint>

constexpr int64_t TILE_M = 16;  // knob: 4, 16, 64
constexpr int64_t TILE_N = 16;

extern "C" int forward(const float* x, const float* weight, const float* bias, float* out,
                       int64_t M, int64_t K, int64_t N, void* workspace, int64_t workspace_bytes) {
    const int64_t tiles_m = (M + TILE_M - 1) / TILE_M, tiles_n = (N + TILE_N - 1) / TILE_N;
    #pragma omp parallel for collapse(2) schedule(static)
    for (int64_t tm = 0; tm < tiles_m; ++tm) {
        for (int64_t tn = 0; tn < tiles_n; ++tn) {
            const int64_t m1 = (tm + 1) * TILE_M < M ? (tm + 1) * TILE_M : M;
            const int64_t n1 = (tn + 1) * TILE_N < N ? (tn + 1) * TILE_N : N;
            for (int64_t m = tm * TILE_M; m < m1; ++m) {
                const float* xr = x + m * K;
                for (int64_t n = tn * TILE_N; n < n1; ++n) {
                    const float* w = weight + n * K;
                    float acc = 0.0f;
                    #pragma omp simd reduction(+ : acc)
                    for (int64_t k = 0; k < K; ++k) acc += xr[k] * w[k];
                    out[m * N + n] = acc + bias[n];
                }
            }
        }
    }
    return 0;
}
