// CORRECT: every OpenMP construct a kernel is likely to write, each of which joins its threads before the call
// returns (the symbol allow-list names the runtime entries GCC emits for them: `symbols.GOMP_OK`, issue 49) —
// a parallel region with worksharing loops (dynamic, guided, static nowait), single, critical, atomic, barrier,
// sections, tasks and taskwait, a taskloop, a combined parallel-for reduction, and omp_set_num_threads.
#include <cmath>
#include <cstdint>
#include <omp.h>

static void row(const float* x, const float* w, const float* b, float* out, int64_t N, float eps, int64_t r) {
    const float* xr = x + r * N;
    double s = 0, q = 0;
    for (int64_t i = 0; i < N; ++i) s += xr[i];
    const double m = s / N;
    for (int64_t i = 0; i < N; ++i) q += (xr[i] - m) * (xr[i] - m);
    const double rs = 1.0 / std::sqrt(q / N + eps);
    for (int64_t i = 0; i < N; ++i) out[r * N + i] = (float)((xr[i] - m) * rs) * w[i] + b[i];
}

extern "C" int forward(const float* x, const float* weight, const float* bias, float* out,
                       int64_t B, int64_t N, float eps, void* workspace, int64_t workspace_bytes) {
    if (B * N < 4096) omp_set_num_threads(1);
    long done = 0, seen = 0;
    double total = 0;
    #pragma omp parallel
    {
        #pragma omp for schedule(dynamic, 1)
        for (int64_t r = 0; r < B; r += 2) row(x, weight, bias, out, N, eps, r);
        #pragma omp for schedule(guided) nowait
        for (int64_t r = 1; r < B; r += 2) row(x, weight, bias, out, N, eps, r);
        #pragma omp barrier
        #pragma omp single
        {
            #pragma omp task
            { seen += 1; }
            #pragma omp taskwait
        }
        #pragma omp critical
        { done += 1; }
        #pragma omp atomic
        done += 1;
        #pragma omp sections
        {
            #pragma omp section
            { volatile int a = 1; (void)a; }
            #pragma omp section
            { volatile int b = 2; (void)b; }
        }
    }
    #pragma omp parallel
    #pragma omp single
    #pragma omp taskloop
    for (int64_t r = 0; r < B; ++r) { volatile float t = out[r * N]; (void)t; }
    #pragma omp parallel for reduction(+ : total) schedule(static)
    for (int64_t i = 0; i < B * N; ++i) total += out[i];
    return (done > 0 && seen == 1 && std::isfinite(total)) ? 0 : 1;
}
