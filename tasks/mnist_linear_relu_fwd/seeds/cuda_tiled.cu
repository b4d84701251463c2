// Linear + ReLU forward, CUDA seed (tiled): a register-blocked float32 SGEMM with the bias and the ReLU
// fused, out = relu(x @ weight^T + bias); x [B, IN] is the GEMM's [M, K], weight [OUT, IN] its [N, K].
// forward() picks a path from (M, K, N) and the alignment at run time:
//
//  gemv   M <= GEMV_MAX_M: a group of G threads (a warp or more) per output column n reads weight[n, :]
//         once and dots it with every row of x (R <= 8 accumulators per thread), then sums over the
//         group (shuffles; shared memory across warps). G grows while the grid is short of SMs.
//  tile   otherwise: a block computes a BM x BN tile of out, each thread TM x TN outputs in registers.
//         Per slice of KB columns of K, the x and weight tiles are read (a thread: 4 consecutive k of a
//         few rows), transposed into k-major shared memory (rows padded by 4 floats: float4 fragment
//         reads), double buffered, the next slice held in registers while this one is used: one
//         __syncthreads a slice. Tiles (BM x BN x KB, TM x TN, threads): BIG_M x BIG_N x BIG_BK,
//         BIG_M/16 x BIG_N/16, 256 (float4 loads only: the scalar variant would spill); 128x64xBK, 8x4,
//         256; 64x64xBK, 4x4, 256; 32x32xBK, 4x4, 64; 128x16xBK, 4x4, 128 (small N).
//         A cost model (waves x slices x max(one load round trip, the slice's FMA time at the tile's
//         guessed efficiency and residency)) picks the tile and a split of K; a split writes float32
//         partials to the workspace and reduce_kernel adds them, in split order, to the bias and applies
//         the ReLU (unsplit, the tile kernel does). No atomic split (ATOMIC_SPLIT): the ReLU needs the sum.
// Loads are float4 when K % 4 == 0 and x, weight are 16-byte aligned (checked per call), else scalar;
// stores are float4 when N % 4 == 0 and the destination is aligned. Float32 FMA only (no TF32, no tensor
// cores). Every workspace word read was written earlier in the same call. Under the CPU emulator the
// dispatch assumes a few SMs, so the small set reaches the large tiles and the splits. Not yet timed on
// a GPU.
// ptxas (sm_90, defaults): tile_kernel 79-128 registers (128x128: 128, the cap of 2 blocks per SM), gemv
// 32-60, no spills; <= 25.6 KB static shared memory.
#include <cstdint>
#include <cuda_runtime.h>

constexpr int BK = 16;            // knob: 8, 16
constexpr int BIG_BK = 8;         // knob: 8, 16
constexpr int BIG_M = 128;        // knob: 64, 128
constexpr int BIG_N = 128;        // knob: 64, 128
constexpr int GEMV_MAX_M = 8;     // knob: 0, 4, 8
constexpr int SPLIT_MIN_K = 64;   // knob: 32, 64, 128, 256
constexpr int MAX_SPLIT = 32;     // knob: 1, 4, 16, 32
constexpr bool RELU = true;

static_assert(BK % 4 == 0 && BIG_BK % 4 == 0, "a K slice is whole float4s");

constexpr bool ATOMIC_SPLIT = !RELU;  // a split too big for the workspace adds into out (not under a ReLU)
constexpr int DIRECT = 0, PARTS = 1, ATOMIC = 2;   // where the tile kernel puts its sums

__device__ __forceinline__ float epilogue(float v) { return RELU ? fmaxf(v, 0.0f) : v; }
__host__ __device__ __forceinline__ int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

