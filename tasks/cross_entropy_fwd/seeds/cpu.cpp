// Cross-entropy forward, CPU seed: one row per OpenMP iteration (row max, then the sum of exp(x - max)
// in double); each row's loss goes to the workspace, then one thread sums them in order (deterministic).
#include <cmath>
#include <cstdint>

extern "C" int forward(const float* logits, const int64_t* target, float* loss,
                       int64_t B, int64_t C, void* workspace, int64_t workspace_bytes) {
    if (workspace_bytes < B * (int64_t)sizeof(double)) return 1;
    double* row_loss = static_cast<double*>(workspace);

    #pragma omp parallel for schedule(static)
    for (int64_t b = 0; b < B; ++b) {
        const float* row = logits + b * C;
        float mx = row[0];
        for (int64_t j = 1; j < C; ++j) mx = row[j] > mx ? row[j] : mx;
        double s = 0.0;
        for (int64_t j = 0; j < C; ++j) s += std::exp((double)row[j] - mx);
        row_loss[b] = std::log(s) + mx - row[target[b]];
    }
    double total = 0.0;
    for (int64_t b = 0; b < B; ++b) total += row_loss[b];
    loss[0] = (float)(total / B);
    return 0;
}
