"""How much of each task's tolerance torch's own float32 result uses, and whether TF32 would pass.

    python experiments/tolerance_margins.py TASK [TASK ...] [--shapes bench] [--device cuda] [--inits all]
                                            [--compile] [--only REGEX] [--max-macs X]

Per configuration: the worst |baseline - reference| / (atol + rtol |reference|) over all outputs, with the
baseline in float32 and TF32 off (as the judge's worker runs it: `kevolve.task.precision`), and again with
TF32 on (cuBLAS / cuDNN on a GPU; on the CPU, which has no TF32, the float64 reference on inputs rounded to
TF32's 10-bit mantissa); with `--compile`, torch.compile's float32 result too (compiled per configuration as
the worker compiles it, dynamic=False, TF32 off). A task's tolerance is right when the float32 columns stay
well under 1 and the TF32 one is over 1 somewhere.
`--inits` takes all, first, or a comma-separated list of init sets; `--only` keeps the configurations whose id
matches REGEX (re.search); `--max-macs` skips those whose float64 reference would take too long on this
device. Each configuration's tensors (and compiled code) are freed before the next.
"""
from __future__ import annotations

import argparse
import gc
import re
import time

import torch

from kevolve.task import load_task
from kevolve.task.precision import set_strict_float32


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


def chosen(task, c, first_seed: int, inits: str, only: str | None) -> bool:
    """Whether configuration `c` is measured: the set's first seed, an init set asked for, an id that matches."""
    if c.seed != first_seed:
        return False
    if inits == "first" and c.init != task.init_sets[0]:
        return False
    if inits not in ("all", "first") and c.init not in inits.split(","):
        return False
    return only is None or re.search(only, c.id) is not None


def compiled(task, c):
    import torch._dynamo
    torch._dynamo.config.recompile_limit = 64
    sizes, scalars = c.size_dict, task.scalar_values(c)
    fn = torch.compile(lambda *ins: task.baseline(*ins, **sizes, **scalars), dynamic=False)
    return lambda inputs: fn(*[inputs[s.name] for s in task.inputs])


def measure(name: str, shapes: str, device: str, inits: str, max_macs: float, only: str | None,
            with_compile: bool) -> None:
    task = load_task(name)
    print(f"{name}: atol={task.atol:g} rtol={task.rtol:g}")
    first = task.configs(shapes)[0].seed
    for c in task.configs(shapes):
        if not chosen(task, c, first, inits, only):
            continue
        if macs(task, c.size_dict) > max_macs:
            print(f"  {c.id:48s} skipped ({macs(task, c.size_dict):.3g} multiply-adds)")
            continue
        start = time.perf_counter()
        try:
            one(task, c, device, with_compile, start)
        except Exception as e:                            # noqa: BLE001 - say it, go on with the next one
            print(f"  {c.id:48s} failed: {type(e).__name__}: {str(e).splitlines()[0][:120]}", flush=True)
        gc.collect()
        if device == "cuda":
            torch.cuda.empty_cache()


def one(task, c, device: str, with_compile: bool, start: float) -> None:
    """One configuration's line: eager float32, torch.compile (optional), TF32."""
    inputs = task.make_inputs(c, device)
    up = {k: v.double() if v.is_floating_point() else v for k, v in inputs.items()}
    refs = task.call_reference(up, c)
    del up
    set_strict_float32()
    fp32 = worst(task, task.call_baseline(inputs, c), refs)
    comp = ""
    if with_compile:
        try:
            comp = f"   compile {worst(task, _listed(compiled(task, c)(inputs)), refs):8.3f}"
        except Exception as e:                        # noqa: BLE001 - the failure is the finding
            comp = f"   compile failed: {type(e).__name__}: {str(e).splitlines()[0][:80]}"
        torch._dynamo.reset()
    if device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
        low = worst(task, task.call_baseline(inputs, c), refs)
        set_strict_float32()
    else:
        low = worst(task, task.call_reference({k: tf32(v.double() if v.is_floating_point() else v)
                                               for k, v in inputs.items()}, c), refs)
    print(f"  {c.id:48s} float32 {fp32:8.3f}{comp}   tf32 {low:10.3f}   ({time.perf_counter() - start:.1f} s)",
          flush=True)


def _listed(x) -> list:
    return list(x) if isinstance(x, (tuple, list)) else [x]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("tasks", nargs="+")
    ap.add_argument("--shapes", default="bench")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--inits", default="all", help="all, first, or init sets separated by commas")
    ap.add_argument("--only", default=None, help="a regular expression the configuration ids must match")
    ap.add_argument("--compile", action="store_true", help="torch.compile's result too")
    ap.add_argument("--max-macs", type=float, default=float("inf"))
    args = ap.parse_args()
    for name in args.tasks:
        measure(name, args.shapes, args.device, args.inits, args.max_macs, args.only, args.compile)


if __name__ == "__main__":
    main()