// ------------------------------------------------------------------ tile path
// A ROWS x KB tile of a row-major operand (rows of length K), staged k-major in shared memory as
// s[k * (ROWS + 4) + r]. Thread t owns 4 columns c..c+3 (one float4 when VEC, else 4 scalar loads) of
// the rows r_t + q * STEP, q < PER; it reads zero past `rows` and past the end of its slice of K.
template <int ROWS, int NT, int KB, bool VEC>
struct Loader {
    static constexpr int W = 4;                           // columns per thread and row
    static constexpr int CPR = KB / W;                    // loads per row of the tile
    static constexpr int STEP = NT / CPR;                 // rows between a thread's loads
    static constexpr int PER = (ROWS + STEP - 1) / STEP;
    static constexpr int REGS = PER * W;
    static constexpr int LD = ROWS + 4;
    static_assert(NT % CPR == 0, "the threads cover whole rows of the tile");

    const float* p;                                       // row r0 + r_t, column kb + c
    int64_t step;                                         // STEP rows
    int c, r, live;                                       // column, first row, rows left from r (<= 0: none)

    __device__ __forceinline__ Loader(const float* src, int64_t r0, int64_t rows, int64_t K, int64_t kb) {
        c = ((int)threadIdx.x % CPR) * W;
        r = (int)threadIdx.x / CPR;
        const int64_t left = rows - r0 - r;
        live = left > ROWS - r ? ROWS - r : (int)left;
        p = src + (left > 0 ? (r0 + r) * K + kb + c : 0);
        step = (int64_t)STEP * K;
    }
    // the slice starting k0 past kb; `kleft`: columns of the K range left from that start
    __device__ __forceinline__ void load(int64_t k0, int64_t kleft, float* reg) const {
        #pragma unroll
        for (int q = 0; q < PER; ++q) {
            const bool row = q * STEP < live;
            if constexpr (VEC) {                          // K % 4 == 0: the float4 is all in or all out
                float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
                if (row && c < kleft) v = *reinterpret_cast<const float4*>(p + q * step + k0);
                reg[4 * q] = v.x; reg[4 * q + 1] = v.y; reg[4 * q + 2] = v.z; reg[4 * q + 3] = v.w;
            } else {
                #pragma unroll
                for (int e = 0; e < 4; ++e) reg[4 * q + e] = row && c + e < kleft ? p[q * step + k0 + e] : 0.f;
            }
        }
    }
    __device__ __forceinline__ void store(float* s, const float* reg) const {
        #pragma unroll
        for (int q = 0; q < PER; ++q) {
            if (ROWS % STEP != 0 && r + q * STEP >= ROWS) continue;
            #pragma unroll
            for (int e = 0; e < W; ++e) s[(c + e) * LD + r + q * STEP] = reg[q * W + e];
        }
    }
};

// T floats of shared memory, T / 4 float4s STRIDE floats apart from p (16-byte aligned).
template <int T, int STRIDE>
__device__ __forceinline__ void frag(const float* p, float* r) {
    #pragma unroll
    for (int i = 0; i < T; i += 4) {
        const float4 v = *reinterpret_cast<const float4*>(p + (i / 4) * STRIDE);
        r[i] = v.x; r[i + 1] = v.y; r[i + 2] = v.z; r[i + 3] = v.w;
    }
}

