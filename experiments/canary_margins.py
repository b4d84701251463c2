"""The canary's margins on honest kernels (`judge.evaluator.canary`): for each kernel, every timed configuration's
known addition, the difference its canary rounds were reported with, and the ratio (an honest clock gives about 1;
under `canary.REJECT` is a rejection) — by the verdict's statistic (`canary.shift`, the median of pairwise
differences) and, beside it, by the difference of medians used before issue 49. Also the limits measured before the
kernel loaded (`impossible.Limits`).

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
        seen_rows.append((c.expect_ms, canary.shift(canaried, plain) if plain and canaried else None,
                          median(plain) if plain else None,
                          median(canaried) - median(plain) if plain and canaried else None))
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
        for expect, seen, plain, medians in seen_rows:
            ratio = seen / expect if seen is not None else None
            old = medians / expect if medians is not None else None
            print(f"  canary {expect * 1e3:9.2f} us  seen {seen * 1e3 if seen is not None else float('nan'):9.2f} us"
                  f"  ratio {ratio if ratio is not None else float('nan'):.3f}  (medians' difference "
                  f"{old if old is not None else float('nan'):.3f})  plain {plain * 1e3:9.2f} us")
            rows.append((spec, ratio, old))
    for k, name in ((1, "shift"), (2, "medians' difference")):
        ratios = [r[k] for r in rows if r[k] is not None]
        if ratios:
            low, near = sum(r < canary.REJECT for r in ratios), sum(r < canary.NEAR for r in ratios)
            print(f"canary ratios by {name} over {len(ratios)} configurations: min {min(ratios):.3f} median "
                  f"{median(ratios):.3f} max {max(ratios):.3f}, under {canary.REJECT}: {low}, under {canary.NEAR}: "
                  f"{near}")


if __name__ == "__main__":
    main()
