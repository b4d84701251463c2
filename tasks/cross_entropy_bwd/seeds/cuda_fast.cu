// Cross-entropy backward, CUDA seed (fast): one launch; a row's logits are read from DRAM once wherever
// the row fits in the registers of the threads that own it, with 128-bit loads and stores wherever the
// row allows.
//   grad_logits[b, j] = (exp(x[b, j] - m_b) / s_b - (j == target[b])) * grad_out[0] / B
// Per row, each thread loads its first CACHE float4s of the row into registers, folds everything it owns
// into an online softmax pair (running max m, sum s of exp(x - m), rescaled by exp(m_old - m_new) when
// the max grows: once per float4), the row's threads merge their pairs (warp shuffles; for a block per
// row, one pair per warp through shared memory, merged by every warp in the same order: the same bits
// everywhere), and then write the gradient from the registers. Only what lies beyond CACHE float4s per
// thread (C > G * 4 * CACHE: C = 100001 at 1024 threads) is read a second time, just after the first
// read (mostly from L2).
//
// Row layout: a row start is 16-byte aligned only when C % 4 == 0 and the base is. Each row is cut at run
// time into a scalar head (0..3 elements, up to the first 16-byte boundary of the logits row), a float4
// body and a scalar tail (0..3), so every C gets vector loads. The gradient row has the same cut only if
// grad_logits and logits share their address mod 16 (checked at run time); otherwise the body's values
// are stored one float at a time. (A logits base that is not 4-byte aligned is read all scalar.)
//
// Dispatch by shape, first match:
//  tiny   C <= TINY_C and B * C <= TINY_ELEMS (B = 64 .. 1024 with C = 10): launch-bound, one thread per
//         row, TINY_THREADS rows per block, every load issued up front (one DRAM round trip), no shuffle,
//         barrier or online rescaling: see tiny_rows.
//  smem   (GPU builds only; off by default: SMEM_MIN_C) rows for a block of 1024 (C > 8192) that fit in shared
//         memory (SMEM_MIN_C <= C,
//         4 C bytes <= SMEM_MAX_BYTES, 4-byte aligned logits: C = 32000, 50257): the row is read from DRAM
//         once into dynamic shared memory (50257 floats do not fit in 1024 threads' registers), one exp
//         per element (the block path spends two plus the online rescales), the next row's first float4s
//         prefetched into registers during this row's compute and stores, one persistent block per SM:
//         see smem_rows. Falls back to the paths below when a runtime call fails. Measured on the H200 (judge
//         clock, a knob search of this seed, experiments/results/search_cross_entropy_bwd.h200.txt): slower
//         than the block path (B=4096,C=50257: 1.09 ms vs 0.83 ms; B=8192,C=32000: 1.16 vs 1.13 ms), so off.
// Otherwise G threads per row, the power of two (MIN_LANES <= G <= MAX_ROW_THREADS) that leaves each thread
// about VPT float4s.
//  group  G <= 32 (C = 100; C = 10 beyond the tiny path): G lanes of a warp per row, ROW_THREADS / G rows
//         per block (fewer threads when one block holds all rows); the grid strides over the rows.
//  block  G > 32 (C = 1000 to 100001, the LLM vocabularies included while the smem path is off): one
//         block of G threads per row (1024 for the LLM vocabularies), the grid striding over rows.
// p - 1 at the target is formed in float: its error is ~ulp(1) * grad_out / B (atol is 2e-6).
// exp is the accurate expf (no __expf). The workspace is not used.
#include <cstdint>
#include <cuda_runtime.h>

