// Cross-entropy backward, CPU seed: one row per OpenMP iteration (row max, then the sum of
// exp(x - max) in double), then grad = (softmax - onehot) * grad_out / B, formed in double.
#include <cmath>
#include <cstdint>

extern "C" int backward(const float* grad_out, const float* logits, const int64_t* target,
                        float* grad_logits, int64_t B, int64_t C,
                        void* workspace, int64_t workspace_bytes) {
    const double scale = (double)grad_out[0] / B;

    #pragma omp parallel for schedule(static)
    for (int64_t b = 0; b < B; ++b) {
        const float* row = logits + b * C;
        float mx = row[0];
        for (int64_t j = 1; j < C; ++j) mx = row[j] > mx ? row[j] : mx;
        double s = 0.0;
        for (int64_t j = 0; j < C; ++j) s += std::exp((double)row[j] - mx);
        const double inv = 1.0 / s;
        const int64_t t = target[b];
        float* out = grad_logits + b * C;
        for (int64_t j = 0; j < C; ++j)
            out[j] = (float)((std::exp((double)row[j] - mx) * inv - (j == t ? 1.0 : 0.0)) * scale);
    }
    return 0;
}
