"""How far a task's best kernel could still go against torch.compile, per configuration: the speedup it has now and
the ceiling a kernel at the memory floor would reach: where a goal is out of reach, by how much.

    python -m kevolve.tasks ceilings [TASK ...]        (default: every task with a tasks/<name>/best/cuda.md)

From each `tasks/<name>/best/cuda.md` (its per-configuration table: the kernel's, eager's and torch.compile's
device times and the fraction of the floor, from the search's final judgement) it prints, per configuration: the
kernel, compile and the floor in µs, the speedup over compile now, and the ceiling — compile's time over the
larger of the floor and `LAUNCH_US`, the device time of the smallest kernel launch (a call cannot take less: ncu
measured 2.0-2.3 µs for torch's one-block kernels on an H200, experiments/results/ncu_*.h200.txt) — then the
geomeans of both. Reads files only; times nothing.
"""
from __future__ import annotations

import math
from pathlib import Path

from kevolve import ROOT

LAUNCH_US = 2.5


def rows(md: Path) -> list[tuple[str, float, float, float]]:
    """(configuration, kernel µs, compile µs, floor µs) from a best/*.md's per-configuration table."""
    out = []
    for line in md.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 8 or not line.startswith("| ") or cells[0] in ("configuration", "geomean") or "---" in line:
            continue
        try:
            kernel, compile_, fraction = float(cells[1].split()[0]), float(cells[3]), float(cells[7].rstrip("%")) / 100
        except ValueError:
            continue
        out.append((cells[0], kernel, compile_, kernel * fraction))
    return out


def report(name: str) -> str:
    md = ROOT / "tasks" / name / "best" / "cuda.md"
    lines, now, ceiling = [f"## {name} ({md.relative_to(ROOT)})",
                           f"{'configuration':48s} {'kernel':>8s} {'compile':>8s} {'floor':>8s} {'now':>6s} "
                           f"{'ceiling':>8s}"], [], []
    for cfg, kernel, compile_, floor in rows(md):
        top = compile_ / max(floor, LAUNCH_US)
        now.append(math.log(compile_ / kernel))
        ceiling.append(math.log(top))
        lines.append(f"{cfg:48s} {kernel:8.1f} {compile_:8.1f} {floor:8.1f} {compile_ / kernel:5.2f}x {top:7.2f}x")
    if now:
        lines.append(f"{'geomean':48s} {'':8s} {'':8s} {'':8s} {math.exp(sum(now) / len(now)):5.2f}x "
                     f"{math.exp(sum(ceiling) / len(ceiling)):7.2f}x")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if {"-h", "--help"} & set(argv):
        print(__doc__.strip())
        return 0
    names = argv or sorted(p.parent.parent.name for p in (ROOT / "tasks").glob("*/best/cuda.md"))
    print("\n\n".join(report(n) for n in names))
    return 0

