"""The files of an imported KernelBench task folder (`kevolve.task.kernelbench` decides what they say).

`write(imported, out)` writes `out/<name>/`: `problem.py` (the problem file, byte for byte), `reference.py` (three
functions over `kevolve.task.problem.Problem`), `task.yaml` and `prompt.md` (the program, its tensors, the C
prototypes from `kevolve.task.abi`), and, where the naive writer follows the op (kevolve/task/naive.py),
`seeds/cpu.cpp` and `seeds/cuda.cu`, listed in task.yaml (`python -m kevolve.tasks import` judges the CPU one and
takes it out of the list if it fails). Guarantees: the text is a function of the import alone (no paths, no times),
so the same file gives the same folder byte for byte; only a folder whose task.yaml carries `imported_from` (one
the importer made) is overwritten, and only those files. Not guaranteed: that the folder loads — `write`
loads it once to draw the prompt, which raises TaskError if not.
"""
from __future__ import annotations

from pathlib import Path

import yaml

from kevolve.task.kernelbench import Imported
from kevolve.task.problem import ProblemError

MARK = "imported_from"
HEAD = ("# KernelBench problem {name}, imported by `python -m kevolve.tasks import` (kevolve/task/kernelbench.py).\n"
        "# Re-import it rather than edit this file. bench: the file's constants; small: scaled for a CPU; held out: "
        "odd sizes.\n# seeds: naive kernels written from the reference (kevolve/task/naive.py), where it could.\n")
ELEMENT_BYTES = {"float32": 4, "float64": 8, "int64": 8, "int32": 4}


def write(imp: Imported, out: str | Path, atol: float = 1e-4, rtol: float = 1e-4) -> Path:
    """Writes the task folder `out/<name>`; raises ProblemError if a folder of that name was not made here."""
    from kevolve.task.load import load_task
    folder = Path(out) / imp.name
    if (folder / "task.yaml").exists() and MARK not in (yaml.safe_load((folder / "task.yaml").read_text()) or {}):
        raise ProblemError(f"{folder} holds a task the importer did not make: choose another --out or --name")
    from kevolve.task.naive_seeds import naive_seeds, with_seeds
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "problem.py").write_text(imp.source.read_text())
    (folder / "reference.py").write_text(reference_py(imp))
    (folder / "task.yaml").write_text(task_yaml(imp, atol, rtol))
    sources, workspace, _ = naive_seeds(folder, imp)          # none where the naive writer cannot follow the op
    if sources:
        with_seeds(folder, task_dict(imp, atol, rtol), HEAD.format(name=imp.source.name), sources, workspace)
    (folder / "prompt.md").write_text(prompt_md(imp, load_task(folder)))
    return folder


def task_yaml(imp: Imported, atol: float, rtol: float) -> str:
    raw = task_dict(imp, atol, rtol)
    return HEAD.format(name=imp.source.name) + yaml.safe_dump(raw, sort_keys=False, default_flow_style=None, width=110)


def task_dict(imp: Imported, atol: float, rtol: float) -> dict:
    """What task.yaml states of an import, as data (`kevolve.task.new` writes an editable one from it)."""
    floor = " + ".join(f"{ELEMENT_BYTES[d]} * {' * '.join(s) or '1'}" for _, s, d in imp.inputs + imp.outputs)
    return {
        "name": imp.name, "direction": "forward", MARK: imp.source.name,
        "description": f"KernelBench problem {imp.source.stem}: Model.forward of problem.py. Inputs: get_inputs(), "
                       "then the Model's parameters; outputs: what forward returns.",
        "dtype": "float32", "sizes": list(imp.sizes),
        "inputs": [{"name": n, "shape": list(s), "dtype": d, "init": "drawn"} for n, s, d in imp.inputs],
        "outputs": [{"name": n, "shape": list(s), "dtype": d} for n, s, d in imp.outputs],
        "scalars": [{"name": n, "type": "float", "value": v} for n, v in imp.scalars.items()],
        "inits": ["torch"], "workspace_bytes": 0, "floor_bytes": floor,
        "tolerance": {"atol": atol, "rtol": rtol},
        "domain": domain(imp),
        "shapes": {k: {"configs": [{**sizes, "label": label} for sizes, label, held in cs if not held],
                       "heldout": [{**sizes, "label": label} for sizes, label, held in cs if held],
                       "inits": ["torch"], "seeds": [0] if k == "bench" else [0, 1]}
                   for k, cs in imp.shape_sets.items()},
    }