constexpr int ROW_THREADS = 256;        // knob: 128, 256, 512
constexpr int VPT = 4;                  // knob: 2, 4, 8
constexpr int MIN_LANES = 2;            // knob: 1, 2, 4
constexpr int MAX_ROW_THREADS = 1024;   // knob: 256, 512, 1024
constexpr int CACHE = 8;                // knob: 4, 8
constexpr int UNROLL = 2;               // knob: 1, 2, 4
constexpr int TINY_THREADS = 64;        // knob: 32, 64, 128
constexpr int TINY_ELEMS = 65536;       // knob: 0, 16384, 65536, 262144
constexpr int SMEM_MIN_C = 2147483647;  // knob: 8193, 16384, 2147483647
constexpr int SMEM_UNROLL = 4;          // knob: 2, 4
constexpr int SMEM_PREFETCH = 4;        // knob: 0, 2, 4
constexpr int TINY_C = 16;              // the tiny path's widest row (registers per thread)
constexpr int SMEM_MAX_BYTES = 226 * 1024;  // under an sm_90 block's 227 KB less the static reduction arrays
constexpr int64_t MAX_GRID = 65536;     // blocks at most; the grid strides over the rest

constexpr unsigned FULL = 0xffffffffu;

// Online softmax statistics: fold one element / one float4 into (m, s).
__device__ __forceinline__ void add1(float& m, float& s, float x) {
    if (x > m) {
        s = s * expf(m - x) + 1.0f;
        m = x;
    } else {
        s += expf(x - m);
    }
}

__device__ __forceinline__ void add4(float& m, float& s, float4 v) {
    const float c = fmaxf(fmaxf(v.x, v.y), fmaxf(v.z, v.w));
    if (c > m) {
        s *= expf(m - c);
        m = c;
    }
    s += (expf(v.x - m) + expf(v.y - m)) + (expf(v.z - m) + expf(v.w - m));
}

// (m, s) <- the statistics of both parts. An empty part is (-inf, 0).
__device__ __forceinline__ void merge(float& m, float& s, float m2, float s2) {
    const float M = fmaxf(m, m2);
    if (M == -INFINITY) return;
    s = s * expf(m - M) + s2 * expf(m2 - M);
    m = M;
}

// Elements before the row's first 16-byte boundary (all of them when vector loads are off).
__device__ __forceinline__ int row_head(const float* row, int C, bool vec) {
    if (!vec) return C;
    const int h = (int)((4u - (unsigned)(((uintptr_t)row >> 2) & 3u)) & 3u);
    return h < C ? h : C;
}

// One row's geometry and the gradient's constants.
struct Row {
    const float* x;
    float* out;
    int C, head, nv, t;         // column indices (C < 2^31); t: the target column
    float M, inv, scale;         // the row max, 1 / sum, grad_out / B
};

// Pass 1 for this thread (lane of G): the first CN float4s it owns into registers, then (m, s) over
// everything it owns.
template <int G, int CN>
__device__ __forceinline__ void load_stats(const Row& r, int lane, float4 (&cache)[CN], float& m, float& s) {
    const float4* vx = reinterpret_cast<const float4*>(r.x + r.head);
#pragma unroll
    for (int i = 0; i < CN; ++i) {
        const int v = lane + i * G;
        if (v < r.nv) cache[i] = __ldg(vx + v);
    }
    for (int j = lane; j < r.head; j += G) add1(m, s, __ldg(r.x + j));
    for (int j = r.head + 4 * r.nv + lane; j < r.C; j += G) add1(m, s, __ldg(r.x + j));
#pragma unroll
    for (int i = 0; i < CN; ++i)
        if (lane + i * G < r.nv) add4(m, s, cache[i]);
    int v = lane + CN * G;                                                 // beyond the registers
    for (; v + (UNROLL - 1) * G < r.nv; v += G * UNROLL) {
        float4 q[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) q[u] = __ldg(vx + v + u * G);
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) add4(m, s, q[u]);
    }
    for (; v < r.nv; v += G) add4(m, s, __ldg(vx + v));
}

__device__ __forceinline__ float grad1(const Row& r, float x, int j) {
    const float p = expf(x - r.M) * r.inv;
    return (j == r.t ? p - 1.0f : p) * r.scale;
}

