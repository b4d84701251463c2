// CORRECT: a different code path by shape, each correct for every shape it takes. Short rows (N < 128): plain
// scalar code in double. N % 8 == 0: AVX2 over whole rows, no tail needed, unaligned loads all the same (the
// contract promises element alignment only, whatever N is). Otherwise: AVX2 over the first N - N % 8 elements
// and a scalar tail. Many rows (B >= 4): rows in parallel with OpenMP.
#include <cmath>
#include <cstdint>
#include <immintrin.h>

static void scalar_row(const float* row, const float* w, const float* b, float* o, int64_t N, float eps) {
    double s = 0, q = 0;
    for (int64_t i = 0; i < N; ++i) s += row[i];
    const double m = s / N;
    for (int64_t i = 0; i < N; ++i) q += (row[i] - m) * (row[i] - m);
    const double r = 1.0 / std::sqrt(q / N + eps);
    for (int64_t i = 0; i < N; ++i) o[i] = (float)((row[i] - m) * r) * w[i] + b[i];
}

static inline double hsum8(__m256 v) {
    float t[8];
    _mm256_storeu_ps(t, v);
    double s = 0;
    for (float f : t) s += f;
    return s;
}

template <bool TAIL>
static void vector_row(const float* row, const float* w, const float* b, float* o, int64_t N, float eps) {
    const int64_t body = TAIL ? N - N % 8 : N;
    double s = 0, q = 0;
    for (int64_t i0 = 0; i0 < body; i0 += 1024) {         // float lanes over blocks, double across blocks
        __m256 a = _mm256_setzero_ps();
        for (int64_t i = i0; i < body && i < i0 + 1024; i += 8) a = _mm256_add_ps(a, _mm256_loadu_ps(row + i));
        s += hsum8(a);
    }
    if (TAIL) for (int64_t i = body; i < N; ++i) s += row[i];
    const float mf = (float)(s / N);
    const __m256 m = _mm256_set1_ps(mf);
    for (int64_t i0 = 0; i0 < body; i0 += 1024) {
        __m256 a = _mm256_setzero_ps();
        for (int64_t i = i0; i < body && i < i0 + 1024; i += 8) {
            const __m256 d = _mm256_sub_ps(_mm256_loadu_ps(row + i), m);
            a = _mm256_fmadd_ps(d, d, a);
        }
        q += hsum8(a);
    }
    if (TAIL) for (int64_t i = body; i < N; ++i) q += (double)(row[i] - mf) * (row[i] - mf);
    const float rf = (float)(1.0 / std::sqrt(q / N + eps));
    const __m256 r = _mm256_set1_ps(rf);
    for (int64_t i = 0; i < body; i += 8) {
        const __m256 y = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(row + i), m), r);
        _mm256_storeu_ps(o + i, _mm256_fmadd_ps(y, _mm256_loadu_ps(w + i), _mm256_loadu_ps(b + i)));
    }
    if (TAIL) for (int64_t i = body; i < N; ++i) o[i] = (row[i] - mf) * rf * w[i] + b[i];
}

extern "C" int forward(const float* x, const float* weight, const float* bias, float* out,
                       int64_t B, int64_t N, float eps, void* workspace, int64_t workspace_bytes) {
    void (*path)(const float*, const float*, const float*, float*, int64_t, float) =
        N < 128 ? scalar_row : N % 8 == 0 ? vector_row<false> : vector_row<true>;
    #pragma omp parallel for schedule(static) if (B >= 4)
    for (int64_t r = 0; r < B; ++r) path(x + r * N, weight, bias, out + r * N, N, eps);
    return 0;
}
