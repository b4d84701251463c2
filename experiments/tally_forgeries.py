"""Issue 37's tally of forged times: each hostile kernel of `tests/adversarial/test_impossible.py` and
`test_side_work.py` (built by `reach_python.py`; and slows_torch.cpp), the ÷5 forger that spares the canary (which
no test has: the judge accepts it), and each honest twin, judged as those tests judge them; since issue 49 also the
helper thread started by `GOMP_parallel_start` and the honest kernels that change their process's thread count and
FPU modes (judged with both baselines). One line each: accepted or rejected, and why. With `cuda` (on a GPU): the
same walk from a CUDA kernel's host code forging its graph's times (÷1000 sparing the canary, ÷5 in every round, ÷5
sparing the canary), the honest seed, and the layernorm_fwd best kernel on its task. The hostile sources come from
ATTACKS (a checkout's tests/adversarial, default this one), the judge from the checkout on PYTHONPATH, so an older
judge can be tried against today's attacks. A time forger accepted at less than 1.5x its honest twin's speedup (the
honest seed of its task, judged first) forged nothing and is not counted wrong: with KEVOLVE_CUDA_REPLAY=1 the
CUDA forgers' times are taken where their host code never ran.

    PYTHONPATH=$PWD python experiments/tally_forgeries.py [cuda]
    PYTHONPATH=/path/to/older/checkout ATTACKS=$PWD/tests/adversarial python experiments/tally_forgeries.py [cuda]
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

FORGES_TIME = "/"          # the forgers' and scalers' names carry their factor: "forger /1000", "scaler /5"
INFLATED = 1.5             # the least a forged speedup exceeds its honest twin's by (their factors are 5 and 1000)
HERE = Path(os.environ.get("ATTACKS") or Path(__file__).resolve().parent.parent / "tests" / "adversarial")
sys.path.insert(0, str(HERE))


def main() -> None:
    from kevolve.judge import build as builder
    from kevolve.judge.evaluator.harness import judge
    cases = cuda_cases() if sys.argv[1:] == ["cuda"] else cpu_cases()
    wrong = {True: 0, False: 0}
    honest_speed: dict[str, float] = {}
    for name, hostile, task, source, options in sorted(cases, key=lambda c: c[1]):     # the honest first
        t0 = time.time()
        built = builder.build(source, options.target)
        ev = judge(task, built.lib_path, options) if built.ok else None
        ok = bool(ev and ev.correct)
        speed = ev.speedup if ok and ev and ev.speedup else None
        if not hostile and speed and task.name not in honest_speed:
            honest_speed[task.name] = speed
        own = honest_speed.get(task.name)
        # a time forger accepted at its own speed (its forgery undone, as the CUDA replay undoes it) forged nothing
        harmless = hostile and ok and FORGES_TIME in name and speed and own and speed < INFLATED * own
        wrong[hostile] += (ok and not harmless) if hostile else not ok
        why = f"speedup {speed:.2f}x" if speed else (ev.failure if ev else built.error)[:160]
        if harmless:
            why += f", the honest twin's {own:.2f}x: at its own speed, nothing forged"
        print(f"{name:45s} {'hostile' if hostile else 'honest ':7s} {'ACCEPTED' if ok else 'rejected'} "
              f"{time.time() - t0:5.1f}s {why}", flush=True)
    hostile = sum(c[1] for c in cases)
    print(f"hostile wrongly accepted: {wrong[True]} of {hostile}; honest wrongly rejected: {wrong[False]} of "
          f"{len(cases) - hostile} (a time forger accepted under {INFLATED}x its honest twin's speedup is not "
          f"counted: its forgery bought nothing)")


def cpu_cases() -> list:
    """The CPU forgers on layernorm_tiny, the poisoner on layernorm_heavy, slows_torch, and both honest seeds."""
    from reach_python import POISON, forger, with_python
    from kevolve.judge.options import Options
    from kevolve.task import load_task
    tasks = HERE.parent / "kernels" / "tasks"
    tiny, heavy = load_task(tasks / "layernorm_tiny"), load_task(tasks / "layernorm_heavy")
    small = dict(target="cpu", shapes="small", baselines=("eager",), reps=5, timeout=60)   # as the tests judge
    on_tiny, on_heavy = Options(**small, budget_s=0.05), Options(**small, budget_s=5.0)
    canaried = Options(**{**small, "reps": 20}, budget_s=0.05)                            # enough calls to mark
    both = Options(**{**small, "baselines": ("eager", "compile")}, budget_s=0.05)         # torch.compile's too
    kernels = HERE.parent / "kernels" / "cpu"
    return [("forger /1000, spares the canary", True, tiny, forger(1000.0, True), on_tiny),
            ("scaler /5, every call", True, tiny, forger(5.0, False), canaried),
            ("forger /5, spares the canary", True, tiny, forger(5.0, True), canaried),
            ("poisoner: answer computed while poisoned", True, heavy, with_python(POISON), on_heavy),
            ("slows torch in its worker (gains nothing?)", True, tiny, (HERE / "cpu" / "slows_torch.cpp").read_text(),
             on_tiny),
            ("helper thread by GOMP_parallel_start (issue 49)", True, tiny, (HERE / "cpu" / "gomp_helper.cpp")
             .read_text(), on_tiny),
            ("honest tiny seed", False, tiny, (tasks / "layernorm_tiny" / "seeds" / "cpu.cpp").read_text(), on_tiny),
            ("honest heavy seed", False, heavy, (tasks / "layernorm_heavy" / "seeds" / "cpu.cpp").read_text(),
             on_heavy)] + [
            (f"honest {name} (issue 49)", False, tiny, (kernels / f"{name}.cpp").read_text(), both)
            for name in ("good_threads_small", "good_rounding_upward", "good_ftz_daz", "good_rows_split",
                         "good_static_scratch") if (kernels / f"{name}.cpp").exists()]


def cuda_cases() -> list:
    """The CUDA forgers on layernorm_gpu_timing's microsecond shape (as `test_impossible.py` judges them there), the
    honest seed beside them, and the layernorm_fwd best kernel on its own task's small shapes."""
    from reach_python import forger
    from kevolve.judge.options import Options
    from kevolve.task import load_task
    root = Path(__file__).resolve().parent.parent
    timing = load_task(HERE.parent / "kernels" / "tasks" / "layernorm_gpu_timing")
    on_gpu = Options(target="cuda", shapes="short", baselines=("eager",), reps=30, timeout=60)
    fwd = load_task(root / "tasks" / "layernorm_fwd")
    return [("cuda forger /1000, spares the canary", True, timing, forger(1000.0, True, cuda=True), on_gpu),
            ("cuda scaler /5, every round", True, timing, forger(5.0, False, cuda=True), on_gpu),
            ("cuda forger /5, spares the canary", True, timing, forger(5.0, True, cuda=True), on_gpu),
            ("honest cuda seed", False, timing, timing.seed_path("cuda").read_text(), on_gpu),
            ("honest layernorm_fwd best", False, fwd, (fwd.dir / "best" / "cuda.cu").read_text(),
             Options(target="cuda", shapes="small", baselines=("eager", "compile"), timeout=60))]


if __name__ == "__main__":
    main()
