// EXPERIMENT, not yet a seed: its first H200 judgement crashed (B=255,C=100001, a cluster block exiting while another
// still read its shared memory; the relaxed cluster arrive is now a release arrive). Unverified since: judge it with
// VARIANTS="cross_entropy_bwd:experiments/kernels/cross_entropy_bwd_coop.cu" bash experiments/gpu_variants.sh.
// Under the CPU emulator (tests/task/test_seeds.py's, which runs the cluster path as groups of one block) it is
// correct on its 18 configurations, warps forward and reversed (stop 33).
// Cross-entropy backward, CUDA seed (coop): every logit is read from DRAM once and held on chip (registers, then
// shared memory, across the blocks of a thread-block cluster for the longest rows) until its gradient is
// written; one launch per call, whatever the shape.
//   grad_logits[b, j] = (exp(x[b, j] - M_b) / S_b - (j == target[b])) * grad_out[0] / B
// Why cuda_fast.cu reaches only 46% / 42% of the memory floor on B=8192,C=32000 / B=4096,C=50257 (H200): its
// long rows take one block of 1024 threads per SM (64 registers each: the whole register file), so an SM holds
// one row, and each row goes load -> wait -> compute -> barrier -> store with nothing of the SM's own to overlap
// the wait; its online softmax spends two exps per element plus a rescale and a divergent branch per float4;
// the part of a C=50257 row beyond 32 floats a thread is read twice, UNROLL float4s per DRAM round trip. Here:
//  - long rows: two blocks per SM (512 threads x <= 64 registers), each holding a whole row (or the 1/K of it
//    its cluster rank owns): while one block waits on DRAM the other computes, and each block has all of its
//    row's loads in flight from its start (64 KB into registers with 128-bit loads, the rest into shared
//    memory with cp.async: no register staging, one round trip);
//  - one exp per element: a thread's own max m (no exp), e = exp(x - m) in place with its sum s, one merge of the
//    (m, s) pairs across the block (and cluster), then grad = e * exp(m - M) / S * grad_out / B. The target
//    column is formed from its logit, (exp(x_t - M) / S - 1) * scale, as the other seeds do (the thread that
//    holds x_t keeps it before e overwrites it);
//  - short rows (C = 10, 100): one launch with no shared memory, barrier or second kernel, G lanes of a warp per
//    row and a few values per lane (for C = 10, 8 lanes x 2 values, 8 rows to a block of 64, as torch.compile's
//    kernel does), so a launch-bound call is one DRAM round trip and a few shuffles.
//
// Paths, chosen at run time from C (first match):
//  short  C <= SHORT_MAX_C: G = 2^lg lanes per row (the power of two <= 32 with G * SHORT_VPL >= C, halved while
//         B * G threads exceed one wave of 2048 per SM and E stays <= 8), E = the power of two >= C / G values per
//         lane in registers (scalar loads issued together; lane l has columns l + k G: coalesced), max and sum
//         by xor shuffles within the G lanes, exp(x - M) with the row max. SHORT_T threads per block, halved
//         (down to 64) while the grid has fewer blocks than the GPU has SMs (spreads the tiny batches).
//  onchip C > SHORT_MAX_C, logits 4-byte aligned. A row is a scalar head (0..3 elements up to its first 16-byte
//         boundary), a float4 body and a scalar tail (0..3; head and tail on threads 0..2 and 4..6 of rank 0).
//         The body is split into K = 2^lgp parts, one block each (a cluster of K blocks per row); a part's block
//         of G threads keeps float4s g + i G (i < R) in registers and the rest in dynamic shared memory (slot
//         v - R G, cp.async.cg; each thread only touches its own slots: no barrier between copy and use).
//         Medium rows (C / 4 <= R * G with G <= BIG_T; C = 1000, 2047, 4100): registers only, no cluster:
//         G = C / (4 VPT) rounded up to a warp, R the smallest of 1, 2, 4, 8 that holds the row, then a larger
//         R (fewer threads) where that makes the grid a single wave (cudaOccupancy...; B=511,C=4100 at R=4 x 288
//         would be 3 blocks per SM at 59 registers, two waves). Long rows: G = BIG_T, R = BIG_R, K the smallest
//         power of two (<= CLUSTER_MAX) whose part's remainder fits SMEM_PART_KB (110 KB: two blocks per SM).
//         Pass 1 the thread's max (and x_t); pass 2 exp in place and the sum; one __syncthreads (warp pairs);
//         for K > 1 the K block pairs through distributed shared memory (cluster.sync, then a release arrive
//         whose wait comes just before exit); pass 3 scale and store (float4 when grad_logits shares the logits'
//         16-byte phase, else scalar). Under the CPU emulator (no clusters, no dynamic shared memory) the K parts
//         are K groups of one block (G shrunk to fit 1024 threads) and the shared memory a static array.
//  stream fallback (logits not 4-byte aligned, a row longer than 8 parts hold (~356K floats at the defaults), a
//         cluster or shared-memory configuration the GPU refuses): a block of 1024 per row, an online softmax
//         over the row, then the row read again (mostly from L2) for the gradient.
//
// Bench shapes at the defaults on an H200 (132 SMs): path, grid x threads, and the device time expected on the
// judge's clock (floor = the task's bytes at the measured ~4.1 TB/s; torch.compile and cuda_fast measured):
//   shape            path                                   expected     compile  fast     floor
//   B=64,C=10        short G=8 E=2, 8 x 64                   ~1.5-2 us    1.6      2.0
//   B=128,C=10       short G=8 E=2, 16 x 64                  ~1.5-2 us    1.6      2.2
//   B=1024,C=10      short G=8 E=2, 128 x 64                 ~2 us        4.1      2.6
//   B=65536,C=10     short G=4 E=4, 1024 x 256 (one wave)    ~3 us        6.0      5.2      1.4
//   B=4096,C=100     short G=32 E=4, 512 x 256               ~3 us        8.6      4.2      0.8
//   B=1000,C=1000    onchip R=4, 1000 x 64                   ~3 us        3.8      5.9      1.9
//   B=333,C=2047     onchip R=4, 333 x 128                   ~3 us        8.8      5.8      1.3
//   B=511,C=4100     onchip R=8, 511 x 160 (one wave)        ~5-6 us      11.5     12.8     4.1
//   B=8192,C=32000   onchip R=8 K=1, 8192 x 512, 61 KB smem  ~560-600 us  768      1105     507
//   B=4096,C=50257   onchip R=8 K=2, 8192 x 512, 34 KB smem  ~440-480 us  821      958      398
//   B=255,C=100001   onchip R=8 K=4, 1020 x 512, 34 KB smem  ~55-65 us    193      130      49
// Long rows: two blocks per SM, each with its whole row (part) of loads in flight from its start (128 KB at
// C=32000, 100 KB at C=50257 / 100001, against a DRAM bandwidth-delay product of ~30 KB per SM), ~12
// instructions an element (one exp) against ~60 that the SM can issue per element at the floor's rate: DRAM
// stays busy, and the loss is the last partial wave (8192 blocks over 264 slots: ~3%) and the read/write mix.
// Not measured: no GPU was used to write this seed; the knobs are there for the search to correct it.
// ptxas (sm_90a, CUDA 13.0, defaults; every knob value checked: no spills): onchip_rows<8,512> 63 registers,
// <8,0> 64, <4,0> 59, <2,0> 49, <1,0> 40; short_rows<8> 32, <4> 27, <2> 30, <1> 30; stream_rows 32.
// onchip_rows with R = 8 must stay <= 64 registers (two blocks of 512 per SM).
// exp is the accurate expf (no __expf); 1 / S an IEEE division. The workspace is not used.
#include <cstdint>
#include <cuda_runtime.h>
#if defined(__CUDACC__)
#include <cooperative_groups.h>
#define CE_GPU 1
#else
#define CE_GPU 0
#endif