__device__ __forceinline__ void store4(const Row& r, int v, float4 x, bool ovec) {
    const int j = r.head + 4 * v;
    const float4 g = make_float4(grad1(r, x.x, j), grad1(r, x.y, j + 1), grad1(r, x.z, j + 2), grad1(r, x.w, j + 3));
    if (ovec) {
        *reinterpret_cast<float4*>(r.out + j) = g;
    } else {
        r.out[j] = g.x;
        r.out[j + 1] = g.y;
        r.out[j + 2] = g.z;
        r.out[j + 3] = g.w;
    }
}

// Pass 2 for this thread: the gradient of everything it owns, the cached float4s from registers.
template <int G, int CN>
__device__ __forceinline__ void write_grad(const Row& r, int lane, const float4 (&cache)[CN], bool ovec) {
    const float4* vx = reinterpret_cast<const float4*>(r.x + r.head);
    for (int j = lane; j < r.head; j += G) r.out[j] = grad1(r, __ldg(r.x + j), j);
    for (int j = r.head + 4 * r.nv + lane; j < r.C; j += G) r.out[j] = grad1(r, __ldg(r.x + j), j);
#pragma unroll
    for (int i = 0; i < CN; ++i) {
        const int v = lane + i * G;
        if (v < r.nv) store4(r, v, cache[i], ovec);
    }
    int v = lane + CN * G;
    for (; v + (UNROLL - 1) * G < r.nv; v += G * UNROLL) {
        float4 q[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) q[u] = __ldg(vx + v + u * G);
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) store4(r, v + u * G, q[u], ovec);
    }
    for (; v < r.nv; v += G) store4(r, v, __ldg(vx + v), ovec);
}

__device__ __forceinline__ float grad_scale(const float* grad_out, int64_t B) {
    return (float)((double)__ldg(grad_out) / (double)B);
}

// G lanes per row (G <= 32), blockDim.x / G rows per block at a time, the grid striding over rows.
template <int G>
__global__ void __launch_bounds__(1024, 1) group_rows(const float* __restrict__ grad_out, const float* __restrict__ logits,
                                                      const int64_t* __restrict__ target, float* __restrict__ grad,
                                                      int64_t B, int64_t C, bool vec, bool ovec) {
    const int64_t rpb = blockDim.x / G;
    const int lane = threadIdx.x % G;
    const float scale = grad_scale(grad_out, B);
    for (int64_t first = (int64_t)blockIdx.x * rpb; first < B; first += (int64_t)gridDim.x * rpb) {  // block-uniform
        const int64_t b = first + threadIdx.x / G;
        const bool live = b < B;
        Row r;
        r.x = logits + (live ? b : 0) * C;
        r.out = grad + (live ? b : 0) * C;
        r.C = (int)C;
        r.head = row_head(r.x, r.C, vec);
        r.nv = (r.C - r.head) >> 2;
        r.t = live ? (int)__ldg(target + b) : 0;
        r.scale = scale;
        float4 cache[VPT];                                         // a lane owns at most VPT float4s here
        float m = -INFINITY, s = 0.0f;
        if (live) load_stats<G, VPT>(r, lane, cache, m, s);
        for (int o = G / 2; o > 0; o >>= 1) {                      // every lane of the warp shuffles
            const float m2 = __shfl_xor_sync(FULL, m, o, G);
            const float s2 = __shfl_xor_sync(FULL, s, o, G);
            merge(m, s, m2, s2);
        }
        if (live) {
            r.M = m;
            r.inv = 1.0f / s;
            write_grad<G, VPT>(r, lane, cache, ovec);
        }
    }
}

