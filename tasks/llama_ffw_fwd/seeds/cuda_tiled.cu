// Llama MLP forward, CUDA seed (tiled): register-blocked float32 GEMMs through the workspace.
//   1. gate_up: h[m, u] = silu(x[m, :] . gate_proj[u, :]) * (x[m, :] . up_proj[u, :]), h [M, U] in the
//      workspace (its base rounded up to 16 bytes where the 1 MiB slack allows); the gate and up products
//      of one (m, u) tile in one block, two accumulators per output, silu(g) * v in the epilogue.
//   2. down:    out[m, d] = h[m, :] . down_proj[d, :]
// forward() picks a path from the sizes at run time:
//  tiled  M > GEMV_M. Both products are C[m, n] = sum_k A[m, k] B[n, k] with A and B read along their
//         contiguous K. A block computes a TBM x BN tile of C (TBM = BM, or BM_SMALL where the BM tiles of
//         the gate_up product do not fill one wave of the SMs, or M < BM in the down product), each thread
//         TM x TN outputs in registers (per K step TM + TN (+ TN) values from shared memory, read as
//         float4, for TM x TN (x 2) FMAs). K tiles of BK: A and B tiles are stored transposed in shared
//         memory ([k][m], [k][n], rows padded by 4 floats), double-buffered, and the next tile is loaded
//         into registers while the current one is multiplied (one __syncthreads per K tile). Tiles are
//         rastered in groups of GROUP_M tile rows (L2 reuse of both operands). The down product is split
//         over K (blockIdx.y) when its tiles are fewer than SPLIT_BLOCKS per SM, each split at least
//         SPLIT_MIN_K long: out zeroed first (cudaMemsetAsync), partial sums added with atomicAdd (the
//         order of the few partial sums of an output varies from call to call).
//  gemv   M <= GEMV_M (a single token): memory-bound. One warp per output column n, GEMV_WARPS per block;
//         each lane walks the weight row (float4 strided by 128 floats, or scalar by 32) and keeps a sum
//         for each of the M rows (gate and up for the first product), warp shuffles, lane 0 writes.
// Global loads are float4 only when K % 4 == 0 and A and every B are 16-byte aligned (checked at run
// time), else scalar with every element bounds-checked; stores are float4 when N % 4 == 0 and C is
// 16-byte aligned. Every tail (M, N, K, split) is zero-filled or guarded. float32 FMA sums only (no TF32),
// silu with expf. Not measured on a GPU yet.
// ptxas (sm_90, defaults): tile_kernel gated 124-127 registers at BM (256 threads: 2 blocks per SM), 163-177
// at BM_SMALL (64 threads), down 80-109; gemv_kernel 56-80; no spills; <= 17 KB static shared memory.
#include <cstdint>
#include <cuda_runtime.h>

constexpr int BM = 128;            // knob: 64, 128
constexpr int BM_SMALL = 32;       // knob: 16, 32, 64
constexpr int BN = 64;             // knob: 32, 64, 128
constexpr int BK = 8;              // knob: 8, 16
constexpr int TM = 8;              // knob: 4, 8
constexpr int TN = 4;              // fixed: 8 with TM = 8 (128 gated accumulators) spills
constexpr int GROUP_M = 8;         // knob: 1, 4, 8, 16
constexpr int SPLIT_BLOCKS = 2;    // knob: 0, 1, 2, 4
constexpr int SPLIT_MIN_K = 256;   // knob: 64, 128, 256, 512, 1024
constexpr int GEMV_M = 8;          // knob: 1, 4, 8, 16
constexpr int GEMV_WARPS = 4;      // knob: 2, 4, 8

constexpr int PAD = 4;             // floats added to each shared-memory row (conflict-free transposed stores)
static_assert(BM % TM == 0 && BM_SMALL % TM == 0 && BN % TN == 0 && BK % 4 == 0 && TM % 4 == 0 && TN % 4 == 0,
              "tile shapes");