constexpr int SHORT_MAX_C = 128;        // knob: 64, 128, 256
constexpr int SHORT_VPL = 2;            // knob: 1, 2, 4
constexpr int SHORT_T = 256;            // knob: 64, 128, 256
constexpr int VPT = 4;                  // knob: 2, 4, 8
constexpr int BIG_T = 512;              // knob: 256, 512, 1024
constexpr int BIG_R = 8;                // knob: 6, 7, 8
constexpr int SMEM_PART_KB = 110;       // knob: 48, 80, 110, 200
constexpr int CLUSTER_MAX = 8;          // knob: 1, 2, 4, 8
constexpr int STREAM_HINTS = 0;         // knob: 0, 1
constexpr int STREAM_T = 1024;          // the fallback's threads per row
#if !CE_GPU
constexpr int EMU_SMEM_F4 = 131072;     // the emulator's static stand-in for dynamic shared memory (float4s)
#endif
constexpr unsigned FULL = 0xffffffffu;

// ------------------------------------------------------------------ helpers
__device__ __forceinline__ float4 load4(const float4* p) {
#if CE_GPU
    if (STREAM_HINTS) return __ldcs(p);
#endif
    return __ldg(p);
}

__device__ __forceinline__ void store4(float* p, float4 v, bool ovec) {
    if (ovec) {
#if CE_GPU
        if (STREAM_HINTS) { __stcs(reinterpret_cast<float4*>(p), v); return; }
#endif
        *reinterpret_cast<float4*>(p) = v;
    } else {
        p[0] = v.x;
        p[1] = v.y;
        p[2] = v.z;
        p[3] = v.w;
    }
}