// One row per block of T threads (T a multiple of 64), the grid striding over rows.
// A thread owns at most VPT float4s unless T is the cap (MAX_ROW_THREADS): then CACHE stay in registers.
template <int T>
__global__ void __launch_bounds__(T, (1024 / T > 0 ? 1024 / T : 1)) block_rows(const float* __restrict__ grad_out, const float* __restrict__ logits,
                                                   const int64_t* __restrict__ target, float* __restrict__ grad,
                                                   int64_t B, int64_t C, bool vec, bool ovec) {
    constexpr int NW = T / 32;
    constexpr int CN = T < MAX_ROW_THREADS ? VPT : CACHE;
    __shared__ float shm[2][NW], shs[2][NW];     // by row parity: one barrier per row
    const int l = threadIdx.x & 31, w = threadIdx.x >> 5;
    const float scale = grad_scale(grad_out, B);
    int parity = 0;
    for (int64_t b = blockIdx.x; b < B; b += gridDim.x) {
        Row r;
        r.x = logits + b * C;
        r.out = grad + b * C;
        r.C = (int)C;
        r.head = row_head(r.x, r.C, vec);
        r.nv = (r.C - r.head) >> 2;
        r.t = (int)__ldg(target + b);
        r.scale = scale;
        float4 cache[CN];
        float m = -INFINITY, s = 0.0f;
        load_stats<T, CN>(r, threadIdx.x, cache, m, s);
        for (int o = 16; o > 0; o >>= 1) {
            const float m2 = __shfl_xor_sync(FULL, m, o);
            const float s2 = __shfl_xor_sync(FULL, s, o);
            merge(m, s, m2, s2);
        }
        if (l == 0) {
            shm[parity][w] = m;
            shs[parity][w] = s;
        }
        __syncthreads();
        const float mk = l < NW ? shm[parity][l] : -INFINITY;    // lane k takes warp k's pair: one exp per lane
        float M = mk;
        for (int o = 16; o > 0; o >>= 1) M = fmaxf(M, __shfl_xor_sync(FULL, M, o));
        float e = l < NW ? shs[parity][l] * expf(mk - M) : 0.0f;
        for (int o = 16; o > 0; o >>= 1) e += __shfl_xor_sync(FULL, e, o);
        parity ^= 1;
        r.M = M;
        r.inv = 1.0f / e;
        write_grad<T, CN>(r, threadIdx.x, cache, ovec);
    }
}

// Tiny problems (C <= TINY_C, B * C <= TINY_ELEMS): launch-bound, so one thread per row with every load
// (grad_out, target, the whole row) issued up front, one DRAM round trip, no shuffles or barriers: the row's
// max and sum in registers (two passes over registers, not online), then the gradient.
__global__ void __launch_bounds__(TINY_THREADS) tiny_rows(const float* __restrict__ grad_out, const float* __restrict__ logits,
                                                       const int64_t* __restrict__ target, float* __restrict__ grad,
                                                       int64_t B, int64_t C) {
    const float go = __ldg(grad_out);
    const int64_t b = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (b >= B) return;
    const int t = (int)__ldg(target + b);
    const float* x = logits + b * C;
    float* out = grad + b * C;
    const int c = (int)C;
    float v[TINY_C];
#pragma unroll
    for (int j = 0; j < TINY_C; ++j) {                             // branch-free: every load issued at once
        v[j] = __ldg(x + (j < c ? j : c - 1));
        if (j >= c) v[j] = -INFINITY;
    }
    float M = v[0];
#pragma unroll
    for (int j = 1; j < TINY_C; ++j) M = fmaxf(M, v[j]);
    float s = 0.0f;
#pragma unroll
    for (int j = 0; j < TINY_C; ++j) {
        v[j] = j < c ? expf(v[j] - M) : 0.0f;
        s += v[j];
    }
    const float inv = 1.0f / s;
    const float scale = (float)((double)go / (double)B);
#pragma unroll
    for (int j = 0; j < TINY_C; ++j) {
        const float p = v[j] * inv;
        if (j < c) out[j] = (j == t ? p - 1.0f : p) * scale;
    }
}

