// Cross-entropy forward (mean over rows), CUDA seed (fast): every logit is read once, with 128-bit loads
// wherever the row allows, and the per-row statistics are an online softmax: each thread keeps a running
// max m and a sum s of exp(x - m), rescaled by exp(m_old - m_new) when the max grows (once per float4,
// not per element). A row's threads merge their (m, s) pairs (warp shuffles, then one value per warp
// through shared memory); the row loss is m - x[target] + log(s), accumulated in double. x[target] is
// picked out of the loaded stream by the thread whose share holds that column (no dependent load
// after target[b]: one DRAM round trip for a short row).
//
// Row layout: logits + b * C is 16-byte aligned only when C % 4 == 0 and the base is. Each row is
// therefore cut at run time into a scalar head (0..3 elements, up to the first 16-byte boundary), a
// float4 body and a scalar tail (0..3): every row, any C, gets vector loads and no load crosses the
// row. (A base that is not even 4-byte aligned -- never for a float tensor -- is read all scalar.)
//
// Dispatch by shape: G threads per row, G = the power of two (MIN_LANES <= G <= MAX_ROW_THREADS) that
// leaves each thread about VPT float4s of the row.
//  tiny   B * C <= TINY_ELEMS and G <= 32: one launch of one block (up to 1024 threads; G shrunk until
//         every row is in flight at once); the block sums its row losses and writes loss[0] itself.
//         (B=64..1024 with C=10 are launch-bound: one kernel, one DRAM round trip.)
//  group  G <= 32 (short rows, C = 10 or 100): G lanes of a warp per row, ROW_THREADS / G rows per
//         block, the grid (at most MAX_BLOCKS) strides over the rows; per-block double totals in the
//         workspace, then `finish`.
//  block  G > 32 (C = 1000 to 100001): one block of G threads per row (MAX_ROW_THREADS = 512 for the
//         LLM vocabularies: two such blocks fit an SM (~50 registers), so one row's reduction overlaps
//         the other's loads, and B=255 x C=100001 is a single wave), UNROLL float4 loads in flight per
//         thread, at most MAX_BLOCKS blocks striding over rows; per-block totals, then `finish`.
//  finish one block sums the per-block totals in block order: loss[0] = total / B (deterministic, double).
// A launch of a single block (B small) writes loss[0] directly: one launch.
// PDL = 1 (sm_90): `finish` is a programmatic dependent launch: the rows kernel lets it launch once all its
// blocks have started (griddepcontrol.launch_dependents) and it waits (griddepcontrol.wait) for the rows
// kernel's completion and memory before reading the partials, so its launch gap (~1-2 us; B=1000,C=1000 is
// 0.84x of torch.compile at 8 us) overlaps the rows kernel's tail. Off by default: not measured on a GPU yet.
// exp and log are the accurate expf / log (no __expf). Nothing assumes the workspace starts zeroed:
// every word read was written earlier in the same call.
#include <cstdint>
#include <cuda_runtime.h>

constexpr int ROW_THREADS = 256;        // knob: 128, 256, 512
constexpr int VPT = 4;                  // knob: 2, 4, 8
constexpr int MIN_LANES = 2;            // knob: 1, 2, 4
constexpr int MAX_ROW_THREADS = 512;    // knob: 256, 512, 1024
constexpr int UNROLL = 4;               // knob: 2, 4, 8
constexpr int64_t TINY_ELEMS = 16384;   // knob: 0, 4096, 16384, 65536
constexpr int64_t MAX_BLOCKS = 4096;    // knob: 1024, 4096, 8192
constexpr int FINISH_THREADS = 512;     // threads of the finishing block
constexpr int PDL = 0;                  // knob: 0, 1

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
__device__ __forceinline__ int64_t row_head(const float* row, int64_t C, bool vec) {
    if (!vec) return C;
    const int64_t h = (int64_t)((4u - (unsigned)(((uintptr_t)row >> 2) & 3u)) & 3u);
    return h < C ? h : C;
}