__host__ __device__ inline int64_t imin(int64_t a, int64_t b) { return a < b ? a : b; }
__host__ __device__ inline int64_t imax(int64_t a, int64_t b) { return a > b ? a : b; }
inline bool aligned16(const void* p) { return ((uintptr_t)p & 15) == 0; }
__device__ __forceinline__ float silu_mul(float g, float v) { return g / (1.0f + expf(-g)) * v; }

// p[k .. k+3] (p a row start), zero where k + i >= ke or the row is outside (ok false). VEC: ke % 4 == 0,
// k % 4 == 0 and p 16-byte aligned, so the four are all in or all out.
template <bool VEC>
__device__ __forceinline__ float4 load4(const float* __restrict__ p, int64_t k, int64_t ke, bool ok) {
    if (VEC) return ok && k < ke ? __ldg(reinterpret_cast<const float4*>(p + k)) : make_float4(0.f, 0.f, 0.f, 0.f);
    float4 v;
    v.x = ok && k < ke ? __ldg(p + k) : 0.0f;
    v.y = ok && k + 1 < ke ? __ldg(p + k + 1) : 0.0f;
    v.z = ok && k + 2 < ke ? __ldg(p + k + 2) : 0.0f;
    v.w = ok && k + 3 < ke ? __ldg(p + k + 3) : 0.0f;
    return v;
}

