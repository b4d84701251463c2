// CORRECT (issue 49): turns flush-to-zero and denormals-are-zero on (MXCSR) at entry, on its own thread and on
// every thread of its OpenMP team, and leaves them so — a common setting for speed. Its answer does not depend on
// denormals. The harness puts its own FPU state back after every call, on the calling thread and on the OpenMP
// pool's threads it shares with torch (`judge.worker.state`); this kernel checks that each call starts without the
// flags (printed otherwise: `PROBE ftz_daz_at_entry=`).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <immintrin.h>
#include <omp.h>

static const unsigned FTZ_DAZ = 0x8040;

extern "C" int forward(const float* x, const float* weight, const float* bias, float* out,
                       int64_t B, int64_t N, float eps, void* workspace, int64_t workspace_bytes) {
    if (_mm_getcsr() & FTZ_DAZ) { printf("PROBE ftz_daz_at_entry=%x\n", _mm_getcsr()); fflush(stdout); }
    _mm_setcsr(_mm_getcsr() | FTZ_DAZ);
    int pool_flags = 0;
    #pragma omp parallel
    {
        if (omp_get_thread_num() != 0 && (_mm_getcsr() & FTZ_DAZ)) {   // a pool thread (the first call's
            #pragma omp atomic                                             // new ones inherit the caller's)
            pool_flags += 1;
        }
        _mm_setcsr(_mm_getcsr() | FTZ_DAZ);
        #pragma omp for schedule(static)
        for (int64_t b = 0; b < B; ++b) {
            const float* row = x + b * N;
            double sum = 0.0;
            for (int64_t i = 0; i < N; ++i) sum += row[i];
            const double mean = sum / N;
            double sq = 0.0;
            for (int64_t i = 0; i < N; ++i) { const double d = row[i] - mean; sq += d * d; }
            const float rstd = (float)(1.0 / std::sqrt(sq / N + eps));
            const float m = (float)mean;
            float* o = out + b * N;
            for (int64_t i = 0; i < N; ++i) o[i] = (row[i] - m) * rstd * weight[i] + bias[i];
        }
    }
    if (pool_flags) { printf("PROBE ftz_daz_in_pool_at_entry=%d\n", pool_flags); fflush(stdout); }
    return 0;
}
