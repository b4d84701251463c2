"""Loading a task: `tasks/<name>/` (or any folder holding task.yaml) read, checked and made a `Task`.

`list_tasks()` (kevolve.config.tasks) names the folders of tasks/; `load_task(name_or_path)` parses task.yaml, imports
reference.py and
checks the whole task (see `kevolve.task.spec` for the format and what a loaded task guarantees); a malformed
folder raises `TaskError` naming the file and the field.
"""
from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path
from typing import Any

import yaml

from kevolve.config import tasks as shipped
from kevolve.config.tasks import list_tasks
from kevolve.task import domain as domains
from kevolve.task import torch_call
from kevolve.task.expr import TaskError
from kevolve.task.inits import valid_init
from kevolve.task.spec import BEST_FILES, DTYPES, SCALAR_TYPES, Case, ScalarSpec, Task, TensorSpec

def load_task(name: str | Path) -> Task:
    """Loads a task by name (a folder of `tasks/`) or by path; raises TaskError saying what to fix."""
    path = Path(name)
    folder = (path if (path / "task.yaml").exists() else shipped.TASKS_DIR / str(name)).resolve()
    if not (folder / "task.yaml").exists():
        raise TaskError(f"unknown task {str(name)!r}; known tasks: {', '.join(list_tasks()) or '(none)'}")
    where = folder / "task.yaml"
    try:
        raw = yaml.safe_load(where.read_text())
        return _parse(raw, folder)
    except TaskError as e:
        raise TaskError(f"{where}: {e}") from None
    except (KeyError, TypeError, ValueError, AttributeError, yaml.YAMLError) as e:
        raise TaskError(f"{where}: malformed ({type(e).__name__}: {e})") from None


def _parse(raw: dict, folder: Path) -> Task:
    for key in ("name", "direction", "sizes", "inputs", "outputs", "floor_bytes", "tolerance", "shapes"):
        if key not in raw:
            raise TaskError(f"missing field {key!r}")
    if raw["direction"] not in ("forward", "backward"):
        raise TaskError(f"direction must be forward or backward, not {raw['direction']!r}")
    init_sets = tuple(raw.get("inits", ["random"]))
    default_dtype = raw.get("dtype", "float32")

    def tensor(d: dict, is_input: bool) -> TensorSpec:
        dtype = d.get("dtype", default_dtype)
        if dtype not in DTYPES:
            raise TaskError(f"{d['name']}: dtype {dtype!r} not one of {sorted(DTYPES)}")
        init = d.get("init", "normal")
        init = {s: init for s in init_sets} if isinstance(init, str) else dict(init)
        if is_input:
            for s in init_sets:
                if s not in init or not valid_init(init[s]):
                    raise TaskError(f"input {d['name']}: no valid initialiser for init set {s!r} (got {init.get(s)!r})")
        return TensorSpec(d["name"], tuple(str(e) for e in d["shape"]), dtype, init if is_input else {})

    inputs = tuple(tensor(d, True) for d in raw["inputs"])
    outputs = tuple(tensor(d, False) for d in raw["outputs"])
    scalars = tuple(_scalar(s) for s in raw.get("scalars", []))
    sizes = tuple(raw["sizes"])
    clash = sorted({s.name for s in scalars} & {*sizes, "label"})
    if clash:
        raise TaskError(f"scalar {', '.join(clash)}: a scalar's name must differ from every size and from 'label'")
    declared = raw.get("torch_abi")
    dim_names = tuple(declared.get("dims") or ()) if isinstance(declared, dict) else ()
    shape_sets = {name: _configs(spec, sizes, init_sets, scalars, dim_names) for name, spec in raw["shapes"].items()}
    ref = _load_module(folder / "reference.py")
    seeds = {k: tuple([v] if isinstance(v, str) else v) for k, v in raw.get("seeds", {}).items()}
    for key, fnames in seeds.items():
        for fname in fnames:
            if not (folder / "seeds" / fname).exists():
                raise TaskError(f"seed {key}: file seeds/{fname} does not exist")
    task = Task(name=raw["name"], direction=raw["direction"], description=raw.get("description", "").strip(),
                best=_best(folder),
                sizes=sizes, inputs=inputs, outputs=outputs, scalars=scalars,
                workspace_bytes=str(raw.get("workspace_bytes", 0)), floor_bytes=str(raw["floor_bytes"]),
                floor_flops=str(raw["floor_flops"]) if raw.get("floor_flops") is not None else None,
                atol=float(raw["tolerance"]["atol"]), rtol=float(raw["tolerance"]["rtol"]),
                init_sets=init_sets, shape_sets=shape_sets, dir=folder, seeds=seeds,
                reference=ref.reference, baseline=getattr(ref, "baseline", ref.reference),
                torch_call=_torch_call(raw, inputs, outputs, scalars, sizes),
                draw=getattr(ref, "draw_inputs", None),
                domain=domains.parse(raw.get("domain"), sizes, scalars, init_sets))
    if task.draw is None and any("drawn" in s.init.values() for s in inputs):
        raise TaskError("an input is initialised `drawn` but reference.py defines no "
                        "draw_inputs(seed, device, **sizes, **scalars)")
    for configs in shape_sets.values():          # every expression must evaluate on every configuration
        for c in configs:
            for spec in inputs + outputs:
                task.shape(spec, c.size_dict)
            task.workspace(c.size_dict), task.floor(c.size_dict), task.flops(c.size_dict)
    if task.torch_call is not None:
        torch_call.check(task.torch_call, task)
    domains.check_fixed(task)
    return task


