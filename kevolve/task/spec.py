"""Tasks: an operation and its direction, read from `tasks/<name>/`.

A task folder holds `task.yaml` (signature, shape sets, initialisations, tolerance, memory floor and, for
GEMM and convolution tasks, a FLOP floor `floor_flops`),
`reference.py` (`reference` — the function a kernel must compute, evaluated in float64 — and
`baseline` — what torch eager and torch.compile are timed on, in the task's dtype; inputs initialised
`drawn` come from its `draw_inputs(seed, device, **sizes, **scalars)`, e.g. an imported KernelBench
problem's own `get_inputs()` and parameters), `prompt.md`
(what an LLM is told) and `seeds/` (one plain, correct kernel per target and ABI). An optional `best/` holds
the fastest kernel found so far per target, named by it (`cuda.cu`, `cpu.cpp`; C ABI only), each beside a
markdown file of the same stem (`cuda.md`) with its numbers and the command that produced it: what
`python -m kevolve.tasks best RUN_DIR` writes (`kevolve.report.best`) and `search.seeds` starts from.

An optional `torch_abi` block in task.yaml says how the torch ABI calls a kernel, as robust-kbench's harness
calls its extensions (`kevolve/task/torch_call.py` documents the format): the arguments in order — inputs,
scalars as Python numbers, sizes, named tuples of sizes (`dims`, e.g. LayerNorm's `normalized_shape`),
literals, tuples — and each tensor's `view` (LayerNorm's x as [B, *normalized_shape]; `[]`, a 0-dim tensor,
for a scalar loss's upstream gradient). A configuration of a shape set may give its own value of a dims
tuple next to its sizes (`{B: 16, N: 4194304, normalized_shape: [64, 256, 256]}`; `Case.dims`); the C ABI's
flattened sizes stay the same. Without the block the torch ABI passes the inputs in the task's shapes.
A shape set crosses its configurations with its `inits` (default: every init set the task defines); a
configuration may list its own (`{B: 1, N: 4194304, inits: [random, offset_mild]}`), which replace the set's
for it — LayerNorm's rows of 4M elements take a milder offset than float32 torch fails on shorter rows.

Guarantees: a task that loads is complete — every shape expression evaluates on every configuration,
every input has an initialiser for every init set, every seed file named exists, every best/ kernel is
named by its target and has its .md, every scalar value a configuration sets has its declared type — and a
malformed one raises `TaskError` naming the file and the field; every torch_abi view holds exactly its
tensor's elements on every configuration, and no two configurations of a shape set share an id. A configuration's scalar values (`Case.scalars`: its own, else the defaults) are what its kernel,
reference and baselines get. Inputs are a pure function of (task, configuration, variant, device type):
the evaluator and its worker process draw identical tensors independently.
Not guaranteed: that `reference` is right; tests compare it with torch where torch has the operation.
"""
from __future__ import annotations

import ast
import importlib.util
import math
import operator
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import yaml

from kevolve import ROOT

if TYPE_CHECKING:
    from kevolve.task.torch_call import TorchCall

TASKS_DIR = ROOT / "tasks"
TARGETS = ("cpu", "cuda")
BEST_FILES = {"cpu": "cpu.cpp", "cuda": "cuda.cu"}    # target -> its kernel's name in best/ (the .md: same stem)
DTYPES = {"float32": "float", "float64": "double", "int64": "int64_t", "int32": "int32_t"}
SCALAR_TYPES = {"float": "float", "double": "double", "int": "int64_t"}


class TaskError(ValueError):
    """A task name that does not exist or a task folder that is malformed."""