// x[t] if it lies in the float4 whose first column is t - d (d = t - that column), else xt unchanged.
__device__ __forceinline__ void pick4(float& xt, bool& own, float4 v, int64_t d) {
    if ((uint64_t)d < 4u) {
        xt = d == 0 ? v.x : d == 1 ? v.y : d == 2 ? v.z : v.w;
        own = true;
    }
}

// This thread's share (lane of G) of one row: scalar head, float4 body (UNROLL loads in flight), scalar
// tail. The target logit is picked out of the stream by the thread that owns column t (xt stays 0 in
// the others; `own` set in it), so it costs no dependent load after target[b].
template <int G>
__device__ __forceinline__ void lane_stats(const float* __restrict__ row, int64_t C, bool vec, int lane, int64_t t,
                                           float& m, float& s, float& xt, bool& own) {
    const int64_t head = row_head(row, C, vec);
    const int64_t nv = (C - head) >> 2;
    for (int64_t j = lane; j < head; j += G) {
        const float x = __ldg(row + j);
        if (j == t) {
            xt = x;
            own = true;
        }
        add1(m, s, x);
    }
    const float4* vrow = reinterpret_cast<const float4*>(row + head);
    const int64_t th = t - head;                                          // t's offset in the body
    int64_t v = lane;
    for (; v + (int64_t)(UNROLL - 1) * G < nv; v += (int64_t)G * UNROLL) {   // UNROLL loads, then their math
        float4 r[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) r[u] = __ldg(vrow + v + (int64_t)u * G);
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            pick4(xt, own, r[u], th - 4 * (v + (int64_t)u * G));
            add4(m, s, r[u]);
        }
    }
    for (; v < nv; v += G) {
        const float4 q = __ldg(vrow + v);
        pick4(xt, own, q, th - 4 * v);
        add4(m, s, q);
    }
    for (int64_t j = head + 4 * nv + lane; j < C; j += G) {
        const float x = __ldg(row + j);
        if (j == t) {
            xt = x;
            own = true;
        }
        add1(m, s, x);
    }
}

// The block's total of one double per thread, valid in thread 0 (blockDim.x a multiple of 32).
__device__ __forceinline__ double block_total(double v, double* sh) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(FULL, v, o);
    if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = v;
    __syncthreads();
    double t = 0.0;
    if (threadIdx.x == 0)
        for (unsigned w = 0; w < blockDim.x / 32; ++w) t += sh[w];
    return t;
}

// Programmatic dependent launch (PDL): no-ops unless PDL and compiled for sm_90 or later.
__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if constexpr (PDL != 0) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if constexpr (PDL != 0) asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// G lanes per row (G <= 32), blockDim.x / G rows per block at a time. loss != nullptr: a single block,
// which writes the mean itself; otherwise the block's total goes to partial[blockIdx.x].
template <int G>
__global__ void __launch_bounds__(1024, 1) group_rows(const float* __restrict__ logits, const int64_t* __restrict__ target,
                                                   double* __restrict__ partial, float* __restrict__ loss,
                                                   int64_t B, int64_t C, bool vec) {
    __shared__ double sh[32];
    pdl_trigger();                               // finish may launch: it waits for this grid's end
    const int64_t rpb = blockDim.x / G;
    const int lane = threadIdx.x % G;
    double acc = 0.0;
    for (int64_t first = (int64_t)blockIdx.x * rpb; first < B; first += (int64_t)gridDim.x * rpb) {  // block-uniform
        const int64_t b = first + threadIdx.x / G;
        const bool live = b < B;
        const float* row = logits + (live ? b : 0) * C;
        float m = -INFINITY, s = 0.0f, xt = 0.0f;
        bool own = false;
        if (live) lane_stats<G>(row, C, vec, lane, __ldg(target + b), m, s, xt, own);
        for (int o = G / 2; o > 0; o >>= 1) {                      // every lane of the warp shuffles
            const float m2 = __shfl_xor_sync(FULL, m, o, G);
            const float s2 = __shfl_xor_sync(FULL, s, o, G);
            xt += __shfl_xor_sync(FULL, xt, o, G);                  // one lane's x[t] plus zeros: exact
            merge(m, s, m2, s2);
        }
        if (live && lane == 0) acc += ((double)m - (double)xt) + log((double)s);
    }
    const double total = block_total(acc, sh);
    if (threadIdx.x == 0) {
        if (loss) loss[0] = (float)(total / (double)B);
        else partial[blockIdx.x] = total;
    }
}

