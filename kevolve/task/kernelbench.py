"""Importing a KernelBench problem file as a task folder: `python -m kevolve.tasks import PATH… [--out DIR]`.

A KernelBench problem (`class Model(nn.Module)`, module-level `get_inputs()` and `get_init_inputs()`, constants at
module level) becomes `DIR/<name>/`, name `kb_[l<level>_]<file stem>` in lower case (the level from a `level_N`
folder on its path). The folder holds `problem.py` (the file, byte for byte), `reference.py` (`reference`:
Model.forward in float64 with the parameters it is given; `baseline`: the same in float32; `draw_inputs`:
get_inputs() and the Model's parameters, drawn by torch under the seed — see `kevolve.task.problem`),
`prompt.md`, and `task.yaml`:
- sizes: the file's int constants (`batch_size = 16`), then one size per tensor dimension that is neither a constant
  nor a fixed number (`out_dim2`, a convolution's output height), its value computed per configuration;
  scalars: the file's float constants; inputs: get_inputs(), named after Model.forward's parameters, then the
  Model's parameters (`gemm.weight` as `gemm_weight`), all initialised `drawn`; outputs: `out` (`out0`, `out1`… for
  a tuple); one init set, `torch`;
- shape sets: `bench` at the file's constants; `small` with the largest constants (those a shape follows, from
  16 up) halved until a configuration holds at most SMALL_ELEMENTS elements in all; each with a held-out
  configuration whose scaled constants are odd; floor_bytes: every input (parameters included) and output once;
  tolerance atol = rtol = 1e-4 unless given; no seed kernels (a search starts from the translate operator).
Which constant a dimension is comes from observation: shapes on the meta device at every configuration and with
each constant changed alone; a dimension equal to one constant at all of them is that constant.

Refused, with the reason (`ProblemError`): no Model, get_inputs or get_init_inputs; get_inputs() giving a
non-tensor or a tensor on a GPU; a dtype the harness has no type for (float16, bfloat16, bool, complex); a forward
that returns anything but a tensor or a tuple of tensors, is not deterministic (dropout in training mode, random
numbers), changes its inputs in place, fails in float64, or gives shapes that depend on the data; names that
collide (a forward argument named like a constant).
Guarantees: the same file gives the same folder, byte for byte; only a folder the importer made is overwritten
(its task.yaml, reference.py, problem.py and prompt.md; anything else there stays): `kevolve.task.kernelbench_folder`.
Not guaranteed: that the default tolerance suits the operation — `python -m kevolve.tasks check` says whether torch's
own float32 and torch.compile results meet it on every configuration.
"""
from __future__ import annotations

import inspect
import math
import re
from dataclasses import dataclass
from pathlib import Path

from kevolve.task.problem import Problem, ProblemError, safe_name
from kevolve.task.spec import DTYPES

SMALL_ELEMENTS = 1 << 20
MIN_SCALED = 16


@dataclass(frozen=True)
class Tensor:
    name: str
    shape: tuple[int, ...]
    dtype: str


@dataclass(frozen=True)
class Observed:
    """Every tensor of one forward at one set of constant values: inputs (parameters last), then outputs."""
    inputs: tuple[Tensor, ...]
    outputs: tuple[Tensor, ...]

    @property
    def tensors(self) -> tuple[Tensor, ...]:
        return self.inputs + self.outputs

    def signature(self) -> tuple:
        return tuple((t.name, len(t.shape), t.dtype) for t in self.tensors)

    def elements(self) -> int:
        return sum(math.prod(t.shape) for t in self.tensors)


@dataclass(frozen=True)
class Config:
    values: dict
    observed: Observed
    heldout: bool


# ---------------------------------------------------------------- observing shapes
def observe(problem: Problem, values: dict, strict: bool = False) -> Observed | None:
    """The tensors of one forward at `values`, on the meta device (on the CPU where meta cannot run it); None
    when the file fails at these values, unless `strict` (then the reason is raised)."""
    error: Exception | None = None
    for device in ("meta", "cpu"):
        try:
            return _observe(problem, values, device)
        except ProblemError:
            if strict:
                raise
            return None
        except Exception as e:          # the file's own code: anything can fail
            error = e
    if strict:
        raise ProblemError(f"{problem.path.name} fails at its own constants: {type(error).__name__}: {error}")
    return None


