"""How much of each task's tolerance torch's own float32 result uses, and whether TF32 would pass.

    python experiments/tolerance_margins.py TASK [TASK ...] [--shapes bench] [--device cuda] [--inits all]

Per configuration: the worst |baseline - reference| / (atol + rtol |reference|) over all outputs, with the
baseline in float32 and TF32 off (as the judge's worker runs it), and again with TF32 on (cuBLAS / cuDNN
on a GPU; on the CPU, which has no TF32, the float64 reference on inputs rounded to TF32's 10-bit mantissa).
A task's tolerance is right when the first column stays well under 1 and the second is over 1 somewhere.
`--max-macs` skips configurations whose float64 reference would take too long on this device.
"""
from __future__ import annotations

import argparse
import time

import torch

from kevolve.task import load_task


def tf32(t: torch.Tensor) -> torch.Tensor:
    """`t` rounded to TF32 (10 explicit mantissa bits, round to nearest even)."""
    if not t.is_floating_point():
        return t
    bits = t.float().view(torch.int32)
    bits = (bits + 0xFFF + ((bits >> 13) & 1)) & ~0x1FFF
    return bits.view(torch.float32).to(t.dtype)


def worst(task, outs, refs) -> float:
    w = 0.0
    for out, ref in zip(outs, refs):
        out = out.double().reshape(ref.shape)
        if not torch.isfinite(out).all():
            return float("inf")
        w = max(w, float(((out - ref).abs() / (task.atol + task.rtol * ref.abs())).max()))
    return w


def macs(task, sizes) -> int:
    flops = task.flops(sizes)
    return flops // 2 if flops else task.floor(sizes)


def measure(name: str, shapes: str, device: str, inits: str, max_macs: float) -> None:
    task = load_task(name)
    print(f"{name}: atol={task.atol:g} rtol={task.rtol:g}")
    for c in task.configs(shapes):
        if inits == "first" and c.init != task.init_sets[0] or c.seed != 0:
            continue
        if macs(task, c.size_dict) > max_macs:
            print(f"  {c.id:48s} skipped ({macs(task, c.size_dict):.3g} multiply-adds)")
            continue
        start = time.perf_counter()
        inputs = task.make_inputs(c, device)
        up = {k: v.double() if v.is_floating_point() else v for k, v in inputs.items()}
        refs = task.call_reference(up, c)
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
        fp32 = worst(task, task.call_baseline(inputs, c), refs)
        if device == "cuda":
            torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
            low = worst(task, task.call_baseline(inputs, c), refs)
            torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
        else:
            low = worst(task, task.call_reference({k: tf32(v) for k, v in up.items()}, c), refs)
        print(f"  {c.id:48s} float32 {fp32:8.3f}   tf32 {low:10.3f}   ({time.perf_counter() - start:.1f} s)",
              flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("tasks", nargs="+")
    ap.add_argument("--shapes", default="bench")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--inits", default="all", choices=["all", "first"])
    ap.add_argument("--max-macs", type=float, default=float("inf"))
    args = ap.parse_args()
    for name in args.tasks:
        measure(name, args.shapes, args.device, args.inits, args.max_macs)


if __name__ == "__main__":
    main()
