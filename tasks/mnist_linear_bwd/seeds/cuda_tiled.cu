// Linear backward, CUDA seed (tiled): register-blocked float32 SGEMMs, split over long reductions.
//   grad_x      [B, IN]   = grad_out [B, OUT] @ weight [OUT, IN]                    (reduction over OUT)
//   grad_weight [OUT, IN] = grad_out^T @ x [B, IN], grad_bias [OUT] = column sums    (reduction over B)
// One GEMM kernel, C[i, j] = sum over p of A(i, p) * B(p, j). A block computes a BM x BN tile of C, each
// thread TM x TN of it in registers (rows and columns in groups of 4, spread so that a warp's shared-memory
// reads are contiguous float4s). BK-deep tiles of A and B sit in shared memory as [p][i] and [p][j], double
// buffered: the next tile is loaded into registers while this one is used, one barrier per tile. Each
// operand is read with its row index contiguous (grad_out as A^T, weight, x) or its p contiguous (grad_out
// as A), one loader per layout; loads are float4 when that operand's row length is a multiple of 4 and its
// base is 16-byte aligned (checked at run time), scalar otherwise; every tail is checked.
// Split-K: when the output tiles are too few to fill the GPU, blockIdx.z takes a slice of p and writes float32
// partials to scratch (as many slices as it holds), and reduce_splits adds them in a fixed order. The scratch
// is the 1 MiB workspace, or for grad_x (computed first) grad_weight's buffer when that is larger. grad_bias is
// fused into the grad_weight product: the blocks of the first column tile also sum their A tiles (grad_out^T)
// over p. Products with few rows, or too few big tiles, use a narrow tile (SMALL_M x TILE_N, 4 x 4 per thread)
// that is SMALL_K deep: fewer dependent load rounds on the small, latency-bound shapes. float32 FMAs
// throughout, no tensor cores. Two launches when nothing splits.
#include <cstdint>
#include <cuda_runtime.h>

constexpr int TILE_M = 64;             // knob: 64, 128
constexpr int TILE_N = 128;            // knob: 64, 128
constexpr int TILE_K = 8;              // knob: 8, 16
constexpr int THREAD_TILE = 8;         // knob: 4, 8
constexpr int SMALL_M = 16;            // knob: 16, 32
constexpr int SMALL_K = 32;            // knob: 8, 16, 32
constexpr int64_t SPLIT_BLOCKS = 512;  // knob: 256, 512, 1024
constexpr int64_t MIN_SPLIT = 256;     // knob: 128, 256, 512
constexpr int64_t FEW_BLOCKS = 128;    // knob: 64, 128, 256
constexpr int REDUCE_THREADS = 256;

template <int BM_, int BN_, int BK_, int TM_, int TN_>
struct Tiling {
    static constexpr int BM = BM_, BN = BN_, BK = BK_, TM = TM_, TN = TN_;
    static constexpr int NR = BM / TM, NC = BN / TN, THREADS = NR * NC;
    static_assert(TM % 4 == 0 && TN % 4 == 0 && BM % TM == 0 && BN % TN == 0 && BK % 4 == 0, "tile shape");
    static_assert(THREADS >= BM && THREADS <= 1024, "a thread per row of A for the row sums");
};
using Big = Tiling<TILE_M, TILE_N, TILE_K, THREAD_TILE, THREAD_TILE>;
using Small = Tiling<SMALL_M, TILE_N, SMALL_K, 4, 4>;

// A BK x R operand tile, kept in shared memory as s[p * (R + 4) + r]. Element (r, p) of the operand is
// X[p * ld + r] when RC (r contiguous), else X[r * ld + p]; r < rn, p < pn, zero outside. Each thread moves
// PER footprints of 4 elements (4 consecutive r when RC, else 4 consecutive p), one float4 load when vec.
template <int R, int BK, int THREADS, bool RC>
struct TileLoader {
    static constexpr int F4 = R * BK / 4, PER = (F4 + THREADS - 1) / THREADS, LD = R + 4;
    float4 v[PER];

    __device__ __forceinline__ static int64_t r_of(int f) { return RC ? f % (R / 4) * 4 : f / (BK / 4); }
    __device__ __forceinline__ static int64_t p_of(int f) { return RC ? f / (R / 4) : f % (BK / 4) * 4; }