def _observe(problem: Problem, values: dict, device: str) -> Observed:
    import torch
    mod = problem.at(values)
    with torch.random.fork_rng(devices=[]), torch.device(device), torch.no_grad():
        torch.manual_seed(0)
        inputs = list(mod.get_inputs())
        for i, x in enumerate(inputs):
            if not isinstance(x, torch.Tensor):
                raise ProblemError(f"get_inputs() item {i} is a {type(x).__name__}, not a tensor: only tensor "
                                   "inputs import")
            if x.device.type not in ("cpu", "meta"):
                raise ProblemError(f"get_inputs() item {i} is on {x.device}: make CPU tensors, kevolve moves them")
        model = mod.Model(*mod.get_init_inputs())
        out = model(*inputs)
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    if not outs or not all(isinstance(o, torch.Tensor) for o in outs):
        raise ProblemError(f"Model.forward returns {type(out).__name__}: only a tensor or a tuple of tensors imports")
    names = _input_names(mod.Model, len(inputs))
    names += [safe_name(n) for n, _ in model.named_parameters()]
    tensors = inputs + [p for _, p in model.named_parameters()]
    out_names = ["out"] if len(outs) == 1 else [f"out{i}" for i in range(len(outs))]
    return Observed(tuple(Tensor(n, tuple(t.shape), _dtype(n, t)) for n, t in zip(names, tensors)),
                    tuple(Tensor(n, tuple(t.shape), _dtype(n, t)) for n, t in zip(out_names, outs)))


def _input_names(model_class, n: int) -> list[str]:
    params = list(inspect.signature(model_class.forward).parameters.values())[1:]
    named = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return [named[i] if i < len(named) else f"x{i}" for i in range(n)]


def _dtype(name: str, t) -> str:
    dtype = str(t.dtype).removeprefix("torch.")
    if dtype not in DTYPES:
        raise ProblemError(f"{name} is {dtype}; the harness has types for {', '.join(DTYPES)} only")
    return dtype


# ---------------------------------------------------------------- the configurations
def _probes(problem: Problem, bench: dict, base: Observed, sizes: list[str]) -> dict[str, Config]:
    """Each int constant changed alone (+1, else doubled): the observations that tell which constant a
    dimension is."""
    out = {}
    for s in sizes:
        for v in (bench[s] + 1, bench[s] * 2):
            obs = observe(problem, {**bench, s: v})
            if obs is not None and obs.signature() == base.signature():
                out[s] = Config({**bench, s: v}, obs, False)
                break
    return out


