"""What the node's torch.compile cache (kevolve/judge/evaluator/baseline_cache.py) saves: the same seed judged N times in a
row, each in a fresh worker with both baselines compiled (no evaluator reuse), starting from an empty build cache.

    python experiments/bench_baseline_cache.py [--task tests/kernels/tasks/layernorm_one] [--judgements 2] [--off]

Prints per judgement its wall time and the harness's `baselines` phase (torch.compile of the baselines, their
warm-up included). `--off` sets KEVOLVE_BASELINE_CACHE=0: every worker compiles from nothing.
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", default=str(ROOT / "tests" / "kernels" / "tasks" / "layernorm_one"))
    ap.add_argument("--target", default="cpu")
    ap.add_argument("--judgements", type=int, default=2)
    ap.add_argument("--off", action="store_true")
    args = ap.parse_args()
    os.environ["KEVOLVE_CACHE"] = tempfile.mkdtemp(prefix="kevolve-bench-cache-")
    if args.off:
        os.environ["KEVOLVE_BASELINE_CACHE"] = "0"
    from kevolve.judge.evaluator.harness import evaluate
    from kevolve.judge.options import Options, default_shapes
    from kevolve.task import load_task
    task = load_task(args.task)
    options = Options(target=args.target, shapes=default_shapes(args.target), baselines=("eager", "compile"),
                      reps=5, budget_s=0.02, timeout=120)
    for i in range(args.judgements):
        t = time.perf_counter()
        ev = evaluate(task, task.seed_path(args.target).read_text(), options)
        print(f"judgement {i + 1}: correct={ev.correct} wall {time.perf_counter() - t:.1f} s, "
              f"baselines {ev.phases.get('baselines', 0.0):.1f} s, load {ev.phases.get('load', 0.0):.1f} s"
              + (f" ({ev.failure})" if ev.failure else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
