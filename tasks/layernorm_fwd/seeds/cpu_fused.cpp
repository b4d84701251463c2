// LayerNorm forward, CPU seed (fused, tiled). Rows are cut into tiles of about TILE elements.
//  - One tile per row (short rows, or many rows): one row per OpenMP iteration does everything while
//    the row is in cache: shifted sums of d = x - x[0] and d*d (float SIMD over blocks of FBLOCK
//    elements, double across blocks), then out = (x - mean) * rstd * weight + bias.
//  - Several tiles per row (a few long rows): the tiles' shifted sums go to the workspace as
//    (mean_t, M2_t), one row per item merges them (Chan's parallel variance, in double), then one tile
//    per item writes its part of out. Every core works even when B = 1.
// x is read twice in both cases (the second time from cache for short rows), instead of three times.
// Small problems (B * N < PAR_MIN) run on the calling thread: waking the OpenMP team costs more.
// Nothing assumes the workspace starts zeroed: every word read was written earlier in the same call.
#include <cmath>
#include <cstdint>

constexpr int64_t TILE = 16384;      // knob: 4096, 16384, 65536
constexpr int64_t FBLOCK = 256;      // knob: 64, 256, 1024
constexpr int64_t PAR_MIN = 32768;   // knob: 0, 8192, 32768, 131072

static inline int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

struct TileStats { double mean, m2; };

static TileStats tile_stats(const float* __restrict__ xr, int64_t j0, int64_t j1) {
    const float k = xr[j0];
    double s1 = 0.0, s2 = 0.0;
    for (int64_t s = j0; s < j1; s += FBLOCK) {
        const int64_t e = min64(s + FBLOCK, j1);
        float f1 = 0.f, f2 = 0.f;
        #pragma omp simd reduction(+ : f1, f2)
        for (int64_t i = s; i < e; ++i) { const float d = xr[i] - k; f1 += d; f2 += d * d; }
        s1 += f1; s2 += f2;
    }
    const double dm = s1 / (double)(j1 - j0);
    return {k + dm, s2 - s1 * dm};
}

static void normalize(const float* __restrict__ xr, const float* __restrict__ weight, const float* __restrict__ bias,
                      float* __restrict__ o, int64_t j0, int64_t j1, float m, float r) {
    #pragma omp simd
    for (int64_t i = j0; i < j1; ++i) o[i] = (xr[i] - m) * r * weight[i] + bias[i];
}

extern "C" int forward(const float* x, const float* weight, const float* bias, float* out,
                       int64_t B, int64_t N, float eps, void* workspace, int64_t workspace_bytes) {
    if (B <= 0 || N <= 0) return 0;
    const bool parallel = B * N >= PAR_MIN;
    // workspace: [mean, rstd per row (floats)] [tile records]
    const int64_t row_bytes = 2 * B * (int64_t)sizeof(float);
    const int64_t rec_offset = (row_bytes + 15) / 16 * 16;
    const int64_t cap = (workspace_bytes - rec_offset) / (B * (int64_t)sizeof(TileStats));
    int64_t tpr = min64(cdiv(N, TILE), cap > 1 ? cap : 1);     // tiles per row
    const int64_t tile_len = cdiv(N, tpr);
    tpr = cdiv(N, tile_len);                                   // no empty tiles

    if (tpr == 1) {
        #pragma omp parallel for schedule(static) if (parallel)
        for (int64_t b = 0; b < B; ++b) {
            const float* xr = x + b * N;
            const TileStats s = tile_stats(xr, 0, N);
            const double var = s.m2 > 0.0 ? s.m2 / N : 0.0;
            normalize(xr, weight, bias, out + b * N, 0, N, (float)s.mean, (float)(1.0 / std::sqrt(var + eps)));
        }
        return 0;
    }

    float* mean_of = static_cast<float*>(workspace);
    float* rstd_of = mean_of + B;
    TileStats* tiles = reinterpret_cast<TileStats*>(static_cast<char*>(workspace) + rec_offset);
    #pragma omp parallel if (parallel)
    {
        #pragma omp for schedule(static)
        for (int64_t t = 0; t < B * tpr; ++t) {
            const int64_t b = t / tpr, j0 = (t % tpr) * tile_len;
            tiles[t] = tile_stats(x + b * N, j0, min64(j0 + tile_len, N));
        }
        #pragma omp for schedule(static)
        for (int64_t b = 0; b < B; ++b) {
            const TileStats* ts = tiles + b * tpr;
            double mean = 0.0;
            for (int64_t t = 0; t < tpr; ++t)
                mean += (double)(min64((t + 1) * tile_len, N) - t * tile_len) * ts[t].mean;
            mean /= N;
            double m2 = 0.0;
            for (int64_t t = 0; t < tpr; ++t) {
                const double d = ts[t].mean - mean;
                m2 += ts[t].m2 + (double)(min64((t + 1) * tile_len, N) - t * tile_len) * d * d;
            }
            const double var = m2 > 0.0 ? m2 / N : 0.0;
            mean_of[b] = (float)mean;
            rstd_of[b] = (float)(1.0 / std::sqrt(var + eps));
        }
        #pragma omp for schedule(static)
        for (int64_t t = 0; t < B * tpr; ++t) {
            const int64_t b = t / tpr, j0 = (t % tpr) * tile_len;
            normalize(x + b * N, weight, bias, out + b * N, j0, min64(j0 + tile_len, N), mean_of[b], rstd_of[b]);
        }
    }
    return 0;
}