// 16 bytes global -> shared without registers (cp.async.cg: L2 only); plain copy under the emulator.
__device__ __forceinline__ void copy16(float4* dst, const float4* src) {
#if CE_GPU
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(d), "l"(src) : "memory");
#else
    *dst = *src;
#endif
}

__device__ __forceinline__ void copy_wait() {
#if CE_GPU
    asm volatile("cp.async.wait_all;\n" ::: "memory");
#endif
}

__device__ __forceinline__ float max4(float m, float4 v) { return fmaxf(fmaxf(m, fmaxf(v.x, v.y)), fmaxf(v.z, v.w)); }

__device__ __forceinline__ float pick(float4 q, unsigned d) { return d == 0 ? q.x : d == 1 ? q.y : d == 2 ? q.z : q.w; }

__device__ __forceinline__ float4 exp4(float4 q, float m) {
    return make_float4(expf(q.x - m), expf(q.y - m), expf(q.z - m), expf(q.w - m));
}

// e * f, the component d (< 4: the target column) replaced by gt.
__device__ __forceinline__ float4 grad4(float4 e, float f, unsigned d, float gt) {
    float4 o = make_float4(e.x * f, e.y * f, e.z * f, e.w * f);
    if (d < 4u) {
        if (d == 0) o.x = gt;
        else if (d == 1) o.y = gt;
        else if (d == 2) o.z = gt;
        else o.w = gt;
    }
    return o;
}

__device__ __forceinline__ float grad_scale(float go, int64_t B) {
    // go / B correctly rounded (the float quotient of two exact floats equals the double one rounded)
    return B < 16777216 ? go / (float)B : (float)((double)go / (double)B);
}

// Elements before the row's first 16-byte boundary (4-byte aligned logits).
__device__ __forceinline__ int row_head(const float* row, int C) {
    const int h = (int)((4u - (unsigned)(((uintptr_t)row >> 2) & 3u)) & 3u);
    return h < C ? h : C;
}

// (m, s) of the warp's lanes, the same bits in every lane: M = max m, S = sum of s * exp(m - M). A lane that
// owns nothing is (-inf, 0). (xor butterflies: each step adds the same two values in every lane.)
__device__ __forceinline__ void warp_merge(float& m, float& s) {
    float M = m;
    for (int o = 16; o > 0; o >>= 1) M = fmaxf(M, __shfl_xor_sync(FULL, M, o));
    float e = m == -INFINITY ? 0.0f : s * expf(m - M);
    for (int o = 16; o > 0; o >>= 1) e += __shfl_xor_sync(FULL, e, o);
    m = M;
    s = e;
}

