"""Where one evaluator's time goes: judges one kernel several times in a row, as a search's evaluator does.

    python experiments/bench_judge.py --task layernorm_bwd --kernel tasks/layernorm_bwd/seeds/cpu_fused.cpp
                                      [--target cpu|cuda] [--shapes small|bench] [--judgements 3]
                                      [--no-reuse] [--profile FILE] [--compiled-checks auto|on|off]

Prints, per judgement, the wall seconds and the seconds per phase (`judge.evaluator.phases.Phases`: load, check,
reference, baselines, time). With reuse (the search's default) the first judgement pays for the worker's
start, the references and torch.compile; the later ones show what a candidate costs in a running search.
Then, for the last judgement, every phase (the worker's own breakdown, `worker …`, included); with
`--profile`, the evaluator's side of the last judgement under cProfile, its 40 costliest functions written to FILE.
"""
from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import time
from pathlib import Path

from kevolve.judge import build
from kevolve.judge.evaluator.harness import judge
from kevolve.judge.options import Options
from kevolve.judge.evaluator.reuse import Reuse
from kevolve.report.tables import table
from kevolve.task import load_task

PHASES = ("load", "check", "reference", "baselines", "time")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--task", default="layernorm_bwd")
    ap.add_argument("--kernel", required=True)
    ap.add_argument("--target", default="cpu")
    ap.add_argument("--shapes", default=None)
    ap.add_argument("--judgements", type=int, default=3)
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--budget", type=float, default=0.15)
    ap.add_argument("--reference-gb", type=float, default=16.0)
    ap.add_argument("--compiled-checks", default="auto", choices=("auto", "on", "off"),
                    help="the evaluator's reference and comparison by torch.compile (judge/evaluator/fused.py; auto: on cuda)")
    ap.add_argument("--cpu-flush", default="lines", choices=("lines", "llc"),
                    help="how a timed CPU call is made cold (judge/worker/timing.py CpuClock)")
    ap.add_argument("--no-reuse", action="store_true", help="a fresh worker, references and baselines each time")
    ap.add_argument("--profile", default=None, help="cProfile the last judgement; its top functions go here")
    args = ap.parse_args()
    task = load_task(args.task)
    shapes = args.shapes or ("bench" if args.target == "cuda" else "small")
    options = Options(target=args.target, shapes=shapes, reps=args.reps, budget_s=args.budget, time_inits="first",
                      compiled_checks=args.compiled_checks, cpu_flush=args.cpu_flush)
    built = build.build(Path(args.kernel).read_text(), args.target, "c")
    if not built.ok:
        raise SystemExit(f"build failed: {built.error}")
    reuse = None if args.no_reuse else Reuse(options, int(args.reference_gb * (1 << 30)), 3600)
    rows = []
    try:
        for i in range(args.judgements):
            prof = cProfile.Profile() if args.profile and i == args.judgements - 1 else None
            t0 = time.perf_counter()
            if prof:
                prof.enable()
            ev = judge(task, built.lib_path, options, reuse=reuse)
            if prof:
                prof.disable()
            wall = time.perf_counter() - t0
            rows.append([i + 1, "yes" if ev.correct else f"no ({ev.stage})", f"{wall:.1f}",
                         *(f"{ev.phases.get(p, 0.0):.1f}" for p in PHASES),
                         f"{ev.speedup:.2f}x" if ev.speedup else "-", ev.work.get("timed_calls", 0),
                         f"{ev.work.get('flushed_bytes', 0) / 2**20:.0f}"])
            print(f"judgement {i + 1}: {ev.failure or 'correct'}", flush=True)
    finally:
        if reuse:
            reuse.close()
    print(f"{args.task} on {shapes} ({args.target}), kernel {args.kernel}, "
          f"{'fresh each time' if args.no_reuse else 'reuse (search default)'}")
    print(table(rows, ["#", "correct", "wall s", *PHASES, "speedup", "timed calls", "flushed MiB"]))
    print("last judgement, every phase (s): " + ", ".join(f"{k} {v:.2f}" for k, v in sorted(ev.phases.items())))
    if reuse and reuse.compiled:
        for (name, _, device), f in reuse.compiled.items():
            print(f"compiled checks ({name}, {device}): {len(f.agreed)} configurations' compiled references agreed "
                  f"with eager's; off: {f.off or 'nothing'}")
    else:
        print(f"compiled checks: not used (--compiled-checks {args.compiled_checks}, target {args.target}"
              f"{', no reuse' if args.no_reuse else ''})")
    if prof:
        text = io.StringIO()
        stats = pstats.Stats(prof, stream=text)
        stats.sort_stats("tottime").print_stats(40)
        stats.sort_stats("cumulative").print_stats(40)
        Path(args.profile).write_text(text.getvalue())
        print(f"profile of the last judgement: {args.profile}")


if __name__ == "__main__":
    main()
