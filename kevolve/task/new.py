"""A task folder of your own from a torch file: `python -m kevolve.tasks new NAME --from FILE` (kevolve/cli/task_new.py
runs this, then judges the seeds it wrote).

FILE is either a KernelBench problem (`class Model`, `get_inputs()`, `get_init_inputs()`) or, shorter, a module-level
function and its inputs:

    import torch
    B, N = 64, 4096                       # int constants: the sizes (bench at these values; small and held-out
                                          # sizes are derived from them); float constants: the scalars
    def forward(x):                       # the op, in torch; its arguments are the kernel's inputs
        return torch.softmax(x, dim=-1)
    def get_inputs():                     # one draw of the inputs (the judge draws them like this, per seed)
        return [torch.randn(B, N)]

The function form is given `Model` and `get_init_inputs` (appended to the folder's problem.py, which holds your
file), and then read as the importer reads a problem (kevolve/task/kernelbench.py: sizes, shapes, shape sets,
outputs, what it refuses). The folder is yours to edit, unlike an import: problem.py, reference.py (the float64
reference and the float32 baseline over problem.py), task.yaml (with the fields to fill in said at its top, and a
`domain:` block), prompt.md, and seeds/cpu.cpp and seeds/cuda.cu: naive kernels written from the reference
(kevolve/task/naive.py), listed under `seeds:` once judged (`unlist` takes back one that failed).

Guarantees: an existing folder is never overwritten (nothing is written when the file is refused; a folder half
written is removed); the seeds are the task's C prototype and pass the static rules' includes. Not guaranteed: that a
naive seed could be written (the reason is returned instead), or that the tolerance suits the op — `python -m
kevolve.tasks check NAME` says whether torch's own float32 meets it.
"""
from __future__ import annotations

import ast
import shutil
from dataclasses import dataclass, field
from pathlib import Path


from kevolve.task.kernelbench_folder import MARK, prompt_md, reference_py, task_dict
from kevolve.task.naive_seeds import naive_seeds, unlist, with_seeds, write_yaml
from kevolve.task.problem import ProblemError

__all__ = ["Created", "new_task", "unlist"]

FILL_IN = (
    "description (above) and prompt.md: say what the op computes, in words (what an LLM reads first)",
    "inputs' init: `drawn` draws them as get_inputs() does; add init sets that matter (large values, a small "
    "variance, negative ones…) as tasks/layernorm_fwd/task.yaml does",
    "tolerance: {atol} / {rtol}; `python -m kevolve.tasks check {name}` says whether torch's float32 meets it",
    "shapes: bench at the file's constants, small scaled for a CPU, held out: odd sizes; add the sizes you care "
    "about",
    "domain: the range every size and scalar may take (checked by the judge on configurations drawn from it)",
    "floor_bytes: every input and output once; tighten it if the op must move less",
)


@dataclass
class Created:
    folder: Path
    seeds: dict = field(default_factory=dict)         # target -> seed file written
    no_seed: str | None = None                        # why no naive seed was written
    fill_in: tuple[str, ...] = ()


def adapter(source: str, function: str) -> str:
    """The KernelBench form of a file that defines `function` and get_inputs() (see the module's docstring)."""
    tree = ast.parse(source)
    defs = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    if function not in defs:
        raise ProblemError(f"the file defines no `{function}` function and no `class Model`: write the op as "
                           f"`def {function}(x, ...): return ...` beside `def get_inputs(): return [torch.randn(B, N)]`"
                           " (docs/tasks.md, \"Your own op\")")
    if "get_inputs" not in defs:
        raise ProblemError("the file defines no get_inputs(): return one draw of the inputs, e.g. "
                           "`def get_inputs(): return [torch.randn(B, N)]`")
    args = [a.arg for a in defs[function].args.args]
    if defs[function].args.vararg or defs[function].args.kwonlyargs:
        raise ProblemError(f"`{function}` takes *args or keyword-only arguments: name each input")
    params = ", ".join(args)
    init = "" if "get_init_inputs" in defs else "\n\ndef get_init_inputs():\n    return []\n"
    return (source.rstrip() + "\n\n\n# ---- added by `python -m kevolve.tasks new`: the function above in "
            "KernelBench's form\nimport torch as _kevolve_torch\n\n\nclass Model(_kevolve_torch.nn.Module):\n"
            f"    def forward(self, {params}):\n        return {function}({params})\n" + init)


