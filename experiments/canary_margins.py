"""The canary's margins on honest kernels (`judge.evaluator.canary`): for each kernel, every timed configuration's
known addition, the difference its canary rounds were reported with, and the ratio (an honest clock gives about 1;
under `canary.REJECT` is a rejection). Also the limits measured before the kernel loaded (`impossible.Limits`).

    python experiments/canary_margins.py --target cpu layernorm_fwd:tasks/layernorm_fwd/seeds/cpu.cpp ...
    python experiments/canary_margins.py --target cuda layernorm_fwd:tasks/layernorm_fwd/best/cuda.cu
"""
from __future__ import annotations

import argparse
import time

from kevolve.judge.evaluator import canary, impossible
from kevolve.judge.evaluator.harness import evaluate
from kevolve.judge.options import Options
from kevolve.judge.worker.timing import median
from kevolve.task import load_task


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("kernels", nargs="+", help="task:path of a kernel source")
    ap.add_argument("--target", default="cpu")
    ap.add_argument("--shapes", default="small")
    ap.add_argument("--reps", type=int, default=None)
    args = ap.parse_args()
    seen_rows: list[tuple] = []
    limits_seen: list = []
    verdict, measure = canary.verdict, impossible.measure

    def spy_verdict(plain, canaried, c, who):
        seen_rows.append((c.expect_ms, median(canaried) - median(plain) if plain and canaried else None,
                          median(plain) if plain else None))
        return verdict(plain, canaried, c, who)

    def spy_measure(*a, **k):
        limits_seen.append(measure(*a, **k))
        return limits_seen[-1]
    canary.verdict, impossible.measure = spy_verdict, spy_measure
    rows = []
    for spec in args.kernels:
        task_name, path = spec.split(":", 1)
        seen_rows.clear()
        limits_seen.clear()
        opts = Options(target=args.target, shapes=args.shapes, **({"reps": args.reps} if args.reps else {}))
        t0 = time.time()
        ev = evaluate(load_task(task_name), open(path).read(), opts)
        lim = limits_seen[-1] if limits_seen else None
        print(f"{spec}: correct={ev.correct} {time.time() - t0:.1f}s failure={ev.failure}")
        if lim:
            print(f"  limits: trivial {lim.trivial_ms and lim.trivial_ms * 1e3:.3f} us, peak {lim.peak_gbs} GB/s "
                  f"({lim.peak_from}), cycle {lim.cycle_ms} ms")
        for expect, seen, plain in seen_rows:
            ratio = seen / expect if seen is not None else None
            print(f"  canary {expect * 1e3:9.2f} us  seen {seen * 1e3 if seen is not None else float('nan'):9.2f} us"
                  f"  ratio {ratio if ratio is not None else float('nan'):.3f}  plain {plain * 1e3:9.2f} us")
            rows.append((spec, ratio))
    ratios = [r for _, r in rows if r is not None]
    if ratios:
        print(f"canary ratios over {len(ratios)} configurations: min {min(ratios):.3f} median {median(ratios):.3f} "
              f"max {max(ratios):.3f} (reject under {canary.REJECT}, time again under {canary.NEAR})")


if __name__ == "__main__":
    main()
