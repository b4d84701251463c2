"""Times a seed and chosen knob variants of it side by side, in one evaluator, as a search's evaluator would.

    python -m kevolve.tasks knob-sweep --task layernorm_fwd --kernel tasks/layernorm_fwd/seeds/cuda_rows.cu \
        [--target cuda] [--shapes bench] [--each GRID_PATH] [--variant "GRID_PATH=1,GRID_THREADS=256" ...] \
        [--baselines eager,compile] [--reps 50] [--budget 0.15] [--out FILE]

Where a search samples knob values at random, this answers a kernel engineer's question directly: which value of
which knob pays on which configuration. `--each NAME` adds one variant per other choice of that knob (the rest at
the kernel's values); `--variant` one variant with the values given. Every variant is rewritten by
`kevolve.operators.knobs.apply` (an unknown knob or a value outside its choices is an error before anything
builds), built (in parallel), then judged one after another by one evaluator that times the baselines with the
first and reuses them after (the search's `Reuse`), first initialisation of each shape. Prints one row per
configuration — best torch, then each variant's time per call (device time on CUDA) and its ratio to best torch —
then the geomeans; a variant that fails to build or is judged incorrect says why in its column's last row.
"""
from __future__ import annotations

import argparse
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from kevolve.config import SearchConfig
from kevolve.judge import build
from kevolve.judge.evaluator.harness import judge
from kevolve.judge.options import Options
from kevolve.judge.evaluator.reuse import Reuse
from kevolve.operators import knobs
from kevolve.report.tables import table
from kevolve.task import load_task
from kevolve.task.expr import geomean


def variants(source: str, each: list[str], given: list[str]) -> list[tuple[str, dict]]:
    """(label, knob values) per variant, the kernel as it is first. Raises ValueError for an unknown knob."""
    found = knobs.parse(source)
    out: list[tuple[str, dict]] = [("as is", {})]
    for name in each:
        if name not in found:
            raise ValueError(f"--each {name}: the kernel has no knob {name} (its knobs: {', '.join(found) or 'none'})")
        out += [(f"{name}={v}", {name: v}) for v in found[name].choices if v != found[name].value]
    for text in given:
        values = {}
        for item in text.split(","):
            name, sep, value = item.partition("=")
            if not sep or not name.strip():
                raise ValueError(f"--variant {text!r}: expected NAME=VALUE[,NAME=VALUE...]")
            values[name.strip()] = value.strip()
        out.append((text, values))
    for label, values in out:
        knobs.apply(source, values)                   # raises for an unknown knob or a value outside its choices
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kevolve.tasks knob-sweep", description=__doc__.split("\n\n")[0])
    ap.add_argument("--task", required=True)
    ap.add_argument("--kernel", required=True)
    ap.add_argument("--target", default="cpu")
    ap.add_argument("--shapes", default=None)
    ap.add_argument("--each", action="append", default=[], help="one variant per other choice of this knob")
    ap.add_argument("--variant", action="append", default=[], help="NAME=VALUE[,NAME=VALUE...]")
    search = SearchConfig()                       # the search's timing effort, unless told
    ap.add_argument("--baselines", default=",".join(search.baselines))
    ap.add_argument("--reps", type=int, default=search.reps)
    ap.add_argument("--budget", type=float, default=search.budget_s)
    ap.add_argument("--out", default=None, help="also write the table here")
    args = ap.parse_args(argv)
    task = load_task(args.task)
    source = Path(args.kernel).read_text()
    try:
        todo = variants(source, args.each, args.variant)
    except ValueError as e:
        print(f"knob_sweep: {e}", file=sys.stderr)
        return 2
    shapes = args.shapes or ("bench" if args.target == "cuda" else "small")
    options = Options(target=args.target, shapes=shapes, reps=args.reps, budget_s=args.budget, time_inits="first",
                      baselines=tuple(b for b in args.baselines.split(",") if b))
    with ThreadPoolExecutor(max_workers=4) as pool:
        built = list(pool.map(lambda v: build.build(knobs.apply(source, v[1]), args.target, "c"), todo))
    reuse = Reuse(options, 16 << 30, 3600)
    evs = []
    try:
        for (label, _), b in zip(todo, built):
            ev = judge(task, b.lib_path, options, reuse=reuse) if b.ok else None
            evs.append(ev)
            print(f"{label}: " + ("build failed: " + (b.error or "")[:200] if ev is None else
                                  ev.failure or f"correct, {ev.speedup:.2f}x over best torch"), flush=True)
    finally:
        reuse.close()
    text = render(todo, built, evs, f"{args.task} ({shapes}, {args.target}), {args.kernel}")
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0


def render(todo, built, evs, title: str) -> str:
    """The table: a row per timed configuration of the first correct judgement, a column per variant."""
    first = next((ev for ev in evs if ev is not None and ev.correct), None)
    if first is None:
        rows = [[label, "build failed" if ev is None else f"rejected: {ev.failure}"[:200]]
                for (label, _), ev in zip(todo, evs)]
        return title + "\n" + table(rows, ["variant", "verdict"])
    configs = [m for m in first.measurements if m.kernel is not None]
    header = ["configuration", "best torch"] + [label for label, _ in todo]
    rows, ratios = [], [[] for _ in todo]
    for m in configs:
        best = m.baseline(m.best_torch_name) if m.best_torch_name else None
        row = [m.config.rsplit("/s", 1)[0], _us(best.median if best else None)]
        for j, ev in enumerate(evs):
            mine = next((x for x in ev.measurements if x.config == m.config), None) if ev and ev.correct else None
            if mine is None or mine.kernel is None:
                row.append("-")
                continue
            r = best.median / mine.kernel.median if best else None
            if r:
                ratios[j].append(r)
            row.append(_us(mine.kernel.median) + (f" {r:.2f}x" if r else ""))
        rows.append(row)
    rows.append(["geomean vs best torch", ""] + [f"{geomean(r):.2f}x" if r else "-" for r in ratios])
    rows.append(["verdict", ""] + ["build failed" if ev is None else "correct" if ev.correct else
                                   f"rejected at {ev.stage}" for ev in evs])
    lines = [title, table(rows, header)]
    for (label, _), b, ev in zip(todo, built, evs):
        if ev is None:
            lines.append(f"{label}: build failed: {(b.error or '')[:300]}")
        elif not ev.correct:
            lines.append(f"{label}: {ev.failure}"[:400])
    return "\n".join(lines)


def _us(ms: float | None) -> str:
    return "-" if ms is None else f"{ms * 1e3:.1f}us"