// One row per block of T threads (T a multiple of 64), the grid striding over rows.
template <int T>
__global__ void __launch_bounds__(T, 1) block_rows(const float* __restrict__ logits, const int64_t* __restrict__ target,
                                                double* __restrict__ partial, float* __restrict__ loss,
                                                int64_t B, int64_t C, bool vec) {
    constexpr int NW = T / 32;
    __shared__ float shm[2][NW], shs[2][NW];     // by row parity: one barrier per row
    __shared__ float shx[2];                     // x[t], written by the one thread that owns column t
    pdl_trigger();
    const int l = threadIdx.x & 31, w = threadIdx.x >> 5;
    double acc = 0.0;                           // thread 0's
    int parity = 0;
    for (int64_t b = blockIdx.x; b < B; b += gridDim.x) {
        const float* row = logits + b * C;
        const int64_t t = __ldg(target + b);
        float m = -INFINITY, s = 0.0f, xt = 0.0f;
        bool own = false;
        lane_stats<T>(row, C, vec, threadIdx.x, t, m, s, xt, own);
        if (own) shx[parity] = xt;
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
        if (w == 0) {                            // lane k takes warp k's pair: one exp per lane
            const float mk = l < NW ? shm[parity][l] : -INFINITY;
            float M = mk;
            for (int o = 16; o > 0; o >>= 1) M = fmaxf(M, __shfl_xor_sync(FULL, M, o));
            float e = l < NW ? shs[parity][l] * expf(mk - M) : 0.0f;
            for (int o = 16; o > 0; o >>= 1) e += __shfl_xor_sync(FULL, e, o);
            if (l == 0) acc += ((double)M - (double)shx[parity]) + log((double)e);
        }
        parity ^= 1;
    }
    if (threadIdx.x == 0) {
        if (loss) loss[0] = (float)(acc / (double)B);
        else partial[blockIdx.x] = acc;
    }
}

__global__ void __launch_bounds__(FINISH_THREADS) finish(const double* __restrict__ partial, float* __restrict__ loss,
                                                         int64_t n, int64_t B) {
    __shared__ double sh[32];
    pdl_wait();                                  // the rows kernel's partials are complete
    double v = 0.0;
    for (int64_t k = threadIdx.x; k < n; k += FINISH_THREADS) v += partial[k];
    const double total = block_total(v, sh);
    if (threadIdx.x == 0) loss[0] = (float)(total / (double)B);
}

// Threads per row: a power of two, MIN_LANES..MAX_ROW_THREADS, about VPT float4s per thread.
static int pick_group(int64_t C) {
    const int64_t want = ((C + 3) / 4 + VPT - 1) / VPT;
    int g = MIN_LANES;
    while (g < want && g < MAX_ROW_THREADS) g *= 2;
    return g;
}