    __device__ __forceinline__ void load(const float* __restrict__ X, int64_t ld, int64_t r0, int64_t rn, int64_t p0,
                                         int64_t pn, bool vec) {
        #pragma unroll
        for (int u = 0; u < PER; ++u) {
            const int f = threadIdx.x + u * THREADS;
            const int64_t r = r0 + r_of(f), p = p0 + p_of(f);
            float4 e = make_float4(0.f, 0.f, 0.f, 0.f);
            if (f < F4 && vec) {            // rn (RC) or pn a multiple of 4: the footprint is all in or all out
                if (r < rn && p < pn) e = *reinterpret_cast<const float4*>(X + (RC ? p * ld + r : r * ld + p));
            } else if (f < F4) {
                float t[4];
                #pragma unroll
                for (int k = 0; k < 4; ++k) {
                    const int64_t rr = RC ? r + k : r, pp = RC ? p : p + k;
                    t[k] = rr < rn && pp < pn ? X[RC ? pp * ld + rr : rr * ld + pp] : 0.f;
                }
                e = make_float4(t[0], t[1], t[2], t[3]);
            }
            v[u] = e;
        }
    }

    __device__ __forceinline__ void store(float* __restrict__ s) const {
        #pragma unroll
        for (int u = 0; u < PER; ++u) {
            const int f = threadIdx.x + u * THREADS;
            if (f >= F4) continue;
            const int r = (int)r_of(f), p = (int)p_of(f);
            if (RC) {
                *reinterpret_cast<float4*>(s + p * LD + r) = v[u];
            } else {
                s[p * LD + r] = v[u].x;
                s[(p + 1) * LD + r] = v[u].y;
                s[(p + 2) * LD + r] = v[u].z;
                s[(p + 3) * LD + r] = v[u].w;
            }
        }
    }
};

// grid (column tiles, row tiles, splits): block (x, y, z) computes rows [y * BM, + BM) and columns [x * BN, + BN)
// of C over p in [z * chunk, min((z + 1) * chunk, P)) and writes them to C + z * I * J (the output when one split,
// else its partials). MASK (one split only): C[i, j] = acc + bias[j] > 0 ? go[i * J + j] : 0. ROWSUM: the blocks
// with x == 0 also write the sums over their p of A(i, p) to rowsum + z * I.
template <class T, bool A_RC, bool B_RC, bool MASK, bool ROWSUM>
__global__ void __launch_bounds__(T::THREADS) gemm_kernel(const float* __restrict__ A, int64_t lda, bool vec_a,
                                                          const float* __restrict__ B, int64_t ldb, bool vec_b,
                                                          float* __restrict__ C, bool vec_c, int64_t I, int64_t J,
                                                          int64_t P, int64_t chunk, float* __restrict__ rowsum,
                                                          const float* __restrict__ bias, const float* __restrict__ go) {
    constexpr int BM = T::BM, BN = T::BN, BK = T::BK, TM = T::TM, TN = T::TN, NR = T::NR, NC = T::NC;
    using LoadA = TileLoader<BM, BK, T::THREADS, A_RC>;
    using LoadB = TileLoader<BN, BK, T::THREADS, B_RC>;
    __shared__ float4 as[2][BK][BM / 4 + 1];            // [p][i], rows of BM + 4 floats
    __shared__ float4 bs[2][BK][BN / 4 + 1];            // [p][j]
    const int tr = threadIdx.x / NC, tc = threadIdx.x % NC;
    const int64_t i0 = (int64_t)blockIdx.y * BM, j0 = (int64_t)blockIdx.x * BN;
    const int64_t p_begin = (int64_t)blockIdx.z * chunk, p_end = p_begin + chunk < P ? p_begin + chunk : P;
    const bool sum_rows = ROWSUM && blockIdx.x == 0;
    float acc[TM][TN];
    #pragma unroll
    for (int a = 0; a < TM; ++a)
        #pragma unroll
        for (int b = 0; b < TN; ++b) acc[a][b] = 0.f;
    float rs = 0.f;
    LoadA la;
    LoadB lb;
    if (p_begin < p_end) {
        la.load(A, lda, i0, I, p_begin, p_end, vec_a);
        lb.load(B, ldb, j0, J, p_begin, p_end, vec_b);
        la.store(reinterpret_cast<float*>(&as[0][0][0]));
        lb.store(reinterpret_cast<float*>(&bs[0][0][0]));
    }
    __syncthreads();
    int buf = 0;
    for (int64_t p0 = p_begin; p0 < p_end; p0 += BK) {
        const bool more = p0 + BK < p_end;
        if (more) {
            la.load(A, lda, i0, I, p0 + BK, p_end, vec_a);
            lb.load(B, ldb, j0, J, p0 + BK, p_end, vec_b);
        }
        #pragma unroll
        for (int k = 0; k < BK; ++k) {
            float av[TM], bv[TN];
            #pragma unroll
            for (int q = 0; q < TM / 4; ++q) {
                const float4 t = as[buf][k][q * NR + tr];
                av[4 * q] = t.x; av[4 * q + 1] = t.y; av[4 * q + 2] = t.z; av[4 * q + 3] = t.w;
            }
            #pragma unroll
            for (int q = 0; q < TN / 4; ++q) {
                const float4 t = bs[buf][k][q * NC + tc];
                bv[4 * q] = t.x; bv[4 * q + 1] = t.y; bv[4 * q + 2] = t.z; bv[4 * q + 3] = t.w;
            }
            #pragma unroll
            for (int a = 0; a < TM; ++a)
                #pragma unroll
                for (int b = 0; b < TN; ++b) acc[a][b] = fmaf(av[a], bv[b], acc[a][b]);
        }
        if (sum_rows && threadIdx.x < BM) {
            const float* s = reinterpret_cast<const float*>(&as[buf][0][0]);
            #pragma unroll
            for (int k = 0; k < BK; ++k) rs += s[k * LoadA::LD + threadIdx.x];
        }
        if (more) {
            la.store(reinterpret_cast<float*>(&as[buf ^ 1][0][0]));
            lb.store(reinterpret_cast<float*>(&bs[buf ^ 1][0][0]));
        }
        __syncthreads();
        buf ^= 1;
    }
    const bool mask = MASK && gridDim.z == 1;
    float* out = C + (int64_t)blockIdx.z * I * J;
    #pragma unroll
    for (int a = 0; a < TM; ++a) {
        const int64_t i = i0 + (a / 4 * NR + tr) * 4 + a % 4;
        if (i >= I) continue;
        #pragma unroll
        for (int q = 0; q < TN / 4; ++q) {
            const int64_t j = j0 + (q * NC + tc) * 4;
            if (!mask && vec_c && j < J) {
                *reinterpret_cast<float4*>(out + i * J + j) =
                    make_float4(acc[a][4 * q], acc[a][4 * q + 1], acc[a][4 * q + 2], acc[a][4 * q + 3]);
                continue;
            }
            #pragma unroll
            for (int e = 0; e < 4; ++e) {
                if (j + e >= J) continue;
                const float v = acc[a][4 * q + e];
                out[i * J + j + e] = mask ? (v + bias[j + e] > 0.f ? go[i * J + j + e] : 0.f) : v;
            }
        }
    }
    if (sum_rows && threadIdx.x < BM && i0 + threadIdx.x < I) rowsum[(int64_t)blockIdx.z * I + i0 + threadIdx.x] = rs;
}

