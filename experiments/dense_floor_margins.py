"""Margins for a round that would floor a CPU kernel's time from outside (docs/guarantees.md, "On the CPU the same
round would tighten bound 2"): for each kernel, each timed configuration's reported cold per-call time (the
judge's median) against a warm floor — R back-to-back calls on inputs mixed before each call, each call's
outputs hashed, the CPU they burned less the same loop without the calls, over R (the larger of the main thread's
and all threads' over the cores). An honest kernel's cold time should not be under its warm floor (ratio >= 1
less the noise); the forger that divides its samples by 5 would read a fifth of it. Measured here, in this process,
with no adversary: the margins a bound would need, not the bound. `--cold io`: the call's inputs and outputs are evicted
from every cache level just before it, in both loops, as the judge's clock does before a timed call
(`judge.worker.evict`); `--cold all`: its workspace too, every buffer the judge's clock evicts. The cold floor a
round would have to measure, since a warm one is the wrong floor.

    PYTHONPATH=$PWD python experiments/dense_floor_margins.py [--cold io|all] \
        tests/kernels/tasks/layernorm_tiny:tests/kernels/tasks/layernorm_tiny/seeds/cpu.cpp ...

A task is a name or a folder; the kernel a C-ABI CPU source. `--calls R` (default: enough for about 30 ms).
"""
from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import torch

from kevolve.judge import build as builder
from kevolve.judge.evaluator.harness import evaluate
from kevolve.judge.options import Options
from kevolve.judge.worker import evict
from kevolve.judge.worker.buffers import allocate
from kevolve.judge.worker.timing import median
from kevolve.task import load_task
from kevolve.task.abi import CKernel


WORKSPACE = False                                          # --cold all: the workspace is evicted too


def floor_ms(kernel: CKernel, task, case, calls: int, cores: int, evictor=None) -> tuple[float, int]:
    """The floor of one configuration in ms per call (warm, or cold with an `evict.Evictor`), and the calls it took."""
    sizes = case.size_dict
    buf = allocate(task, "cpu", sizes)
    mine = [*buf["inputs"].values(), *buf["outputs"].values(), *([buf["workspace"]] if WORKSPACE else [])]
    cold = evictor.ranges(mine) if evictor else None
    base = task.make_inputs(case, "cpu", 7)
    scalars = task.scalar_values(case)
    noise = {n: torch.randn_like(t) * 1e-3 if t.is_floating_point() else None for n, t in base.items()}

    def loop(n: int, call: bool) -> tuple[float, float]:
        t0, m0 = time.process_time(), time.thread_time()
        for k in range(n):
            for name, t in base.items():                    # a mix only this call's constants give
                dst = buf["inputs"][name]
                dst.copy_(t)
                if noise[name] is not None:
                    dst.add_(noise[name], alpha=float(k % 97) + 1.0)
            if cold is not None:
                evictor.evict(cold)
            if call:
                kernel(buf["inputs"], buf["outputs"], sizes, buf["workspace"], scalars=scalars, case=case)
            for out in buf["outputs"].values():             # the commitment: a hash of the output's bytes
                out.view(torch.uint8)[: out.numel() * out.element_size() // 4 * 4].view(torch.int32).sum()
        return time.process_time() - t0, time.thread_time() - m0

    loop(3, True)                                           # warm
    if calls <= 0:
        t0 = time.perf_counter()
        loop(10, True)
        per = max((time.perf_counter() - t0) / 10, 1e-6)
        calls = int(min(20000, max(50, 0.030 / per)))
    with_total, with_main = loop(calls, True)
    without_total, without_main = loop(calls, False)
    per_call = max(with_main - without_main, (with_total - without_total) / cores) / calls
    return per_call * 1e3, calls


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("kernels", nargs="+", help="task:path of a C-ABI CPU kernel source")
    ap.add_argument("--calls", type=int, default=0)
    ap.add_argument("--shapes", default="small")
    ap.add_argument("--cold", choices=["io", "all"], help="evict the call's inputs and outputs (io), and its workspace "
                    "too (all: every buffer the judge's clock evicts), before each call")
    ap.add_argument("--torch-threads", type=int, default=1, help="torch's threads for the mix and the hash")
    args = ap.parse_args()
    cores = len(os.sched_getaffinity(0))
    global WORKSPACE
    WORKSPACE = args.cold == "all"
    lib = evict.library() if args.cold else None
    if args.cold and lib is None:
        raise SystemExit("--cold: the evictor could not be built here (no C compiler?)")
    evictor = evict.Evictor(lib) if lib else None
    kind = "cold" if evictor else "warm"
    ratios = []
    for spec in args.kernels:
        name, path = spec.split(":", 1)
        task = load_task(name if not Path(name).is_dir() else Path(name))
        source = Path(path).read_text()
        ev = evaluate(task, source, Options(target="cpu", shapes=args.shapes))
        built = builder.build(source, "cpu")
        if not (ev.correct and built.ok):
            print(f"{spec}: not judged correct ({ev.failure or built.error}); skipped")
            continue
        kernel = CKernel(built.lib_path, task, "cpu")
        torch.set_num_threads(args.torch_threads)   # the mix and the hash: one thread, as the worker's flush (a
                                                    # pool's spinning threads beside the kernel's slowed it)
        cases = {c.id: c for c in task.configs(args.shapes)}
        print(f"{spec}: speedup {ev.speedup:.2f}x")
        for m in ev.measurements:
            if m.kernel is None or m.config not in cases:
                continue
            floor, calls = floor_ms(kernel, task, cases[m.config], args.calls, cores, evictor)
            ratio = m.kernel.median / floor if floor > 0 else float("inf")
            ratios.append(ratio)
            print(f"  {m.config:40s} cold {m.kernel.median * 1e3:9.2f} us  {kind} floor {floor * 1e3:9.2f} us "
                  f"({calls} calls)  ratio {ratio:6.2f}")
    if ratios:
        print(f"cold / {kind} floor over {len(ratios)} configurations: min {min(ratios):.2f} "
              f"median {median(ratios):.2f} max {max(ratios):.2f} (the ÷5 forger would read a fifth)")


if __name__ == "__main__":
    main()
