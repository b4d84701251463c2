"""`python -m kevolve.tasks new NAME --from FILE [--out DIR]`: a task folder of your own from a torch file
(kevolve/task/new.py), its naive seeds judged before they are listed, and what to do next.

The CPU seed is judged as a search judges it, correctness only (`kevolve.judge.evaluator.harness.evaluate` on the
`small` set: every configuration, init and seed); the CUDA seed passes the static rules and, where nvcc is on the
PATH, compiles (it runs only on a GPU: `python -m kevolve.evaluate task=PATH kernel=PATH/seeds/cuda.cu target=cuda`
there). A seed that fails is taken out of `seeds:` (its file stays) and the reason printed.
Exit status: 0 written (with a correct CPU seed, or saying why there is none), 1 written but the CPU seed failed,
2 the file cannot be a task (nothing written).
"""
from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path


def check_cpu(folder: Path, source: str) -> str | None:
    """None when the judge finds the CPU seed correct on the small set, else its failure."""
    from kevolve.judge.evaluator.harness import evaluate
    from kevolve.judge.options import Options
    from kevolve.task.load import load_task
    ev = evaluate(load_task(folder), source, Options(target="cpu", shapes="small", time_kernel=False))
    return None if ev.correct else (ev.failure or "not correct")


def check_cuda(source: str) -> str | None:
    """None when the CUDA seed passes the static rules and (with nvcc here) compiles, else why not."""
    from kevolve.judge import build
    from kevolve.judge.static import rules
    verdict = rules.check(source, "cuda")
    if not verdict.ok:
        return f"static rules: {verdict.reason}"
    if not (Path(build.cuda_home()) / "bin" / "nvcc").exists() and shutil.which("nvcc") is None:
        return None                              # no toolkit here: the GPU machine builds it
    b = build.build(source, "cuda", "c", arch="90a")
    return None if b.ok else f"nvcc: {(b.error or '')[:600]}"


def judge_seeds(folder: Path) -> bool:
    """Judges the naive seeds task.yaml lists (see the module's docstring), prints each verdict, takes a failed one
    out of the list; False when the CPU seed failed."""
    import yaml
    from kevolve.task.new import unlist
    listed = (yaml.safe_load((folder / "task.yaml").read_text()) or {}).get("seeds") or {}
    ok = True
    for target in ("cpu", "cuda"):
        for fname in listed.get(target) or []:
            start = time.perf_counter()
            text = (folder / "seeds" / fname).read_text()
            why = check_cpu(folder, text) if target == "cpu" else check_cuda(text)
            if why is None:
                how = "correct on every configuration of the small set" if target == "cpu" else \
                    "passes the static rules and compiles (judge it on a GPU)"
                print(f"seeds/{fname}: {how} ({time.perf_counter() - start:.0f} s)")
            else:
                unlist(folder, target)
                ok = ok and target != "cpu"
                print(f"seeds/{fname}: FAILED, taken out of task.yaml's seeds: {why[:800]}")
    return ok


def run(name: str, source: str, out: str | None, atol: float, rtol: float, function: str, check: bool) -> int:
    from kevolve.task.new import new_task
    from kevolve.task.problem import ProblemError
    from kevolve.task.spec import TaskError
    try:
        created = new_task(name, source, out, atol, rtol, function)
    except (ProblemError, TaskError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    folder = created.folder
    print(f"wrote {folder}: problem.py (your file), reference.py, task.yaml, prompt.md"
          + (", seeds/" + ", seeds/".join(created.seeds.values()) if created.seeds else ""))
    status = 0
    if created.no_seed:
        print(f"no naive seed: {created.no_seed}\n  write seeds/cpu.cpp yourself (the prototype is in prompt.md) and "
              "list it under seeds: in task.yaml, or search with an LLM, whose translate operator writes the first "
              "kernels: python -m kevolve task=" + str(folder) + " llm=openai")
    if check:
        status = 0 if judge_seeds(folder) else 1
    else:
        print("seeds: not judged (--no-check)")
    print("to fill in (task.yaml says it too):\n" + "\n".join(f"  - {line}" for line in created.fill_in))
    print(f"next:\n  python -m kevolve.tasks check {folder}            # torch's own float32 within the tolerance?\n"
          f"  python -m kevolve task={folder} target=cpu            # a CPU search from the naive seed\n"
          f"  python -m kevolve task={folder} llm=openai             # the LLM pipeline")
    return status