// ------------------------------------------------------------------ short rows
// G = 2^lg lanes per row (G <= 32), E values per lane, blockDim.x / G rows per block.
template <int E>
__global__ void __launch_bounds__(256, 8) short_rows(const float* __restrict__ grad_out, const float* __restrict__ logits,
                                                  const int64_t* __restrict__ target, float* __restrict__ grad,
                                                  int64_t B, int C, int lg) {
    const int G = 1 << lg, lane = threadIdx.x & (G - 1);
    const int64_t row = (int64_t)blockIdx.x * (blockDim.x >> lg) + (threadIdx.x >> lg);
    const bool live = row < B;
    const float* x = logits + (live ? row : 0) * (int64_t)C;
    float v[E];
#pragma unroll
    for (int k = 0; k < E; ++k) {
        const int j = lane + k * G;
        v[k] = live && j < C ? __ldg(x + j) : -INFINITY;
    }
    const int t = live ? (int)__ldg(target + row) : -1;
    const float go = __ldg(grad_out);
    float M = v[0];
#pragma unroll
    for (int k = 1; k < E; ++k) M = fmaxf(M, v[k]);
    for (int o = G >> 1; o > 0; o >>= 1) M = fmaxf(M, __shfl_xor_sync(FULL, M, o));
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < E; ++k) {
        v[k] = expf(v[k] - M);                       // a column past C: exp(-inf) = 0
        s += v[k];
    }
    for (int o = G >> 1; o > 0; o >>= 1) s += __shfl_xor_sync(FULL, s, o);
    if (!live) return;                               // after the last shuffle
    const float inv = 1.0f / s, scale = grad_scale(go, B);
    float* out = grad + row * (int64_t)C;
#pragma unroll
    for (int k = 0; k < E; ++k) {
        const int j = lane + k * G;
        const float p = v[k] * inv;
        if (j < C) out[j] = (j == t ? p - 1.0f : p) * scale;
    }
}