// grid (M tiles, N tiles, K splits). mode DIRECT: out = epilogue(acc + bias); PARTS: part[z][m][n] = acc;
// ATOMIC: out += acc (atomicAdd; out holds the bias already).
// Thread (ty, tx) owns rows ty * 4 + i4 * SM + (0..3), i4 < TM / 4, SM = BM / (TM / 4), and likewise
// columns: a quarter warp's float4 fragment reads are 128 contiguous bytes (no bank conflicts).
// vst: the destination takes float4 stores (N % 4 == 0, 16-byte aligned). MINB: blocks per SM to fit.
template <int BM, int BN, int TM, int TN, int KB, int MINB, bool VEC>
__global__ void __launch_bounds__((BM / TM) * (BN / TN), MINB)
tile_kernel(const float* __restrict__ x, const float* __restrict__ weight, const float* __restrict__ bias,
            float* __restrict__ out, float* __restrict__ part, int64_t M, int64_t K, int64_t N, int64_t kc,
            int mode, bool vst) {
    constexpr int NX = BN / TN, NT = (BM / TM) * NX, SM = BM * 4 / TM, SN = BN * 4 / TN;
    static_assert(TM % 4 == 0 && TN % 4 == 0 && BM % TM == 0 && BN % TN == 0, "float4 fragments");
    using LA = Loader<BM, NT, KB, VEC>;
    using LB = Loader<BN, NT, KB, VEC>;
    __shared__ float4 as4[2][KB * LA::LD / 4];     // float4: 16-byte aligned rows of (BM + 4) floats
    __shared__ float4 bs4[2][KB * LB::LD / 4];
    const int tx = (int)threadIdx.x % NX, ty = (int)threadIdx.x / NX;
    const int64_t m0 = (int64_t)blockIdx.x * BM, n0 = (int64_t)blockIdx.y * BN;
    const int64_t kb = (int64_t)blockIdx.z * kc, ke = min64(K, kb + kc);
    const int nt = ke > kb ? (int)((ke - kb + KB - 1) / KB) : 0;
    float acc[TM][TN];
    #pragma unroll
    for (int i = 0; i < TM; ++i)
        #pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = 0.f;
    float ra[LA::REGS], rb[LB::REGS];
    const LA la(x, m0, M, K, kb);
    const LB lb(weight, n0, N, K, kb);
    if (nt > 0) {
        la.load(0, ke - kb, ra);
        lb.load(0, ke - kb, rb);
        la.store(reinterpret_cast<float*>(as4[0]), ra);
        lb.store(reinterpret_cast<float*>(bs4[0]), rb);
    }
    __syncthreads();
    for (int t = 0; t < nt; ++t) {
        const bool more = t + 1 < nt;
        if (more) {
            const int64_t k0 = (int64_t)(t + 1) * KB;
            la.load(k0, ke - kb - k0, ra);
            lb.load(k0, ke - kb - k0, rb);
        }
        const float* as = reinterpret_cast<const float*>(as4[t & 1]) + ty * 4;
        const float* bs = reinterpret_cast<const float*>(bs4[t & 1]) + tx * 4;
        #pragma unroll
        for (int kk = 0; kk < KB; ++kk) {
            float a[TM], b[TN];
            frag<TM, SM>(as + kk * LA::LD, a);
            frag<TN, SN>(bs + kk * LB::LD, b);
            #pragma unroll
            for (int i = 0; i < TM; ++i)
                #pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
        if (more) {
            la.store(reinterpret_cast<float*>(as4[(t + 1) & 1]), ra);
            lb.store(reinterpret_cast<float*>(bs4[(t + 1) & 1]), rb);
        }
        __syncthreads();
    }
    float* dst = mode == PARTS ? part + (int64_t)blockIdx.z * M * N : out;
    #pragma unroll
    for (int j4 = 0; j4 < TN; j4 += 4) {
        const int64_t n = n0 + tx * 4 + (j4 / 4) * SN; // N % 4 == 0 when vst: the float4 is all in or all out
        float bv[4];
        #pragma unroll
        for (int e = 0; e < 4; ++e) bv[e] = (mode == DIRECT && n + e < N) ? bias[n + e] : 0.f;
        #pragma unroll
        for (int i = 0; i < TM; ++i) {
            const int64_t m = m0 + ty * 4 + (i / 4) * SM + i % 4;
            if (m >= M) continue;
            float v[4];
            #pragma unroll
            for (int e = 0; e < 4; ++e) v[e] = mode == DIRECT ? epilogue(acc[i][j4 + e] + bv[e]) : acc[i][j4 + e];
            float* o = dst + m * N + n;
            if (mode == ATOMIC) {
                #pragma unroll
                for (int e = 0; e < 4; ++e)
                    if (n + e < N) atomicAdd(o + e, v[e]);
            } else if (vst) {                           // (m * N + n) % 4 == 0
                if (n < N) reinterpret_cast<float4*>(dst)[(m * N + n) >> 2] = make_float4(v[0], v[1], v[2], v[3]);
            } else {
                #pragma unroll
                for (int e = 0; e < 4; ++e)
                    if (n + e < N) o[e] = v[e];
            }
        }
    }
}

// out[m, n] = bias[n]: the start of an ATOMIC split.
__global__ void __launch_bounds__(256) bias_kernel(const float* __restrict__ bias, float* __restrict__ out, int64_t MN,
                                                   int64_t N) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < MN; i += stride) out[i] = bias[i % N];
}