// C[m, n] (+)= sum over k in the block's split of A[m, k] * B0[n, k] (GATED: silu(that) * the same with
// B1). A [M, K], B0, B1 [N, K], C [M, N]; grid (tiles, splits), split s covers [s * k_chunk, +k_chunk).
template <int TBM, bool GATED, bool VEC>
__global__ void __launch_bounds__((TBM / TM) * (BN / TN))
tile_kernel(const float* __restrict__ A, const float* __restrict__ B0, const float* __restrict__ B1,
            float* __restrict__ C, int64_t M, int64_t N, int64_t K, int64_t k_chunk, int out_vec, int atomic) {
    constexpr int THREADS = (TBM / TM) * (BN / TN);
    constexpr int NB = GATED ? 2 : 1;
    constexpr int KQ = BK / 4;                          // float4 chunks per row of a K tile
    constexpr int A_CH = TBM * KQ, B_CH = BN * KQ;      // chunks per tile (B: per matrix)
    constexpr int A_LD = (A_CH + THREADS - 1) / THREADS, B_LD = (NB * B_CH + THREADS - 1) / THREADS;
    constexpr int AS = TBM + PAD, BS = BN + PAD;        // shared row pitches in floats (multiples of 4)
    __shared__ float4 As4[2][BK][AS / 4];               // As[buf][k][m]
    __shared__ float4 Bs4[2][NB][BK][BS / 4];           // Bs[buf][matrix][k][n]

    // grouped raster: GROUP_M tile rows side by side, column after column
    const int64_t m_tiles = (M + TBM - 1) / TBM, n_tiles = (N + BN - 1) / BN;
    const int64_t pid = blockIdx.x, per_group = (int64_t)GROUP_M * n_tiles;
    const int64_t first_m = pid / per_group * GROUP_M, gsize = imin(m_tiles - first_m, GROUP_M);
    const int64_t m0 = (first_m + pid % per_group % gsize) * TBM, n0 = pid % per_group / gsize * BN;
    const int64_t kb = (int64_t)blockIdx.y * k_chunk, ke = imin(K, kb + k_chunk);
    const int64_t tiles_k = ke > kb ? (ke - kb + BK - 1) / BK : 0;
    const int tid = threadIdx.x, tx = tid % (BN / TN), ty = tid / (BN / TN);

    float4 ra[A_LD], rb[B_LD];
    auto load = [&](int64_t k0) {
        #pragma unroll
        for (int i = 0; i < A_LD; ++i) {
            const int c = tid + i * THREADS;
            if (A_CH % THREADS == 0 || c < A_CH) {
                const int64_t m = m0 + c / KQ;
                ra[i] = load4<VEC>(A + (m < M ? m : 0) * K, k0 + (c % KQ) * 4, ke, m < M);
            }
        }
        #pragma unroll
        for (int i = 0; i < B_LD; ++i) {
            const int c = tid + i * THREADS;
            if ((NB * B_CH) % THREADS == 0 || c < NB * B_CH) {
                const int cc = c % B_CH;
                const int64_t n = n0 + cc / KQ;
                const float* B = (GATED && c >= B_CH) ? B1 : B0;
                rb[i] = load4<VEC>(B + (n < N ? n : 0) * K, k0 + (cc % KQ) * 4, ke, n < N);
            }
        }
    };
    auto store = [&](int buf) {
        float* as = reinterpret_cast<float*>(&As4[buf][0][0]);
        #pragma unroll
        for (int i = 0; i < A_LD; ++i) {
            const int c = tid + i * THREADS;
            if (A_CH % THREADS == 0 || c < A_CH) {
                const int r = c / KQ, q = (c % KQ) * 4;
                as[(q + 0) * AS + r] = ra[i].x;
                as[(q + 1) * AS + r] = ra[i].y;
                as[(q + 2) * AS + r] = ra[i].z;
                as[(q + 3) * AS + r] = ra[i].w;
            }
        }
        #pragma unroll
        for (int i = 0; i < B_LD; ++i) {
            const int c = tid + i * THREADS;
            if ((NB * B_CH) % THREADS == 0 || c < NB * B_CH) {
                const int mat = c / B_CH, cc = c % B_CH, r = cc / KQ, q = (cc % KQ) * 4;
                float* bs = reinterpret_cast<float*>(&Bs4[buf][mat][0][0]);
                bs[(q + 0) * BS + r] = rb[i].x;
                bs[(q + 1) * BS + r] = rb[i].y;
                bs[(q + 2) * BS + r] = rb[i].z;
                bs[(q + 3) * BS + r] = rb[i].w;
            }
        }
    };

    float acc[NB][TM][TN];
    #pragma unroll
    for (int b = 0; b < NB; ++b)
        #pragma unroll
        for (int i = 0; i < TM; ++i)
            #pragma unroll
            for (int j = 0; j < TN; ++j) acc[b][i][j] = 0.0f;

    load(kb);
    store(0);
    __syncthreads();
    for (int64_t t = 0; t < tiles_k; ++t) {
        const int buf = (int)(t & 1);
        if (t + 1 < tiles_k) load(kb + (t + 1) * BK);
        #pragma unroll
        for (int kk = 0; kk < BK; ++kk) {
            float a[TM], b[NB][TN];
            #pragma unroll
            for (int i = 0; i < TM / 4; ++i) {
                const float4 v = As4[buf][kk][ty * (TM / 4) + i];
                a[4 * i] = v.x; a[4 * i + 1] = v.y; a[4 * i + 2] = v.z; a[4 * i + 3] = v.w;
            }
            #pragma unroll
            for (int mat = 0; mat < NB; ++mat)
                #pragma unroll
                for (int j = 0; j < TN / 4; ++j) {
                    const float4 v = Bs4[buf][mat][kk][tx * (TN / 4) + j];
                    b[mat][4 * j] = v.x; b[mat][4 * j + 1] = v.y; b[mat][4 * j + 2] = v.z; b[mat][4 * j + 3] = v.w;
                }
            #pragma unroll
            for (int mat = 0; mat < NB; ++mat)
                #pragma unroll
                for (int i = 0; i < TM; ++i)
                    #pragma unroll
                    for (int j = 0; j < TN; ++j) acc[mat][i][j] = fmaf(a[i], b[mat][j], acc[mat][i][j]);
        }
        if (t + 1 < tiles_k) store(buf ^ 1);      // the other buffer: last read before the previous barrier
        __syncthreads();
    }

    #pragma unroll
    for (int i = 0; i < TM; ++i) {
        const int64_t m = m0 + ty * TM + i;
        if (m >= M) continue;
        float* crow = C + m * N;
        #pragma unroll
        for (int j = 0; j < TN; j += 4) {
            const int64_t n = n0 + tx * TN + j;
            float v[4];
            #pragma unroll
            for (int e = 0; e < 4; ++e)
                v[e] = GATED ? silu_mul(acc[0][i][j + e], acc[NB - 1][i][j + e]) : acc[0][i][j + e];
            if (!GATED && atomic) {
                #pragma unroll
                for (int e = 0; e < 4; ++e)
                    if (n + e < N) atomicAdd(crow + n + e, v[e]);
            } else if (out_vec && n < N) {
                *reinterpret_cast<float4*>(crow + n) = make_float4(v[0], v[1], v[2], v[3]);
            } else {
                #pragma unroll
                for (int e = 0; e < 4; ++e)
                    if (n + e < N) crow[n + e] = v[e];
            }
        }
    }
}