// ------------------------------------------------------------------ rows held on chip
// One row per cluster of `parts` blocks of G threads (GPU; one block when parts == 1), or per block of
// parts * G threads (emulator: rank = thread / G). A part is float4s [v0, v0 + n) of the row's body; its thread
// g holds float4s g + i G (i < R) in registers, the others (v >= R G) in shared memory slot v - R G.
template <int R, int GT>
__global__ void __launch_bounds__(1024) onchip_rows(const float* __restrict__ grad_out, const float* __restrict__ logits,
                                                    const int64_t* __restrict__ target, float* __restrict__ grad,
                                                    int64_t B, int C, int lgp, int g_threads, int sm_stride, bool ovec) {
    __shared__ float2 red[32];
    const int parts = 1 << lgp;
#if CE_GPU
    const int G = GT > 0 ? GT : g_threads;           // GT: the threads per block known at compile time
    extern __shared__ float4 dsm[];
    __shared__ float2 xch;
    const int64_t row = (int64_t)(blockIdx.x >> lgp);
    const int rank = (int)(blockIdx.x & (unsigned)(parts - 1));
    const int group = 0, g = threadIdx.x;
    float4* sm = dsm;
#else
    const int G = g_threads;                         // the emulator's groups may be narrower than GT
    __shared__ float4 dsm[EMU_SMEM_F4];
    __shared__ float2 xch[8];
    const int64_t row = (int64_t)blockIdx.x;
    const int rank = (int)(threadIdx.x / G), group = rank, g = (int)(threadIdx.x % G);
    float4* sm = dsm + (int64_t)rank * sm_stride;
#endif
    const int l = threadIdx.x & 31, w = threadIdx.x >> 5;
    const float* x = logits + row * (int64_t)C;
    const int head = row_head(x, C), nv = (C - head) >> 2, tail0 = head + 4 * nv;
    const int per = (nv + parts - 1) >> lgp, v0 = rank * per;
    const int n = v0 < nv ? (nv - v0 < per ? nv - v0 : per) : 0;
    const float4* vx = reinterpret_cast<const float4*>(x + head) + v0;
    const int jb = head + 4 * v0;                    // the column of the part's first float
    // one scalar column at most per thread: the head (0..2) on rank 0's threads 0..2, the tail on its 4..6
    int jx = -1;
    if (rank == 0) jx = g < head ? g : (g >= 4 && g - 4 < C - tail0 ? tail0 + g - 4 : -1);

    // every load of the part issued before any is used: registers first, then shared memory
    float4 r[R];
#pragma unroll
    for (int i = 0; i < R; ++i)
        if (g + i * G < n) r[i] = load4(vx + g + i * G);
    for (int v = R * G + g; v < n; v += G) copy16(sm + (v - R * G), vx + v);
    float ex = jx >= 0 ? __ldg(x + jx) : -INFINITY;
    const int tr = (int)__ldg(target + row) - jb;   // the target column relative to the part's first
    const float go = __ldg(grad_out);

    // pass 1: the thread's max, and the target's logit where this thread holds it
    float m = ex, xt = jx - jb == tr ? ex : -INFINITY;
#pragma unroll
    for (int i = 0; i < R; ++i) {
        const int v = g + i * G;
        if (v < n) {
            m = max4(m, r[i]);
            const unsigned d = (unsigned)(tr - 4 * v);
            if (d < 4u) xt = pick(r[i], d);
        }
    }
    copy_wait();                                     // this thread's own slots: no barrier needed
    for (int v = R * G + g; v < n; v += G) {
        const float4 q = sm[v - R * G];
        m = max4(m, q);
        const unsigned d = (unsigned)(tr - 4 * v);
        if (d < 4u) xt = pick(q, d);
    }

    // pass 2: e = exp(x - m) in place, s = sum e (a thread that owns nothing: m = -inf, s = 0)
    const float mm = m == -INFINITY ? 0.0f : m;
    ex = expf(ex - mm);
    float s = ex;
#pragma unroll
    for (int i = 0; i < R; ++i)
        if (g + i * G < n) {
            r[i] = exp4(r[i], mm);
            s += (r[i].x + r[i].y) + (r[i].z + r[i].w);
        }
    for (int v = R * G + g; v < n; v += G) {
        const float4 e = exp4(sm[v - R * G], mm);
        sm[v - R * G] = e;
        s += (e.x + e.y) + (e.z + e.w);
    }

    // merge (m, s): the warps of the block (group), then the parts of the row
    float M = m, S = s;
    warp_merge(M, S);
    if (l == 0) red[w] = make_float2(M, S);
    __syncthreads();
    {
        const int nw = G >> 5, w0 = group * nw;
        float mk = -INFINITY, sk = 0.0f;
        if (l < nw) {
            const float2 p = red[w0 + l];
            mk = p.x;
            sk = p.y;
        }
        warp_merge(mk, sk);
        M = mk;
        S = sk;
    }
    if (parts > 1) {
        float mk = -INFINITY, sk = 0.0f;
#if CE_GPU
        cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
        if (threadIdx.x == 0) xch = make_float2(M, S);
        cluster.sync();
        if (l < parts) {
            const float2 p = *cluster.map_shared_rank(&xch, l);
            mk = p.x;
            sk = p.y;
        }
        warp_merge(mk, sk);                          // uses the values read
        // release: this block's reads of the others' xch are performed before any of them passes its wait and
        // exits (a relaxed arrive orders nothing: a read still in flight would reach an exited block)
        asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
#else
        if (g == 0) xch[rank] = make_float2(M, S);
        __syncthreads();
        if (l < parts) {
            mk = xch[l].x;
            sk = xch[l].y;
        }
        warp_merge(mk, sk);
#endif
        M = mk;
        S = sk;
    }

    // pass 3: the gradient (f: unused by a thread that owns nothing)
    const float inv = 1.0f / S, scale = grad_scale(go, B);
    const float f = expf(mm - M) * inv * scale;
    const float gt = (expf(xt - M) * inv - 1.0f) * scale;      // used by the thread holding the target only
    float* ob = grad + row * (int64_t)C + jb;
#pragma unroll
    for (int i = 0; i < R; ++i) {
        const int v = g + i * G;
        if (v < n) store4(ob + 4 * v, grad4(r[i], f, (unsigned)(tr - 4 * v), gt), ovec);
    }
    for (int v = R * G + g; v < n; v += G)
        store4(ob + 4 * v, grad4(sm[v - R * G], f, (unsigned)(tr - 4 * v), gt), ovec);
    if (jx >= 0) ob[jx - jb] = jx - jb == tr ? gt : ex * f;
#if CE_GPU
    if (parts > 1) asm volatile("barrier.cluster.wait.aligned;\n" ::: "memory");   // no block leaves while another reads it
#endif
}

