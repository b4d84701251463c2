"""A second clock for a CPU layernorm_bwd kernel: torch.utils.benchmark, outside kevolve's harness.

    python experiments/second_clock_cpu.py runs/layernorm_bwd/<run>/best.cpp [--cold]

The judge times cold calls (every buffer evicted before each call) interleaved with torch's baselines in a
confined worker. This script times the same C-ABI kernel (built by `kevolve.judge.build`, called through ctypes),
torch eager (`reference.baseline`, what the judge times as eager) and torch.compile of it (default mode) with
`torch.utils.benchmark.Timer.blocked_autorange`: warm by default (one input set, called again and again), or with
`--cold`, each contender's calls rotating over as many input, output and workspace sets as fill 2 x the LLC
(`/sys/devices/system/cpu/cpu0/cache`), so that each call finds its buffers evicted by the calls before it.
The kernel's outputs are checked against the float64 reference first. It prints µs per call and the ratios on
the small set's configurations, and their geometric mean, to compare with the judge's table.
"""
from __future__ import annotations

import argparse
import ctypes
import importlib.util
import math
import sys
from pathlib import Path

import torch
import torch.utils.benchmark as tb

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kevolve.judge.build import build  # noqa: E402

CONFIGS = [dict(B=1, N=4096, eps=1e-5), dict(B=8, N=4096, eps=1e-6), dict(B=16, N=65536, eps=1e-3),
           dict(B=64, N=256, eps=1e-5), dict(B=1, N=262147, eps=1e-5), dict(B=37, N=1000, eps=1e-3),
           dict(B=1000, N=33, eps=1e-5), dict(B=3, N=13, eps=1e-3)]


def llc_bytes() -> int:
    best = 32 << 20
    for idx in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        size = (idx / "size").read_text().strip()
        n = int(size[:-1]) * {"K": 1 << 10, "M": 1 << 20}[size[-1]] if size[-1] in "KM" else int(size)
        best = max(best, n) if (idx / "level").read_text().strip() == "3" else best
    return best


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("kernel")
    ap.add_argument("--cold", action="store_true")
    ap.add_argument("--min-run", type=float, default=0.5)
    a = ap.parse_args()
    spec = importlib.util.spec_from_file_location("ref", ROOT / "tasks/layernorm_bwd/reference.py")
    ref = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ref)
    b = build(Path(a.kernel).read_text(), "cpu")
    assert b.ok, b.error
    lib = ctypes.CDLL(b.lib_path)
    fn = lib.backward
    fn.restype = ctypes.c_int
    ptr, i64 = ctypes.c_void_p, ctypes.c_int64
    fn.argtypes = [ptr] * 7 + [i64, i64, ctypes.c_float, ptr, i64]
    torch._dynamo.config.cache_size_limit = 64                  # one graph per configuration, never eager again
    compiled = torch.compile(ref.baseline, dynamic=False)
    rows, logs = [], {"vs eager": [], "vs compile": [], "vs the faster": []}
    for c in CONFIGS:
        B, N, eps = c["B"], c["N"], c["eps"]
        g = torch.Generator().manual_seed(0)
        ws_bytes = 8 * B + 8 * N * min(B, 256) + 1048576
        footprint = 4 * (5 * B * N + 4 * N) + ws_bytes
        k_sets = max(1, math.ceil(2 * llc_bytes() / footprint)) if a.cold else 1
        sets = []
        for _ in range(k_sets):
            go, x = torch.randn(B, N, generator=g), torch.randn(B, N, generator=g) * 2 + 1
            w, bias = torch.randn(N, generator=g), torch.randn(N, generator=g)
            out, ws = (torch.empty(B, N), torch.empty(N), torch.empty(N)), torch.empty(ws_bytes, dtype=torch.uint8)
            ptrs = [t.data_ptr() for t in (go, x, w, bias, *out)] + [B, N, eps, ws.data_ptr(), ws_bytes]
            sets.append(((go, x, w, bias), out, ws, ptrs))

        def kernel():
            for *_, ptrs in sets:
                assert fn(*ptrs) == 0

        def eager():
            for ins, *_ in sets:
                ref.baseline(*ins, B=B, N=N, eps=eps)

        def comp():
            for ins, *_ in sets:
                compiled(*ins, B=B, N=N, eps=eps)

        kernel()
        for ins, out, *_ in sets[:2]:
            want = ref.reference(*(t.double() for t in ins), B=B, N=N, eps=eps)
            for got, exp in zip(out, want):
                assert torch.allclose(got.double(), exp, rtol=1e-3, atol=1e-3 * max(1.0, float(exp.abs().max()))), c
        comp()
        comp()

        def us(f) -> float:
            return tb.Timer("f()", globals={"f": f}).blocked_autorange(min_run_time=a.min_run).median * 1e6 / k_sets

        k, e, co = us(kernel), us(eager), us(comp)
        logs["vs eager"].append(math.log(e / k))
        logs["vs compile"].append(math.log(co / k))
        logs["vs the faster"].append(math.log(min(e, co) / k))
        rows.append(f"B={B},N={N}".ljust(16) + f"{e:10.1f}{co:10.1f}{k:10.1f}{e / k:10.2f}x{co / k:10.2f}x"
                    f"{k_sets:6d}")
    how = "cold: calls rotate over input sets of 2 x the LLC" if a.cold else "warm"
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, {how}, "
          f"µs per call (torch.utils.benchmark median)")
    print("config".ljust(16) + "     eager   compile    kernel  vs eager  vs compile  sets")
    print("\n".join(rows))
    print("geomean: " + ", ".join(f"{k} {math.exp(sum(v) / len(v)):.2f}x" for k, v in logs.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
