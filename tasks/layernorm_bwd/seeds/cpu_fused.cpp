// LayerNorm backward, CPU seed (fused, tiled). One OpenMP parallel region, four phases:
//  1. tiles:   every row is cut into tiles of about TILE elements, one tile per work item, so that a few
//              long rows still use every core. Each tile sums, with its first element k as a shift,
//              d = x - k, d*d, gw = grad_out * weight and gw * d: float SIMD sums over blocks of FBLOCK
//              elements, double across blocks. It stores (mean_t, M2_t, sum gw, sum gw*(x - mean_t)).
//  2. rows:    one row per item merges its tiles (Chan's parallel variance, in double) into mean, rstd,
//              a = mean(gw) and c = mean(gw * xhat), stored as floats.
//  3. columns: one (column block of COLS columns, row group) per item computes grad_x for its block
//              and, from the same loads, grad_weight and grad_bias summed down the group's rows (double
//              accumulators). With one group the sums go straight to the outputs; otherwise each group
//              writes float partials to the workspace and
//  4. reduce:  sums the group partials of each column (double).
// x and grad_out are read twice (phases 1 and 3) instead of six to eight times. Small problems
// (B * N < PAR_MIN) run on the calling thread: waking the OpenMP team costs more than they do.
// Nothing assumes the workspace starts zeroed: every word read was written earlier in the same call.
#include <cmath>
#include <cstdint>
#include <omp.h>

constexpr int64_t TILE = 8192;       // knob: 2048, 8192, 32768
constexpr int64_t COLS = 512;        // knob: 128, 512, 2048
constexpr int64_t FBLOCK = 256;      // knob: 64, 256, 1024
constexpr int64_t PAR_MIN = 65536;   // knob: 0, 16384, 65536, 262144

static inline int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

struct TileStats { double mean, m2, sum_gw, sum_gwd; };   // sum_gwd = sum gw * (x - mean_t)

static TileStats tile_stats(const float* __restrict__ xr, const float* __restrict__ gr,
                            const float* __restrict__ w, int64_t j0, int64_t j1) {
    const float k = xr[j0];
    double s1 = 0.0, s2 = 0.0, s3 = 0.0, s4 = 0.0;
    for (int64_t s = j0; s < j1; s += FBLOCK) {
        const int64_t e = min64(s + FBLOCK, j1);
        float f1 = 0.f, f2 = 0.f, f3 = 0.f, f4 = 0.f;
        #pragma omp simd reduction(+ : f1, f2, f3, f4)
        for (int64_t i = s; i < e; ++i) {
            const float d = xr[i] - k;
            const float gw = gr[i] * w[i];
            f1 += d; f2 += d * d; f3 += gw; f4 += gw * d;
        }
        s1 += f1; s2 += f2; s3 += f3; s4 += f4;
    }
    const double n = (double)(j1 - j0), dm = s1 / n;
    return {k + dm, s2 - s1 * dm, s3, s4 - dm * s3};
}

