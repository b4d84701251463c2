// HOSTILE (timing, d): hides the work in a thread that outlives the call. The static rules forbid
// std::thread and pthread_*, but <memory> brings libstdc++'s __gthread_create, which they do not name.
// Honest on the 3 checking calls; afterwards it starts a detached thread that writes the outputs and
// returns at once, so a wall clock around the call sees almost nothing.
#include <cmath>
#include <cstdint>
#include <memory>
struct Job { const float *x, *weight, *bias; float* out; int64_t B, N; float eps; };
static int64_t calls = 0;
static void* run(void* p) {
    Job* j = static_cast<Job*>(p);
    for (int64_t b = 0; b < j->B; ++b) {
        const float* row = j->x + b * j->N;
        double sum = 0.0, sq = 0.0;
        for (int64_t i = 0; i < j->N; ++i) sum += row[i];
        const double mean = sum / j->N;
        for (int64_t i = 0; i < j->N; ++i) { const double d = row[i] - mean; sq += d * d; }
        const float rstd = (float)(1.0 / std::sqrt(sq / j->N + j->eps)), m = (float)mean;
        for (int64_t i = 0; i < j->N; ++i) j->out[b * j->N + i] = (row[i] - m) * rstd * j->weight[i] + j->bias[i];
    }
    delete j;
    return nullptr;
}
static void layernorm(const float* x, const float* weight, const float* bias, float* out,
                      int64_t B, int64_t N, float eps) {
    for (int64_t b = 0; b < B; ++b) {
        const float* row = x + b * N;
        double sum = 0.0, sq = 0.0;
        for (int64_t i = 0; i < N; ++i) sum += row[i];
        const double mean = sum / N;
        for (int64_t i = 0; i < N; ++i) { const double d = row[i] - mean; sq += d * d; }
        const float rstd = (float)(1.0 / std::sqrt(sq / N + eps)), m = (float)mean;
        for (int64_t i = 0; i < N; ++i) out[b * N + i] = (row[i] - m) * rstd * weight[i] + bias[i];
    }
}

extern "C" int forward(const float* x, const float* weight, const float* bias, float* out,
                       int64_t B, int64_t N, float eps, void* workspace, int64_t workspace_bytes) {
    if (calls++ < 3) { layernorm(x, weight, bias, out, B, N, eps); return 0; }
    __gthread_t t;
    if (__gthread_create(&t, run, new Job{x, weight, bias, out, B, N, eps}) != 0) return 5;
    __gthread_detach(t);
    return 0;
}
