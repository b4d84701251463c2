"""experiments/results/h200.md, from the H200 judgements recorded under experiments/results/.

    python -m kevolve.tasks h200-report [--out experiments/results/h200.md] [TABLE ...]

Each TABLE is a file in the format of `python -m kevolve.tasks seeds-table` (kevolve/cli/seeds_table.py) (one row per
task, seed and bench shape:
kernel, compile and eager device µs on the judge's clock, the memory floor, speedups; a geomean row per
seed; `#` lines say what ran and how). Default: seeds_plain.h200.txt, seeds_table.h200.txt and seeds_further.h200.txt.
Per task the
report keeps the seed measured fastest (highest geomean over torch.compile; a seed judged twice, its latest
judgement). Writes a summary table (one row per task), the searched kernels of `tasks/<name>/best/` (what each
cuda.md records), then
per task every shape (first initialisation's numbers, `worst init` the lowest speedup over the faster torch
baseline over its initialisations), then every table's own header, which names the commands behind it.
Only rows of correct judgements count: a rejected seed's row says REJECTED and is skipped. A seed whose table
lacks torch.compile's time on some shapes ("-") says so in the summary: its "vs best torch" is over eager there.
"""
from __future__ import annotations

import argparse
import math
import re
from pathlib import Path

from kevolve import ROOT

RESULTS = ROOT / "experiments" / "results"
DEFAULT = [RESULTS / "seeds_plain.h200.txt", RESULTS / "seeds_table.h200.txt", RESULTS / "seeds_further.h200.txt"]


