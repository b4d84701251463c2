"""How much the evaluator verifies when it times a task: per shape, the calls a round and the rounds the judge plans
on a target, and the bytes of inputs and outputs it then draws again, computes in float64 and compares (every
timed call of the kernel, the synced latency call on CUDA included), with and without the per-configuration cap
`session.VERIFY_BYTES` (issue 14, Build 4: on layernorm_bwd's bench set this verification was most of a judgement).

    python experiments/verify_bytes.py [--target cuda] [--shapes bench] [TASK ...]   (default: the six tasks)

The plan is the judge's own (`session.calls_for`, `session.plan_rounds`, `session.set_bytes`), with the options'
defaults (10 calls a round, reps 100) and no time budget: the most rounds a configuration can get. One initialisation per shape is timed (a search's `time_inits=first`).
Computes from the task files only; times nothing and needs no GPU.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SIX = ["layernorm_fwd", "layernorm_bwd", "rmsnorm_fwd", "rmsnorm_bwd", "cross_entropy_fwd", "cross_entropy_bwd"]


def plan(task, shapes: str, cuda: bool, capped: bool) -> list[tuple[str, float, int, int, float]]:
    """(shape, a call's inputs and outputs in GB, calls a round, rounds, GB verified) per timed shape."""
    from kevolve.judge.options import Options
    from kevolve.judge.worker.session import calls_for, plan_rounds, set_bytes
    o = Options()
    out, seen = [], set()
    for cfg in task.configs(shapes):
        if cfg.shape_id in seen:
            continue
        seen.add(cfg.shape_id)
        sizes = cfg.size_dict
        one = set_bytes(task, sizes)
        n = calls_for(task, sizes, o.abi, o.calls, o.reps, cuda, 1)
        rounds = plan_rounds(o.reps, n, cuda, None, None, one if capped else 0)
        out.append((cfg.shape_id, one / 1e9, n, rounds, rounds * (n + cuda) * one / 1e9))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("tasks", nargs="*", default=SIX)
    ap.add_argument("--target", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--shapes", default="bench")
    a = ap.parse_args()
    from kevolve.task import load_task
    cuda = a.target == "cuda"
    print(f"{'task':18} {'shape':30} {'set GB':>7} {'calls':>5} {'rounds':>10} {'verified GB':>14}")
    for name in a.tasks:
        task = load_task(name)
        before, after = plan(task, a.shapes, cuda, False), plan(task, a.shapes, cuda, True)
        for (shape, gb, n, r0, v0), (_, _, _, r1, v1) in zip(before, after):
            print(f"{name:18} {shape:30} {gb:7.2f} {n:5d} {r0:4d} -> {r1:3d} {v0:6.0f} -> {v1:5.0f}")
        print(f"{name:18} {'all shapes':30} {'':7} {'':5} {'':10} "
              f"{sum(r[4] for r in before):6.0f} -> {sum(r[4] for r in after):5.0f}")


if __name__ == "__main__":
    main()
