"""`python -m kevolve.tasks list | check | import | best | TOOL …`: what tasks there are, whether each is a fair
test, new ones, the best kernel each has so far, and the tools that judge and tabulate kernels of the tasks.

  list                       every task of tasks/: direction, sizes, shape sets (configurations, held out, inits,
                             seeds), the memory floor (and the FLOP floor where floor_flops is set) over the bench
                             set, seed kernels per target, best kernels per target (with their recorded speedup).
  check [NAME|PATH …]        loads each task (its domain checked: every fixed configuration inside it), runs the task
      [--shapes small|bench|domain[:N]]  filters (`kevolve.task.filters`; `domain`: at the domain's corners, where
                               torch itself must meet the tolerance; `domain:N` a sweep of N configurations of
                               it) and prints task × filter, pass or FAIL,
                               then why each FAIL failed (`-v`: every filter's detail). Default: every task of
      [--device cpu|cuda]      tasks/, on the CPU's `small` set (cuda: `bench`). Exit 1 when a task fails a filter.
      [--filters a,b] [--variants N] [--max-shapes K]
  new NAME --from FILE       a task of your own from a torch file (`def forward(x)`, `def get_inputs()`, int
      [--out DIR]              constants for the sizes): the folder, naive seeds written from the reference and
                               judged (cli/task_new.py, task/new.py), what to fill in, the commands to run next.
  import PATH … [--out DIR]  imports KernelBench problem files as task folders (`kevolve.task.kernelbench`);
      [--name NAME] [--atol X] [--rtol X]   prints each folder, or why a file was refused (then exit 1).
  best RUN_DIR [--force]     promotes a finished run's confirmed best kernel into its task's best/ (report/best.py):
      [--task NAME|PATH]       `<target>.cu|.cpp` byte for byte and `<target>.md` (its numbers, the command); refuses
                               (exit 1) a run with no confirmed correct best, or a best/ kernel with a higher recorded
                               speedup unless --force. --task: the task folder, if not the one the run's config names.

Tools (each `python -m kevolve.tasks TOOL --help`; its module in kevolve/cli/ documents it):
  knob-sweep                 a seed and its knob variants timed side by side by one evaluator (cli/knob_sweep.py)
  check-seeds                every task's seed kernels judged for one target, correctness only (cli/check_seeds.py)
  render-prompts             the LLM prompts for layernorm_fwd on an H200, into experiments/prompts/
  ceilings [TASK …]          how far each best/ kernel could still go against torch.compile (cli/ceilings.py)
  seeds-table LOG …          the compact table of `python -m kevolve.evaluate` logs (cli/seeds_table.py)
  h200-report                experiments/results/h200.md from the recorded H200 tables (cli/h200_report.py)
  search-throughput TASK …   a knob search's throughput, from its store (cli/search_throughput.py)

The command lives here, beside the task code; `kevolve/tasks.py` only makes `python -m kevolve.tasks` run it (as
`kevolve/evaluate.py` does for the judge). `tasks/` at the top of the checkout is data: task folders, no code.
Exit status: 0 done and everything passed, 1 a filter failed, a file or a promotion was refused, 2 bad usage.
Not guaranteed: `check` on the CPU says nothing about TF32 or other GPU numerics (run it with --device cuda there).
"""
from __future__ import annotations

import argparse
import sys

from kevolve.task.spec import Task, TaskError
from kevolve.config.tasks import list_tasks
from kevolve.task.load import load_task


class _Parser(argparse.ArgumentParser):
    def error(self, message):                     # usage errors exit 2 (argparse's own default, made explicit)
        self.print_usage(sys.stderr)
        print(f"error: {message}", file=sys.stderr)
        sys.exit(2)


