// 3x3 convolution forward, CPU seed (direct, NCHW). One OpenMP iteration per (image, group of KB output
// channels): each output plane starts at its bias, then every input channel plane is read once per group
// and, for each of the 9 filter taps, added into every output plane of the group (w * the shifted,
// strided input), over exactly the output rows and columns whose input tap lies inside the image (the
// zero padding is never read). Sums in float32, over channels then taps.
#include <cstdint>

constexpr int64_t KB = 4;  // knob: 1, 4, 16

// first and one-past-last output index o with 0 <= o * S + off < n  (off = tap - padding)
static inline void valid(int64_t off, int64_t n, int64_t S, int64_t count, int64_t& lo, int64_t& hi) {
    lo = off >= 0 ? 0 : (-off + S - 1) / S;
    hi = n - 1 - off < 0 ? 0 : (n - 1 - off) / S + 1;
    if (hi > count) hi = count;
    if (lo > hi) lo = hi;
}

static void add_tap_plane(const float* in, int64_t H, int64_t W, const float* w, int64_t S, int64_t P,
                          float* o, int64_t HO, int64_t WO) {
    for (int64_t r = 0; r < 3; ++r) {
        int64_t i0, i1;
        valid(r - P, H, S, HO, i0, i1);
        for (int64_t s = 0; s < 3; ++s) {
            int64_t j0, j1;
            valid(s - P, W, S, WO, j0, j1);
            const float wv = w[r * 3 + s];
            for (int64_t i = i0; i < i1; ++i) {
                const float* row = in + (i * S + r - P) * W;
                float* orow = o + i * WO;
                for (int64_t j = j0; j < j1; ++j) orow[j] += wv * row[j * S + s - P];
            }
        }
    }
}

extern "C" int forward(const float* x, const float* weight, const float* bias, float* out,
                       int64_t B, int64_t C, int64_t H, int64_t W, int64_t K, int64_t STRIDE, int64_t PAD,
                       void* workspace, int64_t workspace_bytes) {
    const int64_t HO = (H + 2 * PAD - 3) / STRIDE + 1, WO = (W + 2 * PAD - 3) / STRIDE + 1;
    const int64_t groups = (K + KB - 1) / KB;
    #pragma omp parallel for collapse(2) schedule(static)
    for (int64_t b = 0; b < B; ++b) {
        for (int64_t g = 0; g < groups; ++g) {
            const int64_t k0 = g * KB, k1 = k0 + KB < K ? k0 + KB : K;
            for (int64_t k = k0; k < k1; ++k) {
                float* o = out + (b * K + k) * HO * WO;
                for (int64_t p = 0; p < HO * WO; ++p) o[p] = bias[k];
            }
            for (int64_t c = 0; c < C; ++c) {
                const float* plane = x + (b * C + c) * H * W;
                for (int64_t k = k0; k < k1; ++k)
                    add_tap_plane(plane, H, W, weight + (k * C + c) * 9, STRIDE, PAD, out + (b * K + k) * HO * WO, HO, WO);
            }
        }
    }
    return 0;
}
