"""Tasks: an operation and its direction, read from `tasks/<name>/` (by `kevolve.task.load`).

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
tensor's elements on every configuration, and no two configurations of a shape set share an id. A configuration's scalar
values (`Case.scalars`: its own, else the defaults) are what its kernel,
reference and baselines get. Inputs are a pure function of (task, configuration, variant, device type):
the evaluator and its worker process draw identical tensors independently.
Not guaranteed: that `reference` is right; tests compare it with torch where torch has the operation.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from kevolve.config import tasks as shipped
from kevolve.task.expr import TaskError, eval_expr
from kevolve.task import inits

if TYPE_CHECKING:
    from kevolve.task.domain import Domain
    from kevolve.task.torch_call import TorchCall

TARGETS = ("cpu", "cuda")
BEST_FILES = {"cpu": "cpu.cpp", "cuda": "cuda.cu"}    # target -> its kernel's name in best/ (the .md: same stem)
DTYPES = {"float32": "float", "float64": "double", "int64": "int64_t", "int32": "int32_t"}
SCALAR_TYPES = {"float": "float", "double": "double", "int": "int64_t"}


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
    drawn: bool = False     # drawn from the domain (`kevolve.task.draw`), not listed in task.yaml

    @property
    def size_dict(self) -> dict[str, int]:
        return dict(self.sizes)

    @property
    def scalar_dict(self) -> dict[str, float | int]:
        return dict(self.scalars)

    @property
    def shape_id(self) -> str:
        base = self.label or ",".join(f"{k}={v}" for k, v in self.sizes)
        if self.drawn:
            base = "drawn:" + base
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
    # "cpu" / "cuda" / "torch-cuda" / "torch-cpu" -> files in seeds/, plain one first
    seeds: dict[str, tuple[str, ...]]
    reference: Callable[..., Any] = field(repr=False, compare=False)
    baseline: Callable[..., Any] = field(repr=False, compare=False)
    torch_call: "TorchCall | None" = None   # how the torch ABI calls the kernel (torch_call.py); None: as before
    draw: Callable[..., dict] | None = field(default=None, repr=False, compare=False)   # reference.draw_inputs
    best: tuple[str, ...] = ()           # targets with a best kernel in best/ (BEST_FILES), each with its .md
    domain: "Domain | None" = None       # what every kernel must be correct on (`kevolve.task.domain`); set on load

    @property
    def ref(self) -> str:
        """How another process (or node) finds this task: its name if it ships with kevolve, else its folder."""
        return self.name if self.dir == (shipped.TASKS_DIR / self.name).resolve() else str(self.dir)

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
            out[spec.name] = inits.draw(spec.init[config.init], self.shape(spec, sizes), spec.dtype, sizes, g, device)
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