def parser() -> argparse.ArgumentParser:
    from kevolve.task.filters import FILTERS, VARIANTS
    p = _Parser(prog="python -m kevolve.tasks", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    sub.add_parser("list", help="every task with its sizes, shape sets, floors and seeds")
    c = sub.add_parser("check", help="run the task filters")
    c.add_argument("tasks", nargs="*", metavar="NAME|PATH", help="default: every task of tasks/")
    c.add_argument("--shapes", default=None, help="shape set (default: small on cpu, bench on cuda); `domain`: "
                   "the corners of the task's domain on the device (where torch itself must meet the tolerance); "
                   "`domain:N`: a sweep of N configurations of it")
    c.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    c.add_argument("--filters", default=",".join(FILTERS), help=f"comma-separated subset of {','.join(FILTERS)}")
    c.add_argument("--variants", type=int, default=VARIANTS, help="input variants per configuration (>= 2)")
    c.add_argument("--max-shapes", type=int, default=None, help="only the K cheapest shapes of the set")
    c.add_argument("-v", "--verbose", action="store_true", help="every filter's detail, not only failures'")
    i = sub.add_parser("import", help="import KernelBench problem files as task folders")
    i.add_argument("paths", nargs="+", metavar="PATH")
    i.add_argument("--out", default=None, help="where the task folders go (default: tasks/)")
    i.add_argument("--name", default=None, help="the task's name (one PATH only; default kb_[l<level>_]<stem>)")
    i.add_argument("--atol", type=float, default=1e-4)
    i.add_argument("--rtol", type=float, default=1e-4)
    i.add_argument("--no-check", action="store_true", help="do not judge the naive seeds written")
    n = sub.add_parser("new", help="a task folder of your own from a torch file, with naive seeds judged",
                       description="Writes NAME/ from FILE (a function and get_inputs(), or a KernelBench problem): "
                                   "problem.py, reference.py, task.yaml, prompt.md and naive seeds "
                                   "(kevolve/task/new.py); the CPU seed is judged before it is listed.")
    n.add_argument("name", metavar="NAME", help="the task's name (a folder of --out)")
    n.add_argument("--from", dest="source", required=True, metavar="FILE",
                   help="the torch file: `def forward(x): ...` and `def get_inputs(): ...`, int constants for the "
                        "sizes (or a KernelBench problem)")
    n.add_argument("--out", default=None, help="where the folder goes (default: tasks/)")
    n.add_argument("--function", default="forward", help="the function that is the op (default: forward)")
    n.add_argument("--atol", type=float, default=1e-4)
    n.add_argument("--rtol", type=float, default=1e-4)
    n.add_argument("--no-check", action="store_true", help="write the seeds without judging them")
    b = sub.add_parser("best", help="promote a finished run's best kernel into its task's best/")
    b.add_argument("run_dir", metavar="RUN_DIR")
    b.add_argument("--force", action="store_true", help="replace a best/ kernel with a higher recorded speedup")
    b.add_argument("--task", default=None, metavar="NAME|PATH", help="the task folder (default: the run's)")
    for name in TOOLS:                            # listed in --help; `main` hands their arguments to them
        sub.add_parser(name, help=f"a tool: python -m kevolve.tasks {name} --help")
    return p


TOOLS = {"knob-sweep": "knob_sweep", "check-seeds": "check_seeds", "render-prompts": "render_prompts",
         "ceilings": "ceilings", "seeds-table": "seeds_table", "h200-report": "h200_report",
         "search-throughput": "search_throughput"}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in TOOLS:                 # a tool parses its own arguments
        import importlib
        return int(importlib.import_module(f"kevolve.cli.{TOOLS[argv[0]]}").main(argv[1:]) or 0)
    args = parser().parse_args(argv)
    return {"list": list_command, "check": check_command, "import": import_command,
            "best": best_command, "new": new_command}[args.command](args)


def new_command(args) -> int:
    from kevolve.cli.task_new import run
    return run(args.name, args.source, args.out, args.atol, args.rtol, args.function, not args.no_check)


# ---------------------------------------------------------------- list
def list_command(args) -> int:
    from kevolve.report.tables import table
    rows = [_row(load_task(name)) for name in list_tasks()]
    print(table(rows, ["task", "direction", "sizes", "bench", "small", "floor (bench)", "FLOPs (bench)", "seeds",
                       "best"]))
    print("shape sets: configurations + held out, x init sets x seeds = cases; best: tasks/<name>/best/ kernels, "
          "the speedup their .md records")
    return 0


def _row(t: Task) -> list[str]:
    bench = t.configs("bench") if "bench" in t.shape_sets else ()
    floors = [t.floor(c.size_dict) for c in bench]
    flops = [t.flops(c.size_dict) for c in bench] if t.floor_flops else []
    seeds = ", ".join(f"{k} {len(v)}" for k, v in sorted(t.seeds.items())) or "none"
    return [t.name, t.direction, ",".join(t.sizes), _set(t, "bench"), _set(t, "small"),
            _span(floors, "B"), _span(flops, "FLOP") if flops else "-", seeds, _best(t)]


def _best(t: Task) -> str:
    from kevolve.report.best import recorded_speedup
    shown = []
    for target in t.best:
        x = recorded_speedup(t, target)
        shown.append(f"{target} {x:.2f}x" if x is not None else target)
    return ", ".join(shown) or "-"


def _set(t: Task, name: str) -> str:
    if name not in t.shape_sets:
        return "-"
    cases = t.shape_sets[name]
    shapes = {(c.sizes, c.label, c.heldout) for c in cases}
    held = sum(1 for s in shapes if s[2])
    seeds = {c.seed for c in cases}
    per_shape: dict = {}
    for c in cases:                                  # a configuration may list its own init sets
        per_shape.setdefault((c.sizes, c.label, c.heldout), set()).add(c.init)
    counts = sorted({len(v) for v in per_shape.values()})
    inits = str(counts[0]) if len(counts) == 1 else f"{counts[0]}-{counts[-1]}"
    return f"{len(shapes) - held}+{held} x{inits} x{len(seeds)} = {len(cases)}"


def _span(values: list[int], unit: str) -> str:
    if not values:
        return "-"
    lo, hi = _si(min(values), unit), _si(max(values), unit)
    return lo if lo == hi else f"{lo}-{hi}"


def _si(n: float, unit: str) -> str:
    for prefix in ("", "K", "M", "G", "T"):
        if abs(n) < 1000:
            return f"{n:.3g}{prefix}{unit}" if prefix else f"{int(n)}{unit}"
        n /= 1000
    return f"{n:.3g}P{unit}"


# ---------------------------------------------------------------- check
def check_command(args) -> int:
    from kevolve.report.tables import table
    from kevolve.task import filters
    chosen = tuple(f for f in args.filters.split(",") if f)
    shapes = args.shapes or ("bench" if args.device == "cuda" else "small")
    try:
        if set(chosen) - set(filters.FILTERS) or not chosen:
            raise ValueError(f"--filters must be a comma-separated subset of {','.join(filters.FILTERS)}")
        if args.variants < 2 or (args.max_shapes is not None and args.max_shapes < 1):
            raise ValueError("--variants must be at least 2 and --max-shapes at least 1")
        tasks = [load_task(n) for n in (args.tasks or list_tasks())]
        for t in tasks:                           # (a task that loads has a domain its shape sets lie in)
            if not filters.is_domain(shapes):
                t.configs(shapes)
        if args.device == "cuda":
            _need_cuda()
    except (TaskError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    results = {}
    for t in tasks:
        results[t.name] = filters.run(t, shapes, args.device, chosen, args.variants, args.max_shapes)
        print(f"{t.name}: {sum(r.passed for r in results[t.name])}/{len(chosen)} passed", file=sys.stderr, flush=True)
    rows = [[name] + ["pass" if r.passed else "FAIL" for r in rs] for name, rs in results.items()]
    print(table(rows, ["task", *chosen]))
    for name, rs in results.items():
        for r in rs:
            if args.verbose or not r.passed:
                print(f"{name} {r.name}: {'pass' if r.passed else 'FAIL'}: {r.detail}")
    return 0 if all(r.passed for rs in results.values() for r in rs) else 1


def _need_cuda() -> None:
    import torch
    if not torch.cuda.is_available():
        raise ValueError("--device cuda: no CUDA device is visible here (run check on the GPU machine)")


# ---------------------------------------------------------------- import
def import_command(args) -> int:
    from kevolve.task.kernelbench_folder import import_file
    from kevolve.task.problem import ProblemError
    if args.name and len(args.paths) > 1:
        print("error: --name names one task: give one PATH with it", file=sys.stderr)
        return 2
    from kevolve.cli.task_new import judge_seeds
    refused = 0
    for path in args.paths:
        try:
            folder = import_file(path, args.out, args.name, args.atol, args.rtol)
            print(f"{path} -> {folder}")
        except (ProblemError, TaskError) as e:
            refused += 1
            print(f"{path}: refused: {e}", file=sys.stderr)
            continue
        if not args.no_check:
            judge_seeds(folder)
    return 1 if refused else 0


# ---------------------------------------------------------------- best
def best_command(args) -> int:
    from kevolve.report.best import PromotionError, promote
    try:
        done = promote(args.run_dir, force=args.force, task=args.task)
    except TaskError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except PromotionError as e:
        print(f"refused: {e}", file=sys.stderr)
        return 1
    was = f" (replacing one of {done.replaced:.3f}x)" if done.replaced is not None else ""
    speedup = f"{done.speedup:.3f}x" if done.speedup is not None else "unknown speedup"
    print(f"{done.kernel}: {speedup}{was}\n{done.notes}")
    return 0
