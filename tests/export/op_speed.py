"""An exported LayerNorm (or RMSNorm) package against torch's module, both under torch.compile, at each size its op
was judged on: forward alone, and forward + backward. Run by tests/export/test_export_gpu.py on a GPU (the lead's
H200), or by hand:

    python tests/export/op_speed.py kevolve_layernorm [--device cuda] [--reps 15]

Times: CUDA events around `CALLS` back-to-back calls (launch overhead included, L2 not flushed: a model's view,
not the judge's clock), the median over `--reps` repetitions after a warm-up. Prints one row per size and the
geometric means; exits 0 (it measures, it does not judge).
"""
from __future__ import annotations

import argparse
import copy
import importlib
import math
import time

import torch
from torch import nn

CALLS = 20


def clock(fn, reps: int, device: str) -> float:
    """Median ms per call of `fn` over `reps` repetitions of CALLS calls."""
    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        if device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(CALLS):
                fn()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end) / CALLS)
        else:
            t = time.perf_counter()
            for _ in range(CALLS):
                fn()
            times.append((time.perf_counter() - t) * 1e3 / CALLS)
    return sorted(times)[len(times) // 2]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("package")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--reps", type=int, default=15)
    args = ap.parse_args()
    pkg = importlib.import_module(args.package)
    forward = next(n for n, s in pkg.MANIFEST["ops"].items() if s["direction"] == "forward")
    spec = pkg.MANIFEST["ops"][forward]
    kind = {"layernorm": (nn.LayerNorm, pkg.LayerNorm), "rmsnorm": (nn.RMSNorm, pkg.RMSNorm)}[spec["family"]]
    print(f"{args.package}.{forward} on {torch.cuda.get_device_name() if args.device == 'cuda' else 'cpu'}: "
          f"torch.nn.{kind[0].__name__} vs the exported op, both under torch.compile; ms per call "
          f"(median of {args.reps} x {CALLS} calls; launch included, L2 warm)")
    header = ["size", "bucket", "runs", "fwd torch", "fwd op", "fwd x", "fwd+bwd torch", "fwd+bwd op", "fwd+bwd x"]
    rows, ratios = [], {"fwd": [], "both": []}
    for j in spec["judged"]:
        B, N = j["sizes"]["B"], j["sizes"]["N"]
        theirs = kind[0](N, device=args.device)
        holder = nn.Sequential(copy.deepcopy(theirs))
        pkg.replace(holder)                        # as a user does: the module swapped, its parameters kept
        ours = holder[0]
        x = torch.randn(B, N, device=args.device)
        g = torch.randn(B, N, device=args.device)
        numbers = []
        for module in (theirs, ours):
            compiled = torch.compile(module, fullgraph=True)
            with torch.no_grad():
                fwd = clock(lambda: compiled(x), args.reps, args.device)
            xg = x.detach().requires_grad_(True)
            both = clock(lambda: compiled(xg).backward(g), args.reps, args.device)
            numbers.append((fwd, both))
            torch._dynamo.reset()
        (tf, tb), (of, ob) = numbers
        ratios["fwd"].append(tf / of)
        ratios["both"].append(tb / ob)
        rows.append([j["shape"], j["bucket"], j["runs"], f"{tf:.4f}", f"{of:.4f}", f"{tf / of:.2f}x", f"{tb:.4f}",
                     f"{ob:.4f}", f"{tb / ob:.2f}x"])
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(len(header))]
    for r in [header] + rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(r, widths)))
    geo = {k: math.exp(sum(map(math.log, v)) / len(v)) for k, v in ratios.items() if v}
    print(f"geomean: forward {geo.get('fwd', math.nan):.2f}x, forward + backward {geo.get('both', math.nan):.2f}x "
          f"(op over torch.compile; > 1: the op is faster); calls: {pkg.stats()}")


if __name__ == "__main__":
    main()