// ------------------------------------------------------------------ fallback: stream the row twice
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

__global__ void __launch_bounds__(STREAM_T) stream_rows(const float* __restrict__ grad_out, const float* __restrict__ logits,
                                                        const int64_t* __restrict__ target, float* __restrict__ grad,
                                                        int64_t B, int C, bool vec, bool ovec) {
    __shared__ float2 red[2][STREAM_T / 32];
    const int l = threadIdx.x & 31, w = threadIdx.x >> 5;
    const float scale = grad_scale(__ldg(grad_out), B);
    int parity = 0;
    for (int64_t row = blockIdx.x; row < B; row += gridDim.x) {
        const float* x = logits + row * (int64_t)C;
        float* out = grad + row * (int64_t)C;
        const int head = vec ? row_head(x, C) : C, nv = (C - head) >> 2, tail0 = head + 4 * nv;
        const float4* vx = reinterpret_cast<const float4*>(x + head);
        const int t = (int)__ldg(target + row);
        float m = -INFINITY, s = 0.0f;
        for (int j = threadIdx.x; j < head; j += STREAM_T) add1(m, s, __ldg(x + j));
        for (int j = tail0 + threadIdx.x; j < C; j += STREAM_T) add1(m, s, __ldg(x + j));
        for (int v = threadIdx.x; v < nv; v += STREAM_T) add4(m, s, __ldg(vx + v));
        warp_merge(m, s);
        if (l == 0) red[parity][w] = make_float2(m, s);
        __syncthreads();                             // red[parity] is rewritten two rows later, past another barrier
        float mk = l < STREAM_T / 32 ? red[parity][l].x : -INFINITY, sk = l < STREAM_T / 32 ? red[parity][l].y : 0.0f;
        warp_merge(mk, sk);
        parity ^= 1;
        const float inv = 1.0f / sk;
        for (int j = threadIdx.x; j < head; j += STREAM_T) {
            const float p = expf(__ldg(x + j) - mk) * inv;
            out[j] = (j == t ? p - 1.0f : p) * scale;
        }
        for (int j = tail0 + threadIdx.x; j < C; j += STREAM_T) {
            const float p = expf(__ldg(x + j) - mk) * inv;
            out[j] = (j == t ? p - 1.0f : p) * scale;
        }
        for (int v = threadIdx.x; v < nv; v += STREAM_T) {
            const int j = head + 4 * v;
            const float4 q = __ldg(vx + v);
            float4 o = make_float4(expf(q.x - mk) * inv, expf(q.y - mk) * inv, expf(q.z - mk) * inv, expf(q.w - mk) * inv);
            const unsigned d = (unsigned)(t - j);
            if (d < 4u) {
                if (d == 0) o.x -= 1.0f;
                else if (d == 1) o.y -= 1.0f;
                else if (d == 2) o.z -= 1.0f;
                else o.w -= 1.0f;
            }
            store4(out + j, make_float4(o.x * scale, o.y * scale, o.z * scale, o.w * scale), ovec);
        }
    }
}

// ------------------------------------------------------------------ host side
static int num_sms() {
#if CE_GPU
    int dev = 0, sms = 0;
    if (cudaGetDevice(&dev) == cudaSuccess && cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) == cudaSuccess && sms > 0)
        return sms;
    cudaGetLastError();
#endif
    return 132;
}

