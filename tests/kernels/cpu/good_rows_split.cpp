// CORRECT (issue 49's host-load case): short rows through a copy on the stack, long rows split over OpenMP threads
// (each row's sums reduced over the team). Its calls' times swing with the machine's load — a thread of the team
// descheduled holds the others at the row's barrier — which once made the canary's median difference read under
// half its addition on a loaded 2-core host (rejected in 1 of 3 judgements there, accepted alone).
#include <cmath>
#include <cstdint>

extern "C" int forward(const float* x, const float* weight, const float* bias, float* out,
                       int64_t B, int64_t N, float eps, void* workspace, int64_t workspace_bytes) {
    for (int64_t b = 0; b < B; ++b) {
        const float* row = x + b * N;
        float* o = out + b * N;
        if (N <= 1024) {
            float copy[1024];
            double s = 0.0, q = 0.0;
            for (int64_t i = 0; i < N; ++i) { copy[i] = row[i]; s += copy[i]; }
            const double m = s / N;
            for (int64_t i = 0; i < N; ++i) q += (copy[i] - m) * (copy[i] - m);
            const float rs = (float)(1.0 / std::sqrt(q / N + eps)), mf = (float)m;
            for (int64_t i = 0; i < N; ++i) o[i] = (copy[i] - mf) * rs * weight[i] + bias[i];
            continue;
        }
        double s = 0.0, q = 0.0;
        #pragma omp parallel for reduction(+ : s)
        for (int64_t i = 0; i < N; ++i) s += row[i];
        const double m = s / N;
        #pragma omp parallel for reduction(+ : q)
        for (int64_t i = 0; i < N; ++i) q += (row[i] - m) * (row[i] - m);
        const float rs = (float)(1.0 / std::sqrt(q / N + eps)), mf = (float)m;
        #pragma omp parallel for
        for (int64_t i = 0; i < N; ++i) o[i] = (row[i] - mf) * rs * weight[i] + bias[i];
    }
    return 0;
}