#if defined(__CUDACC__)
// Long rows that do not fit in registers (C >= SMEM_MIN_C, C * 4 bytes <= SMEM_MAX_BYTES): one block of T
// threads per row, a persistent grid (one block per SM), the row's float4 body held in dynamic shared memory
// so logits are read from DRAM once. Each thread touches only its own float4 slots (v = tid + k * T), so the
// slots need no barrier between rows. Per row:
//   1a  body float4s -> shared memory (SMEM_UNROLL loads in flight per thread), the thread's max m;
//       the first SMEM_PREFETCH float4s per thread were loaded into registers during the previous row;
//   --  the next row's first SMEM_PREFETCH float4s per thread -> registers (in flight during the rest);
//   1b  e = exp(x - m) in place, the thread's sum s (one exp per element in all);
//   --  the block merges (m, s) -> (M, S) as block_rows does;
//   2   grad = e * exp(m - M) / S * scale; the target column from its logit: (exp(x_t - M) / S - 1) * scale.
// Head and tail scalars (0..3 each) sit in registers of threads 0..3.
__device__ __forceinline__ float max4(float m, float4 v) { return fmaxf(fmaxf(m, fmaxf(v.x, v.y)), fmaxf(v.z, v.w)); }

template <int T>
__global__ void __launch_bounds__(T, 1) smem_rows(const float* __restrict__ grad_out, const float* __restrict__ logits,
                                                  const int64_t* __restrict__ target, float* __restrict__ grad,
                                                  int64_t B, int64_t C, bool vec, bool ovec) {
    extern __shared__ float4 srow[];
    constexpr int NW = T / 32;
    constexpr int PF = SMEM_PREFETCH > 0 ? SMEM_PREFETCH : 1;
    __shared__ float shm[2][NW], shs[2][NW];
    const int tid = threadIdx.x, l = tid & 31, w = tid >> 5;
    const int c = (int)C;
    const float scale = grad_scale(grad_out, B);
    float4 pf[PF];
    int64_t b = blockIdx.x;
    if (SMEM_PREFETCH > 0 && b < B) {
        const float* x = logits + b * C;
        const int head = row_head(x, c, vec), nv = (c - head) >> 2;
        const float4* vx = reinterpret_cast<const float4*>(x + head);
#pragma unroll
        for (int i = 0; i < PF; ++i)
            if (tid + i * T < nv) pf[i] = __ldg(vx + tid + i * T);
    }
    int parity = 0;
    for (; b < B; b += gridDim.x) {
        const float* x = logits + b * C;
        float* out = grad + b * C;
        const int head = row_head(x, c, vec), nv = (c - head) >> 2, tail0 = head + 4 * nv;
        const float4* vx = reinterpret_cast<const float4*>(x + head);
        const int t = (int)__ldg(target + b);
        const float xt = __ldg(x + ((unsigned)t < (unsigned)c ? t : 0));   // used in pass 2 only
        const float hx = tid < head ? __ldg(x + tid) : -INFINITY;     // T >= 4: one head / tail scalar a thread
        const float tx = tail0 + tid < c ? __ldg(x + tail0 + tid) : -INFINITY;
        float m = fmaxf(hx, tx);
        int v = tid;
        if (SMEM_PREFETCH > 0) {
#pragma unroll
            for (int i = 0; i < PF; ++i)
                if (tid + i * T < nv) {
                    srow[tid + i * T] = pf[i];
                    m = max4(m, pf[i]);
                }
            v = tid + PF * T;
        }
        for (; v < nv; v += SMEM_UNROLL * T) {                          // pass 1a
            float4 q[SMEM_UNROLL];
#pragma unroll
            for (int u = 0; u < SMEM_UNROLL; ++u)
                if (v + u * T < nv) q[u] = __ldg(vx + v + u * T);
#pragma unroll
            for (int u = 0; u < SMEM_UNROLL; ++u)
                if (v + u * T < nv) {
                    srow[v + u * T] = q[u];
                    m = max4(m, q[u]);
                }
        }
        const int64_t nb = b + gridDim.x;                                // the next row's first float4s
        if (SMEM_PREFETCH > 0 && nb < B) {
            const float* x2 = logits + nb * C;
            const int head2 = row_head(x2, c, vec), nv2 = (c - head2) >> 2;
            const float4* vx2 = reinterpret_cast<const float4*>(x2 + head2);
#pragma unroll
            for (int i = 0; i < PF; ++i)
                if (tid + i * T < nv2) pf[i] = __ldg(vx2 + tid + i * T);
        }
        const float mm = m == -INFINITY ? 0.0f : m;                      // a thread that owns nothing: s = 0
        const float he = expf(hx - mm), te = expf(tx - mm);
        float s = he + te;
        for (v = tid; v < nv; v += T) {                                   // pass 1b
            const float4 q = srow[v];
            const float4 e = make_float4(expf(q.x - mm), expf(q.y - mm), expf(q.z - mm), expf(q.w - mm));
            s += (e.x + e.y) + (e.z + e.w);
            srow[v] = e;
        }
        for (int o = 16; o > 0; o >>= 1) {
            const float m2 = __shfl_xor_sync(FULL, m, o);
            const float s2 = __shfl_xor_sync(FULL, s, o);
            merge(m, s, m2, s2);
        }
        if (l == 0) {
            shm[parity][w] = m;
            shs[parity][w] = s;
        }
        __syncthreads();
        const float mk = l < NW ? shm[parity][l] : -INFINITY;
        float M = mk;
        for (int o = 16; o > 0; o >>= 1) M = fmaxf(M, __shfl_xor_sync(FULL, M, o));
        float e = l < NW ? shs[parity][l] * expf(mk - M) : 0.0f;
        for (int o = 16; o > 0; o >>= 1) e += __shfl_xor_sync(FULL, e, o);
        parity ^= 1;
        const float inv = 1.0f / e;
        const float cs = expf(mm - M) * inv * scale;                       // e -> gradient (not the target)
        const float gt = (expf(xt - M) * inv - 1.0f) * scale;              // the target column
        if (tid < head) out[tid] = tid == t ? gt : he * cs;
        if (tail0 + tid < c) out[tail0 + tid] = tail0 + tid == t ? gt : te * cs;
        for (v = tid; v < nv; v += T) {                                   // pass 2
            const float4 q = srow[v];
            const int j = head + 4 * v;
            float4 g = make_float4(q.x * cs, q.y * cs, q.z * cs, q.w * cs);
            const unsigned d = (unsigned)(t - j);
            if (d < 4u) {
                if (d == 0) g.x = gt;
                else if (d == 1) g.y = gt;
                else if (d == 2) g.z = gt;
                else g.w = gt;
            }
            if (ovec) {
                *reinterpret_cast<float4*>(out + j) = g;
            } else {
                out[j] = g.x;
                out[j + 1] = g.y;
                out[j + 2] = g.z;
                out[j + 3] = g.w;
            }
        }
    }
}

