// Cross-entropy forward, CPU seed (vectorised exp). std::exp is one library call per element; here exp is
// an inline polynomial that GCC vectorises inside `omp simd` loops, fed from a stack buffer of FBLOCK
// shifted logits d = max(x - row max, -87) (a clamp or std::floor in the same loop as the polynomial
// makes GCC fall back to scalar code, hence the separate loops).
//  - Short rows (2 * C <= FBLOCK, e.g. C = 10): FBLOCK / C rows at a time: their maxes and d in scalar
//    loops, one SIMD exp over all their elements, then each row's sum (float) and loss in double.
//  - Long rows: the max (SIMD), then the sum of exp over blocks of FBLOCK elements (float SIMD sums,
//    double across blocks).
// loss_b = log(sum) + max - x[target] in double. Rows are handed out ROWS at a time; each block of rows
// adds its losses (double, in order) into one workspace slot, then one thread sums the slots in order
// (deterministic). Small problems (B * C < PAR_MIN) run on the calling thread: waking the OpenMP team
// costs more than they do.
#include <cmath>
#include <cstdint>

constexpr int64_t ROWS = 256;        // knob: 64, 256, 1024
constexpr int64_t FBLOCK = 512;      // knob: 128, 512, 2048
constexpr int64_t PAR_MIN = 16384;   // knob: 0, 4096, 16384, 65536

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

// exp(x) for -87 <= x <= 0: x = n ln2 + r (Cody-Waite), exp(r) by a degree-6 polynomial (relative error
// < 1e-7), 2^n from the exponent bits. No branch, floor or memcpy inside: loops that call it vectorise.
static inline float exp_core(float x) {
    const int32_t ni = (int32_t)(x * 1.44269504088896341f - 0.5f);         // x / ln2 rounded to nearest
    const float n = (float)ni;                                              // (truncation of a value <= -0.5)
    const float r = (x - n * 0.693359375f) + n * 2.12194440e-4f;            // ln2 = 0.693359375 - 2.12194440e-4
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    return p * __builtin_bit_cast(float, (ni + 127) << 23);                  // 2^n, n in [-126, 0]
}

// max(v, -87): below -87 exp gives exp(-87) ~ 1.6e-38 instead of less, which no sum of terms >= 1 sees
static inline float clamp87(float v) { return v < -87.0f ? -87.0f : v; }

static double long_row(const float* __restrict__ row, int64_t C, int64_t t) {
    float mx = row[0];
    #pragma omp simd reduction(max : mx)
    for (int64_t j = 0; j < C; ++j) mx = row[j] > mx ? row[j] : mx;
    float d[FBLOCK];
    double s = 0.0;
    for (int64_t j0 = 0; j0 < C; j0 += FBLOCK) {
        const int64_t n = min64(FBLOCK, C - j0);
        #pragma omp simd
        for (int64_t j = 0; j < n; ++j) d[j] = clamp87(row[j0 + j] - mx);
        float f = 0.f;
        #pragma omp simd reduction(+ : f)
        for (int64_t j = 0; j < n; ++j) f += exp_core(d[j]);
        s += f;
    }
    return std::log(s) + (double)mx - (double)row[t];
}

// the summed losses of rows [b0, b1), each of C <= FBLOCK / 2 columns
static double short_rows(const float* __restrict__ logits, const int64_t* __restrict__ target,
                         int64_t b0, int64_t b1, int64_t C) {
    float d[FBLOCK], mx[FBLOCK];
    const int64_t k = FBLOCK / C;
    double total = 0.0;
    for (int64_t r0 = b0; r0 < b1; r0 += k) {
        const int64_t rows = min64(k, b1 - r0), n = rows * C;
        const float* x = logits + r0 * C;
        for (int64_t r = 0; r < rows; ++r) {
            float m = x[r * C];
            for (int64_t j = 1; j < C; ++j) m = x[r * C + j] > m ? x[r * C + j] : m;
            mx[r] = m;
            for (int64_t j = 0; j < C; ++j) d[r * C + j] = clamp87(x[r * C + j] - m);
        }
        #pragma omp simd
        for (int64_t j = 0; j < n; ++j) d[j] = exp_core(d[j]);
        for (int64_t r = 0; r < rows; ++r) {
            float s = 0.f;
            for (int64_t j = 0; j < C; ++j) s += d[r * C + j];
            total += std::log((double)s) + (double)mx[r] - (double)x[r * C + target[r0 + r]];
        }
    }
    return total;
}

extern "C" int forward(const float* logits, const int64_t* target, float* loss,
                       int64_t B, int64_t C, void* workspace, int64_t workspace_bytes) {
    if (B <= 0 || C <= 0) return 1;
    const int64_t blocks = (B + ROWS - 1) / ROWS;
    if (workspace_bytes < blocks * (int64_t)sizeof(double)) return 1;
    double* block_loss = static_cast<double*>(workspace);

    #pragma omp parallel for schedule(static) if (B * C >= PAR_MIN)
    for (int64_t k = 0; k < blocks; ++k) {
        const int64_t b0 = k * ROWS, b1 = min64(b0 + ROWS, B);
        double s = 0.0;
        if (2 * C <= FBLOCK) s = short_rows(logits, target, b0, b1, C);
        else for (int64_t b = b0; b < b1; ++b) s += long_row(logits + b * C, C, target[b]);
        block_loss[k] = s;
    }
    double total = 0.0;
    for (int64_t k = 0; k < blocks; ++k) total += block_loss[k];
    loss[0] = (float)(total / B);
    return 0;
}
