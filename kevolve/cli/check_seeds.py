"""Judges every seed kernel of every task for one target (correctness only, no timing) and prints a table.

    python -m kevolve.tasks check-seeds [--target cuda] [--shapes small]

The quick check to run on a new GPU host before a search: a seed that fails here fails the search's start.
Exit status: 0 every seed correct, 1 one is not.
"""
from __future__ import annotations

import argparse
import time

from kevolve.judge.evaluator.harness import evaluate
from kevolve.judge.options import Options
from kevolve.report.tables import table
from kevolve.task import list_tasks, load_task


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kevolve.tasks check-seeds", description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="cuda")
    ap.add_argument("--shapes", default="small")
    args = ap.parse_args(argv)
    options = Options(target=args.target, shapes=args.shapes, time_kernel=False)
    rows = []
    for name in list_tasks():
        task = load_task(name)
        for path in task.seed_paths(args.target):
            start = time.perf_counter()
            ev = evaluate(task, path.read_text(), options)
            rows.append([name, path.name, "yes" if ev.correct else "NO", f"{time.perf_counter() - start:.1f}",
                         (ev.failure or "")[:150]])
            print(" | ".join(rows[-1]), flush=True)
    print(table(rows, ["task", "seed", "correct", "seconds", "failure"]))
    return 0 if all(r[2] == "yes" for r in rows) else 1
