// Issue 49's pair of static holes, together: a second declarator of the entry point's `extern "C"` declaration
// declares libgomp's legacy `GOMP_parallel_start` (the rules read only the first name), and the symbol allow-list
// admitted every `GOMP_` import. `GOMP_parallel_start` starts a team and returns at once; the team's other thread
// runs the region's body until `GOMP_parallel_end`, which this kernel never calls: a helper thread that outlives
// the call, started without any library walk. Here the helper computes the rows the call left (work outside the
// timed interval) and the call returns as soon as it has started it. Rejected by the rules (extern-c, openmp-runtime)
// and, built without them, by the symbol check (`GOMP_parallel_start`).
#include <cmath>
#include <cstdint>

extern "C" int forward(const float* x, const float* weight, const float* bias, float* out,
                       int64_t B, int64_t N, float eps, void* workspace, int64_t workspace_bytes),
               GOMP_parallel_start(void (*)(void*), void*, unsigned);

struct Job { const float *x, *w, *b; float* out; int64_t B, N; float eps; };
static Job job;

static void rows(void* p) {
    const Job& j = *(const Job*)p;
    for (int64_t r = 0; r < j.B; ++r) {
        const float* row = j.x + r * j.N;
        double s = 0, q = 0;
        for (int64_t i = 0; i < j.N; ++i) s += row[i];
        const double m = s / j.N;
        for (int64_t i = 0; i < j.N; ++i) q += (row[i] - m) * (row[i] - m);
        const double rs = 1.0 / std::sqrt(q / j.N + j.eps);
        for (int64_t i = 0; i < j.N; ++i) j.out[r * j.N + i] = (float)((row[i] - m) * rs) * j.w[i] + j.b[i];
    }
}

extern "C" int forward(const float* x, const float* weight, const float* bias, float* out,
                       int64_t B, int64_t N, float eps, void* workspace, int64_t workspace_bytes) {
    job = Job{x, weight, bias, out, B, N, eps};
    GOMP_parallel_start(rows, &job, 2);   // the team's second thread runs `rows`; this one returns now
    return 0;
}
