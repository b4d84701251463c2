"""Issue 49, item 2 on a GPU: every task's C-ABI CUDA seeds and best kernels judged twice in one evaluator — timed in
their own worker (as before), and with their device code replayed in a worker that never ran their host code
(`KEVOLVE_CUDA_REPLAY=1`, `judge.evaluator.replayed`) — the order alternating from kernel to kernel; then the
adversarial kernels of `tests/adversarial/cuda/` with the replay on (first, so a budget never skips them).
Prints, per kernel, both verdicts, both speedups and the geometric mean over configurations of replayed / own kernel
time (an honest kernel: about 1), and a summary.

    python experiments/replay_gpu.py                                  # every task with a CUDA seed, shapes=small
    python experiments/replay_gpu.py --tasks layernorm_fwd layernorm_bwd --shapes bench --budget-s 500

Stops starting new kernels after --budget-s seconds (what it did is printed). Baselines are timed once per task and
reused (the comparison is of the kernel's own time); `python -m pytest tests/judge/test_replay.py -m gpu` is the
pass/fail twin of this script.
"""
from __future__ import annotations

import argparse
import math
import os
import time
from pathlib import Path

from kevolve.judge import build as builder
from kevolve.judge.evaluator.harness import judge
from kevolve.judge.evaluator.reuse import Reuse
from kevolve.judge.options import Options
from kevolve.task import load_task

ROOT = Path(__file__).resolve().parents[1]
ADVERSARIAL = [("allocates_in_its_graph.cu", "rejected: allocates memory inside its graph"),
               ("device_table.cu", "correct: device data copied across"),
               ("beside_the_flush.cu", "correct, its time about the honest seed's (nothing hidden beside the flush)"),
               ("honest.cu", "correct")]


def kernels(task) -> list[Path]:
    """The task's C-ABI CUDA seeds and best kernel (torch-ABI sources are not replayed)."""
    found = sorted((task.dir / "seeds").glob("*.cu")) + sorted((task.dir / "best").glob("*.cu"))
    return [p for p in found if "torch/extension.h" not in p.read_text()]


def medians(ev) -> dict:
    return {m.config: m.kernel.median for m in ev.measurements if m.kernel is not None}


def judged(task, lib: str, options: Options, reuse: Reuse, replay: bool):
    os.environ["KEVOLVE_CUDA_REPLAY"] = "1" if replay else "0"
    t0 = time.perf_counter()
    ev = judge(task, lib, options, reuse=reuse)
    return ev, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", nargs="*", default=None)
    ap.add_argument("--shapes", default="small")
    ap.add_argument("--budget-s", type=float, default=540.0)
    args = ap.parse_args()
    start = time.monotonic()
    names = args.tasks or sorted(p.name for p in (ROOT / "tasks").iterdir() if list((p / "seeds").glob("*.cu")))
    options = Options(target="cuda", shapes=args.shapes, baselines=("eager", "compile"), time_inits="first")
    rows = []
    flip = False
    for name in ["layernorm_tiny (adversarial)"] + names:
        adversarial = name.endswith("(adversarial)")
        task = load_task(ROOT / "tests" / "kernels" / "tasks" / "layernorm_tiny" if adversarial else name)
        reuse = Reuse(options, 4 << 30, 3600.0)
        paths = [ROOT / "tests" / "adversarial" / "cuda" / f for f, _ in ADVERSARIAL] if adversarial \
            else kernels(task)
        try:
            for path in paths:
                if time.monotonic() - start > args.budget_s:
                    print(f"budget of {args.budget_s:.0f} s spent: stopping before {path}", flush=True)
                    break
                built = builder.build(path.read_text(), "cuda")
                if not built.ok:
                    print(f"{task.name} {path.name}: build failed: {built.error[:300]}", flush=True)
                    continue
                if adversarial:
                    ev, s = judged(task, built.lib_path, options, reuse, True)
                    expect = dict(ADVERSARIAL)[path.name]
                    print(f"adversarial {path.name}: correct={ev.correct} {s:.1f}s speedup={ev.speedup} "
                          f"kernel ms={medians(ev)} failure={ev.failure} (expected: {expect})", flush=True)
                    continue
                order = (True, False) if flip else (False, True)
                flip = not flip
                got = {replay: judged(task, built.lib_path, options, reuse, replay) for replay in order}
                (own, s_own), (rep, s_rep) = got[False], got[True]
                a, b = medians(own), medians(rep)
                common = [c for c in a if c in b]
                ratio = math.exp(sum(math.log(b[c] / a[c]) for c in common) / len(common)) if common else None
                rows.append((task.name, path.name, own.correct, rep.correct, own.speedup, rep.speedup, ratio))
                print(f"{task.name} {path.relative_to(task.dir)}: own {own.correct} {s_own:.1f}s speedup "
                      f"{own.speedup}; replayed {rep.correct} {s_rep:.1f}s speedup {rep.speedup}; replayed/own "
                      f"kernel time {ratio if ratio is None else round(ratio, 3)} over {len(common)} configurations"
                      + (f"; own failure: {own.failure}" if not own.correct else "")
                      + (f"; replayed failure: {rep.failure}" if not rep.correct else ""), flush=True)
        finally:
            reuse.close()
    ratios = [r[-1] for r in rows if r[-1]]
    both = sum(1 for r in rows if r[2] and r[3])
    print(f"\n{len(rows)} kernels: {both} correct both ways; {sum(1 for r in rows if r[2] and not r[3])} correct in "
          f"their own worker only; replayed/own kernel time min {min(ratios, default=float('nan')):.3f} median "
          f"{sorted(ratios)[len(ratios) // 2] if ratios else float('nan'):.3f} max "
          f"{max(ratios, default=float('nan')):.3f} ({time.monotonic() - start:.0f} s)")


if __name__ == "__main__":
    main()
