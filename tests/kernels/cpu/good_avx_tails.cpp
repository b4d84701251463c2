// CORRECT: AVX2 with unaligned loads and masked tails. Every load and store is `loadu`/`storeu` (the contract
// promises element alignment only) and the last N % 8 elements of a row go through `maskload`/`maskstore`,
// whose masked-off lanes neither read nor fault past a buffer's end (inputs may end against an inaccessible page).
// Two passes per row (mean, then centred variance), summed in double lanes.
#include <cmath>
#include <cstdint>
#include <immintrin.h>

static inline __m256i tail_mask(int64_t left) {          // lanes [0, left) on, left in [1, 7]
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)left), lane);
}

static inline __m256d add_wide(__m256d acc, __m256 v) {  // acc += the eight floats of v, as doubles
    acc = _mm256_add_pd(acc, _mm256_cvtps_pd(_mm256_castps256_ps128(v)));
    return _mm256_add_pd(acc, _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)));
}

static inline double hsum(__m256d v) {
    double t[4];
    _mm256_storeu_pd(t, v);
    return (t[0] + t[1]) + (t[2] + t[3]);
}

extern "C" int forward(const float* x, const float* weight, const float* bias, float* out,
                       int64_t B, int64_t N, float eps, void* workspace, int64_t workspace_bytes) {
    const int64_t body = N - N % 8;
    const __m256i mask = tail_mask(N % 8 ? N % 8 : 1);
    for (int64_t b = 0; b < B; ++b) {
        const float* row = x + b * N;
        __m256d s = _mm256_setzero_pd();
        for (int64_t i = 0; i < body; i += 8) s = add_wide(s, _mm256_loadu_ps(row + i));
        if (body < N) s = add_wide(s, _mm256_maskload_ps(row + body, mask));       // masked lanes read as 0
        const double mean = hsum(s) / N;
        const __m256 m = _mm256_set1_ps((float)mean);
        __m256d q = _mm256_setzero_pd();
        for (int64_t i = 0; i < body; i += 8) {
            const __m256 d = _mm256_sub_ps(_mm256_loadu_ps(row + i), m);
            q = add_wide(q, _mm256_mul_ps(d, d));
        }
        if (body < N) {
            const __m256 d = _mm256_and_ps(_mm256_sub_ps(_mm256_maskload_ps(row + body, mask), m),
                                           _mm256_castsi256_ps(mask));            // off lanes: 0, not -mean
            q = add_wide(q, _mm256_mul_ps(d, d));
        }
        const __m256 r = _mm256_set1_ps((float)(1.0 / std::sqrt(hsum(q) / N + eps)));
        float* o = out + b * N;
        for (int64_t i = 0; i < body; i += 8) {
            const __m256 y = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(row + i), m), r);
            _mm256_storeu_ps(o + i, _mm256_fmadd_ps(y, _mm256_loadu_ps(weight + i), _mm256_loadu_ps(bias + i)));
        }
        if (body < N) {
            const __m256 y = _mm256_mul_ps(_mm256_sub_ps(_mm256_maskload_ps(row + body, mask), m), r);
            const __m256 v = _mm256_fmadd_ps(y, _mm256_maskload_ps(weight + body, mask),
                                             _mm256_maskload_ps(bias + body, mask));
            _mm256_maskstore_ps(o + body, mask, v);                                // writes only the tail
        }
    }
    return 0;
}
