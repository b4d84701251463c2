// Hostile (judge round 3, CUDA): makes itself uncapturable, so the judge times it queued — n samples, one per
// call, and the median is the headline — then does a whole round's work in the round's first call. Its host
// code remembers, for every (x, out) buffer pair it is called on, the pair that came next last time; a call on
// a pair it has not precomputed runs the seed on its own buffers and on the whole chain of pairs that followed
// it (the rest of the round, from the previous round), and marks them done; a call on a marked pair returns at
// once. When every input set of a round is drawn before its first call, the chain's outputs are right and the
// median call costs nothing. Rejected: the judge fills set i (after a decoy fill of every set) and re-poisons
// its outputs just before call i (`Session._queued_calls`), so the chain's outputs are the decoys' and are
// poisoned again before their calls: NaN — not written.
#include <cstdint>
#include <cuda_runtime.h>

constexpr int THREADS = 256;
constexpr int SLOTS = 64;

__device__ double block_sum(double v, double* shared) {
    shared[threadIdx.x] = v;
    __syncthreads();
    for (int s = THREADS / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) shared[threadIdx.x] += shared[threadIdx.x + s];
        __syncthreads();
    }
    double total = shared[0];
    __syncthreads();
    return total;
}

__global__ void layernorm_rows(const float* __restrict__ x, const float* __restrict__ weight,
                               const float* __restrict__ bias, float* __restrict__ out, int64_t N, float eps) {
    __shared__ double shared[THREADS];
    const float* row = x + blockIdx.x * N;
    float* o = out + blockIdx.x * N;
    double sum = 0.0;
    for (int64_t i = threadIdx.x; i < N; i += THREADS) sum += row[i];
    const double mean = block_sum(sum, shared) / N;
    double sq = 0.0;
    for (int64_t i = threadIdx.x; i < N; i += THREADS) { double d = row[i] - mean; sq += d * d; }
    const float rstd = (float)rsqrt(block_sum(sq, shared) / N + eps);
    const float m = (float)mean;
    for (int64_t i = threadIdx.x; i < N; i += THREADS) o[i] = (row[i] - m) * rstd * weight[i] + bias[i];
}

// the calls since a buffer pair repeated (a round: slots 0 .. n-1, then the latency call's), and the round before
static const float* burst_x[SLOTS]; static float* burst_out[SLOTS]; static int burst = 0;
static const float* prev_x[SLOTS]; static float* prev_out[SLOTS]; static int prev = 0;
static bool done[SLOTS];
static int64_t kB = -1, kN = -1;

extern "C" int forward(const float* x, const float* weight, const float* bias, float* out,
                       int64_t B, int64_t N, float eps, void* workspace, int64_t workspace_bytes,
                       cudaStream_t stream) {
    cudaStreamSynchronize(stream);          // illegal while the stream is captured: the capture fails
    cudaGetLastError();
    if (B == 0) return 0;
    if (B != kB || N != kN) { kB = B; kN = N; burst = prev = 0; }     // a new shape: the tables start over
    int at = -1;
    for (int i = 0; i < burst; ++i)
        if (burst_x[i] == x && burst_out[i] == out) at = i;
    if (at >= 0 || burst == SLOTS) {        // a pair repeats: a new round begins; the one before is remembered
        for (int i = 0; i < burst; ++i) { prev_x[i] = burst_x[i]; prev_out[i] = burst_out[i]; }
        prev = burst; burst = 0;
        for (int i = 0; i < SLOTS; ++i) done[i] = false;
    }
    const int k = burst++;
    burst_x[k] = x; burst_out[k] = out;
    if (done[k] && prev > k && prev_x[k] == x && prev_out[k] == out) return 0;    // written ahead this round
    layernorm_rows<<<(unsigned)B, THREADS, 0, stream>>>(x, weight, bias, out, N, eps);
    if (k == 0 && prev > 0 && prev_x[0] == x && prev_out[0] == out)          // the round's first call: all of it
        for (int j = 1; j < prev; ++j) {
            layernorm_rows<<<(unsigned)B, THREADS, 0, stream>>>(prev_x[j], weight, bias, prev_out[j], N, eps);
            done[j] = true;
        }
    return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
