"""Writing an exported package: from one bundle (and, for autograd, a second one of the backward task) a folder
holding `pyproject.toml`, `README.md` (`readme`), and the package: `manifest.json` (per task its signature, source,
build flags, size buckets and routes, proven domain and numbers; the autograd pairing), the ops' sources in
`csrc/`, each task's torch baseline (`reference_<task>.py`, copied from the task), `_runtime.py` and `_modules.py`
(kevolve/export/runtime.py and modules.py, verbatim) and an `__init__.py` that loads them.

Guarantees: the folder is written whole or not at all (a temporary sibling, renamed into place at the end); a
non-empty folder is never written into; a pairing is refused unless the two tasks are the directions of one
operation (`layernorm_fwd`, `layernorm_bwd`), the backward's inputs are gradients of the forward's outputs or the
forward's inputs, and its outputs gradients of the forward's inputs.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from kevolve.export import readme
from kevolve.export.bundle import Bundle, ExportError
from kevolve.judge.build import GXX_FLAGS, NVCC_FLAGS, SUFFIX
from kevolve.search.buckets import Buckets
from kevolve.task.expr import eval_expr

HERE = Path(__file__).resolve().parent
NOT_PASSED = {"-shared", "-fPIC", "-Xcompiler", "-cudart", "shared"}     # cpp_extension adds its own


def family(task_name: str) -> str:
    for suffix in ("_fwd", "_bwd", "_forward", "_backward"):
        if task_name.endswith(suffix):
            return task_name[: -len(suffix)]
    return task_name


def op_spec(b: Bundle) -> dict[str, Any]:
    """One task's entry of the manifest."""
    t = b.task
    edges = {n: list(e) for n, e in b.record["buckets"]["edges"].items()}
    probe = Buckets(tuple((n, tuple(e)) for n, e in edges.items()))
    sizes = {c.shape_id: c.size_dict for c in t.configs(b.record["shapes"])}
    routes = {}
    for r in b.op["routes"]:
        shape = next((s for s in r["configs"] if s in sizes), None)
        if shape is None:
            raise ExportError(f"{b.origin}: bucket {r['bucket']}'s sizes are not in task {t.name}'s "
                              f"`{b.record['shapes']}` set any more: export on the checkout that made the run")
        routes[",".join(map(str, probe.index(sizes[shape])))] = "kernel" if r["kernel"] else "torch"
    bucket_of = {c: r for r in b.op["routes"] for c in r["configs"]}
    judged = [{"shape": m.shape, "sizes": sizes[m.shape], "bucket": bucket_of[m.shape]["bucket"],
               "runs": "kernel" if bucket_of[m.shape]["kernel"] else "torch", "kernel_speedup": m.speedup("best"),
               "kernel_ms": m.kernel.median, "torch_ms": m.best_torch}
              for m in b.evaluation.measurements if m.kernel is not None and m.shape in bucket_of and m.shape in sizes]
    for c in t.configs(b.record["shapes"])[:1]:            # every expression is one kevolve can evaluate
        [eval_expr(e, c.size_dict) for s in t.inputs + t.outputs for e in s.shape]
    cuda = b.target == "cuda"
    return {"task": t.name, "direction": t.direction, "family": family(t.name), "target": b.target,
            "inputs": [{"name": s.name, "shape": list(s.shape), "dtype": s.dtype} for s in t.inputs],
            "outputs": [{"name": s.name, "shape": list(s.shape), "dtype": s.dtype} for s in t.outputs],
            "sizes": list(t.sizes),
            "scalars": [{"name": s.name, "type": s.type, "default": s.value} for s in t.scalars],
            "workspace": t.workspace_bytes, "source": f"csrc/{t.name}{SUFFIX[b.target]}",
            "cflags": [] if cuda else [f for f in GXX_FLAGS if f not in NOT_PASSED],
            "cuda_cflags": [f for f in NVCC_FLAGS if f not in NOT_PASSED] if cuda else [],
            "arch": b.record.get("arch"),          # nvcc's arch the op was judged with (None: this GPU's)
            "ldflags": [] if cuda else ["-fopenmp"], "edges": edges, "routes": routes,
            "domain": b.record["domain"], "reference": f"reference_{t.name}.py",
            "origin": b.origin, "device": b.record.get("device", ""), "shapes": b.record["shapes"],
            "speedup": b.op.get("speedup"), "best_speedup": b.op.get("best_speedup"), "judged": judged}