// out[i] = epilogue(bias[i % N] + sum over z < S of part[z * M * N + i]), in split order.
__global__ void __launch_bounds__(256) reduce_kernel(const float* __restrict__ part, const float* __restrict__ bias,
                                                     float* __restrict__ out, int64_t MN, int64_t N, int S) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < MN; i += stride) {
        float s = part[i];
        for (int z = 1; z < S; ++z) s += part[(int64_t)z * MN + i];
        out[i] = epilogue(s + bias[i % N]);
    }
}

// ------------------------------------------------------------------ gemv path
// 256 threads, 256 / G columns per block; rows m < M <= R of x in registers.
template <int R, bool VEC>
__global__ void __launch_bounds__(256) gemv_kernel(const float* __restrict__ x, const float* __restrict__ weight,
                                                   const float* __restrict__ bias, float* __restrict__ out,
                                                   int64_t M, int64_t K, int64_t N, int G) {
    __shared__ float red[8][R];
    const int tid = (int)threadIdx.x, g = tid / G, l = tid % G;
    const int64_t n = (int64_t)blockIdx.x * (256 / G) + g;
    float acc[R];
    #pragma unroll
    for (int r = 0; r < R; ++r) acc[r] = 0.f;
    if (n < N) {
        if constexpr (VEC) {
            const float4* w4 = reinterpret_cast<const float4*>(weight + n * K);
            const float4* x4 = reinterpret_cast<const float4*>(x);
            const int64_t K4 = K / 4;
            #pragma unroll 2
            for (int64_t k = l; k < K4; k += G) {
                const float4 wv = w4[k];
                #pragma unroll
                for (int r = 0; r < R; ++r) {
                    if (r < M) {
                        const float4 xv = x4[r * K4 + k];
                        acc[r] = fmaf(xv.x, wv.x, acc[r]);
                        acc[r] = fmaf(xv.y, wv.y, acc[r]);
                        acc[r] = fmaf(xv.z, wv.z, acc[r]);
                        acc[r] = fmaf(xv.w, wv.w, acc[r]);
                    }
                }
            }
        } else {
            const float* wr = weight + n * K;
            #pragma unroll 4
            for (int64_t k = l; k < K; k += G) {
                const float wv = wr[k];
                #pragma unroll
                for (int r = 0; r < R; ++r)
                    if (r < M) acc[r] = fmaf(x[r * K + k], wv, acc[r]);
            }
        }
    }
    #pragma unroll
    for (int r = 0; r < R; ++r)
        for (int o = 16; o > 0; o >>= 1) acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], o);
    if (G > 32) {                                     // G is the same for the whole block
        const int warp = tid >> 5;
        if ((tid & 31) == 0) {
            #pragma unroll
            for (int r = 0; r < R; ++r) red[warp][r] = acc[r];
        }
        __syncthreads();
        if (l == 0) {
            #pragma unroll
            for (int r = 0; r < R; ++r) {
                float s = 0.f;
                for (int w = g * (G >> 5); w < (g + 1) * (G >> 5); ++w) s += red[w][r];
                acc[r] = s;
            }
        }
    }
    if (l == 0 && n < N) {
        const float b = bias[n];
        #pragma unroll
        for (int r = 0; r < R; ++r)
            if (r < M) out[r * N + n] = epilogue(acc[r] + b);
    }
}

// ------------------------------------------------------------------ host side
template <int R>
static void gemv_launch(bool vec, const float* x, const float* w, const float* b, float* out, int64_t M, int64_t K,
                        int64_t N, int G, cudaStream_t stream) {
    const unsigned blocks = (unsigned)((N + 256 / G - 1) / (256 / G));
    if (vec) gemv_kernel<R, true><<<blocks, 256, 0, stream>>>(x, w, b, out, M, K, N, G);
    else gemv_kernel<R, false><<<blocks, 256, 0, stream>>>(x, w, b, out, M, K, N, G);
}