def _scaled(problem: Problem, start: Config, scalable: list[str]) -> Config:
    """The largest scalable constants halved, one at a time, until SMALL_ELEMENTS (or nothing is left to halve)."""
    cur, frozen = start, set()
    while cur.observed.elements() > SMALL_ELEMENTS:
        candidates = [s for s in scalable if s not in frozen and cur.values[s] >= MIN_SCALED]
        if not candidates:
            break
        s = max(candidates, key=lambda n: cur.values[n])
        trial = {**cur.values, s: cur.values[s] // 2}
        obs = observe(problem, trial)
        if (obs is not None and obs.signature() == start.observed.signature()
                and obs.elements() < cur.observed.elements()):
            cur = Config(trial, obs, False)
        else:
            frozen.add(s)
    return cur


def _odd(problem: Problem, config: Config, scalable: list[str]) -> Config | None:
    """The configuration with every even scalable constant made odd (+1, else -1) where the file allows it."""
    values, obs = dict(config.values), config.observed
    for s in scalable:
        if values[s] < MIN_SCALED or values[s] % 2:
            continue
        for v in (values[s] + 1, values[s] - 1):
            trial = observe(problem, {**values, s: v})
            if trial is not None and trial.signature() == config.observed.signature():
                values, obs = {**values, s: v}, trial
                break
    return Config(values, obs, True) if values != config.values else None


# ---------------------------------------------------------------- the import
@dataclass(frozen=True)
class Imported:
    """What a problem file becomes: everything task.yaml states, before it is written."""
    name: str
    source: Path
    sizes: tuple[str, ...]                  # the int constants, then the derived sizes
    derived: tuple[str, ...]                # sizes that are a tensor's dimension (`out_dim2`)
    scalars: dict
    inputs: tuple[tuple[str, tuple[str, ...], str], ...]     # (name, shape expressions, dtype)
    outputs: tuple[tuple[str, tuple[str, ...], str], ...]
    parameters: tuple[str, ...]             # the inputs that are the Model's parameters
    shape_sets: dict                        # set name -> [(sizes dict, label, heldout)]


def analyse(path: str | Path, name: str | None = None) -> Imported:
    """Reads, observes and verifies one problem file; raises ProblemError saying why it cannot be imported."""
    path = Path(path)
    if not path.is_file():
        raise ProblemError(f"{path}: no such file")
    problem = Problem(path)
    problem.at(problem.constants)                      # Model, get_inputs, get_init_inputs exist
    ints = [n for n, v in problem.constants.items() if type(v) is int]
    scalars = {n: v for n, v in problem.constants.items() if type(v) is float}
    bench = Config(dict(problem.constants), observe(problem, problem.constants, strict=True), False)
    _check_names(bench.observed, problem.constants)
    probes = _probes(problem, bench.values, bench.observed, ints)
    scalable = [s for s, p in probes.items() if p.observed != bench.observed]
    small = _scaled(problem, bench, scalable)
    sets = {"bench": [bench, _odd(problem, bench, scalable)], "small": [small, _odd(problem, small, scalable)]}
    sets = {k: [c for c in v if c is not None] for k, v in sets.items()}
    _verify(problem, small)
    everything = [c for cs in sets.values() for c in cs] + list(probes.values())
    exprs, derived = _expressions(bench.observed, everything, ints)
    sizes = tuple(ints) + tuple(derived)
    shape_sets = {k: [(_sizes(c, ints, derived), _label(c, ints), c.heldout) for c in cs] for k, cs in sets.items()}
    n_in = len(bench.observed.inputs)
    specs = [(t.name, exprs[i], t.dtype) for i, t in enumerate(bench.observed.tensors)]
    return Imported(name or task_name(path), path, sizes, tuple(derived), scalars, tuple(specs[:n_in]),
                    tuple(specs[n_in:]), _parameter_names(problem), shape_sets)


def _parameter_names(problem: Problem) -> tuple[str, ...]:
    import torch
    mod = problem.at(problem.constants)
    with torch.device("meta"):
        return tuple(safe_name(n) for n, _ in mod.Model(*mod.get_init_inputs()).named_parameters())


def _check_names(obs: Observed, constants: dict) -> None:
    names = [t.name for t in obs.tensors]
    clash = sorted({n for n in names if names.count(n) > 1} | (set(names) & set(constants)))
    if clash:
        raise ProblemError(f"the names {clash} are used twice (forward arguments, parameters, outputs, constants): "
                           "rename them in the file")


def _expressions(base: Observed, configs: list[Config], ints: list[str]) -> tuple[list, dict]:
    """Per tensor, its shape as expressions; and the derived sizes: name -> (tensor index, axis)."""
    exprs, derived = [], {}
    for i, t in enumerate(base.tensors):
        shape = []
        for axis in range(len(t.shape)):
            dims = [c.observed.tensors[i].shape[axis] for c in configs]
            match = next((s for s in ints if all(c.values[s] == d for c, d in zip(configs, dims))), None)
            if match is None and len(set(dims)) == 1:
                match = str(dims[0])
            if match is None:
                match = f"{t.name}_dim{axis}"
                derived[match] = (i, axis)
            shape.append(match)
        exprs.append(tuple(shape))
    return exprs, derived


def _sizes(config: Config, ints: list[str], derived: dict) -> dict:
    sizes = {s: config.values[s] for s in ints}
    sizes.update({d: config.observed.tensors[i].shape[axis] for d, (i, axis) in derived.items()})
    return sizes


def _label(config: Config, ints: list[str]) -> str:
    return ",".join(f"{s}={config.values[s]}" for s in ints)


def _verify(problem: Problem, config: Config) -> None:
    """On the CPU at `config`: drawing is deterministic; the forward runs in float64 and float32, gives the
    observed shapes for two input draws, the same answer twice under different global random states, and leaves
    its inputs alone."""
    import torch
    expected = [t.shape for t in config.observed.outputs]
    for seed in (0, 1):
        tensors = problem.draw(seed, "cpu", config.values)
        if not all(_same(a, b) for a, b in zip(tensors, problem.draw(seed, "cpu", config.values))):
            raise ProblemError("get_inputs() or Model() draw different values under the same torch seed")
        up = [t.double() if t.is_floating_point() else t for t in tensors]
        kept = [t.clone() for t in up]
        answers = [_forward64(problem, up, config.values, rng) for rng in (1, 2)]
        shapes = [tuple(o.shape) for o in answers[0]]
        if shapes != expected:
            raise ProblemError(f"output shapes {shapes} differ from {expected} (the meta device's, seed 0): "
                               "shapes that depend on the data do not import")
        if not all(_same(a, b) for a, b in zip(*answers)):
            raise ProblemError("Model.forward gives different outputs for the same inputs (dropout in training mode? "
                               "random numbers in forward?): only deterministic problems import")
        changed = [t.name for t, a, b in zip(config.observed.inputs, up, kept) if not _same(a, b)]
        if changed:
            raise ProblemError(f"Model.forward changes its input {', '.join(changed)} in place: kernels must leave "
                               "inputs alone")
        problem.forward(tensors, config.values, torch.float32)


def _forward64(problem: Problem, tensors: list, values: dict, rng: int) -> list:
    import torch
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(rng)
            return _listed(problem.forward(tensors, values, torch.float64))
    except Exception as e:
        raise ProblemError(f"Model.forward fails in float64 (the reference's precision): "
                           f"{type(e).__name__}: {e}") from None


def _same(a, b) -> bool:
    import torch
    if a.is_floating_point():
        return bool(((a == b) | (torch.isnan(a) & torch.isnan(b))).all())
    return torch.equal(a, b)


def _listed(x) -> list:
    return list(x) if isinstance(x, (tuple, list)) else [x]


def task_name(path: Path) -> str:
    level = next((m.group(1) for part in reversed(path.parts[:-1]) if (m := re.fullmatch(r"level_?(\d+)", part))), None)
    stem = re.sub(r"[^0-9a-z]+", "_", path.stem.lower()).strip("_")
    return f"kb_l{level}_{stem}" if level else f"kb_{stem}"