def pairing(forward: Bundle, backward: Bundle) -> dict[str, Any]:
    """How `backward` gives `forward`'s gradients: per backward input ("grad", forward output) or ("input",
    forward input); per backward output, the forward input it is the gradient of. ExportError when they do not
    pair."""
    f, g = forward.task, backward.task
    if f.direction != "forward" or g.direction != "backward":
        raise ExportError(f"--backward pairs a forward task with a backward one; got {f.name} ({f.direction}) and "
                          f"{g.name} ({g.direction})")
    if family(f.name) != family(g.name):
        raise ExportError(f"{f.name} and {g.name} are not the two directions of one operation (the backward of "
                          f"{f.name} is {family(f.name)}_bwd): they do not pair")
    if forward.target != backward.target:
        raise ExportError(f"the forward op is for {forward.target}, the backward one for {backward.target}")
    outs, ins = {s.name for s in f.outputs}, {s.name for s in f.inputs}
    inputs: dict[str, list[str]] = {}
    for s in g.inputs:
        if s.name.startswith("grad_") and s.name[5:] in outs:
            inputs[s.name] = ["grad", s.name[5:]]
        elif s.name in ins:
            inputs[s.name] = ["input", s.name]
        else:
            raise ExportError(f"{g.name}'s input {s.name} is neither the gradient of an output of {f.name} "
                              f"({sorted(outs)}) nor one of its inputs ({sorted(ins)}): they do not pair")
    outputs = {}
    for s in g.outputs:
        if not (s.name.startswith("grad_") and s.name[5:] in ins):
            raise ExportError(f"{g.name}'s output {s.name} is not the gradient of an input of {f.name}: they do not "
                              "pair")
        outputs[s.name] = s.name[5:]
    missing = {s.name for s in g.scalars} - {s.name for s in f.scalars}
    if missing:
        raise ExportError(f"{g.name} takes scalars {sorted(missing)} that {f.name} does not: they do not pair")
    return {"backward": g.name, "inputs": inputs, "outputs": outputs}


INIT = '''"""{name}: kernels found and proven by kevolve, as torch ops (see README.md)."""
import json
from pathlib import Path

from . import _modules
from ._runtime import KevolveFallbackWarning, load

MANIFEST = json.loads((Path(__file__).resolve().parent / "manifest.json").read_text())
OPS = load(MANIFEST)
_modules.bind({{spec["family"]: OPS[name] for name, spec in MANIFEST["ops"].items()
               if spec["direction"] == "forward"}})
{names}
LayerNorm, RMSNorm, replace = _modules.LayerNorm, _modules.RMSNorm, _modules.replace


def stats() -> dict:
    """Per op, how its calls went: kernel calls, and calls sent to torch by reason."""
    return {{name: dict(op.counts) for name, op in OPS.items()}}


__all__ = ["OPS", "MANIFEST", "KevolveFallbackWarning", "LayerNorm", "RMSNorm", "replace", "stats", {all_}]
'''

PYPROJECT = '''[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "{dist}"
version = "0.1.0"
description = "Kernels found and proven by kevolve ({tasks}), as torch ops"
requires-python = ">=3.10"
dependencies = ["torch>=2.4", "ninja"]

[tool.setuptools]
packages = ["{name}"]

[tool.setuptools.package-data]
"{name}" = ["manifest.json", "csrc/*", "*.py"]
'''


def write(out: Path, bundles: list[Bundle], pair: dict[str, Any] | None, name: str | None = None) -> Path:
    """The package for `bundles` (a forward and, with `pair`, its backward) written to the folder `out`."""
    out = Path(out).resolve()
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ExportError(f"{out} exists and is not an empty folder: give a new or empty one (nothing was written)")
    name = name or f"kevolve_{family(bundles[0].task.name)}"
    if not name.isidentifier():
        raise ExportError(f"--name {name!r} is not a Python package name (letters, digits, _)")
    specs = {b.task.name: op_spec(b) for b in bundles}
    manifest = {"package": name, "exported": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "ops": specs, "autograd": {bundles[0].task.name: pair} if pair else {}}
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        pkg = tmp / name
        (pkg / "csrc").mkdir(parents=True)
        for b in bundles:
            (pkg / specs[b.task.name]["source"]).write_text(b.source)
            shutil.copyfile(b.task.dir / "reference.py", pkg / specs[b.task.name]["reference"])
        shutil.copyfile(HERE / "runtime.py", pkg / "_runtime.py")
        shutil.copyfile(HERE / "modules.py", pkg / "_modules.py")
        (pkg / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
        tasks = list(specs)
        (pkg / "__init__.py").write_text(INIT.format(
            name=name, names="".join(f'{t} = OPS["{t}"]\n' for t in tasks), all_=", ".join(f'"{t}"' for t in tasks)))
        (tmp / "pyproject.toml").write_text(PYPROJECT.format(dist=name.replace("_", "-"), name=name,
                                                             tasks=", ".join(tasks)))
        (tmp / "README.md").write_text(readme.text(name, bundles, manifest))
        if out.exists():
            out.rmdir()                                   # empty, checked above
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out