// SCALAR: whether the scalar-load variant is built (the largest tile's would spill: not taken without float4).
template <int BM, int BN, int TM, int TN, int KB, int MINB, bool SCALAR = true>
static void tile_launch(bool vec, const float* x, const float* w, const float* b, float* out, float* part, int64_t M,
                        int64_t K, int64_t N, int64_t kc, int S, int mode, bool vst, cudaStream_t stream) {
    constexpr int NT = (BM / TM) * (BN / TN);
    const dim3 grid((unsigned)((M + BM - 1) / BM), (unsigned)((N + BN - 1) / BN), (unsigned)S);
    if (vec)
        tile_kernel<BM, BN, TM, TN, KB, MINB, true><<<grid, NT, 0, stream>>>(x, w, b, out, part, M, K, N, kc, mode,
                                                                              vst);
    else if constexpr (SCALAR)
        tile_kernel<BM, BN, TM, TN, KB, MINB, false><<<grid, NT, 0, stream>>>(x, w, b, out, part, M, K, N, kc, mode,
                                                                               vst);
}

struct TileCfg { int bm, bn, kb, per_sm; double eff; };  // resident blocks per SM, FMA efficiency (guesses)
constexpr TileCfg CFGS[] = {{BIG_M, BIG_N, BIG_BK, 2, 0.80}, {128, 64, BK, 2, 0.75}, {64, 64, BK, 3, 0.65},
                            {32, 32, BK, 8, 0.45}, {128, 16, BK, 5, 0.50}};
constexpr double LAT_NS = 300.0;      // a K slice can take no less than one global load round trip
constexpr double FMA_NS = 250.0;      // float32 FMAs per ns per SM (H200: 128 lanes x ~1.98 GHz)
constexpr double REDUCE_NS = 1200.0;  // the reduce (or bias) launch and its first round trip
constexpr double BYTES_NS = 3000.0;   // DRAM bytes per ns

extern "C" int forward(const float* x, const float* weight, const float* bias, float* out,
                       int64_t B, int64_t IN, int64_t OUT, void* workspace, int64_t workspace_bytes,
                       cudaStream_t stream) {
    const int64_t M = B, K = IN, N = OUT;     // the GEMM's names: out [M, N] = x [M, K] . weight [N, K]^T
    if (M <= 0 || N <= 0) return 0;
    if (K < 0) return 1;
    const bool vec = K % 4 == 0 && ((uintptr_t)x & 15) == 0 && ((uintptr_t)weight & 15) == 0;
    int sms = 4;                      // the CPU emulator: few SMs, so that the small set reaches the big tiles
#if defined(__CUDACC__)
    int dev = 0, count = 0;
    if (cudaGetDevice(&dev) == cudaSuccess &&
        cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, dev) == cudaSuccess && count > 0)
        sms = count;
    cudaGetLastError();
