"""`python -m kevolve.evaluate task=NAME kernel=PATH [target=cpu|cuda] [abi=c|torch] [shapes=small|bench] [timeout=S]`

Judges one kernel file on one task: prints a table per configuration (eager, compile, kernel, speedups,
fraction of the memory floor, error), then, as the last line of stdout, one JSON object (`Evaluation.summary`).
Exit status: 0 correct, 1 rejected (any reason), 2 bad usage (unknown task, missing file, bad value).
Defaults: target=cuda when a GPU is visible, else cpu; shapes=bench on cuda, small on cpu; compiled_checks=auto
(eager checks: one judgement would pay torch.compile's compile for little; `on` compiles them, judge/evaluator/fused.py);
timing effort per target (`EFFORT`): on cuda 100 calls per contender and configuration, every (shape, init)
timed; on cpu 50 calls, one init per shape timed (as a search times: every configuration is still checked for
correctness) — one CPU seed on `small` in about a minute on 2 cores. `time_inits=all reps=100` restores the rest.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

USAGE = ("usage: python -m kevolve.evaluate task=NAME kernel=PATH [target=cpu|cuda] [abi=c|torch] "
         "[shapes=small|bench] [timeout=SECONDS] [reps=N] [calls=N] [baselines=eager,compile,compile-max-autotune] "
         "[compiled_checks=auto|on|off] [time_inits=all|first] [cpu_flush=lines|llc]")
KEYS = {"task", "kernel", "target", "abi", "shapes", "timeout", "reps", "baselines", "budget", "calls",
        "compiled_checks", "time_inits", "cpu_flush"}
EFFORT = {"cuda": dict(reps=100, budget_s=0.5, time_inits="all"),     # the timing effort a target gets unless told
          "cpu": dict(reps=50, budget_s=0.15, time_inits="first")}


class UsageError(Exception):
    pass


def parse(argv: list[str]) -> dict[str, str]:
    args = {}
    for a in argv:
        if a in ("-h", "--help"):
            raise UsageError(__doc__.strip())
        key, sep, value = a.partition("=")
        if not sep or key not in KEYS:
            raise UsageError(f"unknown argument {a!r}; expected key=value with key in {sorted(KEYS)}")
        args[key] = value
    for required in ("task", "kernel"):
        if not args.get(required):
            raise UsageError(f"missing {required}=...")
    return args


def options_from(args: dict[str, str], task):
    from kevolve.judge.options import Options, default_shapes
    from kevolve.task.abi import ABIS
    target = args.get("target") or _default_target()
    if target not in ("cpu", "cuda"):
        raise UsageError(f"target must be cpu or cuda, not {target!r}")
    abi = args.get("abi", "c")
    if abi not in ABIS:
        raise UsageError(f"abi must be one of {', '.join(ABIS)}, not {abi!r}")
    shapes = args.get("shapes") or default_shapes(target)
    if shapes not in task.shape_sets:
        raise UsageError(f"task {task.name} has no shape set {shapes!r}; known: {', '.join(task.shape_sets)}")
    from kevolve.judge.options import BASELINES
    baselines = tuple(b for b in args.get("baselines", "eager,compile").split(",") if b)
    if set(baselines) - set(BASELINES):
        raise UsageError(f"baselines must be a comma-separated subset of {','.join(BASELINES)}, "
                         f"not {args['baselines']!r}")
    from kevolve.judge.options import COMPILED_CHECKS
    from kevolve.judge.options import CPU_FLUSH
    compiled = args.get("compiled_checks", "auto")
    if compiled not in COMPILED_CHECKS:
        raise UsageError(f"compiled_checks must be one of {', '.join(COMPILED_CHECKS)} (the evaluator's reference and "
                         f"comparison by torch.compile; auto: off for one judgement), not {compiled!r}")
    kw = dict(target=target, abi=abi, shapes=shapes, baselines=baselines, compiled_checks=compiled, **EFFORT[target])
    for key, allowed in (("time_inits", ("all", "first")), ("cpu_flush", CPU_FLUSH)):
        if key in args:
            if args[key] not in allowed:
                raise UsageError(f"{key} must be one of {', '.join(allowed)}, not {args[key]!r}")
            kw[key] = args[key]
    for key, conv, low in (("timeout", float, 1), ("reps", int, 1), ("budget", float, 0.01), ("calls", int, 1)):
        if key in args:
            try:
                value = conv(args[key])
            except ValueError:
                raise UsageError(f"{key} must be a number, not {args[key]!r}") from None
            if value < low:
                raise UsageError(f"{key} must be at least {low}, not {value}")
            kw["budget_s" if key == "budget" else key] = value
    return Options(**kw)


def _default_target() -> str:
    import torch
    return "cuda" if torch.cuda.is_available() else "cpu"


def main(argv: list[str] | None = None) -> int:
    from kevolve.task.spec import TaskError, load_task
    try:
        args = parse(sys.argv[1:] if argv is None else argv)
        try:
            task = load_task(args["task"])
        except TaskError as e:
            raise UsageError(str(e)) from None
        path = Path(args["kernel"])
        if not path.is_file():
            raise UsageError(f"kernel file {str(path)!r} does not exist")
        options = options_from(args, task)
        if options.target == "cuda" and not _has_nvcc():
            raise UsageError("target=cuda needs nvcc: set CUDA_HOME or put nvcc on PATH")
    except UsageError as e:
        print(f"{e}\n{USAGE}" if "usage" not in str(e) else str(e), file=sys.stderr)
        return 2
    from kevolve.judge.evaluator.harness import evaluate
    from kevolve.report.tables import evaluation_report
    ev = evaluate(task, path.read_text(), options)
    print(evaluation_report(ev))
    print(json.dumps(ev.summary()))
    return 0 if ev.correct else 1


def _has_nvcc() -> bool:
    import os
    import shutil
    from kevolve.judge.build import cuda_home
    return bool(shutil.which("nvcc")) or os.path.exists(os.path.join(cuda_home(), "bin", "nvcc"))


if __name__ == "__main__":
    sys.exit(main())
