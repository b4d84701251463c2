"""Where float32 torch itself meets a norm task's tolerance: eager torch (the task's reference in float32) against the
float64 reference, at one batch and the row lengths and init families given, over 20 seeds x eps in {1e-12, 1e-5}.
Prints the median and worst ratio to the tolerance (> 1 fails). A domain stops where this fails (docs/tasks.md).

    python experiments/norm_domain_edges.py layernorm_fwd 65536 2:random 4:random 13:offset 8:offset_mild
"""
from __future__ import annotations

import sys
from pathlib import Path

from kevolve.task import draw, load_task
from kevolve.task.filters import ratio


def worst(task, batch: int, n: int, init: str, seeds: int = 20) -> list[float]:
    out = []
    for seed in range(seeds):
        for eps in (1e-12, 1e-5):
            c = draw.case(task, {"B": batch, "N": n}, {"eps": eps}, init, seed)
            got_in = task.make_inputs(c, "cpu", 0)
            up = {k: v.double() if v.is_floating_point() else v for k, v in got_in.items()}
            ref, got = task.call_reference(up, c), task.call_reference(got_in, c)
            out.append(max(ratio(g.double(), r, task) for g, r in zip(got, ref)))
    return sorted(out)


def main(argv: list[str]) -> None:
    name, batch, specs = argv[0], int(argv[1]), argv[2:]
    task = load_task(Path(__file__).resolve().parents[1] / "tasks" / name)
    print(f"{name}: eager float32 torch against float64, B={batch}, 20 seeds x eps in (1e-12, 1e-5)")
    for spec in specs:
        n, init = spec.split(":")
        rs = worst(task, batch, int(n), init)
        print(f"N={n:>7} {init:<12} median {rs[len(rs) // 2]:8.3f}  worst {rs[-1]:8.3f}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