def _best(folder: Path) -> tuple[str, ...]:
    """The targets with a kernel in best/: each named by its target, each beside its .md."""
    best = folder / "best"
    if not best.is_dir():
        return ()
    names = {f: t for t, f in BEST_FILES.items()}
    for p in sorted(best.iterdir()):
        if p.suffix in (".cu", ".cpp", ".c", ".cc", ".cuh", ".h") and p.name not in names:
            raise TaskError(f"best/{p.name}: a best kernel is named by its target ({', '.join(BEST_FILES.values())})")
    found = []
    for fname, target in sorted(names.items(), key=lambda x: x[1]):
        if (best / fname).is_file():
            if not (best / fname).with_suffix(".md").is_file():
                raise TaskError(f"best/{fname} has no best/{Path(fname).stem}.md (its numbers and the command that "
                                f"produced it): promote a run's best with `python -m kevolve.tasks best RUN_DIR`")
            found.append(target)
    return tuple(found)


def _scalar(d: dict) -> ScalarSpec:
    """A declared scalar, its default value checked against its type."""
    spec = ScalarSpec(d["name"], d.get("type", "float"), d["value"])
    if spec.type not in SCALAR_TYPES:
        raise TaskError(f"scalar {spec.name}: type {spec.type!r} not one of {sorted(SCALAR_TYPES)}")
    return ScalarSpec(spec.name, spec.type, _scalar_value(spec, spec.value, f"scalar {spec.name}"))


def _scalar_value(spec: ScalarSpec, value: Any, where: str) -> float | int:
    """`value` as `spec`'s type: an int for `int`, a finite number (an int is widened) for float and double."""
    if spec.type == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            raise TaskError(f"{where}: {spec.name} is an int scalar, got {value!r}")
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        hint = " (YAML reads 1e-6 as a string: write 1.0e-6)" if isinstance(value, str) else ""
        raise TaskError(f"{where}: {spec.name} is a {spec.type} scalar, got {value!r}{hint}")
    return float(value)


def _torch_call(raw: dict, inputs, outputs, scalars, sizes) -> torch_call.TorchCall | None:
    if "torch_abi" not in raw:
        return None
    return torch_call.parse(raw["torch_abi"], [s.name for s in inputs], [s.name for s in outputs],
                            [s.name for s in scalars], list(sizes))


def _configs(spec: dict, sizes: tuple[str, ...], init_sets: tuple[str, ...],
             scalars: tuple[ScalarSpec, ...], dim_names: tuple[str, ...] = ()) -> tuple[Case, ...]:
    inits = _known_inits(spec.get("inits", init_sets), init_sets, "shape set")
    seeds = tuple(spec.get("seeds", [0]))
    out = []
    for heldout, key in ((False, "configs"), (True, "heldout")):
        for c in spec.get(key, []):
            c = dict(c)
            label = str(c.pop("label", ""))
            own = _known_inits(c.pop("inits"), init_sets, f"configuration {c}") if "inits" in c else inits
            dims = tuple((n, tuple(c.pop(n))) for n in dim_names if n in c)   # the torch ABI's shapes (torch_call)
            values = _config_scalars(c, sizes, scalars, dim_names)
            custom = tuple(s.name for s in scalars if values[s.name] != s.value)
            for init in own:                    # a configuration's own init sets replace the shape set's
                for seed in seeds:
                    out.append(Case(tuple((s, int(c[s])) for s in sizes), init, int(seed), label, heldout,
                                    tuple(values.items()), custom, dims))
    if not out:
        raise TaskError("a shape set has no configurations")
    ids = [c.id for c in out]
    if len(set(ids)) < len(ids):
        twice = sorted({i for i in ids if ids.count(i) > 1})
        raise TaskError(f"configurations share an id ({', '.join(twice[:3])}): give them distinct labels")
    return tuple(out)


def _known_inits(names, init_sets: tuple[str, ...], where: str) -> tuple[str, ...]:
    names = tuple(names) if isinstance(names, (list, tuple)) else (names,)
    for i in names:
        if i not in init_sets:
            raise TaskError(f"{where} uses init {i!r}, which the task does not define ({list(init_sets)})")
    if not names:
        raise TaskError(f"{where}: an empty list of inits")
    return names


def _config_scalars(c: dict, sizes: tuple[str, ...], scalars: tuple[ScalarSpec, ...],
                    dim_names: tuple[str, ...] = ()) -> dict[str, float | int]:
    """A configuration's scalar values (the defaults where it sets none); its keys checked first."""
    unknown = sorted(set(c) - set(sizes) - {s.name for s in scalars})
    if unknown:
        dims = f", torch_abi dims: {list(dim_names)}" if dim_names else ""
        raise TaskError(f"configuration {c}: unknown key {', '.join(map(repr, unknown))} (sizes: {list(sizes)}, "
                        f"scalars: {[s.name for s in scalars]}{dims}, and label)")
    missing = [s for s in sizes if s not in c]
    if missing:
        raise TaskError(f"configuration {c}: sizes must be exactly {list(sizes)} (missing {missing})")
    where = f"configuration {c}"
    return {s.name: _scalar_value(s, c[s.name], where) if s.name in c else s.value for s in scalars}


def _load_module(path: Path):
    if not path.exists():
        raise TaskError(f"{path.name} is missing")
    name = f"kevolve_task_{path.parent.name}"
    found = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(found)
    sys.modules[name] = mod           # torch.compile imports a function's module by name
    found.loader.exec_module(mod)
    if not hasattr(mod, "reference"):
        raise TaskError(f"{path.name} defines no `reference` function")
    return mod

