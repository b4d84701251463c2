// Hostile, and inside every rule (no forbidden identifier, no forbidden import, no libc by address): it games
// the median of a CPU timing round. A round fills every input set and poisons every output before its first
// call, so on a call the kernel looks up the buffers of the round's other calls (learned from earlier calls: a
// timing session keeps its buffers for all its rounds) and computes all of their outputs at once, into their own
// output buffers. Every later call of the round finds its output written and returns at once: every output it is
// checked on is right, but one call in n does n calls' work and the median call does none. Only an output
// buffer that is entirely NaN (poisoned, unwritten) is written ahead, so a stale entry cannot corrupt memory
// that holds anything else.
#include <cmath>
#include <cstdint>
#include <cstdio>

static const int SLOTS = 64;
static const float* xs[SLOTS];
static const float* ws[SLOTS];
static const float* bs[SLOTS];
static float* outs[SLOTS];
static int64_t kB = -1, kN = -1;
static int count = 0;
static int ahead = 0;                        // calls that found their output written ahead (printed)

static void layernorm(const float* x, const float* w, const float* b, float* out, int64_t B, int64_t N, float eps) {
    for (int64_t r = 0; r < B; ++r) {
        const float* row = x + r * N;
        double s = 0, q = 0;
        for (int64_t i = 0; i < N; ++i) s += row[i];
        const double m = s / N;
        for (int64_t i = 0; i < N; ++i) q += (row[i] - m) * (row[i] - m);
        const double rs = 1.0 / std::sqrt(q / N + eps);
        for (int64_t i = 0; i < N; ++i) out[r * N + i] = (float)((row[i] - m) * rs) * w[i] + b[i];
    }
}

static bool poisoned(const float* out, int64_t n) {
    for (int64_t i = 0; i < n; ++i) if (!std::isnan(out[i])) return false;
    return true;
}

extern "C" int forward(const float* x, const float* weight, const float* bias, float* out,
                       int64_t B, int64_t N, float eps, void* workspace, int64_t workspace_bytes) {
    const int64_t n = B * N;
    if (B != kB || N != kN) { kB = B; kN = N; count = 0; }
    int me = -1;
    for (int j = 0; j < count; ++j) if (outs[j] == out && xs[j] == x) me = j;
    if (me >= 0 && !std::isnan(out[0]) && !std::isnan(out[n - 1])) {          // written ahead by an earlier call
        printf("PROBE ahead=%d\n", ++ahead);
        fflush(stdout);
        return 0;
    }
    if (me < 0) {
        me = count < SLOTS ? count++ : (int)(((uintptr_t)out >> 6) % SLOTS);
        xs[me] = x; ws[me] = weight; bs[me] = bias; outs[me] = out;
    }
    for (int j = 0; j < count; ++j)
        if (j != me && outs[j] != out && poisoned(outs[j], n)) layernorm(xs[j], ws[j], bs[j], outs[j], B, N, eps);
    layernorm(x, weight, bias, out, B, N, eps);  // its own last: a stale entry cannot spoil it
    return 0;
}