// out[e] = sum over s < S of part[s * n + e], s in order (MASK: out[e] = that + bias[e % J] > 0 ? go[e] : 0), and
// rowsum[i] = sum over s of rpart[s * rn + i]; one grid-stride pass over the n + rn outputs.
template <bool MASK>
__global__ void __launch_bounds__(REDUCE_THREADS) reduce_splits(const float* __restrict__ part, int64_t S, int64_t n,
                                                                float* __restrict__ out, int64_t J,
                                                                const float* __restrict__ bias,
                                                                const float* __restrict__ go,
                                                                const float* __restrict__ rpart, int64_t rn,
                                                                float* __restrict__ rowsum) {
    for (int64_t e = (int64_t)blockIdx.x * REDUCE_THREADS + threadIdx.x; e < n + rn;
         e += (int64_t)gridDim.x * REDUCE_THREADS) {
        const bool in_c = e < n;
        const float* src = in_c ? part + e : rpart + (e - n);
        const int64_t stride = in_c ? n : rn;
        float s = 0.f;
        for (int64_t k = 0; k < S; ++k) s += src[k * stride];
        if (!in_c) rowsum[e - n] = s;
        else if (MASK) out[e] = s + bias[e % J] > 0.f ? go[e] : 0.f;
        else out[e] = s;
    }
}

static bool aligned16(const void* p) { return ((uintptr_t)p & 15) == 0; }

template <class T>
static int64_t tiles(int64_t I, int64_t J) {
    const int64_t tj = (J + T::BN - 1) / T::BN;
    return (tj > 0 ? tj : 1) * ((I + T::BM - 1) / T::BM);
}

// Slices of p: enough blocks for SPLIT_BLOCKS, each slice at least MIN_SPLIT long, partials within room floats.
static int64_t splits(int64_t n_tiles, int64_t P, int64_t per_split, int64_t room) {
    int64_t s = (SPLIT_BLOCKS + n_tiles - 1) / n_tiles;
    if (s > P / MIN_SPLIT) s = P / MIN_SPLIT;
    if (s > room / per_split) s = room / per_split;
    return s > 1 ? s : 1;
}

