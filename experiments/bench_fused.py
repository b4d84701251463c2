"""The evaluator's checks, eager against compiled (`kevolve/judge/evaluator/fused.py`), on one device, without a worker:

    python experiments/bench_fused.py [--device cpu|cuda] [--shapes small|bench] [--reps 5] TASK [TASK ...]

Per task: over every configuration of the shape set, the seconds of one float64 reference (eager: the
Checker's own code; compiled: after its first call), their agreement (`Fused._disagree`), the graphs Dynamo
compiled and the compile's wall time; then one output comparison, eager (`Checker._ratio` and its maxima) against
compiled (`Fused.compare`), on the task's largest output. Times are medians of `--reps` calls, synced.
"""
from __future__ import annotations

import argparse
import statistics
import time


def timed(fn, reps: int, sync) -> float:
    fn()
    sync()
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        sync()
        out.append(time.perf_counter() - t0)
    return statistics.median(out)


def main() -> None:
    import torch
    from torch._dynamo.utils import counters

    from kevolve.judge.evaluator.checks import Checker
    from kevolve.judge.evaluator.fused import Fused
    from kevolve.judge.options import Options
    from kevolve.report.tables import table
    from kevolve.task import load_task

    ap = argparse.ArgumentParser()
    ap.add_argument("tasks", nargs="+")
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--shapes", default="small")
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
    rows = []
    for name in args.tasks:
        task = load_task(name)
        checker, fused = Checker(task, Options(target=args.device)), Fused(task, args.device, min_elements=0)
        counters.clear()
        eager_s = compiled_s = compile_s = 0.0
        disagree, biggest = [], None
        for cfg in task.configs(args.shapes):
            inputs = task.make_inputs(cfg, args.device, 5)
            t0 = time.perf_counter()
            got = fused._run_reference(cfg, inputs)
            sync()
            compile_s += time.perf_counter() - t0
            want = checker._expected(cfg, inputs)
            why = fused._disagree(got, want)
            if why:
                disagree.append(f"{cfg.id}: {why}")
            eager_s += timed(lambda c=cfg, i=inputs: checker._expected(c, i), args.reps, sync)
            compiled_s += timed(lambda c=cfg, i=inputs: fused._run_reference(c, i), args.reps, sync)
            for spec, (ref, finite) in zip(task.outputs, want):
                if ref.dtype.is_floating_point and (biggest is None or ref.numel() > biggest[1].numel()):
                    biggest = (spec, ref, finite)
            del inputs, got, want
        compile_s -= compiled_s          # the first calls' time less one steady call per configuration
        spec, ref, finite = biggest
        out = (ref * (1 + 1e-6)).to(getattr(torch, spec.dtype))

        def eager_compare():
            ratio, err = checker._ratio(out, ref, finite, need_err=True)
            return torch.stack([ratio.max(), err.max()]).tolist()
        cmp_eager = timed(eager_compare, args.reps, sync)
        cmp_compiled = timed(lambda: fused.compare(out, ref, finite).tolist(), args.reps, sync)
        rows.append([name, len(task.configs(args.shapes)), counters["stats"].get("unique_graphs", 0),
                     f"{compile_s:.1f}", f"{eager_s * 1e3:.1f}", f"{compiled_s * 1e3:.1f}",
                     f"{eager_s / compiled_s:.1f}x", f"{ref.numel()}", f"{cmp_eager * 1e3:.2f}",
                     f"{cmp_compiled * 1e3:.2f}", "; ".join(disagree) or ("off: " + str(fused.off) if fused.off else "yes")])
        print(f"{name} done", flush=True)
    print(f"# python experiments/bench_fused.py --device {args.device} --shapes {args.shapes} --reps {args.reps} "
          + " ".join(args.tasks))
    print(table(rows, ["task", "configs", "graphs", "compile s", "eager ref ms (sum)", "compiled ref ms (sum)",
                       "ref speedup", "compare elements", "eager compare ms", "compiled compare ms", "agree"]))


if __name__ == "__main__":
    main()