// Launches smem_rows<1024> when the row's body fits in shared memory; false (nothing launched) otherwise.
static bool launch_smem(const float* grad_out, const float* logits, const int64_t* target, float* grad_logits,
                        int64_t B, int64_t C, bool vec, bool ovec, cudaStream_t stream) {
    if (!vec || C < SMEM_MIN_C || C * 4 > SMEM_MAX_BYTES) return false;   // !vec: no float4 body
    const int bytes = (int)(C / 4 * 16);                                  // nv <= C / 4 float4s
    int dev = 0, sms = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess
        || sms <= 0 || cudaFuncSetAttribute(smem_rows<1024>, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes) != cudaSuccess) {
        cudaGetLastError();
        return false;
    }
    const unsigned n = (unsigned)(B < sms ? B : sms);
    smem_rows<1024><<<n, 1024, bytes, stream>>>(grad_out, logits, target, grad_logits, B, C, vec, ovec);
    return true;
}
#endif

// Threads per row: a power of two, MIN_LANES..MAX_ROW_THREADS, about VPT float4s per thread.
static int pick_group(int64_t C) {
    const int64_t want = ((C + 3) / 4 + VPT - 1) / VPT;
    int g = MIN_LANES;
    while (g < want && g < MAX_ROW_THREADS) g *= 2;
    return g;
}