#endif
    if (M <= GEMV_MAX_M && K > 0) {
        int G = 32;                   // threads per column: more while the grid is short of SMs
        while (G < 256 && (N * G + 255) / 256 < 4 * (int64_t)sms && K >= 8 * (int64_t)G) G *= 2;
        if (M <= 1) gemv_launch<1>(vec, x, weight, bias, out, M, K, N, G, stream);
        else if (M <= 2) gemv_launch<2>(vec, x, weight, bias, out, M, K, N, G, stream);
        else if (M <= 4) gemv_launch<4>(vec, x, weight, bias, out, M, K, N, G, stream);
        else gemv_launch<8>(vec, x, weight, bias, out, M, K, N, G, stream);
        return cudaGetLastError() == cudaSuccess ? 0 : 1;
    }
    // the tile and the split of K with the least modelled time
    const int64_t ws_floats = ((uintptr_t)workspace & 3) == 0 ? workspace_bytes / 4 : 0;
    int best = -1, best_s = 1, best_mode = DIRECT;
    int64_t best_kc = 0;
    double best_t = 0.0;
    for (int c = 0; c < (int)(sizeof(CFGS) / sizeof(CFGS[0])); ++c) {
        const TileCfg f = CFGS[c];
        const int64_t tiles = ((M + f.bm - 1) / f.bm) * ((N + f.bn - 1) / f.bn);
        if ((N + f.bn - 1) / f.bn > 65535 || (M + f.bm - 1) / f.bm > 0x7fffffff || (c == 0 && !vec)) continue;
        int prev = 0;
        for (int s = 1; s <= MAX_SPLIT; s *= 2) {
            const int64_t kc = K > 0 ? ((K + s - 1) / s + f.kb - 1) / f.kb * f.kb : f.kb;
            const int S = K > 0 ? (int)((K + kc - 1) / kc) : 1;
            const bool fits = S * M * N <= ws_floats;
            if (S > 1 && (kc < SPLIT_MIN_K || (!fits && !ATOMIC_SPLIT))) break;
            if (S == prev) continue;
            prev = S;
            const int64_t blocks = tiles * S, slots = (int64_t)sms * f.per_sm;
            const double waves = (double)((blocks + slots - 1) / slots);
            double resident = (double)(blocks < slots ? blocks : slots) / sms;
            if (resident < 1.0) resident = 1.0;
            double slice = (double)f.bm * f.bn * f.kb * resident / (FMA_NS * f.eff);
            if (slice < LAT_NS) slice = LAT_NS;
            double t = waves * (double)((kc + f.kb - 1) / f.kb) * slice;
            if (S > 1) t += REDUCE_NS + (double)S * M * N * 8.0 / BYTES_NS;   // partials or atomics, and back
            if (best < 0 || t < best_t) {
                best = c; best_s = S; best_kc = kc; best_t = t;
                best_mode = S == 1 ? DIRECT : fits ? PARTS : ATOMIC;
            }
        }
    }
    if (best < 0) return 1;
    const int64_t kc = best_kc, MN = M * N;
    const int S = best_s, mode = best_mode;
    float* part = mode == PARTS ? static_cast<float*>(workspace) : nullptr;
    const bool vst = N % 4 == 0 && ((uintptr_t)(mode == PARTS ? part : out) & 15) == 0;
    int64_t eblocks = (MN + 255) / 256;           // the bias and reduce kernels' grid
    if (eblocks > 8 * (int64_t)sms) eblocks = 8 * (int64_t)sms;
    if (mode == ATOMIC) {
        bias_kernel<<<(unsigned)eblocks, 256, 0, stream>>>(bias, out, MN, N);
        if (cudaGetLastError() != cudaSuccess) return 1;
    }
    const float* w = weight;
    const float* b = bias;
    switch (best) {
        case 0: tile_launch<BIG_M, BIG_N, BIG_M / 16, BIG_N / 16, BIG_BK, 2, false>(vec, x, w, b, out, part, M, K, N,
                                                                                    kc, S, mode, vst, stream); break;
        case 1: tile_launch<128, 64, 8, 4, BK, 2>(vec, x, w, b, out, part, M, K, N, kc, S, mode, vst, stream); break;
        case 2: tile_launch<64, 64, 4, 4, BK, 3>(vec, x, w, b, out, part, M, K, N, kc, S, mode, vst, stream); break;
        case 3: tile_launch<32, 32, 4, 4, BK, 8>(vec, x, w, b, out, part, M, K, N, kc, S, mode, vst, stream); break;
        default: tile_launch<128, 16, 4, 4, BK, 5>(vec, x, w, b, out, part, M, K, N, kc, S, mode, vst, stream); break;
    }
    if (cudaGetLastError() != cudaSuccess) return 1;
    if (mode == PARTS) {
        reduce_kernel<<<(unsigned)eblocks, 256, 0, stream>>>(part, bias, out, MN, N, S);
        if (cudaGetLastError() != cudaSuccess) return 1;
    }
    return 0;
}