def read_table(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    """The `#` lines and every data row (header -> cell) of a seeds_table-format file; a file may hold
    several tables, each under its own header line."""
    notes, rows, header = [], [], None
    lines = path.read_text().splitlines()
    for i, line in enumerate(lines):
        if line.startswith("#"):
            notes.append(line[1:].strip())
        elif line.startswith("task ") and i + 1 < len(lines) and set(lines[i + 1].replace(" ", "")) == {"-"}:
            header = re.split(r"\s{2,}", line.strip())
        elif header and line.strip() and not set(line.replace(" ", "")) == {"-"}:
            cells = re.split(r"\s{2,}", line.strip())
            if len(cells) == len(header):
                rows.append(dict(zip(header, cells)))
            elif len(cells) >= 6 and cells[2] == "geomean":          # its empty cells collapse in the split
                rows.append({"task": cells[0], "seed": cells[1], "configuration": "geomean",
                             "of floor": cells[-3], "vs compile": cells[-2], "vs best": cells[-1]})
    return notes, rows


def seeds(rows: list[dict[str, str]]) -> dict[str, dict[str, dict]]:
    """task -> seed -> {"shapes": [rows], "geomean": row}, correct judgements only (those with a geomean). A seed
    judged again later (a later table, in the same file or a later one) keeps only its latest judgement: the
    file as it is now."""
    out: dict[str, dict[str, dict]] = {}
    for r in rows:
        entry = out.setdefault(r["task"], {}).setdefault(r["seed"], {"shapes": [], "geomean": None})
        if entry["geomean"] is not None and r["configuration"] != "geomean":      # a new judgement begins
            entry = out[r["task"]][r["seed"]] = {"shapes": [], "geomean": None}
        if r["configuration"] == "geomean":
            entry["geomean"] = r
        elif r["configuration"] != "REJECTED":
            entry["shapes"].append(r)
    return {t: {s: e for s, e in ss.items() if e["geomean"]} for t, ss in out.items()}


def _x(cell: str) -> float:
    return float(cell[:-1]) if cell.endswith("x") else float("nan")


def _us(cell: str) -> float:
    for unit, scale in (("us", 1.0), ("ms", 1e3), ("s", 1e6)):
        if cell.endswith(unit):
            return float(cell[: -len(unit)]) * scale
    return float("nan")


def geomean(xs: list[float]) -> float:
    xs = [x for x in xs if x == x and x > 0]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else float("nan")


def report(paths: list[Path]) -> str:
    notes, rows = {}, []
    for p in paths:
        n, r = read_table(p)
        notes[p.name] = n
        rows += [{**x, "source": p.name} for x in r]
    tasks = seeds(rows)
    summary = ["| task | best kernel (seed) | shapes | vs compile | vs best torch | vs eager | of the floor | shapes "
               "≥ 0.98x of best torch | launch-bound shapes | from |", "|---|---|---|---|---|---|---|---|---|---|"]
    detail = []
    for task in sorted(t for t in tasks if tasks[t]):
        best_seed, best = max(tasks[task].items(), key=lambda kv: _x(kv[1]["geomean"]["vs compile"]))
        shapes = best["shapes"]
        eager = geomean([_us(r["eager"]) / _us(r["kernel"]) for r in shapes])
        at_par = sum(_x(r["vs best"]) >= 0.98 for r in shapes)
        bound = sum(r["configuration"].endswith("*") for r in shapes)
        g = best["geomean"]
        others = ", ".join(f"{s} {e['geomean']['vs compile']}" for s, e in sorted(tasks[task].items())
                           if s != best_seed)
        missing = sum(r["compile"] == "-" for r in shapes)
        flag = (f" (compile not timed on {missing} of {len(shapes)} shapes: vs compile is over the rest, vs best "
                f"torch over eager there)" if missing else "")
        summary.append(f"| {task} | {best_seed}.cu{flag} | {len(shapes)} | {g['vs compile']} | {g['vs best']} | "
                       f"{eager:.2f}x | "
                       f"{g['of floor']} | {at_par} of {len(shapes)} | {bound} | {shapes[0]['source']} |")
        detail += [f"### {task}: {best_seed}.cu" + (f" (other seeds, vs compile: {others})" if others else ""), "",
                   "| shape | eager | compile | kernel | floor | of the floor | vs compile | vs best torch | worst "
                   "init "
                   "| launch-bound |", "|---|---|---|---|---|---|---|---|---|---|"]
        for r in shapes:
            name = r["configuration"].removesuffix(" *")
            detail.append(f"| {name} | {r['eager']} | {r['compile']} | {r['kernel']} | {r['floor']} | "
                          f"{r['of floor']} | "
                          f"{r['vs compile']} | {r['vs best']} | {r['worst init']} | "
                          f"{'yes' if r['configuration'].endswith('*') else ''} |")
        detail += [f"| geomean | | | | | {g['of floor']} | {g['vs compile']} | {g['vs best']} | | |", ""]
    for task in sorted(p.parent.name for p in (RESULTS.parent.parent / "tasks").glob("*/task.yaml")):
        if not tasks.get(task):
            summary.append(f"| {task} | not judged correct on bench yet | | | | | | | | |")
    searched = best_kernels()
    sources = []
    for name, n in notes.items():
        sources += [f"`experiments/results/{name}`:", "", "```", *n, "```", ""]
    return "\n".join([
        "# kevolve on an NVIDIA H200: every task's best kernel so far",
        "",
        "Generated by `python -m kevolve.tasks h200-report` from the tables named under Sources; do not edit by hand.",
        "Device µs per call on the judge's clock (CUDA-graph replay, L2 flushed, launch overhead removed; README, "
        "How we",
        "time), first initialisation of each bench shape, held-out shapes included. \"best kernel\" is the seed "
        "measured",
        "fastest over torch.compile until the task has a searched kernel; \"of the floor\" is the memory floor's "
        "time over",
        "the kernel's (bytes the task must move at the measured copy bandwidth); launch-bound, the judge's flag: the",
        "kernel's or best torch's device time under 5 µs or under its own launch cost (synced latency minus device "
        "time;",
        "torch.compile's synced call takes 100-450 µs more than its device time on the H200, so one call at a time "
        "is launch-bound on most",
        "shapes, and device time is the fair comparison there). Geomeans are over every configuration (shape ×",
        "initialisation), as the judge reports them; \"vs eager\" over the shapes listed.",
        "",
        *summary, "", *searched, *detail, "## Sources", "", *sources]).rstrip() + "\n"


def best_kernels() -> list[str]:
    """The section on tasks/<name>/best/cuda.cu: what each .md records (kevolve.report.best writes it from a search's
    final judgement, baselines interleaved; its per-configuration table is in the .md)."""
    from kevolve.report.best import numbers
    rows = []
    for md in sorted((RESULTS.parent.parent / "tasks").glob("*/best/cuda.md")):
        front = numbers(md)
        ci = front.get("speedup_ci") or [None, None]
        f = lambda v, fmt: "-" if v is None else fmt.format(v)  # noqa: E731
        rows.append(f"| {front.get('task', md.parent.parent.name)} | {front.get('operator', '-')} "
                    f"(candidate {front.get('candidate', '-')}) | {f(front.get('speedup_compile'), '{:.2f}x')} | "
                    f"{f(front.get('speedup'), '{:.2f}x')} [{f(ci[0], '{:.2f}')}, {f(ci[1], '{:.2f}')}] | "
                    f"{f(front.get('speedup_eager'), '{:.2f}x')} | {f(front.get('floor_fraction'), '{:.0%}')} | "
                    f"{front.get('configurations', '-')} | {front.get('device', '-')} | "
                    f"[{md.parent.parent.name}/best/cuda.md](../../tasks/{md.parent.parent.name}/best/cuda.md) |")
    if not rows:
        return []
    return ["## Searched kernels (`tasks/<name>/best/cuda.cu`)", "",
            "A knob search's best per task, promoted with `python -m kevolve.tasks best RUN_DIR`: the numbers of the "
            "run's final judgement (a fresh worker, baselines interleaved, every configuration of bench; the seeds' "
            "tables above time each seed once, so the two differ by the run-to-run noise of both baselines). "
            "`search.seeds=best` starts a search from it. Each .md has the command and the per-configuration "
            "table.", "",
            "| task | best kernel | vs compile | vs best torch [95%] | vs eager | of the floor | configurations | "
            "device | numbers |",
            "|---|---|---|---|---|---|---|---|---|", *rows, ""]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kevolve.tasks h200-report", description=__doc__.splitlines()[0])
    ap.add_argument("tables", nargs="*", type=Path, default=DEFAULT)
    ap.add_argument("--out", type=Path, default=RESULTS / "h200.md")
    args = ap.parse_args(argv)
    args.out.write_text(report(args.tables))
    print(f"wrote {args.out}")
    return 0

