"""The naive seeds of a task folder written from its reference (kevolve/task/naive.py) and listed in its task.yaml:
what `python -m kevolve.tasks new` and `import` write (kevolve/task/new.py, kernelbench_folder.py), and `unlist`,
which takes a seed that failed its judgement out of the list.

Guarantees: a task.yaml rewritten here keeps its head comment and every field but the ones set (`seeds`,
`workspace_bytes`); the seeds' files are the task's C prototype (kevolve/task/naive_source.py).
"""
from __future__ import annotations

from pathlib import Path

import yaml

TARGET_FILES = {"cpu": "cpu.cpp", "cuda": "cuda.cu"}


def write_yaml(folder: Path, raw: dict, head: str) -> None:
    text = yaml.safe_dump(raw, sort_keys=False, default_flow_style=None, width=110)
    text = text.replace("\ndomain:", "\ndomain:                       # what every kernel must be correct on: sizes, "
                        "scalars, inits, memory per target")
    (folder / "task.yaml").write_text(head + text)


def naive_seeds(folder: Path, imp) -> tuple[dict, str, str | None]:
    """({target: source}, workspace_bytes, None) of the naive kernels of the task in `folder`, or ({}, "0", why)."""
    import torch
    from kevolve.task import naive_source
    from kevolve.task.load import load_task
    from kevolve.task.naive import NaiveError, lower
    from kevolve.task.problem import Problem
    if imp.derived:
        return {}, "0", (f"the sizes {', '.join(imp.derived)} follow from others (a convolution's output, say): the "
                         "naive writer reads sizes that are the file's constants only")
    problem = Problem(folder / "problem.py")
    try:
        low = lower(lambda *ts, **v: problem.forward(list(ts), v, torch.float64), list(imp.inputs), list(imp.sizes),
                    dict(imp.scalars), list(imp.outputs))
    except NaiveError as e:
        return {}, "0", str(e)
    task = load_task(folder)
    return {"cpu": naive_source.cpu(task, low), "cuda": naive_source.cuda(task, low)}, low.workspace_bytes(), None


def with_seeds(folder: Path, raw: dict, head: str, sources: dict, workspace: str) -> dict:
    """Writes the seeds and lists them in task.yaml (with the workspace their temporaries need); returns {target:
    file}."""
    (folder / "seeds").mkdir(exist_ok=True)
    listed = {}
    for target, text in sources.items():
        (folder / "seeds" / TARGET_FILES[target]).write_text(text)
        listed[target] = TARGET_FILES[target]
    raw["workspace_bytes"] = workspace
    if isinstance(raw.get("domain"), dict) and "max_bytes" in raw["domain"]:   # the budgets hold the workspace too
        from kevolve.task.expr import eval_expr
        sets = raw.get("shapes", {})

        def most(names) -> int:
            return max([eval_expr(workspace, {k: v for k, v in c.items() if k != "label"})
                        for n in names for key in ("configs", "heldout") for c in sets.get(n, {}).get(key) or []]
                       or [0])
        from kevolve.task.domain import parse_bytes
        budget = {t: parse_bytes(v, f"domain.max_bytes.{t}") for t, v in raw["domain"]["max_bytes"].items()}
        raw["domain"]["max_bytes"] = {"cpu": budget["cpu"] + most(["small"]), "cuda": budget["cuda"] + most(sets)}
    raw["seeds"] = {t: [f] for t, f in listed.items()}
    write_yaml(folder, raw, head)
    return listed


def unlist(folder: Path, target: str) -> None:
    """Takes `target`'s seed out of task.yaml's `seeds:` (the file stays, for reading)."""
    text = (folder / "task.yaml").read_text()
    raw = yaml.safe_load(text)
    raw.get("seeds", {}).pop(target, None)
    if not raw.get("seeds"):
        raw.pop("seeds", None)
    lines = text.splitlines(keepends=True)
    head = "".join(lines[:next((i for i, ln in enumerate(lines) if not ln.startswith("#")), 0)])
    write_yaml(folder, raw, head)