extern "C" int backward(const float* grad_out, const float* x, const float* weight, const float* bias,
                        float* grad_x, float* grad_weight, float* grad_bias,
                        int64_t B, int64_t N, float eps, void* workspace, int64_t workspace_bytes) {
    if (N <= 0) return 0;
    if (B <= 0) {
        for (int64_t j = 0; j < N; ++j) { grad_weight[j] = 0.f; grad_bias[j] = 0.f; }
        return 0;
    }
    // workspace: [4 floats per row: mean, rstd, a, c] [tile records, later reused for group partials]
    const int64_t row_bytes = 4 * B * (int64_t)sizeof(float);
    const int64_t rest = workspace_bytes - row_bytes;
    if (rest < B * (int64_t)sizeof(TileStats)) return 1;
    float* mean_of = static_cast<float*>(workspace);
    float* rstd_of = mean_of + B;
    float* a_of = rstd_of + B;
    float* c_of = a_of + B;
    char* region = static_cast<char*>(workspace) + row_bytes;     // 16-byte aligned: row_bytes = 16 * B
    TileStats* tiles = reinterpret_cast<TileStats*>(region);

    int64_t tpr = min64(cdiv(N, TILE), rest / (B * (int64_t)sizeof(TileStats)));   // tiles per row
    const int64_t tile_len = cdiv(N, tpr);
    tpr = cdiv(N, tile_len);                                                        // no empty tiles

    const bool parallel = B * N >= PAR_MIN;
    const int64_t threads = parallel ? omp_get_max_threads() : 1;
    const int64_t col_blocks = cdiv(N, COLS);
    int64_t G = cdiv(4 * threads, col_blocks);            // row groups: enough items for every thread
    G = min64(G, min64(B, 256));
    G = min64(G, rest / (2 * N * (int64_t)sizeof(float)));
    if (G < 1) G = 1;
    const int64_t rows_per_group = cdiv(B, G);
    G = cdiv(B, rows_per_group);                          // no empty groups
    float* dw_part = reinterpret_cast<float*>(region);
    float* db_part = dw_part + G * N;

    #pragma omp parallel if (parallel)
    {
        #pragma omp for schedule(static)
        for (int64_t t = 0; t < B * tpr; ++t) {
            const int64_t b = t / tpr, j0 = (t % tpr) * tile_len, j1 = min64(j0 + tile_len, N);
            tiles[t] = tile_stats(x + b * N, grad_out + b * N, weight, j0, j1);
        }

        #pragma omp for schedule(static)
        for (int64_t b = 0; b < B; ++b) {
            const TileStats* ts = tiles + b * tpr;
            double mean = 0.0, sum_gw = 0.0;
            for (int64_t t = 0; t < tpr; ++t) {
                const double n = (double)(min64((t + 1) * tile_len, N) - t * tile_len);
                mean += n * ts[t].mean;
                sum_gw += ts[t].sum_gw;
            }
            mean /= N;
            double m2 = 0.0, sum_gwd = 0.0;
            for (int64_t t = 0; t < tpr; ++t) {
                const double n = (double)(min64((t + 1) * tile_len, N) - t * tile_len);
                const double d = ts[t].mean - mean;
                m2 += ts[t].m2 + n * d * d;
                sum_gwd += ts[t].sum_gwd + d * ts[t].sum_gw;
            }
            const double var = m2 > 0.0 ? m2 / N : 0.0;
            const double rstd = 1.0 / std::sqrt(var + eps);
            mean_of[b] = (float)mean;
            rstd_of[b] = (float)rstd;
            a_of[b] = (float)(sum_gw / N);
            c_of[b] = (float)(rstd * sum_gwd / N);
        }
        // (the implicit barrier above also ends every read of the tile records: the partials reuse them)

        #pragma omp for schedule(static)
        for (int64_t item = 0; item < col_blocks * G; ++item) {
            const int64_t cb = item % col_blocks, grp = item / col_blocks;
            const int64_t c0 = cb * COLS, n = min64(COLS, N - c0);
            const int64_t b0 = grp * rows_per_group, b1 = min64(b0 + rows_per_group, B);
            double dw[COLS], db[COLS];
            for (int64_t j = 0; j < n; ++j) { dw[j] = 0.0; db[j] = 0.0; }
            const float* w = weight + c0;
            for (int64_t b = b0; b < b1; ++b) {
                const float* g = grad_out + b * N + c0;
                const float* xr = x + b * N + c0;
                float* gx = grad_x + b * N + c0;
                const float m = mean_of[b], r = rstd_of[b], a = a_of[b], c = c_of[b];
                #pragma omp simd
                for (int64_t j = 0; j < n; ++j) {
                    const float xhat = (xr[j] - m) * r;
                    const float gv = g[j];
                    gx[j] = r * (gv * w[j] - a - xhat * c);
                    dw[j] += (double)(gv * xhat);
                    db[j] += (double)gv;
                }
            }
            float* dw_dst = G == 1 ? grad_weight + c0 : dw_part + grp * N + c0;
            float* db_dst = G == 1 ? grad_bias + c0 : db_part + grp * N + c0;
            for (int64_t j = 0; j < n; ++j) { dw_dst[j] = (float)dw[j]; db_dst[j] = (float)db[j]; }
        }

        if (G > 1) {
            #pragma omp for schedule(static)
            for (int64_t j = 0; j < N; ++j) {
                double dw = 0.0, db = 0.0;
                for (int64_t k = 0; k < G; ++k) { dw += dw_part[k * N + j]; db += db_part[k * N + j]; }
                grad_weight[j] = (float)dw;
                grad_bias[j] = (float)db;
            }
        }
    }
    return 0;
}