extern "C" int backward(const float* grad_out, const float* logits, const int64_t* target,
                        float* grad_logits, int64_t B, int64_t C,
                        void* workspace, int64_t workspace_bytes, cudaStream_t stream) {
    if (B <= 0 || C <= 0) return 0;
    if (C > 2147483647 - 8) return 1;                             // column indices are int
    const bool vec = ((uintptr_t)logits & 3u) == 0;
    const bool ovec = vec && (((uintptr_t)logits ^ (uintptr_t)grad_logits) & 15u) == 0;
    if (C <= TINY_C && B * C <= TINY_ELEMS) {
        const unsigned n = (unsigned)((B + TINY_THREADS - 1) / TINY_THREADS);
        tiny_rows<<<n, TINY_THREADS, 0, stream>>>(grad_out, logits, target, grad_logits, B, C);
        return cudaGetLastError() == cudaSuccess ? 0 : 1;
    }
    const int g = pick_group(C);
#if defined(__CUDACC__)
    if (g == 1024 && MAX_ROW_THREADS == 1024 && launch_smem(grad_out, logits, target, grad_logits, B, C, vec, ovec, stream))
        return cudaGetLastError() == cudaSuccess ? 0 : 1;
#endif
    if (g <= 32) {
        const int64_t rpb = ROW_THREADS / g;
        int64_t blocks = (B + rpb - 1) / rpb;
        int64_t threads = ROW_THREADS;
        if (blocks == 1) threads = (B * g + 31) / 32 * 32;        // one block: no idle warps
        if (blocks > MAX_GRID) blocks = MAX_GRID;
        const unsigned n = (unsigned)blocks;
        const int t = (int)threads;
        switch (g) {
            case 1: group_rows<1><<<n, t, 0, stream>>>(grad_out, logits, target, grad_logits, B, C, vec, ovec); break;
            case 2: group_rows<2><<<n, t, 0, stream>>>(grad_out, logits, target, grad_logits, B, C, vec, ovec); break;
            case 4: group_rows<4><<<n, t, 0, stream>>>(grad_out, logits, target, grad_logits, B, C, vec, ovec); break;
            case 8: group_rows<8><<<n, t, 0, stream>>>(grad_out, logits, target, grad_logits, B, C, vec, ovec); break;
            case 16: group_rows<16><<<n, t, 0, stream>>>(grad_out, logits, target, grad_logits, B, C, vec, ovec); break;
            default: group_rows<32><<<n, t, 0, stream>>>(grad_out, logits, target, grad_logits, B, C, vec, ovec); break;
        }
    } else {
        const unsigned n = (unsigned)(B < MAX_GRID ? B : MAX_GRID);
        switch (g) {
            case 64: block_rows<64><<<n, 64, 0, stream>>>(grad_out, logits, target, grad_logits, B, C, vec, ovec); break;
            case 128: block_rows<128><<<n, 128, 0, stream>>>(grad_out, logits, target, grad_logits, B, C, vec, ovec); break;
            case 256: block_rows<256><<<n, 256, 0, stream>>>(grad_out, logits, target, grad_logits, B, C, vec, ovec); break;
            case 512: block_rows<512><<<n, 512, 0, stream>>>(grad_out, logits, target, grad_logits, B, C, vec, ovec); break;
            default: block_rows<1024><<<n, 1024, 0, stream>>>(grad_out, logits, target, grad_logits, B, C, vec, ovec); break;
        }
    }
    return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