# ---------------------------------------------------------------- size expressions
_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}
_FUNCS = {"max": max, "min": min, "cdiv": lambda a, b: -(-a // b)}


def eval_expr(expr: str | int, names: dict[str, int]) -> int:
    """Evaluates an integer expression of size names (`4 * (B * N + N)`, `cdiv(N, 256)`); nothing else runs."""
    if isinstance(expr, int):
        return expr

    def ev(node: ast.AST) -> int:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.Name):
            if node.id not in names:
                raise TaskError(f"expression {expr!r}: unknown size {node.id!r} (known: {sorted(names)})")
            return names[node.id]
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            return _BINOPS[type(node.op)](ev(node.left), ev(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -ev(node.operand)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCS:
            return _FUNCS[node.func.id](*[ev(a) for a in node.args])
        raise TaskError(f"expression {expr!r}: only integers, sizes, + - * // % ** and max/min/cdiv are allowed")

    try:
        tree = ast.parse(str(expr), mode="eval")
    except SyntaxError as e:
        raise TaskError(f"expression {expr!r} does not parse: {e.msg}") from None
    return int(ev(tree))


_COMPARE = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
            ast.Gt: operator.gt, ast.GtE: operator.ge}


def eval_condition(text: str, sizes: dict[str, int]) -> bool:
    """`text` (comparisons of size expressions joined by and/or/not) on `sizes`; nothing else runs."""
    def ev(node: ast.AST) -> bool:
        if isinstance(node, ast.BoolOp):
            values = [ev(v) for v in node.values]
            return all(values) if isinstance(node.op, ast.And) else any(values)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            return not ev(node.operand)
        if isinstance(node, ast.Compare) and all(type(op) in _COMPARE for op in node.ops):
            terms = [eval_expr(ast.unparse(t), sizes) for t in [node.left, *node.comparators]]
            return all(_COMPARE[type(op)](a, b) for op, a, b in zip(node.ops, terms, terms[1:]))
        raise TaskError(f"condition {text!r}: only comparisons of size expressions joined by and/or/not")
    try:
        return ev(ast.parse(text, mode="eval").body)
    except SyntaxError as e:
        raise TaskError(f"condition {text!r} does not parse: {e.msg}") from None


# ---------------------------------------------------------------- the schema
@dataclass(frozen=True)
class TensorSpec:
    """One argument of the kernel: its name, shape (expressions of sizes), dtype and initialisers."""
    name: str
    shape: tuple[str, ...]
    dtype: str
    init: dict[str, str] = field(default_factory=dict)   # init set -> initialiser ("normal", "ones", ...)

    def ctype(self) -> str:
        return DTYPES[self.dtype]


@dataclass(frozen=True)
class ScalarSpec:
    name: str
    type: str          # float | double | int
    value: float | int  # the default: a configuration may set its own


@dataclass(frozen=True)
class Case:
    """One configuration of a shape set (a case): sizes and scalar values × initialisation × seed. `heldout`
    configs are never shown to an LLM. `scalars` holds every scalar of the task, the defaults filled in;
    `custom` names those this configuration sets to another value than the default: only they enter
    `shape_id` (and so `id`), so a configuration at the defaults keeps the id it had before scalars varied."""
    sizes: tuple[tuple[str, int], ...]
    init: str
    seed: int
    label: str = ""
    heldout: bool = False
    scalars: tuple[tuple[str, float | int], ...] = ()
    custom: tuple[str, ...] = ()
    dims: tuple[tuple[str, tuple[int, ...]], ...] = ()   # the torch ABI's dims tuples this configuration sets

    @property
    def size_dict(self) -> dict[str, int]:
        return dict(self.sizes)

    @property
    def scalar_dict(self) -> dict[str, float | int]:
        return dict(self.scalars)

    @property
    def shape_id(self) -> str:
        base = self.label or ",".join(f"{k}={v}" for k, v in self.sizes)
        return base + "".join(f",{k}={show_scalar(v)}" for k, v in self.scalars if k in self.custom)

    @property
    def id(self) -> str:
        return f"{self.shape_id}/{self.init}/s{self.seed}"


@dataclass(frozen=True)
class Task:
    name: str
    direction: str                       # the exported function: forward | backward
    description: str
    sizes: tuple[str, ...]
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    scalars: tuple[ScalarSpec, ...]
    workspace_bytes: str
    floor_bytes: str
    floor_flops: str | None              # GEMM / conv tasks: fewest fp32 FLOPs (no TF32); None: memory-bound
    atol: float
    rtol: float
    init_sets: tuple[str, ...]
    shape_sets: dict[str, tuple[Case, ...]]
    dir: Path
    seeds: dict[str, tuple[str, ...]]    # "cpu" / "cuda" / "torch-cuda" / "torch-cpu" -> files in seeds/, plain one first
    reference: Callable[..., Any] = field(repr=False, compare=False)
    baseline: Callable[..., Any] = field(repr=False, compare=False)
    torch_call: "TorchCall | None" = None   # how the torch ABI calls the kernel (torch_call.py); None: as before
    draw: Callable[..., dict] | None = field(default=None, repr=False, compare=False)   # reference.draw_inputs
    best: tuple[str, ...] = ()           # targets with a best kernel in best/ (BEST_FILES), each with its .md

    @property
    def ref(self) -> str:
        """How another process (or node) finds this task: its name if it ships with kevolve, else its folder."""
        return self.name if self.dir == (TASKS_DIR / self.name).resolve() else str(self.dir)

    # ---- shapes and sizes
    def configs(self, shape_set: str) -> tuple[Case, ...]:
        if shape_set not in self.shape_sets:
            raise TaskError(f"task {self.name}: no shape set {shape_set!r} (known: {sorted(self.shape_sets)})")
        return self.shape_sets[shape_set]

    def shape(self, spec: TensorSpec, sizes: dict[str, int]) -> tuple[int, ...]:
        return tuple(eval_expr(e, sizes) for e in spec.shape)

    def workspace(self, sizes: dict[str, int]) -> int:
        return eval_expr(self.workspace_bytes, sizes)

    def floor(self, sizes: dict[str, int]) -> int:
        """The fewest bytes one call must move (the memory floor)."""
        return eval_expr(self.floor_bytes, sizes)

    def flops(self, sizes: dict[str, int]) -> int | None:
        """The fewest floating-point operations one call must do (None: the task declares none)."""
        return eval_expr(self.floor_flops, sizes) if self.floor_flops else None

    def scalar_values(self, case: Case | None = None) -> dict[str, float | int]:
        """Every scalar's value: the defaults, overridden by those `case` sets."""
        return {s.name: s.value for s in self.scalars} | (case.scalar_dict if case is not None else {})

    def seed_paths(self, target: str, abi: str = "c") -> list[Path]:
        """Every seed kernel for (target, abi), the plain one first (the search starts from all of them)."""
        key = target if abi == "c" else f"torch-{target}"
        if key not in self.seeds:
            raise TaskError(f"task {self.name} has no seed kernel for target={target} abi={abi}")
        return [self.dir / "seeds" / f for f in self.seeds[key]]

    def seed_path(self, target: str, abi: str = "c") -> Path:
        return self.seed_paths(target, abi)[0]

    def best_paths(self, target: str, abi: str = "c") -> list[Path]:
        """The best kernel found so far for (target, abi), in best/ (`best/cuda.cu`); empty when there is none
        (the torch ABI has none: a search writes C ABI kernels)."""
        if abi != "c" or target not in self.best:
            return []
        return [self.dir / "best" / BEST_FILES[target]]

    def prompt(self) -> str:
        p = self.dir / "prompt.md"
        return p.read_text() if p.exists() else self.description

    # ---- inputs
    def make_inputs(self, config: Case, device: str, variant: int = 0) -> dict[str, Any]:
        """Draws the inputs of `config` on `device`; `variant` gives new contents for the same shapes."""
        import torch
        sizes = config.size_dict
        out, drawn = {}, None
        for i, spec in enumerate(self.inputs):
            if spec.init[config.init] == "drawn":      # all such inputs from one draw_inputs call
                if drawn is None:
                    seed = (config.seed * 1_000_003 + variant * 7919) % (2**63)
                    drawn = self.draw(seed, device, **sizes, **self.scalar_values(config))
                out[spec.name] = _checked_draw(spec, drawn, self.shape(spec, sizes))
                continue
            gen_device = "cuda" if str(device).startswith("cuda") else "cpu"
            g = torch.Generator(device=gen_device)
            g.manual_seed((config.seed * 1_000_003 + variant * 7919 + i * 104_729) % (2**63))
            out[spec.name] = _draw(spec.init[config.init], self.shape(spec, sizes), spec.dtype, sizes, g, device)
        return out

    def call_reference(self, inputs: dict, case: Case) -> list:
        """`reference` on `inputs` with the sizes and scalar values of `case`."""
        args, kwargs = self._args(inputs, case)
        return as_list(self.reference(*args, **kwargs))

    def call_baseline(self, inputs: dict, case: Case) -> list:
        """`baseline` on `inputs` with the sizes and scalar values of `case`."""
        args, kwargs = self._args(inputs, case)
        return as_list(self.baseline(*args, **kwargs))

    def _args(self, inputs: dict, case: Case) -> tuple[list, dict]:
        if not isinstance(case, Case):
            raise TypeError(f"pass the Case (its sizes and scalar values), not {type(case).__name__}")
        return [inputs[s.name] for s in self.inputs], {**case.size_dict, **self.scalar_values(case)}


def _checked_draw(spec: TensorSpec, drawn: dict, shape: tuple[int, ...]):
    t = drawn.get(spec.name)
    if t is None or tuple(t.shape) != shape or str(t.dtype) != f"torch.{spec.dtype}":
        got = "nothing" if t is None else f"{tuple(t.shape)} {t.dtype}"
        raise TaskError(f"draw_inputs gave input {spec.name} {got}; the task says {shape} {spec.dtype}")
    return t


def as_list(result) -> list:
    """What a reference, baseline or torch-ABI kernel returned, as a list of its outputs (one tensor: one)."""
    return list(result) if isinstance(result, (tuple, list)) else [result]


def show_scalar(value: float | int) -> str:
    """A scalar value as an id shows it: 1e-06, 0.001, 3."""
    return f"{value:g}" if isinstance(value, float) else str(value)


_INIT = re.compile(r"^(normal|uniform|ones|zeros|const|randint|kaiming_uniform|xavier_normal)(?:\((.*)\))?$|^drawn$")
_ROUND = re.compile(r"^round\(2\*\*(-?\d+),(.+)\)$")    # round(2**-k, INIT): INIT's values to multiples of 2**-k


def valid_init(init: str) -> bool:
    """Whether `init` names an initialiser `_draw` knows, optionally wrapped in round(2**-k, ...)."""
    text = str(init).replace(" ", "")
    r = _ROUND.match(text)
    return bool(_INIT.match(r[2] if r else text))


def _draw(init: str, shape: tuple[int, ...], dtype: str, sizes: dict[str, int], g, device):
    import torch
    r = _ROUND.match(init.replace(" ", ""))
    if r:   # values on a power-of-two grid: sums of a few thousand products are exact in float32
        step = 2.0 ** int(r[1])
        v = _draw(r[2], shape, "float64", sizes, g, device)
        return (torch.round(v / step) * step).to(getattr(torch, dtype))
    m = _INIT.match(init.replace(" ", ""))
    kind, args = m.group(1), [a for a in (m.group(2) or "").split(",") if a]
    tdtype = getattr(torch, dtype)
    if kind == "normal":      # normal(std) or normal(mean, std)
        mean, std = (0.0, float(args[0])) if len(args) == 1 else (float(args[0]), float(args[1])) if args else (0.0, 1.0)
        return (torch.randn(shape, generator=g, device=device, dtype=torch.float32) * std + mean).to(tdtype)
    if kind == "uniform":     # uniform(lo, hi)
        lo, hi = (float(args[0]), float(args[1])) if args else (-1.0, 1.0)
        return (torch.rand(shape, generator=g, device=device, dtype=torch.float32) * (hi - lo) + lo).to(tdtype)
    if kind == "kaiming_uniform":   # kaiming_uniform(fan_in): torch's nn.Linear / nn.Conv default (a=sqrt(5))
        bound = 1.0 / math.sqrt(eval_expr(args[0], sizes))
        return (torch.rand(shape, generator=g, device=device, dtype=torch.float32) * (2 * bound) - bound).to(tdtype)
    if kind == "xavier_normal":     # xavier_normal(fan_in, fan_out): std = sqrt(2 / (fan_in + fan_out))
        std = math.sqrt(2.0 / (eval_expr(args[0], sizes) + eval_expr(args[1], sizes)))
        return (torch.randn(shape, generator=g, device=device, dtype=torch.float32) * std).to(tdtype)
    if kind == "ones":
        return torch.ones(shape, device=device, dtype=tdtype)
    if kind == "zeros":
        return torch.zeros(shape, device=device, dtype=tdtype)
    if kind == "const":
        return torch.full(shape, float(args[0]), device=device, dtype=tdtype)
    hi = eval_expr(args[0], sizes)   # randint(expr): integers in [0, expr)
    return torch.randint(0, hi, shape, generator=g, device=device, dtype=tdtype)


# ---------------------------------------------------------------- loading
def list_tasks() -> list[str]:
    return sorted(p.name for p in TASKS_DIR.iterdir() if (p / "task.yaml").exists()) if TASKS_DIR.exists() else []


def load_task(name: str | Path) -> Task:
    """Loads a task by name (a folder of `tasks/`) or by path; raises TaskError saying what to fix."""
    path = Path(name)
    folder = (path if (path / "task.yaml").exists() else TASKS_DIR / str(name)).resolve()
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
                draw=getattr(ref, "draw_inputs", None))
    if task.draw is None and any("drawn" in s.init.values() for s in inputs):
        raise TaskError("an input is initialised `drawn` but reference.py defines no "
                        "draw_inputs(seed, device, **sizes, **scalars)")
    for configs in shape_sets.values():          # every expression must evaluate on every configuration
        for c in configs:
            for spec in inputs + outputs:
                task.shape(spec, c.size_dict)
            task.workspace(c.size_dict), task.floor(c.size_dict), task.flops(c.size_dict)
    if task.torch_call is not None:
        from kevolve.task import torch_call
        torch_call.check(task.torch_call, task)
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


def _torch_call(raw: dict, inputs, outputs, scalars, sizes) -> "TorchCall | None":
    if "torch_abi" not in raw:
        return None
    from kevolve.task import torch_call
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
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod           # torch.compile imports a function's module by name
    spec.loader.exec_module(mod)
    if not hasattr(mod, "reference"):
        raise TaskError(f"{path.name} defines no `reference` function")
    return mod


def geomean(values: list[float]) -> float:
    vals = [v for v in values if v and v > 0 and math.isfinite(v)]
    return math.exp(sum(math.log(v) for v in vals) / len(vals)) if vals else float("nan")