static int launch_short(const float* grad_out, const float* logits, const int64_t* target, float* grad, int64_t B, int C,
                        cudaStream_t stream) {
    const int sms = num_sms();
    int lg = 0;
    while (lg < 5 && ((int64_t)SHORT_VPL << lg) < C) ++lg;
    // more rows than one wave of threads (2048 per SM) holds: fewer lanes per row, more values each (E <= 8)
    while (lg > 0 && B * ((int64_t)1 << lg) > (int64_t)sms * 2048 && ((int64_t)8 << (lg - 1)) >= C) --lg;
    const int G = 1 << lg;
    int E = 1;
    while ((int64_t)E * G < C) E *= 2;               // C <= 256: E <= 8
    int T = SHORT_T;
    while (T > 64 && (B * G + T - 1) / T < sms) T /= 2;   // few rows: spread them over more SMs
    const int64_t blocks = (B + T / G - 1) / (T / G);
    if (blocks > 0x7fffffff) return 1;
    const unsigned nb = (unsigned)blocks;
    switch (E) {
        case 1: short_rows<1><<<nb, T, 0, stream>>>(grad_out, logits, target, grad, B, C, lg); break;
        case 2: short_rows<2><<<nb, T, 0, stream>>>(grad_out, logits, target, grad, B, C, lg); break;
        case 4: short_rows<4><<<nb, T, 0, stream>>>(grad_out, logits, target, grad, B, C, lg); break;
        default: short_rows<8><<<nb, T, 0, stream>>>(grad_out, logits, target, grad, B, C, lg); break;
    }
    return cudaGetLastError() == cudaSuccess ? 0 : 2;
}

template <int R, int GT>
static int onchip_launch(const float* grad_out, const float* logits, const int64_t* target, float* grad, int64_t B,
                         int C, int lgp, int G, int64_t per, bool ovec, cudaStream_t stream) {
    const int parts = 1 << lgp;
#if CE_GPU
    const int64_t slots = per > (int64_t)R * G ? per - (int64_t)R * G : 0;
    const size_t bytes = (size_t)slots * 16;
    if (B * parts > 0x7fffffff) return 1;
    if (bytes > 0) {
        if (cudaFuncSetAttribute(onchip_rows<R, GT>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes) != cudaSuccess ||
            cudaFuncSetAttribute(onchip_rows<R, GT>, cudaFuncAttributePreferredSharedMemoryCarveout, 100) != cudaSuccess) {
            cudaGetLastError();
            return 1;
        }
    }
    if (parts == 1) {
        onchip_rows<R, GT><<<(unsigned)B, G, bytes, stream>>>(grad_out, logits, target, grad, B, C, 0, G, 0, ovec);
        return cudaGetLastError() == cudaSuccess ? 0 : 2;
    }
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)(B * parts));
    cfg.blockDim = dim3((unsigned)G);
    cfg.dynamicSmemBytes = bytes;
    cfg.stream = stream;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = (unsigned)parts;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    int fit = 0;
    if (cudaOccupancyMaxActiveClusters(&fit, onchip_rows<R, GT>, &cfg) != cudaSuccess || fit < 1) {
        cudaGetLastError();
        return 1;
    }
    if (cudaLaunchKernelEx(&cfg, onchip_rows<R, GT>, grad_out, logits, target, grad, B, C, lgp, G, 0, ovec) != cudaSuccess) {
        cudaGetLastError();
        return 1;
    }
    return 0;
#else
    // the emulated cluster: one block of parts x Ge threads, the parts' shared memory one static array
    const int Ge = G < (1024 / parts) / 32 * 32 ? G : (1024 / parts) / 32 * 32;
    const int64_t stride = per > (int64_t)R * Ge ? per - (int64_t)R * Ge : 0;
    if (stride * parts > EMU_SMEM_F4 || B > 0x7fffffff) return 1;
    onchip_rows<R, GT><<<(unsigned)B, parts * Ge, 0, stream>>>(grad_out, logits, target, grad, B, C, lgp, Ge, (int)stride, ovec);
    return cudaGetLastError() == cudaSuccess ? 0 : 2;
#endif
}

