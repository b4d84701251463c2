"""How far the offset initialisation (x ~ normal(MEAN, 1), |mean| >> std) pushes float32 LayerNorm, on the CPU.

    python experiments/norm_offsets.py [--means 100,60,24,12] [--rows 4194304,65536,100003,4096] [--batch 8]
                                       [--trials 3] [--backward]

The filters run torch's float32 LayerNorm on an H200, where it failed the tolerance on rows of 4M elements at
normal(100, 1) (1.43x). This machine has no GPU, so the script emulates in numpy float32 (each operation rounded
once, fused multiply-adds rounded once) the order in which the GPU kernels compute, and prints the worst
|out - ref| / (atol + rtol |ref|) over the outputs (ref: float64 on the same float32 inputs), per row length N and
offset MEAN (weight and bias ~ normal(0, 1), as the tasks draw them), for:
- torch-cuda: ATen's LayerNorm forward (layer_norm_kernel.cu): where N % 4 == 0 the vectorized kernel, 128 threads
  per row, each a Welford over its float4 loads with a float count and `delta * (1/count)`, merged by warp
  shuffles, then across warps; otherwise RowwiseMomentsCUDAKernel, 512 threads, one element a load;
- onepass-seq: a one-pass kernel with one float sum and one float sum of squares per row, added in order (a plain
  CPU loop); var = E[x^2] - mean^2;
- onepass-256 / onepass-1024: the same with 256 / 1024 strided partial sums per row (a GPU block), summed as a tree;
- float-mean: the float64 answer but for the mean rounded to float32 once (what every kernel that keeps the mean in
  float, torch included, cannot do better than).
--backward B:N,...: layernorm_bwd's grad_weight = sum over rows of grad_out * (x - mean) * rstd (summed in float64)
with each row's mean and rstd in float32: torch-cuda (Welford over up to 2048 lanes with true division, as var_mean),
float-mean (the float64 statistics, the mean rounded to float32) and onepass-256; the tolerance is layernorm_bwd's.
What it does not do: run torch's own CUDA code; the GPU numbers (`experiments/gpu_tasks_check.sh`) decide.
"""
from __future__ import annotations

import argparse
import math

import numpy as np

F32, F64 = np.float32, np.float64
ATOL = RTOL = 1e-4                         # layernorm_fwd's tolerance


def fma(a, b, c):
    """a * b + c rounded once to float32 (exact in float64 for float32 operands, then rounded)."""
    return (a.astype(F64) * b.astype(F64) + c.astype(F64)).astype(F32)


