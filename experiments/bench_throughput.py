"""Pipeline throughput: candidates fully judged per minute and evaluator busy fraction, for a fixed stream.

    python experiments/bench_throughput.py [--task layernorm_fwd] [--target cpu|cuda] [--evaluators 1 2]
                                           [--candidates 12] [--shapes small]

The stream is the same for every evaluator count: the task's seeds and their knob variants (deterministic,
deduplicated), built cold (a fresh build cache per run) and judged by the search's own pipeline
(`kevolve.search.run` with `stream=`). Prints one row per evaluator count, and the scaling over one.
"""
from __future__ import annotations

import argparse
import os
import random
import tempfile
from pathlib import Path

import ray

from kevolve.operators import knobs
from kevolve.config import Config, PopulationConfig, ResourcesConfig, SearchConfig, TaskConfig
from kevolve.search.population import source_hash
from kevolve.record.store import Store
from kevolve.report.tables import table
from kevolve.search.driver import run
from kevolve.task import load_task


def candidate_stream(task_name: str, target: str, n: int, seed: int = 0) -> list[str]:
    """n distinct sources: the seeds, then knob mutations of them (fixed by `seed`)."""
    task, rng = load_task(task_name), random.Random(seed)
    seeds = [p.read_text() for p in task.seed_paths(target)]
    out, seen = list(seeds[:n]), {source_hash(s) for s in seeds}
    for _ in range(50 * n):
        if len(out) >= n:
            break
        child = knobs.mutate(rng.choice(seeds), rng, n=2)
        if child and source_hash(child[0]) not in seen:
            seen.add(source_hash(child[0]))
            out.append(child[0])
    return out


def measure(args, evaluators: int, sources: list[str]):
    cfg = Config(task=TaskConfig(args.task, args.shapes),
                 search=SearchConfig(candidates=len(sources), wall_time_s=args.wall, reps=args.reps,
                                     budget_s=args.budget, population=PopulationConfig(islands=1)),
                 resources=ResourcesConfig(target=args.target, evaluators=evaluators), progress=False)
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["KEVOLVE_CACHE"] = str(Path(tmp) / "cache")
        summary = run(cfg, Path(tmp) / "run", stream=iter(sources))
        with Store.open(Path(tmp) / "run", readonly=True) as store:
            wrong = [f"{r.candidate.id}: {(r.feedback or '')[:400]}" for r in store.evaluated() if not r.correct]
    ray.shutdown()
    return summary, wrong


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--task", default="layernorm_fwd")
    ap.add_argument("--target", default="cpu")
    ap.add_argument("--shapes", default=None)
    ap.add_argument("--evaluators", type=int, nargs="+", default=[1])
    ap.add_argument("--candidates", type=int, default=12)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--budget", type=float, default=0.1)
    ap.add_argument("--wall", type=float, default=3600)
    args = ap.parse_args()
    sources = candidate_stream(args.task, args.target, args.candidates)
    rows, base = [], None
    rejected = []
    for e in args.evaluators:
        s, wrong = measure(args, e, sources)
        rejected += [f"{e} evaluator(s): {w}" for w in wrong]
        rate = s.candidates_per_minute
        if e == 1:                           # scaling is reported against a measured one-evaluator rate only
            base = rate
        rows.append([e, s.candidates, s.correct, f"{s.seconds:.0f}", f"{rate:.2f}",
                     f"{100 * s.evaluator_busy:.0f}%", f"{rate / base:.2f}x" if base else "-",
                     " ".join(f"{k}={v:.0f}s" for k, v in s.stage_seconds.items()),
                     " ".join(f"{k}={v:.0f}s" for k, v in s.judge_phases.items())])
    print(f"task {args.task}, target {args.target}, {len(sources)} candidates per run")
    print(table(rows, ["evaluators", "judged", "correct", "wall s", "per minute", "busy", "vs 1", "stage seconds", "of which judging"]))
    for line in rejected:                    # every stream is the seeds' knob variants: a rejection is news
        print(f"rejected: {line}")


if __name__ == "__main__":
    main()
