"""`python -m kevolve.evaluate task=NAME kernel=PATH [target=cpu|cuda] [abi=c|torch] [shapes=small|bench] [timeout=S]`

Judges one kernel file on one task: prints a table per configuration (eager, compile, kernel, speedups,
fraction of the memory floor, error), then, as the last line of stdout, one JSON object (`Evaluation.summary`).
Exit status: 0 correct, 1 rejected (any reason), 2 bad usage (unknown task, missing file, bad value).
Defaults: target=cuda when a GPU is visible, else cpu; shapes=bench on cuda, small on cpu; compiled_checks=auto
(eager checks: one judgement would pay torch.compile's compile for little; `on` compiles them,
judge/evaluator/fused.py);
timing effort per target: on cuda (`EFFORT`) 100 calls per contender and configuration, every (shape, init)
timed; on cpu the search's defaults (kevolve.config.schema: 50 calls, one init per shape timed; every configuration
is still checked for correctness) — one CPU seed on `small` in about a minute on 2 cores. `time_inits=all reps=100`
restores the rest. `domain=off` checks the shape set's configurations alone (by default every judgement also
checks a few drawn from the task's domain: docs/tasks.md); `release=N` then checks a correct kernel on N
configurations swept over the domain in a fresh worker, as a search does before it names its best (exit 1 when
one fails, the smallest failing configuration named). strict_cuda=false judges a CUDA kernel with its driver
started before the confinement, host threads allowed after the seal and a refused attempt only noted
(docs/guarantees.md). Each key=value is a field
of the search's typed schema (`FIELDS`): a bad value is refused with the field's own message (exit 2), as
`python -m kevolve` refuses it; the field's own name is taken too (`resources.target=cuda` as `target=cuda`).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

USAGE = ("usage: python -m kevolve.evaluate task=NAME kernel=PATH [target=cpu|cuda] [abi=c|torch] "
         "[shapes=small|bench] [timeout=SECONDS] [reps=N] [calls=N] [baselines=eager,compile,compile-max-autotune] "
         "[compiled_checks=auto|on|off] [time_inits=all|first] [cpu_flush=lines|llc] [strict_cuda=true|false] "
         "[domain=draw|off] [release=N]")
KEYS = {"task", "kernel", "target", "abi", "shapes", "timeout", "reps", "baselines", "budget", "calls",
        "compiled_checks", "time_inits", "cpu_flush", "strict_cuda", "domain", "release"}
EFFORT = {"cuda": dict(reps=100, budget=0.5, time_inits="all")}   # on cuda, unless told; cpu: the schema's defaults


class UsageError(Exception):
    pass


def parse(argv: list[str]) -> dict[str, str]:
    args = {}
    for a in argv:
        if a in ("-h", "--help"):
            raise UsageError(__doc__.strip())
        key, sep, value = a.partition("=")
        key = ALIASES.get(key, key)              # the search's spelling of a field: resources.target=cuda, …
        if not sep or key not in KEYS:
            raise UsageError(f"unknown argument {a!r}; expected key=value with key in {sorted(KEYS)}")
        args[key] = value
    for required in ("task", "kernel"):
        if not args.get(required):
            raise UsageError(f"missing {required}=...")
    return args


# key=value of this command -> the field of the search's typed schema (kevolve.config.schema) it sets
FIELDS = {"task": "task.name", "shapes": "task.shapes", "target": "resources.target", "timeout": "search.timeout_s",
          "reps": "search.reps", "budget": "search.budget_s", "baselines": "search.baselines",
          "time_inits": "search.time_inits", "compiled_checks": "resources.compiled_checks",
          "cpu_flush": "resources.cpu_flush", "strict_cuda": "resources.strict_cuda", "domain": "search.domain",
          "release": "search.release"}


ALIASES = {field: key for key, field in FIELDS.items()}


def config_from(args: dict[str, str], target: str):
    """The search's typed `Config` holding what `args` set (a bad value: UsageError naming the key and the field);
    on cuda, the timing effort of `EFFORT` where `args` set none."""
    from kevolve.config import ConfigError, from_hydra
    tree: dict = {}
    given = {**{k: v for k, v in EFFORT.get(target, {}).items()}, **{k: args[k] for k in FIELDS if k in args}}
    given["target"] = target
    for key, value in given.items():
        section, name = FIELDS[key].split(".")
        if key == "baselines":
            value = [b for b in str(value).split(",") if b]
        tree.setdefault(section, {})[name] = value
    try:
        return from_hydra(tree)
    except ConfigError as e:
        bad = next((k for k in given if f"'{FIELDS[k]}'" in str(e)), None)
        raise UsageError(f"{bad}={given[bad]}: {e}" if bad else str(e)) from None


def options_from(args: dict[str, str], task):
    """How to judge: `Options` from the typed config of `args` (`config_from`), the task's shape sets checked."""
    from kevolve.judge.options import Options, default_shapes
    from kevolve.task.abi import ABIS
    target = args.get("target") or _default_target()
    abi = args.get("abi", "c")
    if abi not in ABIS:
        raise UsageError(f"abi must be one of {', '.join(ABIS)}, not {abi!r}")
    cfg = config_from({**args, "task": args.get("task") or task.ref}, target)
    r, s = cfg.resources, cfg.search
    shapes = cfg.task.shapes or default_shapes(target)
    if shapes not in task.shape_sets:
        raise UsageError(f"task {task.name} has no shape set {shapes!r}; known: {', '.join(task.shape_sets)}")
    calls = {}
    if "calls" in args:
        try:
            calls["calls"] = int(args["calls"])
        except ValueError:
            raise UsageError(f"calls must be a number, not {args['calls']!r}") from None
        if calls["calls"] < 1:
            raise UsageError(f"calls must be at least 1, not {calls['calls']}")
    return Options(target=target, abi=abi, shapes=shapes, timeout=s.timeout_s, baselines=tuple(s.baselines),
                   reps=s.reps, budget_s=s.budget_s, time_inits=s.time_inits, compiled_checks=r.compiled_checks,
                   cpu_flush=r.cpu_flush, strict_cuda=r.strict_cuda, domain=s.domain, **calls)


def _default_target() -> str:
    import torch
    return "cuda" if torch.cuda.is_available() else "cpu"


def main(argv: list[str] | None = None) -> int:
    from kevolve.task.spec import TaskError
    from kevolve.task.load import load_task
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
    summary = ev.summary()
    if ev.correct and int(args.get("release") or 0) > 0:      # the release check, as a search runs it at its end
        from kevolve.judge.build import build
        from kevolve.judge.evaluator.harness import release
        built = build(path.read_text(), options.target, options.abi)
        checked = release(task, built.lib_path, options, int(args["release"]), module=built.module_name)
        print(checked.line())
        summary["release"] = {"passed": checked.passed, "checked": checked.checked, "failure": checked.failure,
                              "proven": checked.proven, "seconds": checked.seconds}
        ev = ev if checked.passed else None
    print(json.dumps(summary))
    return 0 if ev is not None and ev.correct else 1


def _has_nvcc() -> bool:
    import os
    import shutil
    from kevolve.judge.build import cuda_home
    return bool(shutil.which("nvcc")) or os.path.exists(os.path.join(cuda_home(), "bin", "nvcc"))


if __name__ == "__main__":
    sys.exit(main())