def welford_lanes(x: np.ndarray, lanes: int, vec: int = 4, float_count: bool = True):
    """ATen's per-thread Welford: x [B, N] read by `lanes` threads in loads of `vec` elements (thread t: loads t,
    t + lanes, ...), each updating (mean, m2, count) in float32; returns the per-lane states [B, lanes]."""
    B, N = x.shape
    loads = N // vec
    rounds = -(-loads // lanes)
    v = np.zeros((B, rounds * lanes * vec), F32)
    v[:, : loads * vec] = x[:, : loads * vec]
    v = v.reshape(B, rounds, lanes, vec)
    live = (np.arange(rounds * lanes) < loads).reshape(rounds, lanes)
    mean = np.zeros((B, lanes), F32)
    m2 = np.zeros((B, lanes), F32)
    count = np.zeros((B, lanes), F32)
    for s in range(rounds):
        on = live[s]
        for k in range(vec):
            val = v[:, s, :, k]
            delta = (val - mean).astype(F32)
            n = (count + F32(1)).astype(F32)
            if float_count:                    # layer_norm_kernel.cu: mean + delta * (1.f / count), one fma
                new = fma(delta, (F32(1) / n).astype(F32), mean)
            else:                              # WelfordOps (RowwiseMoments, var_mean): mean + delta / count
                new = (mean + (delta / n).astype(F32)).astype(F32)
            m2 = np.where(on, fma(delta, (val - new).astype(F32), m2), m2)
            mean, count = np.where(on, new, mean), np.where(on, n, count)
    return mean, m2, count


def combine(a, b):
    """cuWelfordCombine(b, a) in float32."""
    (ma, sa, na), (mb, sb, nb) = a, b
    delta = (mb - ma).astype(F32)
    n = (na + nb).astype(F32)
    coef = (F32(1) / n).astype(F32)
    fa, fb = (na * coef).astype(F32), (nb * coef).astype(F32)
    mean = fma(fa, ma, (fb * mb).astype(F32))
    s = (sa + sb).astype(F32) + (((delta * delta).astype(F32) * na).astype(F32) * fb).astype(F32)
    return mean, s.astype(F32), n


def tree(state, lanes: int):
    """Merges lane states pairwise: 32-lane warps by shuffles (offsets 16..1), then the warps by halves."""
    mean, m2, count = state
    stages = [(lanes // 32, 32), (1, lanes // 32)] if lanes > 32 else [(1, lanes)]
    for parts, width in stages:
        m = mean.reshape(mean.shape[0], parts, width)
        s = m2.reshape(m.shape)
        c = count.reshape(m.shape)
        while m.shape[2] > 1:
            h = m.shape[2] // 2
            m, s, c = combine((m[:, :, h:], s[:, :, h:], c[:, :, h:]), (m[:, :, :h], s[:, :, :h], c[:, :, :h]))
        mean, m2, count = m[:, :, 0], s[:, :, 0], c[:, :, 0]
    return mean[:, 0], m2[:, 0]


def torch_cuda_stats(x: np.ndarray, lanes: int | None = None, float_count: bool | None = None):
    """ATen's LayerNorm statistics: the vectorized kernel (128 threads, float4, float count) when N % 4 == 0, else
    RowwiseMomentsCUDAKernel (512 threads, one element each, WelfordOps' division)."""
    vec = 4 if x.shape[1] % 4 == 0 else 1
    lanes = lanes or (128 if vec == 4 else 512)
    float_count = vec == 4 if float_count is None else float_count
    mean, m2 = tree(welford_lanes(x, lanes, vec, float_count), lanes)
    return mean, (m2 / F32(x.shape[1])).astype(F32)


def onepass_stats(x: np.ndarray, parts: int):
    B, N = x.shape
    if parts == 1:
        s1 = np.cumsum(x, axis=1, dtype=F32)[:, -1]
        s2 = np.cumsum((x * x).astype(F32), axis=1, dtype=F32)[:, -1]
    else:
        v = np.zeros((B, -(-N // parts) * parts), F32)       # zeros past the end add nothing
        v[:, :N] = x
        v = v.reshape(B, -1, parts)
        s1, s2 = np.zeros((B, parts), F32), np.zeros((B, parts), F32)
        for j in range(v.shape[1]):
            s1 = (s1 + v[:, j]).astype(F32)
            s2 = fma(v[:, j], v[:, j], s2)
        while s1.shape[1] > 1:
            h = s1.shape[1] // 2
            s1, s2 = (s1[:, :h] + s1[:, h:]).astype(F32), (s2[:, :h] + s2[:, h:]).astype(F32)
        s1, s2 = s1[:, 0], s2[:, 0]
    mean = (s1 / F32(N)).astype(F32)
    var = ((s2 / F32(N)).astype(F32) - (mean * mean).astype(F32)).astype(F32)
    return mean, var


def forward(x, w, b, mean, var, eps=1e-5):
    rstd = (1.0 / np.sqrt(var.astype(F64) + eps)).astype(F32)[:, None]
    t = ((x - mean[:, None]).astype(F32) * rstd).astype(F32)
    return fma(w[None, :], t, np.broadcast_to(b[None, :], t.shape))


def reference(x, w, b, eps=1e-5):
    x = x.astype(F64)
    mean = x.mean(axis=1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * w.astype(F64) + b.astype(F64), mean[:, 0], var[:, 0]


def ratio(got, ref, atol=ATOL, rtol=RTOL) -> float:
    r = np.abs(got.astype(F64) - ref) / (atol + rtol * np.abs(ref))
    return float(np.nan_to_num(r, nan=np.inf).max())


def draw(rng, B, N, mean):
    x = (rng.standard_normal((B, N), dtype=F32) + F32(mean)).astype(F32)
    return x, rng.standard_normal(N, dtype=F32), rng.standard_normal(N, dtype=F32)


def forward_table(means, rows, batch, trials) -> None:
    kinds = ["torch-cuda", "onepass-seq", "onepass-256", "onepass-1024", "float-mean"]
    print(f"layernorm_fwd, worst ratio over {trials} draws of B={batch} rows (atol=rtol=1e-4); > 1 fails")
    print(f"{'N':>9} {'mean':>5} " + " ".join(f"{k:>12}" for k in kinds))
    for N in rows:
        B = batch if N <= 4194304 else 1
        for mu in means:
            worst = dict.fromkeys(kinds, 0.0)
            for t in range(trials):
                rng = np.random.default_rng(1000 * t + N % 997)
                x, w, b = draw(rng, B, N, mu)
                ref, mean64, var64 = reference(x, w, b)
                stats = {"onepass-seq": onepass_stats(x, 1), "onepass-256": onepass_stats(x, 256),
                         "onepass-1024": onepass_stats(x, 1024),
                         "float-mean": (mean64.astype(F32), var64.astype(F32)),
                         "torch-cuda": torch_cuda_stats(x)}
                for k, (m, v) in stats.items():
                    worst[k] = max(worst[k], ratio(forward(x, w, b, m, v), ref))
            print(f"{N:>9} {mu:>5g} " + " ".join(f"{worst[k]:>12.3g}" for k in kinds), flush=True)


def backward_table(means, shapes, trials, atol=3e-4, rtol=1e-4) -> None:
    """grad_weight's worst ratio when each row's mean and rstd come from float32 statistics."""
    print(f"layernorm_bwd grad_weight, worst ratio over {trials} draws (atol={atol:g}, rtol={rtol:g}); "
          "stats: Welford over 2048 lanes, true division (var_mean), rounded to float32")
    print(f"{'B':>6} {'N':>9} {'mean':>5} {'torch-cuda':>8} {'float-mean':>11} {'onepass-256':>12}")
    for B, N in shapes:
        for mu in means:
            worst, floor, onepass = 0.0, 0.0, 0.0
            for t in range(trials):
                rng = np.random.default_rng(7 + t)
                x = (rng.standard_normal((B, N), dtype=F32) + F32(mu)).astype(F32)
                g = rng.standard_normal((B, N), dtype=F32)
                lanes = min(2048, 2 ** int(math.log2(N // 4)))
                m32, v32 = torch_cuda_stats(x, lanes, float_count=False)
                x64 = x.astype(F64)
                mean = x64.mean(axis=1, keepdims=True)
                var = ((x64 - mean) ** 2).mean(axis=1, keepdims=True)
                rstd = 1 / np.sqrt(var + 1e-5)
                ref = (g * ((x64 - mean) * rstd)).sum(axis=0)
                got = (g * ((x64 - m32.astype(F64)[:, None]) * (1 / np.sqrt(v32.astype(F64) + 1e-5))[:, None]
                            .astype(F32))).sum(axis=0)
                only = (g * ((x64 - mean.astype(F32).astype(F64)) * rstd)).sum(axis=0)
                m1, v1 = onepass_stats(x, 256)
                one = (g * ((x64 - m1.astype(F64)[:, None]) / np.sqrt(v1.astype(F64) + 1e-5)[:, None])).sum(axis=0)
                worst = max(worst, ratio(got, ref, atol, rtol))
                floor = max(floor, ratio(only, ref, atol, rtol))
                onepass = max(onepass, ratio(one, ref, atol, rtol))
                del x, g, x64
            print(f"{B:>6} {N:>9} {mu:>5g} {worst:>8.3g} {floor:>11.3g} {onepass:>12.3g}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--means", default="100,60,24,12")
    ap.add_argument("--rows", default="4194304,65536,100003,4096")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--backward", default="", help="B:N,... shapes for the grad_weight table, e.g. 8192:4096,64:65536")
    args = ap.parse_args()
    means = [float(m) for m in args.means.split(",")]
    if args.backward:
        backward_table(means, [tuple(int(v) for v in s.split(":")) for s in args.backward.split(",")], args.trials)
    else:
        forward_table(means, [int(n) for n in args.rows.split(",")], args.batch, args.trials)


if __name__ == "__main__":
    main()
