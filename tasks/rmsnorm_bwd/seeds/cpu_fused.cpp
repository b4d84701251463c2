// RMSNorm backward, CPU seed (fused, tiled). One OpenMP parallel region, four phases:
//  1. tiles:   every row is cut into tiles of about TILE elements, one tile per work item (a few long
//              rows still use every core). Each tile sums x*x and gw*x (gw = grad_out * weight): float
//              SIMD sums over blocks of FBLOCK elements, double across blocks.
//  2. rows:    one row per item adds its tiles into r = 1/sqrt(mean(x^2) + eps) and c = mean(gw * xhat).
//  3. columns: one (column block of COLS columns, row group) per item computes grad_x for its block
//              and, from the same loads, grad_weight summed down the group's rows (double). With one
//              group the sums go straight to grad_weight; otherwise each group writes float partials
//              to the workspace and
//  4. reduce:  sums the group partials of each column (double).
// x and grad_out are read twice instead of four times. Small problems (B * N < PAR_MIN) run on the
// calling thread: waking the OpenMP team costs more than they do.
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

struct TileSums { double sq, gwx; };

static TileSums tile_sums(const float* __restrict__ xr, const float* __restrict__ gr, const float* __restrict__ w,
                          int64_t j0, int64_t j1) {
    double sq = 0.0, gwx = 0.0;
    for (int64_t s = j0; s < j1; s += FBLOCK) {
        const int64_t e = min64(s + FBLOCK, j1);
        float f1 = 0.f, f2 = 0.f;
        #pragma omp simd reduction(+ : f1, f2)
        for (int64_t i = s; i < e; ++i) { f1 += xr[i] * xr[i]; f2 += gr[i] * w[i] * xr[i]; }
        sq += f1; gwx += f2;
    }
    return {sq, gwx};
}

extern "C" int backward(const float* grad_out, const float* x, const float* weight,
                        float* grad_x, float* grad_weight,
                        int64_t B, int64_t N, float eps, void* workspace, int64_t workspace_bytes) {
    if (N <= 0) return 0;
    if (B <= 0) {
        for (int64_t j = 0; j < N; ++j) grad_weight[j] = 0.f;
        return 0;
    }
    // workspace: [r, c per row (floats)] [tile records, later reused for group partials]
    const int64_t row_bytes = (2 * B * (int64_t)sizeof(float) + 15) / 16 * 16;
    const int64_t rest = workspace_bytes - row_bytes;
    if (rest < B * (int64_t)sizeof(TileSums)) return 1;
    float* r_of = static_cast<float*>(workspace);
    float* c_of = r_of + B;
    char* region = static_cast<char*>(workspace) + row_bytes;
    TileSums* tiles = reinterpret_cast<TileSums*>(region);

    int64_t tpr = min64(cdiv(N, TILE), rest / (B * (int64_t)sizeof(TileSums)));   // tiles per row
    const int64_t tile_len = cdiv(N, tpr);
    tpr = cdiv(N, tile_len);                                                        // no empty tiles

    const bool parallel = B * N >= PAR_MIN;
    const int64_t threads = parallel ? omp_get_max_threads() : 1;
    const int64_t col_blocks = cdiv(N, COLS);
    int64_t G = cdiv(4 * threads, col_blocks);            // row groups: enough items for every thread
    G = min64(G, min64(B, 256));
    G = min64(G, rest / (N * (int64_t)sizeof(float)));
    if (G < 1) G = 1;
    const int64_t rows_per_group = cdiv(B, G);
    G = cdiv(B, rows_per_group);                          // no empty groups
    float* dw_part = reinterpret_cast<float*>(region);

    #pragma omp parallel if (parallel)
    {
        #pragma omp for schedule(static)
        for (int64_t t = 0; t < B * tpr; ++t) {
            const int64_t b = t / tpr, j0 = (t % tpr) * tile_len;
            tiles[t] = tile_sums(x + b * N, grad_out + b * N, weight, j0, min64(j0 + tile_len, N));
        }

        #pragma omp for schedule(static)
        for (int64_t b = 0; b < B; ++b) {
            double sq = 0.0, gwx = 0.0;
            for (int64_t t = 0; t < tpr; ++t) { sq += tiles[b * tpr + t].sq; gwx += tiles[b * tpr + t].gwx; }
            const double r = 1.0 / std::sqrt(sq / N + eps);
            r_of[b] = (float)r;
            c_of[b] = (float)(r * gwx / N);
        }
        // (the implicit barrier above also ends every read of the tile records: the partials reuse them)

        #pragma omp for schedule(static)
        for (int64_t item = 0; item < col_blocks * G; ++item) {
            const int64_t cb = item % col_blocks, grp = item / col_blocks;
            const int64_t c0 = cb * COLS, n = min64(COLS, N - c0);
            const int64_t b0 = grp * rows_per_group, b1 = min64(b0 + rows_per_group, B);
            double dw[COLS];
            for (int64_t j = 0; j < n; ++j) dw[j] = 0.0;
            const float* w = weight + c0;
            for (int64_t b = b0; b < b1; ++b) {
                const float* g = grad_out + b * N + c0;
                const float* xr = x + b * N + c0;
                float* gx = grad_x + b * N + c0;
                const float r = r_of[b], c = c_of[b];
                #pragma omp simd
                for (int64_t j = 0; j < n; ++j) {
                    const float xhat = xr[j] * r;
                    const float gv = g[j];
                    gx[j] = r * (gv * w[j] - xhat * c);
                    dw[j] += (double)(gv * xhat);
                }
            }
            float* dst = G == 1 ? grad_weight + c0 : dw_part + grp * N + c0;
            for (int64_t j = 0; j < n; ++j) dst[j] = (float)dw[j];
        }

        if (G > 1) {
            #pragma omp for schedule(static)
            for (int64_t j = 0; j < N; ++j) {
                double dw = 0.0;
                for (int64_t k = 0; k < G; ++k) dw += dw_part[k * N + j];
                grad_weight[j] = (float)dw;
            }
        }
    }
    return 0;
}
