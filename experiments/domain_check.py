"""Issue 46's table: every task's seed kernels and best/ kernel through the release check (a sweep of the task's
domain in a fresh worker, `kevolve.judge.evaluator.harness.release`), and the hostile kernels of
tests/adversarial/domain/ through the same check, each rejected with the smallest failing configuration named.

    python experiments/domain_check.py --target cpu [--tasks a b ...] [--count 60] [--jobs 1] [--out FILE]
    python experiments/domain_check.py --target cuda --jobs 3 --out $OUT/domain.txt       (on the GPU machine)

`--hostile-only` / `--no-hostile` pick the parts. Each kernel is one line: task, kernel, verdict, configurations
checked, seconds, the failure (shrunk) when there is one. With --jobs > 1 the kernels are checked in that many
processes at once (each its own evaluator and worker). A seed or best/ kernel that fails is a finding (the domain
too wide, or the kernel wrong there); a hostile kernel that passes is one too. The last lines count both.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
HOSTILE = {"cpu": [("layernorm_fwd", "eps_capped.cpp"), ("layernorm_fwd", "onepass_long_rows.cpp"),
                   ("layernorm_bwd", "lowprec_big_batch.cpp")],
           "cuda": [("layernorm_fwd", "eps_capped.cu"), ("layernorm_bwd", "lowprec_big_batch.cu")]}


def kernels(target: str, tasks: list[str], hostile: str) -> list[tuple[str, str, str]]:
    """(task, path, kind) to check: kind honest (seeds, best/) or hostile."""
    from kevolve.config.tasks import list_tasks
    from kevolve.task import load_task
    out = []
    if hostile != "only":
        for name in tasks or list_tasks():
            task = load_task(name)
            paths = task.seed_paths(target) if target in task.seeds else []
            out += [(name, str(p), "honest") for p in paths + task.best_paths(target)]
    if hostile != "no":
        out += [(t, str(ROOT / "tests" / "adversarial" / "domain" / k), "hostile") for t, k in HOSTILE[target]]
    return out


def one(task: str, path: str, target: str, count: int, salt: int | None) -> dict:
    """The release check of one kernel, in this process (the child's side of `--one`)."""
    from kevolve.judge import build as builder
    from kevolve.judge.evaluator.harness import release
    from kevolve.judge.options import Options, default_shapes
    from kevolve.task import load_task
    t = load_task(task)
    start = time.perf_counter()
    b = builder.build(Path(path).read_text(), target)
    if not b.ok:
        return {"passed": False, "checked": 0, "failure": f"build: {b.error[:300]}", "seconds": 0.0}
    options = Options(target=target, shapes=default_shapes(target), time_kernel=False, timeout=120)
    r = release(t, b.lib_path, options, count, module=b.module_name, salt=salt)
    return {"passed": r.passed, "checked": r.checked, "planned": r.planned, "failure": r.failure,
            "seconds": round(time.perf_counter() - start, 1), "proven": r.proven}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--target", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--tasks", nargs="*", default=[])
    ap.add_argument("--count", type=int, default=60)
    ap.add_argument("--salt", type=int, default=None, help="fixes the sweep (default: a fresh secret one)")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--out", default=None)
    ap.add_argument("--hostile-only", action="store_true")
    ap.add_argument("--no-hostile", action="store_true")
    ap.add_argument("--one", nargs=2, metavar=("TASK", "PATH"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one(*args.one, args.target, args.count, args.salt)))
        return 0
    todo = kernels(args.target, args.tasks, "only" if args.hostile_only else "no" if args.no_hostile else "with")
    todo = [t for t in todo if t[2] == "hostile"] + [t for t in todo if t[2] != "hostile"]    # the attacks first
    lines = [f"# {' '.join(sys.argv)}  ({time.strftime('%Y-%m-%d %H:%M')})"]
    if args.out:
        Path(args.out).write_text(lines[0] + "\n")

    def run(item):
        task, path, kind = item
        cmd = [sys.executable, __file__, "--target", args.target, "--count", str(args.count), "--one", task, path]
        if args.salt is not None:
            cmd[2:2] = ["--salt", str(args.salt)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        try:
            got = json.loads(proc.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            got = {"passed": False, "checked": 0, "failure": f"crashed: {proc.stderr[-400:]}", "seconds": 0.0}
        rel = str(Path(path).resolve().relative_to(ROOT)) if Path(path).resolve().is_relative_to(ROOT) else path
        line = (f"{task:26s} {rel:55s} {kind:8s} {'PASS' if got['passed'] else 'FAIL'} "
                f"{got['checked']:4d} {got['seconds']:7.1f}s  {got.get('failure') or ''}")
        print(line, flush=True)
        if args.out:                               # as it goes: a call cut short keeps what finished
            with open(args.out, "a") as f:
                f.write(line + "\n")
        return kind, got["passed"], line
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        results = list(pool.map(run, todo))
    lines += [r[2] for r in results]
    honest_failed = [r for r in results if r[0] == "honest" and not r[1]]
    hostile_passed = [r for r in results if r[0] == "hostile" and r[1]]
    lines.append(f"honest kernels rejected: {len(honest_failed)} of {sum(r[0] == 'honest' for r in results)}; "
                 f"hostile kernels accepted: {len(hostile_passed)} of {sum(r[0] == 'hostile' for r in results)}")
    print(lines[-1])
    if args.out:
        with open(args.out, "a") as f:
            f.write(lines[-1] + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