def domain(imp) -> dict:
    bench = next(s for s, _, held in imp.shape_sets["bench"] if not held)
    sizes = {s: {"min": 1, "max": max(4 * int(bench[s]), 16)} for s in imp.sizes}
    scalars = {n: ({"min": v / 100, "max": v * 100} if v > 0 else {"min": v, "max": v}) for n, v in imp.scalars.items()}
    return {"sizes": sizes, **({"scalars": scalars} if scalars else {}),
            "max_bytes": {"cpu": "64 MiB", "cuda": "4 GiB"}}


def header(name: str, source: Path, atol: float, rtol: float) -> str:
    items = "\n".join(f"#   - {line.format(name=name, atol=atol, rtol=rtol)}" for line in FILL_IN)
    return (f"# Written by `python -m kevolve.tasks new {name} --from {source.name}` (kevolve/task/new.py): edit it "
            f"freely,\n# docs/tasks.md says what each field means. What to fill in (a search runs without, but judges "
            f"better with it):\n{items}\n")


def new_task(name: str, source: str | Path, out: str | Path | None = None, atol: float = 1e-4,
             rtol: float = 1e-4, function: str = "forward") -> Created:
    """Writes `out/NAME/` from `source` (see the module's docstring); raises ProblemError (nothing written) when
    the file cannot be a task."""
    from kevolve.config.tasks import TASKS_DIR
    from kevolve.task.kernelbench import analyse
    from kevolve.task.load import load_task
    source = Path(source)
    if not source.is_file():
        raise ProblemError(f"{source}: no such file")
    folder = Path(TASKS_DIR if out is None else out) / name
    if folder.exists():
        raise ProblemError(f"{folder} exists: choose another NAME or --out (nothing is overwritten)")
    text = source.read_text()
    try:
        tree = ast.parse(text, filename=str(source))
    except SyntaxError as e:
        raise ProblemError(f"{source}: does not parse ({e.msg}, line {e.lineno})") from None
    kernelbench = any(isinstance(n, ast.ClassDef) and n.name == "Model" for n in tree.body)
    folder.mkdir(parents=True)
    try:
        (folder / "problem.py").write_text(text if kernelbench else adapter(text, function))
        imp = analyse(folder / "problem.py", name)
        raw = {k: v for k, v in task_dict(imp, atol, rtol).items() if k != MARK}
        doc = ast.get_docstring(tree) or ""
        raw["description"] = (doc.strip() or f"{name}: what `{function}` in problem.py computes "
                              "(TO FILL IN: say it in words).")
        raw["domain"] = domain(imp)
        head = header(name, source, atol, rtol)
        (folder / "reference.py").write_text(reference_py(imp).replace(
            "imported by `python -m kevolve.tasks import`: re-import, do not edit.",
            "written by `python -m kevolve.tasks new` over problem.py (your file)."))
        write_yaml(folder, raw, head)
        sources, workspace, why = naive_seeds(folder, imp)
        created = Created(folder, no_seed=why, fill_in=tuple(line.format(name=name, atol=atol, rtol=rtol)
                                                             for line in FILL_IN))
        if sources:
            created.seeds = with_seeds(folder, raw, head, sources, workspace)
        prompt = prompt_md(imp, load_task(folder)).replace(f"# KernelBench problem {imp.source.stem}", f"# {name}")
        cut = prompt.find("\n\n\n# ---- added by `python -m kevolve.tasks new`")
        if cut >= 0:                             # the adapter is ours, not the op: not shown to an LLM
            prompt = prompt[:cut] + prompt[prompt.index("\n```", cut):]
        prompt = prompt.replace("(KernelBench's problem file)", "(problem.py)")
        if not kernelbench:
            prompt = prompt.replace("Compute what `Model.forward` computes", f"Compute what `{function}` computes")
        (folder / "prompt.md").write_text(prompt)
        return created
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
