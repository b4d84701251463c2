"""The compact table of experiments/gpu_seeds.sh, from the logs of `python -m kevolve.evaluate`.

    python -m kevolve.tasks seeds-table OUT/seeds/TASK__SEED.txt ...

Each log holds the evaluation's per-configuration table (kevolve.report.tables.config_rows) and, last, the
summary JSON. Prints, per task and seed, one row per shape (the numbers of its first initialisation; "worst
init": the lowest speedup over the faster baseline among its initialisations): kernel, compile and eager µs,
the memory floor µs and the fraction of it reached, speedups over compile and over the faster baseline; then a
row of geometric means over every configuration; a rejected seed gets one row with the reason.
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

COLUMNS = ["task", "seed", "configuration", "kernel", "compile", "eager", "floor", "of floor", "vs compile", "vs best",
           "worst init"]


def parse(text: str) -> tuple[list[dict[str, str]], dict]:
    """The rows of the evaluation table (as header -> cell) and the summary JSON ({} if missing)."""
    lines = text.splitlines()
    summary = {}
    for line in reversed(lines):
        if line.startswith("{"):
            try:
                summary = json.loads(line)
            except json.JSONDecodeError:
                pass
            break
    rows: list[dict[str, str]] = []
    for i, line in enumerate(lines):
        if line.startswith("configuration") and i + 1 < len(lines) and set(lines[i + 1].replace(" ", "")) == {"-"}:
            header = re.split(r"\s{2,}", line.strip())
            for row in lines[i + 2:]:
                cells = re.split(r"\s{2,}", row.strip())
                if len(cells) != len(header):
                    break
                rows.append(dict(zip(header, cells)))
    return rows, summary


def _speedup(cell: str) -> float:
    return float(cell[:-1]) if cell.endswith("x") else float("nan")


def table_rows(path: Path) -> list[list[str]]:
    task, _, seed = path.stem.partition("__")
    rows, summary = parse(path.read_text(errors="replace"))
    shapes: dict[str, list[dict[str, str]]] = {}
    for r in rows:                                   # "B=8,(1,256,256)/random (held out) *": shape, init, flags
        shapes.setdefault(r["configuration"].partition("/")[0], []).append(r)
    out = []
    for shape, rs in shapes.items():
        r = rs[0]
        labels = [x["configuration"] for x in rs]
        shape += " (held out)" * any("(held out)" in x for x in labels) + " *" * any(x.endswith("*") for x in labels)
        worst = min((_speedup(x.get("vs best", "-")) for x in rs), default=float("nan"))
        out.append([task, seed, shape, r.get("kernel", "-"), r.get("compile", "-"), r.get("eager", "-"),
                    r.get("floor", "-"), r.get("of floor", "-"), r.get("vs compile", "-"), r.get("vs best", "-"),
                    "-" if worst != worst else f"{worst:.2f}x"])
    if summary.get("correct"):
        f = lambda v, fmt: "-" if v is None else fmt.format(v)  # noqa: E731
        out.append([task, seed, "geomean", "", "", "", "", f(summary.get("floor_fraction"), "{:.0%}"),
                    f(summary.get("speedup_compile"), "{:.2f}x"), f(summary.get("speedup"), "{:.2f}x"), ""])
    else:
        why = summary.get("failure") or "no summary: see the log (timeout or crash)"
        out.append([task, seed, "REJECTED", str(why)[:120]] + [""] * 7)
    return out


def main(paths: list[str]) -> int:
    if {"-h", "--help"} & set(paths):
        print(__doc__.strip())
        return 0
    if not paths:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    from kevolve.report.tables import table
    rows = [r for p in sorted(paths) for r in table_rows(Path(p))]
    print(table(rows, COLUMNS))
    return 0