def domain(imp: Imported) -> dict:
    """An imported task's domain: its listed configurations and no others (a problem file fixes its sizes, and a
    derived size follows the others in ways the importer only observed), each size's values and one condition
    naming the combinations; its float constants fixed; the CPU's budget the small set's largest configuration,
    CUDA's every set's. Widen it by hand where the problem allows (and `python -m kevolve.tasks check --shapes
    domain` it)."""
    from kevolve.task.expr import eval_expr
    points = [sizes for cs in imp.shape_sets.values() for sizes, _, _ in cs]

    def nbytes(sizes: dict) -> int:
        total = 0
        for _, shape, dtype in imp.inputs + imp.outputs:
            n = 1
            for e in shape:
                n *= eval_expr(e, sizes)
            total += n * ELEMENT_BYTES[dtype]
        return total
    cpu = max(nbytes(s) for s, _, _ in imp.shape_sets.get("small", [])) if imp.shape_sets.get("small") else 1 << 20
    cuda = max(nbytes(s) for s in points)
    either = sorted({" and ".join(f"{k} == {v}" for k, v in p.items()) for p in points})
    return {"sizes": {n: {"values": sorted({p[n] for p in points})} for n in imp.sizes},
            "scalars": {n: {"min": v, "max": v} for n, v in imp.scalars.items()},
            "where": [" or ".join(f"({e})" for e in either)] if len(imp.sizes) > 1 else [],
            "max_bytes": {"cpu": max(cpu, 1 << 20), "cuda": max(cuda, cpu, 1 << 20)}}


def reference_py(imp: Imported) -> str:
    names = tuple(n for n, _, _ in imp.inputs)
    imported = "imported by `python -m kevolve.tasks import`: re-import, do not edit."
    return f'''"""KernelBench problem {imp.source.name}, {imported}

`reference`: Model.forward of problem.py in float64, with the parameters it is given; `baseline`: the same in
float32 (what torch eager and torch.compile are timed on); `draw_inputs`: get_inputs(), then the Model's
parameters, drawn by torch under the seed (kevolve.task.problem).
"""
from pathlib import Path

import torch

from kevolve.task.problem import Problem

PROBLEM = Problem(Path(__file__).with_name("problem.py"))
INPUTS = {names!r}


def reference(*tensors, **values):
    return PROBLEM.forward(tensors, values, torch.float64)


def baseline(*tensors, **values):
    return PROBLEM.forward(tensors, values, torch.float32)


def draw_inputs(seed, device, **values):
    return dict(zip(INPUTS, PROBLEM.draw(seed, device, values)))
'''


def prompt_md(imp: Imported, task) -> str:
    from kevolve.task.abi import c_prototype
    lines = [f"# KernelBench problem {imp.source.stem}", "",
             "Compute what `Model.forward` computes in this PyTorch program (KernelBench's problem file):", "",
             "```python", imp.source.read_text().strip(), "```", "", "## Tensors", "",
             "All tensors are contiguous and row-major (the last index varies fastest). Sizes are `int64_t`: the "
             "program's int constants, at the values the program gives them in the benchmark; the kernel is also "
             "judged at other values, odd ones included, and must be correct for any.", ""]
    for n, s, d in imp.inputs:
        role = "input (a parameter of the Model, as torch initialises it)" if n in imp.parameters else "input"
        lines.append(f"- `{n}`: {role}, {d}, shape [{', '.join(s)}]")
    lines += [f"- `{n}`: output, {d}, shape [{', '.join(s)}]" for n, s, d in imp.outputs]
    if imp.derived:
        lines += ["", "Sizes computed from the constants, passed as arguments too: " + ", ".join(
            f"`{s}` (dimension {s.rsplit('_dim', 1)[1]} of `{s.rsplit('_dim', 1)[0]}`)" for s in imp.derived) + "."]
    lines += ["", "## The function to write", "", "CUDA (`.cu`, built by nvcc; launch your kernels on `stream`):", "",
              "```c", c_prototype(task, "cuda"), "```", "",
              "CPU (`.cpp`, built by g++ -O3 -march=native -fopenmp):", "",
              "```c", c_prototype(task, "cpu"), "```", "",
              "Return 0 on success. Or, as a torch extension (abi=torch): `forward` takes the input tensors in this "
              "order and returns the output tensor(s).", ""]
    return "\n".join(lines)


def import_file(path: str | Path, out: str | Path | None = None, name: str | None = None,
                atol: float = 1e-4, rtol: float = 1e-4) -> Path:
    """Imports one KernelBench problem file into `out` (default: tasks/); returns the task folder."""
    from kevolve.task.kernelbench import analyse
    from kevolve.config.tasks import TASKS_DIR
    return write(analyse(path, name), TASKS_DIR if out is None else out, atol, rtol)