static void launch_group(int g, int64_t blocks, int threads, const float* logits, const int64_t* target,
                         double* partial, float* loss, int64_t B, int64_t C, bool vec, cudaStream_t stream) {
    const unsigned n = (unsigned)blocks;
    switch (g) {
        case 1: group_rows<1><<<n, threads, 0, stream>>>(logits, target, partial, loss, B, C, vec); break;
        case 2: group_rows<2><<<n, threads, 0, stream>>>(logits, target, partial, loss, B, C, vec); break;
        case 4: group_rows<4><<<n, threads, 0, stream>>>(logits, target, partial, loss, B, C, vec); break;
        case 8: group_rows<8><<<n, threads, 0, stream>>>(logits, target, partial, loss, B, C, vec); break;
        case 16: group_rows<16><<<n, threads, 0, stream>>>(logits, target, partial, loss, B, C, vec); break;
        default: group_rows<32><<<n, threads, 0, stream>>>(logits, target, partial, loss, B, C, vec); break;
    }
}

static void launch_block(int g, int64_t blocks, const float* logits, const int64_t* target, double* partial,
                         float* loss, int64_t B, int64_t C, bool vec, cudaStream_t stream) {
    const unsigned n = (unsigned)blocks;
    switch (g) {
        case 64: block_rows<64><<<n, 64, 0, stream>>>(logits, target, partial, loss, B, C, vec); break;
        case 128: block_rows<128><<<n, 128, 0, stream>>>(logits, target, partial, loss, B, C, vec); break;
        case 256: block_rows<256><<<n, 256, 0, stream>>>(logits, target, partial, loss, B, C, vec); break;
        case 512: block_rows<512><<<n, 512, 0, stream>>>(logits, target, partial, loss, B, C, vec); break;
        default: block_rows<1024><<<n, 1024, 0, stream>>>(logits, target, partial, loss, B, C, vec); break;
    }
}

// finish<<<1, FINISH_THREADS>>>, as a programmatic dependent launch when PDL (plain when that is refused).
static void launch_finish(const double* partial, float* loss, int64_t n, int64_t B, cudaStream_t stream) {
#if defined(__CUDACC__)
    if (PDL != 0) {
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = dim3(1);
        cfg.blockDim = dim3(FINISH_THREADS);
        cfg.dynamicSmemBytes = 0;
        cfg.stream = stream;
        cudaLaunchAttribute attr[1];
        attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attr[0].val.programmaticStreamSerializationAllowed = 1;
        cfg.attrs = attr;
        cfg.numAttrs = 1;
        if (cudaLaunchKernelEx(&cfg, finish, partial, loss, n, B) == cudaSuccess) return;
        cudaGetLastError();
    }
#endif
    finish<<<1, FINISH_THREADS, 0, stream>>>(partial, loss, n, B);
}

extern "C" int forward(const float* logits, const int64_t* target, float* loss,
                       int64_t B, int64_t C, void* workspace, int64_t workspace_bytes,
                       cudaStream_t stream) {
    if (B <= 0 || C <= 0) return 1;
    const bool vec = ((uintptr_t)logits & 3u) == 0;
    double* partial = static_cast<double*>(workspace);
    int g = pick_group(C);
    if (g <= 32 && B * C <= TINY_ELEMS) {                 // one block, one launch
        while (g > 1 && B * g > 1024) g >>= 1;
        int64_t threads = (B * g + 31) / 32 * 32;
        if (threads > 1024) threads = 1024;
        launch_group(g, 1, (int)threads, logits, target, partial, loss, B, C, vec, stream);
        return cudaGetLastError() == cudaSuccess ? 0 : 1;
    }
    int64_t blocks;
    if (g <= 32) {
        const int64_t rpb = ROW_THREADS / g;
        blocks = (B + rpb - 1) / rpb;
    } else {
        blocks = B;
    }
    if (blocks > MAX_BLOCKS) blocks = MAX_BLOCKS;
    if (blocks > 1 && workspace_bytes < blocks * (int64_t)sizeof(double)) return 1;
    float* direct = blocks == 1 ? loss : nullptr;
    if (g <= 32) launch_group(g, blocks, ROW_THREADS, logits, target, partial, direct, B, C, vec, stream);
    else launch_block(g, blocks, logits, target, partial, direct, B, C, vec, stream);
    if (blocks > 1) launch_finish(partial, loss, blocks, B, stream);
    return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