// One warp per column n of C [M, N], M <= GEMV_M: C[m, n] = A[m, :] . B0[n, :] (GATED: silu of it times
// A[m, :] . B1[n, :]).
template <bool GATED, bool VEC>
__global__ void __launch_bounds__(GEMV_WARPS * 32)
gemv_kernel(const float* __restrict__ A, const float* __restrict__ B0, const float* __restrict__ B1,
            float* __restrict__ C, int64_t M, int64_t N, int64_t K) {
    constexpr int NB = GATED ? 2 : 1;
    const int lane = threadIdx.x % 32;
    const int64_t n = (int64_t)blockIdx.x * GEMV_WARPS + threadIdx.x / 32;
    if (n >= N) return;                                 // the whole warp
    const float* b0 = B0 + n * K;
    const float* b1 = (GATED ? B1 : B0) + n * K;
    float acc[NB][GEMV_M];
    #pragma unroll
    for (int r = 0; r < GEMV_M; ++r) { acc[0][r] = 0.0f; acc[NB - 1][r] = 0.0f; }
    if (VEC) {
        #pragma unroll 2
        for (int64_t k = lane * 4; k < K; k += 128) {
            const float4 w0 = __ldg(reinterpret_cast<const float4*>(b0 + k));
            const float4 w1 = GATED ? __ldg(reinterpret_cast<const float4*>(b1 + k)) : w0;
            #pragma unroll
            for (int r = 0; r < GEMV_M; ++r) {
                if (r < M) {
                    const float4 a = __ldg(reinterpret_cast<const float4*>(A + r * K + k));
                    acc[0][r] = fmaf(a.x, w0.x, fmaf(a.y, w0.y, fmaf(a.z, w0.z, fmaf(a.w, w0.w, acc[0][r]))));
                    if (GATED)
                        acc[NB - 1][r] = fmaf(a.x, w1.x, fmaf(a.y, w1.y, fmaf(a.z, w1.z, fmaf(a.w, w1.w, acc[NB - 1][r]))));
                }
            }
        }
    } else {
        #pragma unroll 4
        for (int64_t k = lane; k < K; k += 32) {
            const float w0 = __ldg(b0 + k), w1 = GATED ? __ldg(b1 + k) : w0;
            #pragma unroll
            for (int r = 0; r < GEMV_M; ++r) {
                if (r < M) {
                    const float a = __ldg(A + r * K + k);
                    acc[0][r] = fmaf(a, w0, acc[0][r]);
                    if (GATED) acc[NB - 1][r] = fmaf(a, w1, acc[NB - 1][r]);
                }
            }
        }
    }
    #pragma unroll
    for (int r = 0; r < GEMV_M; ++r) {
        if (r < M) {
            #pragma unroll
            for (int b = 0; b < NB; ++b)
                #pragma unroll
                for (int off = 16; off > 0; off >>= 1) acc[b][r] += __shfl_xor_sync(0xffffffffu, acc[b][r], off);
            if (lane == 0) C[r * N + n] = GATED ? silu_mul(acc[0][r], acc[NB - 1][r]) : acc[0][r];
        }
    }
}

// SMs of the current GPU (under the CPU emulator: 8, so that the small shapes reach both tile heights,
// split and unsplit down products).
static int64_t sm_count() {
#if defined(__CUDACC__)
    int dev = 0, n = 0;
    if (cudaGetDevice(&dev) == cudaSuccess && cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) == cudaSuccess
        && n > 0)
        return n;
    cudaGetLastError();
    return 132;
#else
    return 8;
#endif
}

