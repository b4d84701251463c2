// RMSNorm forward, CPU seed (fused, tiled). Rows are cut into tiles of about TILE elements.
//  - One tile per row (short rows, or many rows): one row per OpenMP iteration computes the sum of
//    squares (float SIMD over blocks of FBLOCK elements, double across blocks) and writes
//    out = x * r * weight while the row is still in cache.
//  - Several tiles per row (a few long rows): each tile's sum of squares goes to the workspace, one row
//    per item adds them up into r, then one tile per item writes its part of out, so every core works
//    even when B = 1.
// Small problems (B * N < PAR_MIN) run on the calling thread: waking the OpenMP team costs more.
// Nothing assumes the workspace starts zeroed: every word read was written earlier in the same call.
#include <cmath>
#include <cstdint>

constexpr int64_t TILE = 16384;      // knob: 4096, 16384, 65536
constexpr int64_t FBLOCK = 256;      // knob: 64, 256, 1024
constexpr int64_t PAR_MIN = 32768;   // knob: 0, 8192, 32768, 131072

static inline int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

static double sum_squares(const float* __restrict__ xr, int64_t j0, int64_t j1) {
    double s = 0.0;
    for (int64_t b = j0; b < j1; b += FBLOCK) {
        const int64_t e = min64(b + FBLOCK, j1);
        float f = 0.f;
        #pragma omp simd reduction(+ : f)
        for (int64_t i = b; i < e; ++i) f += xr[i] * xr[i];
        s += f;
    }
    return s;
}

static void scale(const float* __restrict__ xr, const float* __restrict__ weight, float* __restrict__ o,
                  int64_t j0, int64_t j1, float r) {
    #pragma omp simd
    for (int64_t i = j0; i < j1; ++i) o[i] = xr[i] * r * weight[i];
}

extern "C" int forward(const float* x, const float* weight, float* out,
                       int64_t B, int64_t N, float eps, void* workspace, int64_t workspace_bytes) {
    if (B <= 0 || N <= 0) return 0;
    const bool parallel = B * N >= PAR_MIN;
    // workspace: [r per row (float)] [one double per tile]
    const int64_t rec_offset = (B * (int64_t)sizeof(float) + 15) / 16 * 16;
    const int64_t cap = (workspace_bytes - rec_offset) / (B * (int64_t)sizeof(double));
    int64_t tpr = min64(cdiv(N, TILE), cap > 1 ? cap : 1);     // tiles per row
    const int64_t tile_len = cdiv(N, tpr);
    tpr = cdiv(N, tile_len);                                   // no empty tiles

    if (tpr == 1) {
        #pragma omp parallel for schedule(static) if (parallel)
        for (int64_t b = 0; b < B; ++b) {
            const float* xr = x + b * N;
            const float r = (float)(1.0 / std::sqrt(sum_squares(xr, 0, N) / N + eps));
            scale(xr, weight, out + b * N, 0, N, r);
        }
        return 0;
    }

    float* r_of = static_cast<float*>(workspace);
    double* part = reinterpret_cast<double*>(static_cast<char*>(workspace) + rec_offset);
    #pragma omp parallel if (parallel)
    {
        #pragma omp for schedule(static)
        for (int64_t t = 0; t < B * tpr; ++t) {
            const int64_t b = t / tpr, j0 = (t % tpr) * tile_len;
            part[t] = sum_squares(x + b * N, j0, min64(j0 + tile_len, N));
        }
        #pragma omp for schedule(static)
        for (int64_t b = 0; b < B; ++b) {
            double s = 0.0;
            for (int64_t t = 0; t < tpr; ++t) s += part[b * tpr + t];
            r_of[b] = (float)(1.0 / std::sqrt(s / N + eps));
        }
        #pragma omp for schedule(static)
        for (int64_t t = 0; t < B * tpr; ++t) {
            const int64_t b = t / tpr, j0 = (t % tpr) * tile_len;
            scale(x + b * N, weight, out + b * N, j0, min64(j0 + tile_len, N), r_of[b]);
        }
    }
    return 0;
}