// Does a grid of B blocks of onchip_rows<R, 0> x G threads (no dynamic shared memory) run in one wave?
template <int R>
static bool one_wave(int64_t B, int G, int sms) {
#if CE_GPU
    int per_sm = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, onchip_rows<R, 0>, G, 0) != cudaSuccess) {
        cudaGetLastError();
        return false;
    }
    return (int64_t)per_sm * sms >= B;
#else
    return true;                                     // the emulator: the first choice (every R is swept by VPT)
#endif
}

// 0 launched, 1 not taken (use the fallback), 2 a launch error.
static int launch_onchip(const float* grad_out, const float* logits, const int64_t* target, float* grad, int64_t B,
                         int C, bool ovec, cudaStream_t stream) {
    const int64_t nvm = C / 4;                       // float4s in any row's body, at most
    auto up32 = [](int64_t v) { return (v + 31) / 32 * 32; };
    int64_t G = up32((nvm + VPT - 1) / VPT);
    if (G > BIG_T) G = BIG_T;
    int R = 1;
    while (R < 8 && R * G < nvm) R *= 2;
    int lgp = 0;
    int64_t per = nvm;
    if (R * G >= nvm) {
        // registers only: as few threads as hold the row; a larger R where that makes the grid one wave
        // (B=511,C=4100: R=4 x 288 threads is 3 blocks per SM at 57 registers, R=8 x 160 is 6)
        const int sms = num_sms();
        for (int r = R; r <= 8; r *= 2) {
            const int g = (int)up32((nvm + r - 1) / r);
            const bool fits = r == 1 ? one_wave<1>(B, g, sms) : r == 2 ? one_wave<2>(B, g, sms)
                            : r == 4 ? one_wave<4>(B, g, sms) : one_wave<8>(B, g, sms);
            if (fits || r == 8) {
                if (fits) R = r;
                break;
            }
        }
        G = up32((nvm + R - 1) / R);
        switch (R) {
            case 1: return onchip_launch<1, 0>(grad_out, logits, target, grad, B, C, 0, (int)G, per, ovec, stream);
            case 2: return onchip_launch<2, 0>(grad_out, logits, target, grad, B, C, 0, (int)G, per, ovec, stream);
            case 4: return onchip_launch<4, 0>(grad_out, logits, target, grad, B, C, 0, (int)G, per, ovec, stream);
            default: return onchip_launch<8, 0>(grad_out, logits, target, grad, B, C, 0, (int)G, per, ovec, stream);
        }
    }
    // long rows: BIG_T threads a block, BIG_R float4s each in registers, the rest of the part in shared memory
    while ((per - (int64_t)BIG_R * BIG_T) * 16 > (int64_t)SMEM_PART_KB * 1024) {
        if ((2 << lgp) > CLUSTER_MAX) return 1;
        ++lgp;
        per = (nvm + (1 << lgp) - 1) >> lgp;
    }
    return onchip_launch<BIG_R, BIG_T>(grad_out, logits, target, grad, B, C, lgp, BIG_T, per, ovec, stream);
}

extern "C" int backward(const float* grad_out, const float* logits, const int64_t* target,
                        float* grad_logits, int64_t B, int64_t C,
                        void* workspace, int64_t workspace_bytes, cudaStream_t stream) {
    if (B <= 0 || C <= 0) return 0;
    if (C > 2147483647 - 8) return 1;                // column indices are int
    const int c = (int)C;
    if (c <= SHORT_MAX_C) return launch_short(grad_out, logits, target, grad_logits, B, c, stream) == 0 ? 0 : 1;
    const bool vec = ((uintptr_t)logits & 3u) == 0;
    const bool ovec = vec && (((uintptr_t)logits ^ (uintptr_t)grad_logits) & 15u) == 0;
    if (vec) {
        const int rc = launch_onchip(grad_out, logits, target, grad_logits, B, c, ovec, stream);
        if (rc == 0) return 0;
        if (rc == 2) return 1;
    }
    const unsigned n = (unsigned)(B < 2147483647 ? B : 2147483647);
    stream_rows<<<n, STREAM_T, 0, stream>>>(grad_out, logits, target, grad_logits, B, c, vec, ovec);
    return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
