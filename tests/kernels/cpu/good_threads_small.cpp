// CORRECT (issue 49): the CPU seed, one thread for small problems — `omp_set_num_threads(1)`, a common pattern. The
// kernel shares the worker's OpenMP runtime (one libgomp) with torch: before issue 49 its setting stayed set, torch's
// baselines in the same worker ran on one thread, torch.compile's guard on the thread count recompiled inside the
// sealed worker, and the refused vfork of that compile was charged to this kernel ("forbidden action: vfork", one
// judgement in two). Now torch is timed in the clean baseline worker, and the harness puts its own thread count back
// after every call (`judge.worker.state`): every call starts with the count the harness set, which this kernel
// checks (a changed count at entry is printed: `PROBE threads_changed=`).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <omp.h>

static int first_seen = 0;

extern "C" int forward(const float* x, const float* weight, const float* bias, float* out,
                       int64_t B, int64_t N, float eps, void* workspace, int64_t workspace_bytes) {
    const int now = omp_get_max_threads();
    if (!first_seen) first_seen = now;
    if (now != first_seen) { printf("PROBE threads_changed=%d (was %d)\n", now, first_seen); fflush(stdout); }
    if (B * N < 4096) omp_set_num_threads(1);          // small problems: not worth waking the pool
    #pragma omp parallel for schedule(static)
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
    return 0;
}