template <class T, bool A_RC, bool B_RC, bool MASK, bool ROWSUM>
static int run(const float* A, int64_t lda, const float* B, int64_t ldb, float* C, int64_t I, int64_t J, int64_t P,
               int64_t S, float* rowsum, const float* bias, const float* go, float* ws, cudaStream_t stream) {
    int64_t chunk = (P + S - 1) / S;
    chunk = (chunk + T::BK - 1) / T::BK * T::BK;
    if (chunk > 0) S = (P + chunk - 1) / chunk;
    if (S < 1) S = 1;
    float* dst = S == 1 ? C : ws;
    float* rdst = S == 1 ? rowsum : ws + S * I * J;
    const bool vec_a = lda % 4 == 0 && aligned16(A) && (A_RC ? I : P) % 4 == 0;
    const bool vec_b = ldb % 4 == 0 && aligned16(B) && (B_RC ? J : P) % 4 == 0;
    const bool vec_c = J % 4 == 0 && aligned16(dst);
    const int64_t tj = (J + T::BN - 1) / T::BN, ti = (I + T::BM - 1) / T::BM;
    if (ti > 65535 || S > 65535) return 1;
    const dim3 grid((unsigned)(tj > 0 ? tj : 1), (unsigned)ti, (unsigned)S);
    gemm_kernel<T, A_RC, B_RC, MASK, ROWSUM><<<grid, T::THREADS, 0, stream>>>(
        A, lda, vec_a, B, ldb, vec_b, dst, vec_c, I, J, P, chunk, rdst, bias, go);
    if (S > 1) {
        const int64_t n = I * J, rn = ROWSUM ? I : 0;
        int64_t blocks = (n + rn + REDUCE_THREADS - 1) / REDUCE_THREADS;
        if (blocks > 4096) blocks = 4096;
        reduce_splits<MASK><<<(unsigned)blocks, REDUCE_THREADS, 0, stream>>>(ws, S, n, C, J, bias, go, rdst, rn, rowsum);
    }
    return 0;
}

// Float32 scratch for split partials: the workspace, or an output buffer that is written only later.
struct Scratch {
    float* p;
    int64_t floats;
};

static Scratch larger(Scratch a, Scratch b) { return a.floats >= b.floats ? a : b; }

// C [I, J] = A @ B over P, A(i, p) = A[p * lda + i] when A_RC else A[i * lda + p], B(p, j) = B[p * ldb + j] when
// B_RC else B[j * ldb + p]; ROWSUM: rowsum[i] = sum over p of A(i, p). Partials, if any, in ws.
// The big tile unless C has at most SMALL_M rows or the big tiles (split as ws allows) are too few.
template <bool A_RC, bool B_RC, bool MASK, bool ROWSUM>
static int gemm(const float* A, int64_t lda, const float* B, int64_t ldb, float* C, int64_t I, int64_t J, int64_t P,
                float* rowsum, const float* bias, const float* go, Scratch ws, cudaStream_t stream) {
    if (I <= 0 || (J <= 0 && !ROWSUM)) return 0;
    const int64_t per = I * (J > 0 ? J : 0) + (ROWSUM ? I : 0);
    const int64_t big = tiles<Big>(I, J), big_s = splits(big, P, per, ws.floats);
    if (I > SMALL_M && big * big_s >= FEW_BLOCKS)
        return run<Big, A_RC, B_RC, MASK, ROWSUM>(A, lda, B, ldb, C, I, J, P, big_s, rowsum, bias, go, ws.p, stream);
    const int64_t small_s = splits(tiles<Small>(I, J), P, per, ws.floats);
    return run<Small, A_RC, B_RC, MASK, ROWSUM>(A, lda, B, ldb, C, I, J, P, small_s, rowsum, bias, go, ws.p, stream);
}

extern "C" int backward(const float* grad_out, const float* x, const float* weight, const float* bias,
                        float* grad_x, float* grad_weight, float* grad_bias,
                        int64_t B, int64_t IN, int64_t OUT, void* workspace, int64_t workspace_bytes,
                        cudaStream_t stream) {
    if (B < 0 || IN < 0 || OUT < 0) return 1;
    const Scratch ws{static_cast<float*>(workspace), workspace_bytes / (int64_t)sizeof(float)};
    // grad_x(b, i): A(b, o) = grad_out[b * OUT + o] (p contiguous), B(o, i) = weight[o * IN + i] (i contiguous).
    // First: its partials may sit in grad_weight, written after it, where that is the larger scratch.
    if (gemm<false, true, false, false>(grad_out, OUT, weight, IN, grad_x, B, IN, OUT, nullptr, nullptr, nullptr,
                                        larger(ws, Scratch{grad_weight, OUT * IN}), stream))
        return 1;
    // grad_weight(o, i): A(o, b) = grad_out[b * OUT + o] (o contiguous), B(b, i) = x[b * IN + i]; grad_bias: A's row sums
    if (gemm<true, true, false, true>(grad_out, OUT, x, IN, grad_weight, OUT, IN, B, grad_bias, nullptr, nullptr, ws,
                                      stream))
        return 1;
    return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