template <bool GATED>
static void gemv(const float* A, const float* B0, const float* B1, float* C, int64_t M, int64_t N, int64_t K,
                 cudaStream_t stream) {
    const bool vec = K % 4 == 0 && aligned16(A) && aligned16(B0) && (!GATED || aligned16(B1));
    const dim3 grid((unsigned)((N + GEMV_WARPS - 1) / GEMV_WARPS));
    if (vec) gemv_kernel<GATED, true><<<grid, GEMV_WARPS * 32, 0, stream>>>(A, B0, B1, C, M, N, K);
    else gemv_kernel<GATED, false><<<grid, GEMV_WARPS * 32, 0, stream>>>(A, B0, B1, C, M, N, K);
}

template <int TBM, bool GATED>
static int tiled(const float* A, const float* B0, const float* B1, float* C, int64_t M, int64_t N, int64_t K,
                 int64_t sms, cudaStream_t stream) {
    constexpr int THREADS = (TBM / TM) * (BN / TN);
    const int64_t tiles = ((M + TBM - 1) / TBM) * ((N + BN - 1) / BN);
    int64_t splits = 1;
    if (!GATED && SPLIT_BLOCKS > 0 && tiles < SPLIT_BLOCKS * sms)
        splits = imax(1, imin((SPLIT_BLOCKS * sms + tiles - 1) / tiles, K / SPLIT_MIN_K));
    int64_t k_chunk = (K + splits - 1) / splits;
    k_chunk = imax(BK, (k_chunk + BK - 1) / BK * BK);
    splits = (K + k_chunk - 1) / k_chunk;
    if (splits > 1 && cudaMemsetAsync(C, 0, (size_t)(M * N) * sizeof(float), stream) != cudaSuccess) return 1;
    const bool vec = K % 4 == 0 && aligned16(A) && aligned16(B0) && (!GATED || aligned16(B1));
    const int out_vec = N % 4 == 0 && aligned16(C), atomic = splits > 1;
    const dim3 grid((unsigned)tiles, (unsigned)(splits > 0 ? splits : 1));
    if (vec)
        tile_kernel<TBM, GATED, true><<<grid, THREADS, 0, stream>>>(A, B0, B1, C, M, N, K, k_chunk, out_vec, atomic);
    else
        tile_kernel<TBM, GATED, false><<<grid, THREADS, 0, stream>>>(A, B0, B1, C, M, N, K, k_chunk, out_vec, atomic);
    return 0;
}

extern "C" int forward(const float* x, const float* gate_proj, const float* up_proj, const float* down_proj,
                       float* out, int64_t M, int64_t D, int64_t U, void* workspace, int64_t workspace_bytes,
                       cudaStream_t stream) {
    if (M <= 0 || D <= 0) return 0;
    if (U <= 0) return cudaMemsetAsync(out, 0, (size_t)(M * D) * sizeof(float), stream) == cudaSuccess ? 0 : 1;
    const int64_t need = M * U * (int64_t)sizeof(float);
    if (workspace == nullptr || workspace_bytes < need) return 1;
    const uintptr_t w = (uintptr_t)workspace, wa = (w + 15) & ~(uintptr_t)15;
    float* h = reinterpret_cast<float*>((int64_t)(wa - w) + need <= workspace_bytes ? wa : w);
    if (M <= GEMV_M) {
        gemv<true>(x, gate_proj, up_proj, h, M, U, D, stream);
        gemv<false>(h, down_proj, nullptr, out, M, D, U, stream);
    } else {
        const int64_t sms = sm_count();
        const bool small_gu = ((M + BM - 1) / BM) * ((U + BN - 1) / BN) < sms;
        const int rc1 = small_gu ? tiled<BM_SMALL, true>(x, gate_proj, up_proj, h, M, U, D, sms, stream)
                                 : tiled<BM, true>(x, gate_proj, up_proj, h, M, U, D, sms, stream);
        const int rc2 = M < BM ? tiled<BM_SMALL, false>(h, down_proj, nullptr, out, M, D, U, sms, stream)
                               : tiled<BM, false>(h, down_proj, nullptr, out, M, D, U, sms, stream);
        if (rc1 || rc2) return 1;
    }
    return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
